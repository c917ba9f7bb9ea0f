//! The core: one thread that owns the Raft node, the state machine, this member's watches and
//! the session deadlines. Connection tasks send it decoded requests; it proposes writes,
//! answers reads in per-session order, applies committed entries and routes their replies.
//!
//! Everything that changes replicated state happens here, in log order, so a read executed on
//! this thread always sees a prefix of the log that includes its session's earlier writes.
//!
//! A map of the parts, in the order a request meets them:
//!
//! - `inbox`: the two queues the thread takes batches from (`CoreInbox`).
//! - `connect`: the handshake (new session, reconnect, claim of a session from the leader).
//! - `clients`: the connections by id and by session (`ClientTable`); `local_conn`: one of them.
//! - `requests`: per-session order; `local_requests`: what is answered from this member's tree.
//! - `propose`: getting a write into the log; `gate`: the leader's admission of proposals.
//! - `control`: messages between members (forwarded writes, claims, touches) and their
//!   handling; `check_forwarded`: the leader's check of a write another member forwarded.
//! - `read_index`: `sync` through Raft's ReadIndex (`ReadIndexQueue`).
//! - `replicate`: Raft's `Ready` (persist, send, apply) and snapshots.
//! - `sessions`: expiry, touches, closing; `leader_change`: what a new leader or term means,
//!   and closing the connections of a member cut off; `contact_probe`: a follower's proof that
//!   the leader hears it.
//! - `membership`: the admin API's membership and leadership commands.
//! - `backup`: consistent snapshots of the state for `GET /v1/snapshot`.
//! - `snapshotter`: serializing and writing snapshots and backups off the core thread.
//! - `publish`: status and gauges for the admin API and four-letter words.

mod auth;
pub mod backup;
mod check_forwarded;
mod clients;
pub mod clock;
mod connect;
mod contact_probe;
mod control;
mod deliberate_bugs;
mod feature_level;
mod freed_memory;
mod gate;
mod inbox;
mod leader_change;
pub mod links;
mod local_conn;
mod local_requests;
pub mod membership;
pub mod messages;
mod propose;
mod publish;
mod read_index;
mod reclaim;
mod replicate;
mod requests;
mod sessions;
pub mod settings;
mod snapshotter;
mod space_wait;
#[cfg(test)]
mod tests;
pub mod throttled_log;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_machine::{SessionTracker, StateMachine, WatchManager};
use baton_raftlog::RaftLog;
use raft::RawNode;
use raft::eraftpb::ConfState;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::peer::{PeerEvent, PeerInbound};
use crate::status::Status;
pub(crate) use check_forwarded::check_forwarded;
use clients::ClientTable;
pub use clock::{Clock, ManualClock, SystemClock};
pub use connect::HANDSHAKE_TIMEOUT;
use connect::PendingConnects;
use contact_probe::ContactProbes;
pub(crate) use control::Control;
pub use deliberate_bugs::DeliberateBugs;
use gate::ProposalGate;
pub use inbox::CoreInbox;
use leader_change::LeaderWatch;
pub use links::PeerLinks;
pub use messages::{
    ConnId, ConnectOutcome, CoreMsg, IdentityVerdict, Outbound, OutboundRx, OutboundTx,
    ReplyBudget, outbound_queue, unlimited_outbound_queue,
};
use publish::LatencyStats;
use read_index::ReadIndexQueue;
pub use throttled_log::ThrottledLog;

/// Watches one session may hold on a member unless `--max-watches-per-session` says otherwise.
/// ZooKeeper sets no limit; each watch costs a few hundred bytes here, so this caps a session
/// at some tens of MiB while staying far above what any recipe needs (a lock or election
/// watches one node per waiter; Curator caches watch one per cached node).
pub const DEFAULT_MAX_WATCHES_PER_SESSION: usize = 100_000;

/// Bytes of watched paths one session may hold on a member unless
/// `--max-watch-bytes-per-session` says otherwise: 1 MiB, ZooKeeper's `jute.maxbuffer`. A
/// client sends every path it watches back in `setWatches` when it reconnects, and older
/// ZooKeeper clients send them in one packet, which that bound caps; a recipe watches a few
/// short paths (tens of KiB for a Curator cache of a thousand nodes). The count limit alone
/// let 400 watches on 500 KB paths take 242 MiB of one member.
pub const DEFAULT_MAX_WATCH_BYTES_PER_SESSION: usize = 1 << 20;

