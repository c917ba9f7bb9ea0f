//! The Raft side of the core: opening the node, handling `Ready` (persist, send, apply) and
//! taking snapshots. Nothing is acknowledged before `RaftLog::persist` has returned, and
//! entries are applied only once Raft reports them committed.

use std::time::Instant;

use baton_machine::{Applied, Command, CommandKind, StateMachine};
use baton_raftlog::RaftLog;
use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeV2, ConfState, Entry, EntryType, Message, Snapshot};
use raft::{RawNode, Storage};

use super::{Core, CoreConfig, CoreError, wire};
use crate::raft_logging::raft_logger;

const NOOP: Command = Command {
    session_id: 0,
    xid: 0,
    time_ms: 0,
    kind: CommandKind::Noop,
};

/// Opens the Raft node and the tree it replicates: the latest snapshot, then the log after it
/// (which Raft hands back as committed entries on the first `Ready`).
pub(super) fn open_node(
    cfg: &CoreConfig,
    log: RaftLog,
    members: &[u64],
) -> Result<(RawNode<RaftLog>, StateMachine, ConfState, u64), CoreError> {
    let state = log.initial_state()?;
    let mut conf_state = state.conf_state.clone();
    if conf_state.voters.is_empty() && conf_state.learners.is_empty() {
        conf_state = ConfState::from((members.to_vec(), Vec::<u64>::new()));
        log.set_conf_state(&conf_state)?;
        tracing::info!(?members, "bootstrapped a new ensemble");
    }
    let (sm, applied) = match log.latest_snapshot() {
        Some(snap) => {
            let index = snap.get_metadata().index;
            let sm = StateMachine::restore(snap.get_data())
                .map_err(|e| CoreError::Snapshot(format!("snapshot at index {index}: {e}")))?;
            tracing::info!(
                index,
                znodes = sm.node_count(),
                "restored the tree from a snapshot"
            );
            (sm, index)
        }
        None => (StateMachine::new(), 0),
    };
    let config = raft::Config {
        id: cfg.id,
        election_tick: 10,
        heartbeat_tick: 2,
        applied,
        pre_vote: true,
        check_quorum: true,
        max_size_per_msg: 1 << 20,
        max_inflight_msgs: 256,
        ..Default::default()
    };
    config.validate()?;
    let mut node = RawNode::new(&config, log, &raft_logger(cfg.id))?;
    if conf_state.voters == [cfg.id] && conf_state.learners.is_empty() {
        // Alone in the ensemble: no need to wait out an election timeout.
        node.campaign()?;
    }
    Ok((node, sm, conf_state, applied))
}

impl Core {
    /// Handles one `Ready`: apply what is committed, persist new entries (one fsync for the
    /// whole batch), send messages, then apply what became committed by persisting.
    pub(super) fn on_ready(&mut self) -> Result<(), CoreError> {
        if !self.node.has_ready() {
            return Ok(());
        }
        let mut ready = self.node.ready();
        if !ready.messages().is_empty() {
            self.send_messages(ready.take_messages());
        }
        if ready.snapshot().get_metadata().index != 0 {
            self.install_snapshot(ready.snapshot().clone())?;
        }
        self.apply_committed(ready.take_committed_entries())?;
        if !ready.entries().is_empty() || ready.hs().is_some() {
            let started = Instant::now();
            self.log.persist(ready.entries(), ready.hs())?;
            self.metrics
                .fsync_seconds
                .observe(started.elapsed().as_secs_f64());
            self.metrics.fsyncs.inc();
        }
        if !ready.persisted_messages().is_empty() {
            self.send_messages(ready.take_persisted_messages());
        }
        let mut light = self.node.advance(ready);
        self.send_messages(light.take_messages());
        self.apply_committed(light.take_committed_entries())?;
        self.node.advance_apply();
        self.maybe_snapshot()
    }

    /// Peer transport arrives with the replicated ensemble; a one-member ensemble sends nothing.
    fn send_messages(&mut self, messages: Vec<Message>) {
        for m in messages {
            tracing::debug!(to = m.to, kind = ?m.get_msg_type(), "no transport to peer; message dropped");
        }
    }

