//! `sync` through Raft's ReadIndex: the leader confirms its commit index, and the sync is
//! answered in its session's order once this member has applied that far, so reads after it
//! see every write acknowledged before it.

use std::collections::{BTreeMap, BTreeSet};

use super::Core;
use super::local_conn::Pending;
use super::messages::ConnId;

/// ReadIndex requests this member has in flight, and connections whose syncs are answerable
/// once applied far enough.
#[derive(Debug)]
pub(super) struct ReadIndexQueue {
    /// Context → the connection whose sync asked.
    pending: BTreeMap<u64, ConnId>,
    next_ctx: u64,
    /// Connections with a sync whose read index is known.
    resolved: BTreeSet<ConnId>,
    /// Contexts asked for while a `Ready` waited for space, to send Raft once it is advanced.
    deferred: Vec<u64>,
}

impl ReadIndexQueue {
    /// Contexts start at `first_ctx`, which must differ from what an earlier run of this member
    /// used: the leader drops a ReadIndex whose context is already pending.
    pub fn new(first_ctx: u64) -> Self {
        ReadIndexQueue {
            pending: BTreeMap::new(),
            next_ctx: first_ctx,
            resolved: BTreeSet::new(),
            deferred: Vec::new(),
        }
    }

    /// Records a ReadIndex for `conn`; its context, to send to Raft.
    pub fn start(&mut self, conn: ConnId) -> u64 {
        let ctx = self.next_ctx;
        self.next_ctx += 1;
        self.pending.insert(ctx, conn);
        ctx
    }

    /// A context no sync uses, for another kind of ReadIndex (a backup's).
    pub fn fresh_context(&mut self) -> u64 {
        let ctx = self.next_ctx;
        self.next_ctx += 1;
        ctx
    }

    /// Raft answered `ctx`: the connection that asked, once.
    pub fn resolve(&mut self, ctx: u64) -> Option<ConnId> {
        self.pending.remove(&ctx)
    }

    /// `conn` has a sync whose index is known, to answer once applied that far.
    pub fn mark_resolved(&mut self, conn: ConnId) {
        self.resolved.insert(conn);
    }

    /// The connections marked resolved, which are unmarked.
    pub fn take_resolved(&mut self) -> Vec<ConnId> {
        std::mem::take(&mut self.resolved).into_iter().collect()
    }

    /// Forgets requests in flight: they do not outlive a term (their connections are closed).
    pub fn forget_pending(&mut self) {
        self.pending.clear();
    }
}

/// The context Raft carries for a ReadIndex: this member's id, then the counter. The id is in
/// it because raft's leader silently drops a ReadIndex whose context is already pending, and
/// every member counts on its own.
pub(super) fn encode_context(member: u64, ctx: u64) -> Vec<u8> {
    let mut bytes = member.to_be_bytes().to_vec();
    bytes.extend_from_slice(&ctx.to_be_bytes());
    bytes
}

/// The counter of a ReadIndex context that `member` issued; `None` for anyone else's.
pub(super) fn decode_context(member: u64, bytes: &[u8]) -> Option<u64> {
    let (who, counter) = bytes.split_at_checked(8)?;
    if who != member.to_be_bytes() {
        return None;
    }
    Some(u64::from_be_bytes(counter.try_into().ok()?))
}

impl Core {
    /// Asks Raft for a read index under `ctx`. While a `Ready` waits for space, Raft must make
    /// no message (a follower's would make raft-rs panic when that `Ready` is advanced:
    /// "not leader but has new msg after advance"), so the request waits for it.
    pub(super) fn read_index(&mut self, ctx: u64) {
        if self.space_wait.is_waiting() {
            self.reads.deferred.push(ctx);
            return;
        }
        self.node.read_index(encode_context(self.cfg.id, ctx));
    }

    /// Sends Raft the read indexes asked for while a `Ready` waited for space.
    pub(super) fn send_deferred_read_indexes(&mut self) {
        for ctx in std::mem::take(&mut self.reads.deferred) {
            self.read_index(ctx);
        }
    }

    /// Starts a Raft ReadIndex for a `sync`; it is answered in order once applied that far.
    pub(super) fn start_sync(&mut self, conn_id: ConnId, xid: i32, path: String) {
        let ctx = self.reads.start(conn_id);
        let term = self.term();
        let stale = self.cfg.bugs.sync_without_read_index();
        if !stale {
            self.read_index(ctx);
        }
        let now = self.now();
        if let Some(conn) = self.clients.get_mut(conn_id) {
            conn.pipeline.push_back(Pending::Sync {
                xid,
                path,
                ctx,
                index: None,
                since: now,
                term,
            });
        }
        if stale {
            // The deliberate bug: whatever this member has applied counts as up to date.
            let applied = self.node.raft.raft_log.applied;
            self.on_read_state(ctx, applied);
        }
    }

    /// Records the commit index Raft confirmed for a sync, then answers what became answerable.
    pub(super) fn on_read_state(&mut self, ctx: u64, index: u64) {
        if self.on_probe_answered(ctx) || self.on_backup_read_state(ctx, index) {
            return;
        }
        let Some(conn_id) = self.reads.resolve(ctx) else {
            return;
        };
        let Some(conn) = self.clients.get_mut(conn_id) else {
            return;
        };
        for p in conn.pipeline.iter_mut() {
            if let Pending::Sync {
                ctx: c, index: i, ..
            } = p
                && *c == ctx
            {
                *i = Some(index);
            }
        }
        self.reads.mark_resolved(conn_id);
    }

    /// Answers syncs whose read index has been applied, with the reads queued behind them.
    pub(super) fn release_syncs(&mut self) {
        for conn_id in self.reads.take_resolved() {
            let Some(session_id) = self.clients.get(conn_id).and_then(|c| c.session_id) else {
                continue;
            };
            self.drain_deferred(conn_id, session_id);
            if let Some(conn) = self.clients.get(conn_id)
                && conn
                    .pipeline
                    .iter()
                    .any(|p| matches!(p, Pending::Sync { index: Some(_), .. }))
            {
                self.reads.mark_resolved(conn_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_are_fresh_and_resolve_once() {
        let mut q = ReadIndexQueue::new(100);
        let a = q.start(1);
        let b = q.start(1);
        assert_eq!((a, b), (100, 101));
        assert_eq!(q.resolve(b), Some(1));
        assert_eq!(q.resolve(b), None, "an answer counts once");
        assert_eq!(q.resolve(999), None, "never issued");
        assert_eq!(q.resolve(a), Some(1));
    }

    #[test]
    fn a_term_change_forgets_requests_in_flight_but_not_resolved_syncs() {
        let mut q = ReadIndexQueue::new(0);
        let in_flight = q.start(1);
        let answered = q.start(2);
        assert_eq!(q.resolve(answered), Some(2));
        q.mark_resolved(2);
        q.forget_pending();
        assert_eq!(q.resolve(in_flight), None);
        assert_eq!(q.take_resolved(), vec![2]);
        assert!(q.take_resolved().is_empty());
    }

    #[test]
    fn contexts_name_their_member() {
        let bytes = encode_context(3, 42);
        assert_eq!(decode_context(3, &bytes), Some(42));
        assert_eq!(decode_context(4, &bytes), None, "another member's");
        assert_eq!(decode_context(3, &bytes[..12]), None, "truncated");
        assert_eq!(decode_context(3, b""), None);
    }
}
