//! Random sequences of append (with conflicts), hard-state writes, snapshots (compaction),
//! installed snapshots and reopens, checked after every step against a plain in-memory model.
//! Tiny segments make rotation and segment deletion happen constantly.

mod common;

use std::path::Path;

use baton_raftlog::{LogOptions, RaftLog};
use common::*;
use proptest::prelude::*;
use raft::eraftpb::{Entry, HardState};
use raft::{GetEntriesContext, Storage};

#[derive(Debug, Clone)]
enum Step {
    /// Append `count` entries starting at a point chosen by `at` among the legal ones.
    Append {
        at: u8,
        count: u8,
        term_bump: u8,
    },
    HardState {
        commit_at: u8,
    },
    /// Snapshot at a point chosen by `at` among the legal ones.
    CreateSnapshot {
        at: u8,
    },
    /// Install a snapshot from a leader, `ahead` entries past our last.
    ApplySnapshot {
        ahead: u8,
    },
    Reopen,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (any::<u8>(), 1..6u8, 0..2u8).prop_map(|(at, count, term_bump)| Step::Append { at, count, term_bump }),
        2 => any::<u8>().prop_map(|commit_at| Step::HardState { commit_at }),
        2 => any::<u8>().prop_map(|at| Step::CreateSnapshot { at }),
        1 => (0..4u8).prop_map(|ahead| Step::ApplySnapshot { ahead }),
        2 => Just(Step::Reopen),
    ]
}

/// What the log must look like.
#[derive(Debug, Default)]
struct Model {
    anchor: (u64, u64),
    terms: Vec<u64>, // terms[k] is the term of index anchor.0 + 1 + k
    hard_state: HardState,
    snapshot: (u64, u64),
    keep: u64,
}

impl Model {
    fn last(&self) -> u64 {
        self.anchor.0 + self.terms.len() as u64
    }

    fn term(&self, index: u64) -> u64 {
        if index == self.anchor.0 {
            self.anchor.1
        } else {
            self.terms[(index - self.anchor.0 - 1) as usize]
        }
    }

    /// Raft never rewrites entries a snapshot covers (they are committed).
    fn lowest_rewritable(&self) -> u64 {
        self.anchor.0.max(self.snapshot.0) + 1
    }
}

fn pick(at: u8, lo: u64, hi: u64) -> u64 {
    lo + u64::from(at) % (hi - lo + 1)
}

fn options(keep: u64) -> LogOptions {
    LogOptions {
        segment_bytes: 200,
        keep_entries: keep,
        sync: false,
        ..LogOptions::default()
    }
}

fn run(steps: Vec<Step>, keep: u64) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), options(keep)).expect("open");
    let mut model = Model {
        keep,
        ..Model::default()
    };
    for (n, step) in steps.into_iter().enumerate() {
        match step {
            Step::Append {
                at,
                count,
                term_bump,
            } => {
                let start = pick(at, model.lowest_rewritable(), model.last() + 1);
                let term = model
                    .term(start - 1)
                    .max(model.terms.last().copied().unwrap_or(0))
                    + u64::from(term_bump);
                let ents: Vec<Entry> = (start..start + u64::from(count))
                    .map(|i| entry_with_data(i, term, &i.to_le_bytes()))
                    .collect();
                log.persist(&ents, None).expect("persist");
                model.terms.truncate((start - model.anchor.0 - 1) as usize);
                model
                    .terms
                    .extend(std::iter::repeat_n(term, count as usize));
            }
            Step::HardState { commit_at } => {
                let commit = pick(commit_at, 0, model.last());
                let hs = hard_state(
                    model.terms.last().copied().unwrap_or(model.anchor.1),
                    1,
                    commit,
                );
                log.persist(&[], Some(&hs)).expect("persist hard state");
                model.hard_state = hs;
            }
            Step::CreateSnapshot { at } => {
                if model.last() > model.snapshot.0 {
                    let index = pick(at, model.snapshot.0.max(model.anchor.0) + 1, model.last());
                    let term = model.term(index);
                    log.create_snapshot(index, voters(&[1]), index.to_le_bytes().to_vec())
                        .expect("create snapshot");
                    // Entries after the snapshot before this one stay, for a fallback.
                    let older = model.snapshot.0;
                    model.snapshot = (index, term);
                    let compact_to = index.saturating_sub(model.keep).min(older);
                    if compact_to > model.anchor.0 {
                        let drop = (compact_to - model.anchor.0) as usize;
                        model.anchor = (compact_to, model.term(compact_to));
                        model.terms.drain(..drop);
                    }
                }
            }
            Step::ApplySnapshot { ahead } => {
                let index = model.last() + 1 + u64::from(ahead);
                let term = model.terms.last().copied().unwrap_or(model.anchor.1) + 1;
                log.apply_snapshot(&snapshot(index, term, &[1, 2], b"from leader"))
                    .expect("apply snapshot");
                model.anchor = (index, term);
                model.terms.clear();
                model.snapshot = (index, term);
                model.hard_state.term = model.hard_state.term.max(term);
                model.hard_state.commit = index;
            }
            Step::Reopen => {
                drop(log);
                log = open(dir.path(), options(keep)).expect("reopen");
            }
        }
        check(&log, &model, dir.path())
            .map_err(|e| TestCaseError::fail(format!("after step {n}: {e}")))?;
    }
    drop(log);
    let log = open(dir.path(), options(keep)).expect("final reopen");
    check(&log, &model, dir.path())
        .map_err(|e| TestCaseError::fail(format!("after final reopen: {e}")))
}

fn check(log: &RaftLog, model: &Model, dir: &Path) -> Result<(), String> {
    let got = (log.first_index(), log.last_index());
    let want = (Ok(model.anchor.0 + 1), Ok(model.last()));
    if got != want {
        return Err(format!("first/last {got:?}, want {want:?}"));
    }
    if log.term(model.anchor.0) != Ok(model.anchor.1) {
        return Err(format!(
            "anchor term {:?}, want {:?}",
            log.term(model.anchor.0),
            model.anchor
        ));
    }
    let ents = log
        .entries(
            model.anchor.0 + 1,
            model.last() + 1,
            None,
            GetEntriesContext::empty(false),
        )
        .map_err(|e| e.to_string())?;
    let got_terms: Vec<u64> = ents.iter().map(|e| e.term).collect();
    if got_terms != model.terms {
        return Err(format!("terms {got_terms:?}, want {:?}", model.terms));
    }
    if let Some(bad) = ents.iter().find(|e| e.data[..] != e.index.to_le_bytes()) {
        return Err(format!("entry {} has the wrong data", bad.index));
    }
    let mut want_hs = model.hard_state.clone();
    want_hs.commit = want_hs.commit.max(model.anchor.0).max(model.snapshot.0);
    let got_hs = log.initial_state().map_err(|e| e.to_string())?.hard_state;
    if got_hs != want_hs {
        return Err(format!("hard state {got_hs:?}, want {want_hs:?}"));
    }
    let snap = log
        .latest_snapshot()
        .map(|s| (s.get_metadata().index, s.get_metadata().term));
    if snap.unwrap_or((0, 0)) != model.snapshot {
        return Err(format!("snapshot {snap:?}, want {:?}", model.snapshot));
    }
    let files = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".wal"))
        .count() as u64;
    if files != log.stats().segments {
        return Err(format!(
            "{files} segment files, stats say {}",
            log.stats().segments
        ));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn log_matches_model(steps in prop::collection::vec(step(), 1..60), keep in 0..4u64) {
        run(steps, keep)?;
    }
}
