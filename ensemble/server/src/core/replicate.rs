//! The Raft side of the core: opening the node, handling `Ready` (persist, send, apply) and
//! taking snapshots. Nothing is acknowledged before `RaftLog::persist` has returned, and
//! entries are applied only once Raft reports them committed.

use std::time::Instant;

use baton_machine::{Applied, Command, CommandKind, SnapshotError, StateMachine};
use baton_proto::ErrorCode;
use baton_raftlog::RaftLog;
use protobuf::Message as _;
use raft::RawNode;
use raft::eraftpb::{
    ConfChange, ConfChangeSingle, ConfChangeType, ConfChangeV2, ConfState, Entry, EntryType,
    Message, Snapshot,
};

use super::{Core, CoreConfig, CoreError, read_index, space_wait, wire};
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
    initial_members: &[(u64, String)],
) -> Result<(RawNode<RaftLog>, StateMachine, ConfState, u64), CoreError> {
    let members: Vec<u64> = initial_members.iter().map(|(id, _)| *id).collect();
    let existing = log.conf_state();
    let fresh = existing.voters.is_empty() && existing.learners.is_empty();
    if fresh && cfg.join {
        // A member joining a running ensemble learns everything from the leader's snapshot,
        // configuration included; bootstrapping one of its own would make it believe it is a
        // voter of a cluster that never agreed to that.
        tracing::info!(
            ?members,
            "joining: waiting for the leader to add this member (POST /v1/members)"
        );
    } else if fresh {
        bootstrap(&log, initial_members)?;
        tracing::info!(?members, "bootstrapped a new ensemble");
    }
    let (sm, applied) = match log.load_latest_snapshot()? {
        Some(snap) => {
            let index = snap.get_metadata().index;
            let sm = StateMachine::restore(snap.get_data()).map_err(|e| match e {
                // A newer release's format: the data dir's own refusal (exit status 78).
                SnapshotError::FeatureLevel(e) => CoreError::FeatureLevel {
                    level: e.level,
                    max: e.max,
                    index: index as i64,
                },
                e => CoreError::Snapshot(format!("snapshot at index {index}: {e}")),
            })?;
            tracing::info!(
                index,
                znodes = sm.node_count(),
                "restored the tree from a snapshot"
            );
            (sm, index)
        }
        None => (StateMachine::new(), 0),
    };
    // The log's conf state follows every applied membership change (the snapshot's may be older).
    let conf_state = log.conf_state();
    let config = raft::Config {
        id: cfg.id,
        election_tick: 10,
        heartbeat_tick: 2,
        applied,
        pre_vote: true,
        check_quorum: true,
        max_size_per_msg: 1 << 20,
        max_inflight_msgs: 256,
        // `[t, t + 1)`: the one value raft-rs can then draw.
        min_election_tick: cfg.fixed_election_ticks.unwrap_or(0),
        max_election_tick: cfg.fixed_election_ticks.map_or(0, |t| t + 1),
        ..Default::default()
    };
    config.validate()?;
    let mut node = RawNode::new(&config, log, &raft_logger(cfg.id))?;
    if conf_state.voters == [cfg.id] && conf_state.learners.is_empty() {
        // Alone in the ensemble: no need to wait out an election timeout.
        node.campaign()?;
    }
    // Only the leader calls `propose`: followers forward writes through our own `Control`
    // messages and the leader's `ProposalGate`, which keeps each session's writes in order
    // (raft's built-in forwarding could silently drop one write and pass the next).
    Ok((node, sm, conf_state, applied))
}

