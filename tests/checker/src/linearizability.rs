//! Wing & Gong's search for a linearization, one znode at a time, memoising every
//! (set of linearized operations, znode state) already explored so equal sub-problems are
//! solved once (Lowe's improvement, as in Knossos and Porcupine).

use std::collections::HashSet;

use crate::explanation::{Rejection, Violation};
use crate::history::{Call, Failure, History, Operation, Outcome, Reply};
use crate::model::{Attempt, DataTable, Refusal, State, Step, apply};

/// The result of checking a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every key's operations have a linearization.
    Ok,
    /// Some key's operations have none.
    Violation(Box<Violation>),
    /// The step budget ran out on `key` before the search decided.
    Inconclusive { key: String, steps: u64 },
}

/// Checks every key of `history` separately, spending at most `budget` search steps per key.
/// Every znode is taken to be absent before the history starts. Reports a violation if any key
/// has one, else "inconclusive" if any key ran out of budget.
pub fn check(history: &History, budget: u64) -> Verdict {
    let mut inconclusive = None;
    for key in history.keys() {
        match check_key(history, key, budget) {
            Verdict::Ok => {}
            violation @ Verdict::Violation(_) => return violation,
            undecided @ Verdict::Inconclusive { .. } => {
                inconclusive.get_or_insert(undecided);
            }
        }
    }
    inconclusive.unwrap_or(Verdict::Ok)
}

/// One operation the search must (or, for an unknown outcome, may) place.
struct Pending<'h> {
    op: &'h Operation,
    step: Step,
    /// `None` for an unknown outcome: it never forces an order, and it may stay unplaced.
    ret: Option<u64>,
}

/// Checks the operations on `key` alone, within `budget` search steps.
pub fn check_key(history: &History, key: &str, budget: u64) -> Verdict {
    let mut table = DataTable::default();
    let mut pending: Vec<Pending> = history
        .on_key(key)
        .filter_map(|op| prepare(op, &mut table))
        .collect();
    pending.sort_by_key(|p| (p.op.invoke, p.op.id));
    Search::new(key, &pending, table, budget).run()
}

/// The search step for `op`, or `None` if it cannot constrain the znode (a write refused for
/// an unnamed reason, an unchecked or unanswered read).
fn prepare<'h>(op: &'h Operation, table: &mut DataTable) -> Option<Pending<'h>> {
    let known = !matches!(op.outcome, Outcome::Unknown);
    let step = match (&op.call, &op.outcome) {
        // A named error is an observation too: ZooKeeper checks a write against the state it
        // is ordered after, so NodeExists, NoNode and BadVersion must fit some point of the
        // interval. Other errors say nothing about the znode.
        (_, Outcome::Failed(failure)) => {
            let error = match failure {
                Failure::NodeExists => "NodeExists",
                Failure::NoNode => "NoNode",
                Failure::BadVersion => "BadVersion",
                Failure::Other => return None,
            };
            let attempt = match op.call {
                Call::Create { .. } => Attempt::Create,
                Call::SetData {
                    expected_version, ..
                } => Attempt::SetData { expected_version },
                Call::Delete { expected_version } => Attempt::Delete { expected_version },
                Call::GetData { .. } => return None,
            };
            Step::Refused { attempt, error }
        }
        (Call::Create { data }, _) => Step::Create {
            data: table.intern(data),
        },
        (
            Call::SetData {
                data,
                expected_version,
            },
            outcome,
        ) => Step::SetData {
            data: table.intern(data),
            expected_version: *expected_version,
            new_version: match outcome {
                Outcome::Ok(Reply::Version(version)) => Some(*version),
                _ => None,
            },
        },
        (Call::Delete { expected_version }, _) => Step::Delete {
            expected_version: *expected_version,
        },
        (Call::GetData { checked: true }, Outcome::Ok(Reply::Data { data, version })) => {
            Step::Read {
                seen: State::Present {
                    data: table.intern(data),
                    version: *version,
                },
            }
        }
        (Call::GetData { checked: true }, Outcome::Ok(Reply::Absent)) => Step::Read {
            seen: State::Absent,
        },
        (Call::GetData { .. }, _) => return None,
    };
    Some(Pending {
        op,
        step,
        ret: if known { op.ret } else { None },
    })
}

/// A set of operation indexes, hashable for the memo.
type Bits = Box<[u64]>;

fn has(bits: &Bits, index: usize) -> bool {
    bits.get(index / 64)
        .is_some_and(|word| word & (1 << (index % 64)) != 0)
}