    fn install_snapshot(&mut self, snap: Snapshot) -> Result<(), CoreError> {
        let index = snap.get_metadata().index;
        self.sm = StateMachine::restore(snap.get_data()).map_err(|e| {
            CoreError::Snapshot(format!("snapshot at index {index} from the leader: {e}"))
        })?;
        self.log.apply_snapshot(&snap)?;
        self.conf_state = snap.get_metadata().get_conf_state().clone();
        self.last_snapshot_index = index;
        tracing::info!(index, "installed a snapshot from the leader");
        Ok(())
    }

    fn apply_committed(&mut self, entries: Vec<Entry>) -> Result<(), CoreError> {
        for entry in entries {
            let index = entry.index;
            match entry.get_entry_type() {
                EntryType::EntryNormal if entry.data.is_empty() => {
                    self.sm.apply(index as i64, &NOOP);
                }
                EntryType::EntryNormal => {
                    let cmd = Command::decode(&entry.data)
                        .map_err(|source| CoreError::CorruptEntry { index, source })?;
                    let applied = self.sm.apply(index as i64, &cmd);
                    self.route(&cmd, applied);
                }
                EntryType::EntryConfChange => {
                    let mut cc = ConfChange::default();
                    cc.merge_from_bytes(&entry.data)
                        .map_err(|e| CoreError::Snapshot(e.to_string()))?;
                    self.conf_state = self.node.apply_conf_change(&cc)?;
                    self.log.set_conf_state(&self.conf_state)?;
                    self.sm.apply(index as i64, &NOOP);
                }
                EntryType::EntryConfChangeV2 => {
                    let mut cc = ConfChangeV2::default();
                    cc.merge_from_bytes(&entry.data)
                        .map_err(|e| CoreError::Snapshot(e.to_string()))?;
                    self.conf_state = self.node.apply_conf_change(&cc)?;
                    self.log.set_conf_state(&self.conf_state)?;
                    self.sm.apply(index as i64, &NOOP);
                }
            }
        }
        Ok(())
    }

    /// Sends an applied entry's effects where they belong on this member: watch notifications
    /// first (ZooKeeper sends them before the reply that caused them), then the reply.
    fn route(&mut self, cmd: &Command, applied: Applied) {
        let zxid = applied.zxid;
        for (path, event) in &applied.events {
            for (session_id, event) in self.watches.trigger(path, *event) {
                if let Some(conn) = self
                    .session_conns
                    .get(&session_id)
                    .and_then(|c| self.conns.get_mut(c))
                {
                    conn.send(wire::notification(event));
                }
            }
        }
        match &cmd.kind {
            CommandKind::CreateSession { timeout_ms, .. } => {
                let ok = applied.err == 0;
                if ok {
                    let now = self.now_ms();
                    self.tracker.add(cmd.session_id, *timeout_ms as u32, now);
                }
                self.finish_create_session(cmd.session_id, ok);
            }
            CommandKind::Write { .. } | CommandKind::CloseSession { expired: false } => {
                self.deliver_write_reply(
                    cmd.session_id,
                    cmd.xid,
                    zxid,
                    applied.err,
                    applied.body.as_ref(),
                );
            }
            _ => {}
        }
        if let Some(closed) = applied.closed_session {
            self.forget_session(closed);
        }
    }

    fn maybe_snapshot(&mut self) -> Result<(), CoreError> {
        let applied = self.sm.last_applied() as u64;
        if applied < self.last_snapshot_index + self.cfg.snapshot_entries {
            return Ok(());
        }
        let started = Instant::now();
        let data = self.sm.snapshot();
        let bytes = data.len();
        self.log
            .create_snapshot(applied, self.conf_state.clone(), data)?;
        self.last_snapshot_index = applied;
        self.metrics.snapshots.inc();
        tracing::info!(
            index = applied,
            bytes,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "snapshot taken; log compacted"
        );
        Ok(())
    }
}