/// Bootstraps a new ensemble's first state as a snapshot at index 1: the initial configuration
/// and address book live in it rather than only in this member's conf state, so that a member
/// added later, whose log is empty, must start from a snapshot and learns the configuration
/// from it (replaying the log from index 1 would apply membership changes to an empty one).
fn bootstrap(log: &RaftLog, initial_members: &[(u64, String)]) -> Result<(), CoreError> {
    let members: Vec<u64> = initial_members.iter().map(|(id, _)| *id).collect();
    let conf_state = ConfState::from((members, Vec::<u64>::new()));
    let mut sm = StateMachine::new();
    for (id, addr) in initial_members {
        sm.set_member(*id, addr.clone());
    }
    sm.apply(BOOTSTRAP_INDEX as i64, &NOOP);
    let mut snap = Snapshot::default();
    snap.set_data(sm.snapshot().into());
    let meta = snap.mut_metadata();
    meta.index = BOOTSTRAP_INDEX;
    meta.term = BOOTSTRAP_INDEX;
    meta.set_conf_state(conf_state);
    log.apply_snapshot(&snap)?;
    let hs = raft::eraftpb::HardState {
        term: BOOTSTRAP_INDEX,
        commit: BOOTSTRAP_INDEX,
        ..Default::default()
    };
    log.persist(&[], Some(&hs))?;
    Ok(())
}

/// An applied write's outcome: `Applied::err` is 0 or a ZooKeeper error code, which the
/// state machine only ever takes from `ErrorCode`.
fn reply_error(err: i32) -> Option<ErrorCode> {
    (err != 0).then(|| ErrorCode::from_code(err).unwrap_or(ErrorCode::SystemError))
}

/// Index (and term) of the bootstrap snapshot; the first real entry follows it.
const BOOTSTRAP_INDEX: u64 = 1;

/// We only propose V2 changes, but a log may hold a V1 one (raft's own tooling writes them).
fn v1_to_v2(cc: ConfChange) -> ConfChangeV2 {
    let mut single = ConfChangeSingle::default();
    single.set_change_type(cc.get_change_type());
    single.node_id = cc.node_id;
    let mut v2 = ConfChangeV2::default();
    v2.mut_changes().push(single);
    v2.set_context(cc.get_context().to_vec().into());
    v2
}

impl Core {
    /// Handles one `Ready`: apply what is committed, persist new entries (one fsync for the
    /// whole batch), send messages, then apply what became committed by persisting. A `Ready`
    /// a full volume refused is held and retried first (`space_wait.rs`); no other is taken
    /// meanwhile.
    pub(super) fn on_ready(&mut self) -> Result<(), CoreError> {
        self.collect_snapshot()?;
        if let Some(held) = self.space_wait.take_due(self.now()) {
            // Compact again first: a compaction the full volume refused is retried here.
            if let Err(e) = self.log.reclaim_space()
                && !e.is_no_space()
            {
                return Err(e.into());
            }
            return self.finish_ready(held.ready, held.stage);
        }
        if self.space_wait.is_waiting() {
            return self.maybe_snapshot();
        }
        if !self.node.has_ready() {
            return Ok(());
        }
        let mut ready = self.node.ready();
        if !ready.messages().is_empty() {
            self.send_messages(ready.take_messages());
        }
        self.finish_ready(ready, space_wait::Stage::Install)
    }

    /// The rest of `on_ready`, from `stage` on.
    fn finish_ready(
        &mut self,
        mut ready: raft::Ready,
        stage: space_wait::Stage,
    ) -> Result<(), CoreError> {
        if stage == space_wait::Stage::Install {
            if ready.snapshot().get_metadata().index != 0
                && let Err(e) = self.install_snapshot(ready.snapshot().clone())
            {
                return self.wait_for_space(ready, stage, e);
            }
            for rs in ready.take_read_states() {
                if let Some(ctx) = read_index::decode_context(self.cfg.id, &rs.request_ctx) {
                    self.on_read_state(ctx, rs.index);
                }
            }
            self.apply_committed(ready.take_committed_entries())?;
        }
        if !ready.entries().is_empty() || ready.hs().is_some() {
            let started = Instant::now();
            // A hard state that only moves the commit index is written without an fsync, and
            // is not counted as one.
            match self.log.persist(ready.entries(), ready.hs()) {
                Ok(true) => {
                    let took = started.elapsed();
                    self.fsync_in_step += took;
                    self.metrics.fsync_seconds.observe(took.as_secs_f64());
                    self.metrics.fsyncs.inc();
                }
                Ok(false) => {}
                Err(e) => return self.wait_for_space(ready, space_wait::Stage::Persist, e.into()),
            }
        }
        if let Some(waited) = self.space_wait.resumed(self.now()) {
            if self.node.raft.lead_transferee == Some(self.cfg.id) {
                self.node.raft.lead_transferee = None;
            }
            self.metrics.log_waiting_for_space.set(0);
            tracing::warn!(
                waited_ms = waited.as_millis() as u64,
                "the Raft log has space again; writes resume"
            );
        }
        if !ready.persisted_messages().is_empty() {
            self.send_messages(ready.take_persisted_messages());
        }
        let mut light = self.node.advance(ready);
        self.send_messages(light.take_messages());
        self.send_deferred_read_indexes();
        self.apply_committed(light.take_committed_entries())?;
        self.node.advance_apply();
        self.release_syncs();
        self.release_backups();
        self.maybe_snapshot()
    }