fn with(bits: &Bits, index: usize) -> Bits {
    let mut next = bits.clone();
    if let Some(word) = next.get_mut(index / 64) {
        *word |= 1 << (index % 64);
    }
    next
}

/// A point of the search: what is placed, the znode, and which next operations are left to try.
struct Frame {
    bits: Bits,
    state: State,
    placed_known: usize,
    /// Index in `Search::known` of the first acknowledged operation not yet placed.
    low: usize,
    candidates: Vec<usize>,
    tried: usize,
    rejections: Vec<(usize, Tried)>,
}

/// What became of one candidate, kept cheap (formatted only for a report).
#[derive(Debug, Clone, Copy)]
enum Tried {
    /// The model refused it in this state.
    Refused(Refusal, State),
    /// It fitted, but everything after it dead-ended.
    DeadEnd,
    /// It fitted, into a (placed set, state) already explored and dead.
    Explored,
}

/// The deepest dead end seen, kept for the report.
struct DeadEnd {
    placed_known: usize,
    prefix: Vec<usize>,
    state: State,
    rejections: Vec<(usize, Tried)>,
    deadline: Option<usize>,
}

struct Search<'h, 'p> {
    key: &'h str,
    pending: &'p [Pending<'h>],
    table: DataTable,
    budget: u64,
    /// Acknowledged operations (indexes into `pending`), by invocation.
    known: Vec<usize>,
    /// Operations of unknown outcome, by invocation.
    unknown: Vec<usize>,
}

