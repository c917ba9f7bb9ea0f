//! The replicas check: every member that has applied index `i` holds the same tree there,
//! byte for byte (each znode's path, data, with null kept apart from empty, and stat). The
//! other checks look at what decides a lock or a quota; this one catches a member that applies
//! one entry differently in any way, as a member switching on a feature-level behaviour by its
//! build rather than by the level entry would.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use baton_machine::StateMachine;

/// A digest of the tree: independent of the order nodes are iterated in.
pub fn digest(sm: &StateMachine) -> u64 {
    let mut sum = 0u64;
    for (path, node) in sm.tree().iter() {
        // `DefaultHasher::new()` has fixed keys: the same node hashes alike on every member.
        let mut h = DefaultHasher::new();
        path.hash(&mut h);
        node.data().hash(&mut h);
        node.stat().hash(&mut h);
        sum = sum.wrapping_add(h.finish());
    }
    sum
}

/// Each applied index seen, with the first member seen there and its tree's digest.
#[derive(Default)]
pub struct TreeView {
    at: BTreeMap<u64, (u64, u64)>,
    /// The index each member was last checked at: a step that applied nothing is skipped.
    last: BTreeMap<u64, u64>,
}

impl TreeView {
    /// Records member `id` at `applied`; an error when another member's tree differed there.
    pub fn observe(&mut self, id: u64, applied: u64, sm: &StateMachine) -> Result<(), String> {
        if self.last.insert(id, applied) == Some(applied) {
            return Ok(());
        }
        let now = digest(sm);
        match self.at.get(&applied) {
            Some((first, seen)) if *seen != now => Err(format!(
                "the replicas differ at index {applied}: member {first}'s tree has digest \
                 {seen:016x}, member {id}'s {now:016x} (feature level {})",
                sm.settings().feature_level.get()
            )),
            Some(_) => Ok(()),
            None => {
                self.at.insert(applied, (id, now));
                Ok(())
            }
        }
    }

    /// Forgets when `id` was last checked (it restarted: its state was rebuilt from disk).
    pub fn forget_member(&mut self, id: u64) {
        self.last.remove(&id);
    }
}