    /// A write the full volume refused (nothing written) is held and retried; any other
    /// storage error stops the core, so that nothing is acknowledged without being durable.
    fn wait_for_space(
        &mut self,
        ready: raft::Ready,
        stage: space_wait::Stage,
        error: CoreError,
    ) -> Result<(), CoreError> {
        let CoreError::Storage(e) = &error else {
            return Err(error);
        };
        if !e.is_no_space() {
            return Err(error);
        }
        self.metrics.log_no_space_errors.inc();
        self.metrics.log_waiting_for_space.set(1);
        // Raft stays as this `Ready` left it until it is persisted: its entries must still be
        // the last ones when it is advanced. Peer messages and ticks are not stepped meanwhile
        // (`handle`, `on_tick`), and a leader drops proposals (raft-rs does while a transfer is
        // under way; followers forward theirs, which touches nothing here).
        if self.is_leader() && self.node.raft.lead_transferee.is_none() {
            self.node.raft.lead_transferee = Some(self.cfg.id);
        }
        if self.space_wait.hold(ready, stage, self.now()) {
            tracing::error!(
                error = %e,
                "the volume is full: this member's Raft log waits for space (its writes are held                  back and never acknowledged, reads are served); compacting, and retrying"
            );
        }
        self.maybe_snapshot()
    }

    /// Hands Raft's messages to the peer transport (which never blocks; Raft resends what it drops).
    fn send_messages(&mut self, messages: Vec<Message>) {
        let Some(transport) = &self.transport else {
            return;
        };
        for m in messages {
            transport.send(m);
        }
    }

