//! `raft::Storage` for [`RaftLog`], served entirely from memory.

use raft::eraftpb::{Entry, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

use crate::log::RaftLog;

impl Storage for RaftLog {
    /// The durable hard and conf state, with the commit index raised to at least the latest
    /// snapshot's index. That is always true (only applied, hence committed, state is
    /// snapshotted), but the persisted commit may lag it when a `LightReady` commit index was
    /// applied before being persisted; raft refuses to start when its commit is below its first
    /// index or below `Config::applied`, which should be the snapshot index.
    fn initial_state(&self) -> raft::Result<RaftState> {
        let state = self.read_state();
        let snapshot_index = state
            .snapshot
            .as_ref()
            .map_or(0, |s| s.get_metadata().index);
        let mut hard_state = state.mem.hard_state.clone();
        hard_state.commit = hard_state
            .commit
            .max(state.mem.anchor().0)
            .max(snapshot_index);
        Ok(RaftState::new(hard_state, state.mem.conf_state.clone()))
    }

    /// Entries in `[low, high)` limited to `max_size` bytes (at least one); `Compacted` below the
    /// first index, `Unavailable` past the last (where `MemStorage` would panic).
    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        Ok(self.read_state().mem.entries(low, high, max_size.into())?)
    }

    /// Term of `idx`, also for the entry just before the first index.
    fn term(&self, idx: u64) -> raft::Result<u64> {
        Ok(self.read_state().mem.term(idx)?)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.read_state().mem.first_index())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.read_state().mem.last_index())
    }

    /// The newest snapshot file's contents, read from the file (raft asks only when a follower
    /// needs one). `SnapshotTemporarilyUnavailable` (raft retries later) if there is none yet, it
    /// is older than `request_index`, or its file cannot be read: the application should
    /// create one.
    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let latest_index = self
            .read_state()
            .snapshot
            .as_ref()
            .map_or(0, |s| s.get_metadata().index);
        if latest_index > 0 && latest_index >= request_index {
            match self.load_latest_snapshot() {
                Ok(Some(snap)) => return Ok(snap),
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(to, error = %e, "the newest snapshot cannot be read to send it");
                }
            }
        } else {
            tracing::debug!(
                to,
                request_index,
                latest_index,
                "no snapshot recent enough to send"
            );
        }
        Err(raft::Error::Store(
            StorageError::SnapshotTemporarilyUnavailable,
        ))
    }
}
