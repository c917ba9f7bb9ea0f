//! Giving a volume back once the tree shrank: compaction without waiting for the log to grow.
//!
//! A snapshot is due when the log has grown (`replicate.rs`), but deletes add almost nothing
//! to it. A tenant that filled the volumes and then deleted everything would leave the kept
//! snapshots of the full tree, the entries that made it and a reserve sized for it on disk,
//! and the NOSPACE alarm up for good, stopping every tenant's writes. So while this member's
//! volume is short of space (below the level at which its alarm clears), a tree under half
//! the size it had at either kept snapshot makes a snapshot due at once.
//!
//! Compaction keeps the two newest snapshots (the older one is the fallback should the newest
//! be found damaged), so the space of the large one comes back only with the second snapshot
//! after the deletes, which needs an entry past the first. An ensemble whose writes the alarm
//! stopped may append none: this member then asks the leader for one, its own alarm state
//! again (an entry that changes nothing), at most once per [`ENTRY_REQUEST_EVERY`].
//!
//! Bounded: each such snapshot records the smaller tree, so with the tree unchanged at most two
//! are taken, and none while the volume has room.

use std::time::{Duration, Instant};

use super::{Core, clock};

/// How often a member short of space asks the leader for an entry to snapshot at.
const ENTRY_REQUEST_EVERY: Duration = Duration::from_secs(5);

/// The tree's size at the snapshots compaction keeps.
#[derive(Debug, Default)]
pub(super) struct Reclaim {
    /// Tree bytes at the newest snapshot and the one before it.
    kept: [u64; 2],
    /// Tree bytes of the snapshot being written.
    writing: Option<u64>,
    last_entry_request: Option<Instant>,
}

impl Reclaim {
    /// Starting from one snapshot (at startup, or installed from the leader) of `tree_bytes`:
    /// what is on disk is unknown, so both kept ones count as that.
    pub fn reset(&mut self, tree_bytes: u64) {
        self.kept = [tree_bytes; 2];
        self.writing = None;
    }

    /// A snapshot of `tree_bytes` started.
    pub fn started(&mut self, tree_bytes: u64) {
        self.writing = Some(tree_bytes);
    }

    /// The snapshot started last is durable and the log compacted behind it.
    pub fn written(&mut self) {
        if let Some(tree) = self.writing.take() {
            self.kept = [tree, self.kept[0]];
        }
    }

    /// Whether a tree of `tree_bytes` is under half of a kept snapshot's.
    fn shrunk(&self, tree_bytes: u64) -> bool {
        self.kept
            .iter()
            .any(|&kept| tree_bytes.saturating_mul(2) < kept)
    }
}

impl Core {
    /// Called with each measure of the volume: short of space with a tree that shrank, takes a
    /// snapshot now, or asks for an entry to take it at.
    pub(super) fn reclaim_if_shrunk(&mut self, free_bytes: u64, clears_at: u64) {
        if free_bytes >= clears_at
            || self.snapshots.busy()
            || self.space_wait.is_waiting()
            || !self.space_wait.snapshot_may_start(self.now())
        {
            return;
        }
        let tree = self.sm.approximate_data_size();
        if !self.reclaim.shrunk(tree) {
            return;
        }
        if self.sm.last_applied() as u64 > self.last_snapshot_index {
            tracing::warn!(
                free_bytes,
                clears_at,
                tree_bytes = tree,
                kept_snapshot_tree_bytes = ?self.reclaim.kept,
                "the data volume is short of space and the tree shrank: taking a snapshot now to give back what the old ones and their log hold"
            );
            if let Err(e) = self.start_snapshot() {
                tracing::error!(error = %e, "could not take a snapshot to give back space");
            }
            return;
        }
        let now = self.now();
        if self
            .reclaim
            .last_entry_request
            .is_some_and(|at| clock::since(now, at) < ENTRY_REQUEST_EVERY)
        {
            return;
        }
        self.reclaim.last_entry_request = Some(now);
        tracing::info!(
            "nothing applied since the last snapshot: asking the leader for an entry, to snapshot past it and let the older snapshot go"
        );
        self.restate_own_alarm();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_under_half_of_either_kept_snapshot_is_shrunk_until_two_snapshots_record_it() {
        let mut r = Reclaim::default();
        r.reset(100 << 20);
        assert!(!r.shrunk(60 << 20));
        assert!(r.shrunk(10 << 20));
        r.started(10 << 20);
        assert!(r.shrunk(10 << 20), "not yet written");
        r.written();
        assert!(
            r.shrunk(10 << 20),
            "the older snapshot still holds the large tree"
        );
        r.started(10 << 20);
        r.written();
        assert!(!r.shrunk(10 << 20));
        assert!(!r.shrunk(6 << 20));
        assert!(r.shrunk(4 << 20));
    }

    #[test]
    fn an_empty_tree_after_empty_snapshots_is_not_shrunk() {
        let mut r = Reclaim::default();
        r.reset(0);
        assert!(!r.shrunk(0));
    }
}