impl<'h, 'p> Search<'h, 'p> {
    fn new(key: &'h str, pending: &'p [Pending<'h>], table: DataTable, budget: u64) -> Self {
        let (known, unknown) = (0..pending.len()).partition(|&i| pending[i].ret.is_some());
        Search {
            key,
            pending,
            table,
            budget,
            known,
            unknown,
        }
    }

    /// Where the first unplaced acknowledged operation sits in `known`, starting from `from`.
    fn first_unplaced(&self, bits: &Bits, from: usize) -> usize {
        let mut low = from;
        while self.known.get(low).is_some_and(|&i| has(bits, i)) {
            low += 1;
        }
        low
    }

    /// The earliest-returning acknowledged operation not yet placed, if any is left. Only
    /// operations invoked before the best return so far can return earlier, so the scan stops
    /// there instead of walking the whole history.
    fn deadline(&self, bits: &Bits, low: usize) -> Option<usize> {
        let mut best: Option<(u64, usize)> = None;
        for &i in self.known.get(low..).unwrap_or_default() {
            let pending = &self.pending[i];
            if best.is_some_and(|(ret, _)| pending.op.invoke > ret) {
                break;
            }
            if let (false, Some(ret)) = (has(bits, i), pending.ret)
                && best.is_none_or(|(best_ret, _)| ret < best_ret)
            {
                best = Some((ret, i));
            }
        }
        best.map(|(_, i)| i)
    }

    /// Operations that may be placed next: not placed, and invoked no later than the first
    /// return among unplaced ones (anything invoked after it must follow it). Acknowledged ones
    /// come first so the search leaves unknown outcomes unplaced unless it needs them.
    fn candidates(&self, bits: &Bits, low: usize) -> Vec<usize> {
        let Some(first) = self.deadline(bits, low) else {
            return Vec::new();
        };
        let limit = self.pending[first].ret.unwrap_or(u64::MAX);
        let invoked = |i: &&usize| self.pending[**i].op.invoke <= limit;
        let unplaced = |i: &&usize| !has(bits, **i);
        let known = self.known.get(low..).unwrap_or_default();
        known
            .iter()
            .take_while(invoked)
            .filter(unplaced)
            .chain(self.unknown.iter().take_while(invoked).filter(unplaced))
            .copied()
            .collect()
    }

    fn frame(&self, bits: Bits, state: State, placed_known: usize, low: usize) -> Frame {
        let low = self.first_unplaced(&bits, low);
        let candidates = self.candidates(&bits, low);
        Frame {
            bits,
            state,
            placed_known,
            low,
            candidates,
            tried: 0,
            rejections: Vec::new(),
        }
    }

    fn run(self) -> Verdict {
        let words = self.pending.len().div_ceil(64).max(1);
        let mut memo: HashSet<(Bits, State)> = HashSet::new();
        let mut stack = vec![self.frame(vec![0; words].into_boxed_slice(), State::Absent, 0, 0)];
        let mut prefix: Vec<usize> = Vec::new();
        let mut dead_end: Option<DeadEnd> = None;
        let mut steps = 0u64;
        while let Some(top) = stack.last_mut() {
            if top.placed_known == self.known.len() {
                return Verdict::Ok;
            }
            let Some(&next) = top.candidates.get(top.tried) else {
                if dead_end
                    .as_ref()
                    .is_none_or(|end| top.placed_known > end.placed_known)
                {
                    dead_end = Some(DeadEnd {
                        placed_known: top.placed_known,
                        prefix: prefix.clone(),
                        state: top.state,
                        rejections: std::mem::take(&mut top.rejections),
                        deadline: self.deadline(&top.bits, top.low),
                    });
                }
                stack.pop();
                prefix.pop();
                continue;
            };
            top.tried += 1;
            steps += 1;
            if steps > self.budget {
                return Verdict::Inconclusive {
                    key: self.key.to_owned(),
                    steps,
                };
            }
            let candidate = &self.pending[next];
            let state = match apply(top.state, candidate.step) {
                Ok(state) if candidate.ret.is_none() && state == top.state => {
                    top.rejections
                        .push((next, Tried::Refused(Refusal::NoEffect, top.state)));
                    continue;
                }
                Ok(state) => state,
                Err(refusal) => {
                    top.rejections
                        .push((next, Tried::Refused(refusal, top.state)));
                    continue;
                }
            };
            let bits = with(&top.bits, next);
            if !memo.insert((bits.clone(), state)) {
                top.rejections.push((next, Tried::Explored));
                continue;
            }
            top.rejections.push((next, Tried::DeadEnd));
            let placed_known = top.placed_known + usize::from(candidate.ret.is_some());
            prefix.push(next);
            let low = top.low;
            stack.push(self.frame(bits, state, placed_known, low));
        }
        Verdict::Violation(Box::new(self.violation(dead_end)))
    }

    fn reason(&self, tried: Tried, candidate: &Pending) -> String {
        let (refusal, state) = match tried {
            Tried::Refused(refusal, state) => (refusal, state),
            Tried::DeadEnd => return "fits here, but no order of the rest fits after it".into(),
            Tried::Explored => {
                return "fits here, but no order of the rest fits after it (already explored)"
                    .into();
            }
        };
        let znode = self.table.znode(state);
        match refusal {
            Refusal::WouldFail(error) if candidate.ret.is_none() => {
                format!("outcome unknown, and it would fail with {error} on {znode}")
            }
            Refusal::WouldFail(error) => {
                format!("acknowledged, but would have failed with {error} on {znode}")
            }
            Refusal::WrongVersion { expected, reported } => {
                format!("answered version {reported}, but {znode} would become version {expected}")
            }
            Refusal::StaleRead => {
                let seen = match candidate.step {
                    Step::Read { seen } => self.table.znode(seen).to_string(),
                    _ => "?".to_owned(),
                };
                format!("read {seen}, but the znode holds {znode}")
            }
            Refusal::NoEffect => format!("outcome unknown, and it would change nothing on {znode}"),
            Refusal::NotRefused {
                answered,
                here: Some(here),
            } => format!("answered {answered}, but would have failed with {here} on {znode}"),
            Refusal::NotRefused {
                answered,
                here: None,
            } => format!("answered {answered}, but would have succeeded on {znode}"),
        }
    }

    fn violation(&self, dead_end: Option<DeadEnd>) -> Violation {
        let op = |i: usize| self.pending[i].op.clone();
        let Some(end) = dead_end else {
            // Unreachable in practice: the root frame is always recorded before the stack
            // empties; report the bare key rather than panic.
            return Violation {
                key: self.key.to_owned(),
                searched: self.pending.len(),
                longest_prefix: Vec::new(),
                state: self.table.znode(State::Absent),
                next: Vec::new(),
                deadline: None,
            };
        };
        Violation {
            key: self.key.to_owned(),
            searched: self.pending.len(),
            longest_prefix: end.prefix.iter().map(|&i| op(i)).collect(),
            state: self.table.znode(end.state),
            next: end
                .rejections
                .into_iter()
                .map(|(i, tried)| Rejection {
                    operation: op(i),
                    reason: self.reason(tried, &self.pending[i]),
                })
                .collect(),
            deadline: end.deadline.map(op),
        }
    }
}