/// A batch this long is logged (at debug, target `baton_ensemble::core_batch`): the goal for
/// the core's longest pause.
const LONG_BATCH: Duration = Duration::from_millis(10);

/// Settings the core needs from the command line.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    pub id: u64,
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    pub snapshot_entries: u64,
    pub tick: Duration,
    /// How often the leader looks for empty containers and expired TTL nodes.
    pub reap_interval: Duration,
    /// Start with no configuration and wait to be added by the leader (a member joining a
    /// running ensemble).
    pub join: bool,
    /// A fixed election timeout in ticks instead of raft-rs's random one in
    /// `[election_tick, 2 * election_tick)`, which it draws from an unseedable generator. The
    /// deterministic simulation draws this from its seed; production leaves it `None`.
    pub fixed_election_ticks: Option<usize>,
    /// How long a handshake may wait for its session to open or for the leader to confirm a
    /// reconnect before the connection is closed (the client retries).
    pub handshake_timeout: Duration,
    /// Deliberate bugs for proving the simulation's checkers catch them. Always
    /// `DeliberateBugs::NONE` outside tests; no flag reaches it, and without the `testing`
    /// feature there are none to switch on.
    pub bugs: DeliberateBugs,
}

/// Where this member's Raft stands (see [`Core::raft_view`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftView {
    pub is_leader: bool,
    pub term: u64,
    pub applied: u64,
}

/// Why the core stopped.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// The Raft log could not be made durable: nothing more may be acknowledged.
    #[error(
        "the Raft log could not be written; stopping so that no write is acknowledged without being durable: {0}"
    )]
    Storage(#[from] baton_raftlog::LogError),
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    #[error("cannot restore the tree: {0}")]
    Snapshot(String),
    #[error("the membership change at index {index} does not decode: {reason}")]
    BadConfChange { index: u64, reason: String },
    /// The data dir (a snapshot or an applied entry) is at a feature level this build does not
    /// support: a rollback past a level raise (`feature_level.rs`).
    #[error("{}", baton_machine::feature::LevelTooHigh { what: "this data dir", level: *level, max: *max, index: Some(*index) })]
    FeatureLevel { level: u32, max: u32, index: i64 },
    /// The leader counts on entries this member acknowledged and no longer has (a damaged log
    /// tail dropped at start): raft-rs would panic on the leader's next heartbeat.
    #[error(
        "leader {leader} says this member acknowledged the log up to entry {commit}, but its log ends at {last}: entries it had made durable are gone (a damaged or truncated log; see the warnings at start). Stopping rather than vote without them: reseed this member from the ensemble. On Kubernetes annotate the CoordinationEnsemble with baton.dev/reseed-member=\"{member}\"; by hand, remove the member (DELETE /v1/members/{member}), move its data directory aside, start it with --join and add it back (POST /v1/members)"
    )]
    LostAcknowledged {
        leader: u64,
        commit: u64,
        last: u64,
        /// This member's id, for the reseed annotation.
        member: u64,
    },
}

/// The core thread's state.
pub struct Core {
    cfg: CoreConfig,

    // Raft and the tree it replicates.
    node: RawNode<RaftLog>,
    log: RaftLog,
    sm: StateMachine,
    conf_state: ConfState,
    last_snapshot_index: u64,
    /// A membership change applied since the last snapshot (the next one must include it).
    snapshot_after_membership_change: bool,
    /// Writes snapshots from an O(1) copy of the state, on a thread of its own.
    snapshots: snapshotter::Snapshotter,
    /// A `Ready` the full volume refused, held until there is space (`space_wait.rs`).
    space_wait: space_wait::SpaceWait,
    /// The tree's size at the kept snapshots, to compact once it shrank (`reclaim.rs`).
    reclaim: reclaim::Reclaim,
    /// When to give memory the tree freed back to the kernel.
    freed_memory: freed_memory::FreedMemory,
    /// Time spent in fsyncs during the batch being handled (metrics: the core's own work).
    fsync_in_step: Duration,

