//! Properties of a whole run that a per-key linearizability check does not see.

use std::collections::{BTreeMap, HashMap};

use thiserror::Error;

use crate::history::{Call, History, OpId, Operation, Outcome};
use crate::model::Znode;

/// A broken invariant, with the operations that show it.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum InvariantViolation {
    #[error(
        "{key}: no final read was taken, so its last acknowledged write (#{last}) is unchecked"
    )]
    NoFinalRead { key: String, last: OpId },
    #[error(
        "{key}: acknowledged write lost: the last acknowledged write is {last}, but the final read \
         sees {seen}, which neither it nor any write not finished before it produced"
    )]
    LostWrite {
        key: String,
        last: String,
        seen: String,
    },
    #[error(
        "sequential name {name} was acknowledged twice: to session {first} and to session {second}"
    )]
    SequentialNameReused {
        name: String,
        first: u64,
        second: u64,
    },
    #[error(
        "session {session} got its answers out of order: {later} was invoked after {earlier} \
         but answered before it"
    )]
    SessionOutOfOrder {
        session: u64,
        earlier: String,
        later: String,
    },
}

/// Checks that every key's final state (read after the run, once the ensemble settled) comes from
/// its last acknowledged write or from a write that did not finish before that one began.
/// Assumes every write's data is unique, so data names the write that produced it.
pub fn check_no_lost_writes(
    history: &History,
    finals: &BTreeMap<String, Znode>,
) -> Result<(), InvariantViolation> {
    for key in history.keys() {
        let acknowledged =
            |op: &&Operation| op.call.is_write() && matches!(op.outcome, Outcome::Ok(_));
        let Some(last) = history
            .on_key(key)
            .filter(acknowledged)
            .max_by_key(|op| op.ret)
        else {
            continue;
        };
        let final_state = finals
            .get(key)
            .ok_or_else(|| InvariantViolation::NoFinalRead {
                key: key.to_owned(),
                last: last.id,
            })?;
        // Writes that may have been ordered after `last`: itself, and every acknowledged or
        // unknown write that had not returned when `last` was invoked.
        let explains = history.on_key(key).any(|op| {
            let may_follow = op.ret.is_none_or(|ret| ret >= last.invoke)
                || matches!(op.outcome, Outcome::Unknown);
            let applied = matches!(op.outcome, Outcome::Ok(_) | Outcome::Unknown);
            may_follow
                && applied
                && match (&op.call, final_state) {
                    (Call::Delete { .. }, Znode::Absent) => true,
                    (
                        Call::Create { data } | Call::SetData { data, .. },
                        Znode::Present { data: seen, .. },
                    ) => data == seen,
                    _ => false,
                }
        });
        if !explains {
            return Err(InvariantViolation::LostWrite {
                key: key.to_owned(),
                last: last.to_string(),
                seen: final_state.to_string(),
            });
        }
    }
    Ok(())
}

/// Checks that no sequential node name was acknowledged twice; `acks` are (session, full path)
/// of every acknowledged sequential create.
pub fn check_sequential_names<'a>(
    acks: impl IntoIterator<Item = (u64, &'a str)>,
) -> Result<(), InvariantViolation> {
    let mut owners: HashMap<&str, u64> = HashMap::new();
    for (session, name) in acks {
        if let Some(first) = owners.insert(name, session) {
            return Err(InvariantViolation::SequentialNameReused {
                name: name.to_owned(),
                first,
                second: session,
            });
        }
    }
    Ok(())
}

/// Checks that each session's answered operations were answered in the order it invoked them
/// (ZooKeeper's per-session FIFO order). Unanswered operations impose nothing.
pub fn check_session_fifo(history: &History) -> Result<(), InvariantViolation> {
    let mut sessions: BTreeMap<u64, Vec<&Operation>> = BTreeMap::new();
    for op in history.operations() {
        if op.ret.is_some() && !matches!(op.outcome, Outcome::Unknown) {
            sessions.entry(op.session).or_default().push(op);
        }
    }
    for (session, mut ops) in sessions {
        ops.sort_by_key(|op| (op.invoke, op.id));
        for pair in ops.windows(2) {
            if pair[1].ret < pair[0].ret {
                return Err(InvariantViolation::SessionOutOfOrder {
                    session,
                    earlier: pair[0].to_string(),
                    later: pair[1].to_string(),
                });
            }
        }
    }
    Ok(())
}