    fn install_snapshot(&mut self, snap: Snapshot) -> Result<(), CoreError> {
        let index = snap.get_metadata().index;
        let sm = StateMachine::restore_up_to(snap.get_data(), self.max_feature_level()).map_err(
            |e| match e {
                SnapshotError::FeatureLevel(e) => CoreError::FeatureLevel {
                    level: e.level,
                    max: e.max,
                    index: index as i64,
                },
                e => CoreError::Snapshot(format!("snapshot at index {index} from the leader: {e}")),
            },
        )?;
        // Durable first: a full volume that refuses the file leaves this member as it was,
        // to try the same `Ready` again.
        self.log.apply_snapshot(&snap)?;
        self.sm = sm;
        // The settings and alarms came with the snapshot.
        self.publish_alarms();
        self.publish_feature_level();
        self.check_feature_level()?;
        self.conf_state = snap.get_metadata().get_conf_state().clone();
        self.last_snapshot_index = index;
        self.reclaim.reset(self.sm.approximate_data_size());
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
                EntryType::EntryNormal => match Command::decode(&entry.data) {
                    Ok(cmd)
                        if self.cfg.bugs.alarms_on_odd_members_only()
                            && self.cfg.id.is_multiple_of(2)
                            && matches!(cmd.kind, CommandKind::Alarm { .. }) =>
                    {
                        self.sm.apply(index as i64, &NOOP);
                    }
                    Ok(cmd) => {
                        let applied =
                            self.cfg
                                .bugs
                                .apply(self.cfg.id, &mut self.sm, index as i64, &cmd);
                        let settings_changed = applied.settings_changed;
                        self.route(&cmd, applied);
                        if settings_changed {
                            self.check_feature_level()?;
                        }
                    }
                    // Every member meets the same bytes at the same index and does the same:
                    // no divergence, and no crash that would repeat at every restart. The
                    // leader checks what it proposes, so this is a bug or a bad member.
                    Err(error) => {
                        self.metrics.entries_skipped.inc();
                        tracing::error!(
                            index, %error, bytes = entry.data.len(),
                            "a committed entry cannot be applied; applying it as a no-op, as every member does"
                        );
                        self.sm.apply(index as i64, &NOOP);
                    }
                },
                EntryType::EntryConfChange => {
                    let mut cc = ConfChange::default();
                    cc.merge_from_bytes(&entry.data)
                        .map_err(|e| CoreError::BadConfChange {
                            index,
                            reason: e.to_string(),
                        })?;
                    self.apply_membership(index, v1_to_v2(cc))?;
                }
                EntryType::EntryConfChangeV2 => {
                    let mut cc = ConfChangeV2::default();
                    cc.merge_from_bytes(&entry.data)
                        .map_err(|e| CoreError::BadConfChange {
                            index,
                            reason: e.to_string(),
                        })?;
                    self.apply_membership(index, cc)?;
                }
            }
        }
        self.answer_settings_waiters();
        Ok(())
    }

    /// Applies a committed membership change: Raft's configuration, the durable conf state, the
    /// replicated address book and the transport's peer list, in that order.
    fn apply_membership(&mut self, index: u64, cc: ConfChangeV2) -> Result<(), CoreError> {
        self.conf_state = self.node.apply_conf_change(&cc)?;
        self.log.set_conf_state(&self.conf_state)?;
        let addr = String::from_utf8_lossy(cc.get_context()).into_owned();
        for change in cc.get_changes() {
            let id = change.node_id;
            match change.get_change_type() {
                ConfChangeType::AddNode | ConfChangeType::AddLearnerNode => {
                    if !addr.is_empty() {
                        self.sm.set_member(id, addr.clone());
                    }
                    if let (Some(t), Some(a)) = (&self.transport, self.sm.members().get(&id)) {
                        t.add_peer(id, a.clone());
                    }
                }
                ConfChangeType::RemoveNode => {
                    // Also clears the removed member's alarms, on every member alike.
                    self.sm.remove_member(id);
                    self.publish_alarms();
                    if let Some(t) = &self.transport {
                        t.remove_peer(id);
                    }
                    if id == self.cfg.id {
                        tracing::warn!(
                            "this member was removed from the ensemble; it no longer votes or serves writes"
                        );
                    }
                }
            }
        }
        tracing::info!(index, voters = ?self.conf_state.voters, learners = ?self.conf_state.learners, "membership changed");
        // A member catching up from a snapshot must find itself in the snapshot's configuration
        // (raft refuses it otherwise), so the snapshot we serve must postdate every change.
        self.snapshot_after_membership_change = true;
        self.sm.apply(index as i64, &NOOP);
        Ok(())
    }

    /// Sends an applied entry's effects where they belong on this member: watch notifications
    /// first (ZooKeeper sends them before the reply that caused them), then the reply.
    fn route(&mut self, cmd: &Command, applied: Applied) {
        let zxid = applied.zxid;
        for (path, event) in &applied.events {
            for fired in self.watches.fire(path, *event) {
                if let Some(conn) = self.clients.of_session_mut(fired.session_id) {
                    // A persistent or recursive watch must not go on telling a session about
                    // a namespace it may not read (a recursive watch above /baton, access lost
                    // since it was set). A one-shot watch on the path itself fires once, even
                    // if the session lost access since its read was allowed (a policy turned
                    // on, an identity replaced), as ZooKeeper fires it whatever the ACL says
                    // by then: withheld, a lock waiter that only pings would wait forever
                    // while its own node blocks the queue; told, its next read is NoAuth.
                    if !fired.one_shot && self.sm.may_read(&fired.event.path, &conn.auth).is_err() {
                        continue;
                    }
                    conn.send(wire::notification(fired.event));
                }
            }
        }
        if let Some((path, refusal)) = &applied.refusal {
            self.count_refusal(cmd.session_id, path, *refusal);
        }
        if let Some(why) = applied.quota_refusal {
            self.count_quota_refusal(cmd.session_id, why, false);
        }
        if applied.settings_changed {
            self.on_settings_applied(cmd);
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
                    reply_error(applied.err),
                    applied.body.as_ref(),
                );
            }
            _ => {}
        }
        if let Some(closed) = applied.closed_session {
            self.forget_session(closed);
        }
    }

    /// Starts a snapshot when one is due: the core only copies the state (O(1)); the
    /// snapshotter serializes and writes it, and `collect_snapshot` counts it once durable.
    fn maybe_snapshot(&mut self) -> Result<(), CoreError> {
        if self.snapshots.busy() || !self.space_wait.snapshot_may_start(self.now()) {
            return Ok(());
        }
        let applied = self.sm.last_applied() as u64;
        let since = applied.saturating_sub(self.last_snapshot_index);
        // By count, or by bytes whatever their count (`RaftLog::snapshot_due`: half the tree,
        // at least 32 MiB): one client rewriting one 1 MiB znode filled every member's volume
        // while a count of 1,000 entries was also needed. A full volume makes one due too: it
        // is what lets the log compact and free segments.
        let due = since >= self.cfg.snapshot_entries
            || self
                .log
                .snapshot_due_for_tree(self.sm.approximate_data_size())
            || self.space_wait.is_waiting();
        if !(due || self.snapshot_after_membership_change) || applied == self.last_snapshot_index {
            return Ok(());
        }
        self.start_snapshot()
    }

    /// Starts a snapshot of the state as applied now (the caller checked there is something
    /// past the last one) and counts one that finished meanwhile.
    pub(super) fn start_snapshot(&mut self) -> Result<(), CoreError> {
        // The copy holds the state and the conf state as of `applied`, whatever is applied
        // while it is written; a membership change applied meanwhile sets the flag again.
        let tree_bytes = self.sm.approximate_data_size();
        let frozen = self.sm.freeze();
        if self
            .snapshots
            .start(frozen, self.conf_state.clone(), self.log.clone())
        {
            self.snapshot_after_membership_change = false;
            self.reclaim.started(tree_bytes);
        }
        self.collect_snapshot()
    }

    /// Counts a snapshot the snapshotter finished. Its errors are the log's, and stop the
    /// core as they did when it wrote them itself; but a snapshot from the leader installed
    /// meanwhile makes this one out of date, which is no failure.
    pub(super) fn collect_snapshot(&mut self) -> Result<(), CoreError> {
        match self.snapshots.collect() {
            None => Ok(()),
            Some(Ok(written)) => {
                self.space_wait.snapshot_written();
                self.reclaim.written();
                self.last_snapshot_index = self.last_snapshot_index.max(written.index);
                self.metrics.snapshots.inc();
                self.metrics
                    .observe_snapshot(written.elapsed, written.bytes);
                tracing::info!(
                    index = written.index,
                    bytes = written.bytes,
                    elapsed_ms = written.elapsed.as_millis() as u64,
                    "snapshot taken; log compacted"
                );
                Ok(())
            }
            Some(Err(baton_raftlog::LogError::SnapshotOutOfDate { snapshot_index, .. })) => {
                tracing::info!(
                    index = snapshot_index,
                    "a newer snapshot was installed while this one was written; dropped it"
                );
                Ok(())
            }
            Some(Err(e)) if e.is_no_space() => {
                self.metrics.log_no_space_errors.inc();
                self.space_wait.snapshot_refused(self.now());
                tracing::error!(error = %e, "the volume is full: a snapshot could not be written; trying again later");
                Ok(())
            }
            Some(Err(e)) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_applied_writes_error_code_is_kept() {
        assert_eq!(reply_error(0), None);
        assert_eq!(reply_error(-101), Some(ErrorCode::NoNode));
        assert_eq!(reply_error(-110), Some(ErrorCode::NodeExists));
        assert_eq!(reply_error(-7777), Some(ErrorCode::SystemError));
    }
}