    // This member's clients.
    clients: ClientTable,
    connects: PendingConnects,
    watches: WatchManager,
    reads: ReadIndexQueue,
    /// Backups waiting for a confirmed read index, then for apply to reach it.
    backups: backup::BackupWaiters,
    /// Sessions active on this follower since the last batch sent to the leader.
    touched: BTreeSet<i64>,
    next_session_id: i64,

    // The leader's view of sessions and members.
    tracker: SessionTracker,
    gate: ProposalGate,
    /// A change of leader or term may have dropped requests in flight.
    leader_watch: LeaderWatch,
    /// A follower's proof that the leader hears it.
    contact_probes: ContactProbes,
    /// Why `handle` asked the loop to stop, when it was an error rather than a shutdown.
    fatal: Option<CoreError>,
    /// When each peer's last Raft message arrived: the leader's evidence that a member is
    /// alive right now (raft-rs's `recent_active` lags by up to an election timeout).
    last_heard: BTreeMap<u64, Instant>,
    last_reap: Instant,

    // The outside world: peers, time, and what is published.
    transport: Option<Box<dyn PeerLinks>>,
    clock: Arc<dyn Clock>,
    started: Instant,
    latency: LatencyStats,
    metrics: Arc<Metrics>,
    status: watch::Sender<Status>,

    /// Distinct paths one session may watch on this member.
    max_watches_per_session: usize,
    /// Bytes of those paths (each counted once) one session may watch on this member.
    max_watch_bytes_per_session: usize,
    /// Identities (`--super-digest`).
    tenancy: TenancyConfig,
    /// Initial settings, admin changes waiting to apply, and the disk alarm (`settings.rs`).
    settings: settings::SettingsState,
    /// Levels this member and its peers support (`feature_level.rs`).
    levels: feature_level::FeatureLevels,
}

/// Client identities. The namespace policy (`--check-identities`) is replicated state now
/// (`baton_machine::settings`); its flag is one of this member's initial settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenancyConfig {
    /// `USER:BASE64(SHA1(USER:PASSWORD))` (`--super-digest`): a digest auth proving it makes
    /// the session super.
    pub super_digest: Option<String>,
}

impl Core {
    /// Opens the node over `log`, restoring the tree from the latest snapshot.
    pub fn new(
        cfg: CoreConfig,
        log: RaftLog,
        members: &[(u64, String)],
        metrics: Arc<Metrics>,
        status: watch::Sender<Status>,
        transport: Option<Box<dyn PeerLinks>>,
        clock: Arc<dyn Clock>,
    ) -> Result<Core, CoreError> {
        let (node, sm, conf_state, last_snapshot_index) =
            replicate::open_node(&cfg, log.clone(), members)?;
        let started = clock.now();
        let wall_ms = clock.wall_ms();
        let tick_ms = cfg.tick.as_millis().max(1) as u64;
        let mut tracker = SessionTracker::new(tick_ms);
        for s in sm.sessions() {
            tracker.add(s.id, s.timeout_ms as u32, 0);
        }
        let mut core = Core {
            next_session_id: sessions::initial_session_id(cfg.id, wall_ms),
            cfg,
            node,
            log,
            sm,
            watches: WatchManager::default(),
            tracker,
            clients: ClientTable::default(),
            connects: PendingConnects::default(),
            gate: ProposalGate::default(),
            touched: BTreeSet::new(),
            // Unique across restarts too: the leader drops a ReadIndex whose context is pending.
            reads: ReadIndexQueue::new((wall_ms as u64) << 16),
            backups: backup::BackupWaiters::default(),
            transport,
            clock,
            conf_state,
            last_snapshot_index,
            snapshot_after_membership_change: false,
            snapshots: snapshotter::Snapshotter::default(),
            space_wait: space_wait::SpaceWait::default(),
            reclaim: reclaim::Reclaim::default(),
            freed_memory: freed_memory::FreedMemory::default(),
            fsync_in_step: Duration::ZERO,
            last_heard: BTreeMap::new(),
            last_reap: started,
            started,
            leader_watch: LeaderWatch::default(),
            contact_probes: ContactProbes::default(),
            fatal: None,
            latency: LatencyStats::default(),
            metrics,
            status,
            max_watches_per_session: DEFAULT_MAX_WATCHES_PER_SESSION,
            max_watch_bytes_per_session: DEFAULT_MAX_WATCH_BYTES_PER_SESSION,
            tenancy: TenancyConfig::default(),
            settings: settings::SettingsState::default(),
            levels: feature_level::FeatureLevels::default(),
        };
        core.reclaim.reset(core.sm.approximate_data_size());
        if let Some(t) = &core.transport {
            // The flags first (a joining member knows its peers from them alone), then the
            // replicated address book, which is authoritative once there is one.
            for (id, addr) in members
                .iter()
                .map(|(id, a)| (id, a))
                .chain(core.sm.members())
            {
                t.add_peer(*id, addr.clone());
            }
        }
        core.publish_status();
        Ok(core)
    }

