//! Consistent snapshots for backups (`GET /v1/snapshot`): a Raft ReadIndex confirms the
//! leader's commit index (so a follower cut off from the ensemble cannot hand out a stale
//! state), then, once this member has applied that far, the core copies the state (O(1),
//! `StateMachine::freeze`) and the copy is serialized on a thread of its own, as a periodic
//! snapshot is (`snapshotter`). Hashing and sending the bytes happen on the admin API's task.

use std::collections::BTreeMap;

use tokio::sync::oneshot;

use super::Core;

/// The state machine as applied through `index`, for a backup.
#[derive(Debug)]
pub struct BackupSnapshot {
    /// The Raft index (zxid) of the last entry the state reflects: at least the commit index
    /// the leader confirmed when the backup was asked for.
    pub index: u64,
    /// The Raft term of that entry.
    pub term: u64,
    /// `baton_machine` snapshot bytes.
    pub data: Vec<u8>,
}

/// Why no snapshot was taken; the caller may retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackupRefused {
    #[error("this member knows no leader, so it cannot confirm it is up to date")]
    NoLeader,
    #[error("the leader changed before the snapshot was confirmed up to date; try again")]
    LeaderChanged,
}

/// Where the core answers a backup request.
pub type BackupReply = oneshot::Sender<Result<BackupSnapshot, BackupRefused>>;

/// Backup requests in flight: waiting for the leader's read index, then for apply to reach it.
#[derive(Debug, Default)]
pub(super) struct BackupWaiters {
    /// ReadIndex context → who asked.
    confirming: BTreeMap<u64, BackupReply>,
    /// (read index, who asked): answerable once applied that far.
    confirmed: Vec<(u64, BackupReply)>,
}

impl Core {
    /// Starts a backup: a ReadIndex whose answer `release_backups` serves.
    pub(super) fn start_backup(&mut self, reply: BackupReply) {
        if self.node.raft.leader_id == 0 {
            let _ = reply.send(Err(BackupRefused::NoLeader));
            return;
        }
        let ctx = self.reads.fresh_context();
        self.read_index(ctx);
        self.backups.confirming.insert(ctx, reply);
    }

    /// Raft answered a ReadIndex: `true` if it was a backup's.
    pub(super) fn on_backup_read_state(&mut self, ctx: u64, index: u64) -> bool {
        match self.backups.confirming.remove(&ctx) {
            Some(reply) => {
                self.backups.confirmed.push((index, reply));
                true
            }
            None => false,
        }
    }

    /// Serves the backups whose read index is applied: one serialization for all of them.
    pub(super) fn release_backups(&mut self) {
        let applied = self.sm.last_applied() as u64;
        if !self.backups.confirmed.iter().any(|(i, _)| *i <= applied) {
            return;
        }
        let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.backups.confirmed)
            .into_iter()
            .partition(|(i, _)| *i <= applied);
        self.backups.confirmed = waiting;
        let term = self
            .node
            .raft
            .raft_log
            .term(applied)
            .unwrap_or(self.node.raft.term);
        let replies: Vec<BackupReply> = due.into_iter().map(|(_, reply)| reply).collect();
        super::snapshotter::serve_backups(
            self.sm.freeze(),
            term,
            replies,
            self.snapshots.is_off_thread(),
        );
    }

    /// A change of leader or term: ReadIndex requests in flight may never be answered.
    pub(super) fn forget_pending_backups(&mut self) {
        for (_, reply) in std::mem::take(&mut self.backups.confirming) {
            let _ = reply.send(Err(BackupRefused::LeaderChanged));
        }
    }

    /// Drops requests whose caller gave up (the admin API's deadline).
    pub(super) fn drop_abandoned_backups(&mut self) {
        self.backups
            .confirming
            .retain(|_, reply| !reply.is_closed());
        self.backups
            .confirmed
            .retain(|(_, reply)| !reply.is_closed());
    }
}