    /// Sets how many distinct paths one session may watch on this member; a request that
    /// would watch more is answered with BadArguments (-8).
    pub fn set_max_watches_per_session(&mut self, limit: usize) {
        self.max_watches_per_session = limit;
    }

    /// Sets how many bytes of paths one session may watch on this member (each path counted
    /// once); a request that would watch more is answered with BadArguments (-8).
    pub fn set_max_watch_bytes_per_session(&mut self, limit: usize) {
        self.max_watch_bytes_per_session = limit;
    }

    /// Serializes and writes snapshots and backups on threads of their own, so the core only
    /// copies the state (O(1)) instead of pausing in proportion to the tree. Off by default
    /// so that the simulation stays deterministic.
    pub fn snapshot_off_thread(&mut self, on: bool) {
        self.snapshots.set_off_thread(on);
    }

    /// Sets the identity settings.
    pub fn set_tenancy(&mut self, tenancy: TenancyConfig) {
        self.tenancy = tenancy;
    }

    /// Monotonic milliseconds since the core started: the session tracker's clock.
    fn now_ms(&self) -> u64 {
        clock::since(self.clock.now(), self.started).as_millis() as u64
    }

    /// Now, on the core's clock.
    fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Milliseconds since the Unix epoch: the proposer's timestamp carried in every entry.
    fn wall_ms(&self) -> i64 {
        self.clock.wall_ms()
    }

    fn is_leader(&self) -> bool {
        self.node.raft.state == raft::StateRole::Leader
    }

    /// Handles `msgs` as one batch, then Raft's `Ready` (persist, send, apply) once: what
    /// [`Core::run`] does with each batch it takes off its queue. The simulation drives the
    /// core through this. `Ok(false)` means a `Shutdown` was among them.
    pub fn step(&mut self, msgs: impl IntoIterator<Item = CoreMsg>) -> Result<bool, CoreError> {
        let mut go_on = true;
        for msg in msgs {
            if !self.handle(msg) {
                if let Some(e) = self.fatal.take() {
                    return Err(e);
                }
                go_on = false;
                break;
            }
        }
        self.on_ready()?;
        self.observe_leader();
        Ok(go_on)
    }

    /// The replicated state as this member has applied it (read-only, for the simulation's
    /// invariant checks).
    pub fn state(&self) -> &StateMachine {
        &self.sm
    }

    /// This member's Raft view, for the simulation.
    pub fn raft_view(&self) -> RaftView {
        RaftView {
            is_leader: self.is_leader(),
            term: self.node.raft.term,
            applied: self.node.raft.raft_log.applied,
        }
    }

    /// Runs until `Shutdown` or until every sender is gone; an error means a storage failure.
    pub fn run(mut self, mut inbox: CoreInbox) -> Result<(), CoreError> {
        let mut batch = Vec::with_capacity(inbox::MAX_BATCH);
        while inbox.next_batch(&mut batch) {
            let started = Instant::now();
            self.fsync_in_step = Duration::ZERO;
            let messages = batch.len();
            for msg in batch.drain(..) {
                if !self.handle(msg) {
                    return match self.fatal.take() {
                        Some(e) => Err(e),
                        None => self.finish(),
                    };
                }
            }
            self.on_ready()?;
            self.observe_leader();
            let took = started.elapsed();
            self.metrics.observe_core_step(took, self.fsync_in_step);
            if took >= LONG_BATCH {
                // Debug only: `tests/scripts/snapshot-pause.sh` turns it on to tell which long
                // batches fell while a snapshot was written; the metrics count them all.
                tracing::debug!(
                    target: "baton_ensemble::core_batch",
                    took_us = took.as_micros() as u64,
                    fsync_us = self.fsync_in_step.as_micros() as u64,
                    messages,
                    "a long core batch"
                );
            }
        }
        self.finish()
    }

    fn finish(&mut self) -> Result<(), CoreError> {
        self.on_ready()?;
        for conn in self.clients.values() {
            conn.close();
        }
        Ok(())
    }

    /// Handles one message; `false` asks the loop to stop.
    fn handle(&mut self, msg: CoreMsg) -> bool {
        match msg {
            CoreMsg::Connect {
                conn,
                peer,
                out,
                req,
                done,
            } => self.on_connect(conn, peer, out, req, done),
            CoreMsg::Request { conn, xid, request } => self.on_request(conn, xid, request),
            CoreMsg::BadRequest { conn, xid, err } => self.on_bad_request(conn, xid, err),
            CoreMsg::Identity { conn, xid, verdict } => self.on_identity(conn, xid, verdict),
            CoreMsg::Disconnected { conn } => self.on_disconnected(conn),
            CoreMsg::Drained { conn } => self.on_drained(conn),
            CoreMsg::Peer(PeerInbound::Raft(m)) => {
                self.last_heard.insert(m.from, self.clock.now());
                // Raft is frozen while a `Ready` waits for space (`space_wait.rs`): the message
                // is lost, as on a network, and sent again.
                if self.space_wait.is_waiting() {
                    return true;
                }
                if let Some(lost) = self.lost_acknowledged(&m) {
                    self.fatal = Some(lost);
                    return false;
                }
                if let Err(e) = self.node.step(m) {
                    tracing::debug!(error = %e, "raft refused a message");
                }
            }
            CoreMsg::Peer(PeerInbound::Control { from, payload }) => {
                self.on_control(from, &payload)
            }
            CoreMsg::PeerEvent(PeerEvent::Unreachable { peer }) => {
                self.node.report_unreachable(peer);
                self.on_leader_link_broken(peer);
            }
            CoreMsg::PeerEvent(PeerEvent::Snapshot { peer, status }) => {
                self.node.report_snapshot(peer, status)
            }
            CoreMsg::PeerEvent(PeerEvent::FeatureLevel { peer, max }) => {
                self.on_peer_feature_level(peer, max)
            }
            CoreMsg::Admin { command, reply } => self.on_admin(command, reply),
            CoreMsg::Backup(reply) => self.start_backup(reply),
            CoreMsg::Status(reply) => {
                self.publish_full_status();
                let _ = reply.send(self.status.borrow().clone());
            }
            CoreMsg::Tick => self.on_tick(),
            CoreMsg::DiskSpace { free_bytes } => self.on_disk_space(free_bytes),
            CoreMsg::Shutdown => return false,
        }
        true
    }

    fn on_tick(&mut self) {
        if !self.space_wait.is_waiting() {
            self.node.tick();
        }
        // Only where snapshots have threads (the server): the simulation spawns none.
        if self.freed_memory.note(self.sm.approximate_data_size()) && self.snapshots.is_off_thread()
        {
            baton_raftlog::background::release_freed_memory();
        }
        self.publish_status();
        self.expire_stuck_requests();
        self.drop_abandoned_backups();
        self.reconcile_alarm();
        self.probe_contact();
        self.close_cut_off_connections();
        if !self.is_leader() {
            self.flush_touches();
            return;
        }
        self.promote_caught_up_learners();
        self.propose_initial_settings();
        self.maybe_raise_feature_level();
        self.expire_sessions();
        let now = self.now();
        if clock::since(now, self.last_reap) >= self.cfg.reap_interval {
            self.last_reap = now;
            self.propose_housekeeping();
        }
    }
}
