//! The core: one thread that owns the Raft node, the state machine, this member's watches and
//! the session deadlines. Connection tasks send it decoded requests; it proposes writes,
//! answers reads in per-session order, applies committed entries and routes their replies.
//!
//! Everything that changes replicated state happens here, in log order, so a read executed on
//! this thread always sees a prefix of the log that includes its session's earlier writes.

pub mod admin;
mod auth;
pub mod clock;
mod conn;
mod control;
mod forward;
mod gate;
pub mod links;
pub mod messages;
mod replicate;
mod requests;
mod sessions;
pub mod throttled_log;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_machine::{SessionTracker, StateMachine, WatchManager};
use baton_raftlog::RaftLog;
use raft::RawNode;
use raft::eraftpb::ConfState;
use tokio::sync::{mpsc, watch};

use crate::metrics::Metrics;
use crate::peer::{PeerEvent, PeerInbound};
use crate::status::Status;
pub use clock::{Clock, ManualClock, SystemClock};
use conn::LocalConn;
pub(crate) use control::Control;
pub(crate) use forward::check_forwarded;
use gate::ProposalGate;
pub use links::PeerLinks;
pub use messages::{
    ConnId, ConnectOutcome, CoreMsg, IdentityVerdict, Outbound, OutboundTx, ReplyBudget,
};
use sessions::{AwaitingClaim, AwaitingSession};
pub use throttled_log::ThrottledLog;

/// A request waiting on the ensemble longer than this is presumed lost (a forward dropped by
/// a broken peer link): its connection is closed so the client retries.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Watches one session may hold on a member unless `--max-watches-per-session` says otherwise.
/// ZooKeeper sets no limit; each watch costs a few hundred bytes here, so this caps a session
/// at some tens of MiB while staying far above what any recipe needs (a lock or election
/// watches one node per waiter; Curator caches watch one per cached node).
pub const DEFAULT_MAX_WATCHES_PER_SESSION: usize = 100_000;

/// Messages the core takes from its two queues.
///
/// Ticks, peer traffic and admin calls (`control`) are never stuck behind client traffic
/// (`clients`): the core looks at `control` first, and takes at most `CLIENT_SHARE` client
/// messages before it handles a batch's Raft work and looks at `control` again. So a
/// client flood delays a heartbeat by one bounded batch, never by the whole client queue.
pub struct CoreInbox {
    pub control: mpsc::Receiver<CoreMsg>,
    pub clients: mpsc::Receiver<CoreMsg>,
}

/// Messages handled per batch at most. Batching takes what is already queued before handling
/// Raft's Ready, so one fsync covers every write that arrived while the previous one was in
/// progress (group commit).
const MAX_BATCH: usize = 4096;
/// Client messages handled per batch at most.
const CLIENT_SHARE: usize = 1024;

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
    /// Deliberate bugs for proving the simulation's checkers catch them. Always
    /// `DeliberateBugs::NONE` outside tests; no flag reaches it.
    pub bugs: DeliberateBugs,
}

/// Where this member's Raft stands (see [`Core::raft_view`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftView {
    pub is_leader: bool,
    pub term: u64,
    pub applied: u64,
}

/// Known-wrong behaviours the simulation switches on to prove its checkers find them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliberateBugs {
    /// Answer `sync` at once from this member's state, skipping the leader's ReadIndex, so a
    /// read after `sync` can be stale.
    pub sync_without_read_index: bool,
}

impl DeliberateBugs {
    /// None of them: the only setting production uses.
    pub const NONE: DeliberateBugs = DeliberateBugs {
        sync_without_read_index: false,
    };
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
}

/// The core thread's state.
pub struct Core {
    cfg: CoreConfig,
    node: RawNode<RaftLog>,
    log: RaftLog,
    sm: StateMachine,
    watches: WatchManager,
    tracker: SessionTracker,
    conns: BTreeMap<ConnId, LocalConn>,
    session_conns: BTreeMap<i64, ConnId>,
    awaiting_sessions: BTreeMap<i64, AwaitingSession>,
    awaiting_claims: BTreeMap<u64, AwaitingClaim>,
    next_claim_token: u64,
    gate: ProposalGate,
    /// Sessions active on this follower since the last batch sent to the leader.
    touched: BTreeSet<i64>,
    /// ReadIndex requests in flight: context → connection.
    pending_reads: BTreeMap<u64, ConnId>,
    next_read_ctx: u64,
    /// Connections with a sync whose read index is known, to answer once applied that far.
    syncing: BTreeSet<ConnId>,
    transport: Option<Box<dyn PeerLinks>>,
    clock: std::sync::Arc<dyn Clock>,
    /// When each peer's last Raft message arrived: the leader's evidence that a member is
    /// alive right now (raft-rs's `recent_active` lags by up to an election timeout).
    last_heard: BTreeMap<u64, Instant>,
    next_session_id: i64,
    conf_state: ConfState,
    last_snapshot_index: u64,
    snapshot_after_membership_change: bool,
    last_reap: Instant,
    started: Instant,
    /// The (leader, term) last observed: a change of either may have dropped requests in flight.
    last_leader: (u64, u64),
    latency: LatencyStats,
    metrics: Arc<Metrics>,
    status: watch::Sender<Status>,
    /// Distinct paths one session may watch on this member.
    max_watches_per_session: usize,
    /// Identities and the recipe-tree policy (`--check-identities`, `--super-digest`).
    tenancy: TenancyConfig,
}

/// Client identities and the recipe-tree policy; every member must be given the same.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenancyConfig {
    /// The namespace policy (`--check-identities`), applied by the state machine.
    pub policy: baton_machine::TenancyPolicy,
    /// `USER:BASE64(SHA1(USER:PASSWORD))` (`--super-digest`): a digest auth proving it makes
    /// the session super.
    pub super_digest: Option<String>,
}

/// Min/avg/max request latency, as `srvr` reports it.
#[derive(Debug, Default)]
struct LatencyStats {
    count: u64,
    total: Duration,
    min: Option<Duration>,
    max: Duration,
}

impl LatencyStats {
    fn record(&mut self, d: Duration) {
        self.count += 1;
        self.total += d;
        self.min = Some(self.min.map_or(d, |m| m.min(d)));
        self.max = self.max.max(d);
    }
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
            conns: BTreeMap::new(),
            session_conns: BTreeMap::new(),
            awaiting_sessions: BTreeMap::new(),
            awaiting_claims: BTreeMap::new(),
            next_claim_token: 1,
            gate: ProposalGate::default(),
            touched: BTreeSet::new(),
            pending_reads: BTreeMap::new(),
            // Unique across restarts too: the leader drops a ReadIndex whose context is pending.
            next_read_ctx: (wall_ms as u64) << 16,
            syncing: BTreeSet::new(),
            transport,
            clock,
            conf_state,
            last_snapshot_index,
            snapshot_after_membership_change: false,
            last_heard: BTreeMap::new(),
            last_reap: started,
            started,
            last_leader: (0, 0),
            latency: LatencyStats::default(),
            metrics,
            status,
            max_watches_per_session: DEFAULT_MAX_WATCHES_PER_SESSION,
            tenancy: TenancyConfig::default(),
        };
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
    /// would watch more is answered with QuotaExceeded.
    pub fn set_max_watches_per_session(&mut self, limit: usize) {
        self.max_watches_per_session = limit;
    }

    /// Sets the identity settings and the recipe-tree policy (kept across snapshot installs).
    pub fn set_tenancy(&mut self, tenancy: TenancyConfig) {
        self.sm.set_tenancy(tenancy.policy);
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
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while inbox.next_batch(&mut batch) {
            for msg in batch.drain(..) {
                if !self.handle(msg) {
                    return self.finish();
                }
            }
            self.on_ready()?;
            self.observe_leader();
        }
        self.finish()
    }

    fn finish(&mut self) -> Result<(), CoreError> {
        self.on_ready()?;
        for conn in self.conns.values() {
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
            CoreMsg::Admin { command, reply } => self.on_admin(command, reply),
            CoreMsg::Status(reply) => {
                self.publish_status();
                let _ = reply.send(self.status.borrow().clone());
            }
            CoreMsg::Tick => self.on_tick(),
            CoreMsg::Shutdown => return false,
        }
        true
    }

    fn on_tick(&mut self) {
        self.node.tick();
        self.publish_status();
        self.expire_stuck_requests();
        if !self.is_leader() {
            self.flush_touches();
            return;
        }
        self.promote_caught_up_learners();
        let now = self.now_ms();
        for session_id in self.tracker.expired(now) {
            tracing::info!(session = %format_args!("0x{session_id:x}"), "session expired");
            self.propose_close(session_id, true);
        }
        let now = self.now();
        if clock::since(now, self.last_reap) >= self.cfg.reap_interval {
            self.last_reap = now;
            self.propose_housekeeping();
        }
    }

    /// A follower whose link to the leader just broke (a killed or crashed leader's sockets close
    /// at once) shortens its wait for an election to 1-3 ticks instead of the whole randomised
    /// timeout: ZooKeeper's followers act on the same signal, which is why its failover was
    /// faster. Safety is Raft's as ever; pre-vote keeps a leader that is in fact alive in place,
    /// since the followers that still hear it refuse to vote. The wait differs by member id so
    /// followers that noticed together do not split the vote; no randomness, so the simulation
    /// stays deterministic.
    fn on_leader_link_broken(&mut self, peer: u64) {
        let raft = &mut self.node.raft;
        if peer == 0 || raft.leader_id != peer || raft.state != raft::StateRole::Follower {
            return;
        }
        let wait = 1 + ((self.cfg.id + raft.term) % 3) as usize;
        let due = raft
            .randomized_election_timeout()
            .saturating_sub(wait)
            .max(raft.election_timeout());
        if raft.election_elapsed < due {
            tracing::info!(
                leader = peer,
                ticks = raft.randomized_election_timeout() - due,
                "lost the connection to the leader; standing for election unless it is heard from first"
            );
            // Past the lease too: this member now answers other followers' pre-votes.
            raft.election_elapsed = due;
        }
    }

    /// Notices leader changes after every batch (cheap), so a new leader resets session
    /// deadlines before it could expire anyone.
    fn observe_leader(&mut self) {
        let leader = self.node.raft.leader_id;
        let term = self.node.raft.term;
        if (leader, term) == self.last_leader {
            return;
        }
        let leader_changed = leader != self.last_leader.0;
        self.last_leader = (leader, term);
        self.fail_requests_of_old_terms();
        // ReadIndex requests do not outlive a term; their connections were just closed.
        self.pending_reads.clear();
        self.redirect_claims();
        if !leader_changed {
            return;
        }
        if leader != 0 {
            self.metrics.leader_changes.inc();
            tracing::info!(leader, term = self.node.raft.term, "leader known");
        }
        if leader == self.cfg.id {
            // A new leader gives every session a fresh timeout (DESIGN §1 Sessions).
            let now = self.now_ms();
            self.tracker.reset_all(now);
        }
        self.publish_status();
    }

    /// Requests sent on their way under an earlier leader may have been dropped with it; their
    /// clients get ConnectionLoss (the connection closes) and retry, as ZooKeeper's do.
    fn fail_requests_of_old_terms(&mut self) {
        let term = self.term();
        let stale: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.pipeline
                    .iter()
                    .any(|p| p.waiting_since().is_some_and(|(_, t)| t != term))
            })
            .map(|(id, _)| *id)
            .collect();
        for conn_id in stale {
            tracing::info!(
                conn = conn_id,
                "leader changed with requests in flight; closing the connection"
            );
            self.drop_connection(conn_id);
        }
    }

    /// The backstop for a request lost without a trace (e.g. on a peer link that broke).
    fn expire_stuck_requests(&mut self) {
        let now = self.now();
        let stuck: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.pipeline
                    .front()
                    .and_then(|p| p.waiting_since())
                    .is_some_and(|(since, _)| clock::since(now, since) > REQUEST_TIMEOUT)
            })
            .map(|(id, _)| *id)
            .collect();
        for conn_id in stuck {
            tracing::warn!(conn = conn_id, timeout = ?REQUEST_TIMEOUT, "a request got no answer from the ensemble; closing the connection");
            self.drop_connection(conn_id);
        }
        self.expire_stuck_claims();
    }

    /// Publishes the full status (walks every connection: done on ticks, not per batch).
    fn publish_status(&mut self) {
        let raft = &self.node.raft;
        let leader = raft.leader_id;
        let role = match raft.state {
            raft::StateRole::Leader => crate::status::Role::Leader,
            raft::StateRole::Candidate | raft::StateRole::PreCandidate => {
                crate::status::Role::Candidate
            }
            raft::StateRole::Follower if raft.promotable() => crate::status::Role::Follower,
            raft::StateRole::Follower => crate::status::Role::Learner,
        };
        let commit = raft.raft_log.committed;
        let applied = raft.raft_log.applied;
        let m = &self.metrics;
        m.term.set(raft.term as i64);
        m.commit_index.set(commit as i64);
        m.applied_index.set(applied as i64);
        m.is_leader
            .set((role == crate::status::Role::Leader) as i64);
        m.sessions.set(self.sm.sessions().count() as i64);
        m.znodes.set(self.sm.node_count() as i64);
        m.watches.set(self.watches.count() as i64);
        m.connections.set(self.conns.len() as i64);
        let mut members: Vec<u64> = self.conf_state.voters.clone();
        members.extend(self.conf_state.learners.iter().copied());
        members.sort_unstable();
        let l = &self.latency;
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let detail = crate::status::Detail {
            connections: self.conns.len(),
            outstanding: self.conns.values().map(|c| c.pipeline.len()).sum(),
            watches: self.watches.count(),
            watched_paths: self.watches.paths(),
            ephemerals: self.sm.ephemeral_count(),
            approximate_data_size: self.sm.approximate_data_size(),
            packets_received: self.conns.values().map(|c| c.received).sum(),
            packets_sent: self.conns.values().map(|c| c.sent).sum(),
            latency_min_ms: l.min.map_or(0.0, ms),
            latency_avg_ms: if l.count == 0 {
                0.0
            } else {
                ms(l.total) / l.count as f64
            },
            latency_max_ms: ms(l.max),
            clients: self
                .conns
                .values()
                .map(|c| crate::status::ClientLine {
                    peer: c.peer.to_string(),
                    session_id: c.session_id.unwrap_or(0),
                    queued: c.pipeline.len(),
                    received: c.received,
                    sent: c.sent,
                })
                .collect(),
        };
        let status = Status {
            id: self.cfg.id,
            role,
            leader_id: leader,
            term: raft.term,
            commit_index: commit,
            applied_index: applied,
            members,
            learners: self.conf_state.learners.clone(),
            cluster_id: self.log.cluster_id(),
            sessions: self.sm.sessions().count(),
            znodes: self.sm.node_count(),
            detail,
            addresses: self.sm.members().clone(),
        };
        self.status.send_replace(status);
    }
}

impl CoreInbox {
    /// Waits for the next message, then takes what else is queued into `batch`: `control`
    /// first, at most `CLIENT_SHARE` client messages, at most `MAX_BATCH` in all. False once
    /// both queues are closed and empty.
    pub fn next_batch(&mut self, batch: &mut Vec<CoreMsg>) -> bool {
        let Some(first) = self.next_blocking() else {
            return false;
        };
        let mut client_msgs = usize::from(!from_control_queue(&first));
        batch.push(first);
        while batch.len() < MAX_BATCH {
            let msg = match self.control.try_recv() {
                Ok(msg) => msg,
                Err(_) if client_msgs < CLIENT_SHARE => match self.clients.try_recv() {
                    Ok(msg) => {
                        client_msgs += 1;
                        msg
                    }
                    Err(_) => break,
                },
                Err(_) => break,
            };
            batch.push(msg);
        }
        true
    }

    /// Waits on the core thread for the next message, `control` first; `None` once both
    /// queues are closed and empty.
    fn next_blocking(&mut self) -> Option<CoreMsg> {
        use std::task::Poll;
        let mut control_open = true;
        let mut clients_open = true;
        block_on(std::future::poll_fn(|cx| {
            if control_open {
                match self.control.poll_recv(cx) {
                    Poll::Ready(Some(msg)) => return Poll::Ready(Some(msg)),
                    Poll::Ready(None) => control_open = false,
                    Poll::Pending => {}
                }
            }
            if clients_open {
                match self.clients.poll_recv(cx) {
                    Poll::Ready(Some(msg)) => return Poll::Ready(Some(msg)),
                    Poll::Ready(None) => clients_open = false,
                    Poll::Pending => {}
                }
            }
            if control_open || clients_open {
                Poll::Pending
            } else {
                Poll::Ready(None)
            }
        }))
    }
}

/// Whether a message is of the kinds the control queue carries (only used to count the first
/// message of a batch against the client share).
fn from_control_queue(msg: &CoreMsg) -> bool {
    matches!(
        msg,
        CoreMsg::Tick
            | CoreMsg::Peer(_)
            | CoreMsg::PeerEvent(_)
            | CoreMsg::Admin { .. }
            | CoreMsg::Shutdown
    )
}

/// Runs a future to completion on this (non-async) thread, parking it while nothing is ready:
/// `blocking_recv` for two queues at once.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

#[cfg(test)]
mod inbox_tests {
    use super::*;

    #[test]
    fn ticks_are_never_behind_more_than_one_client_share() {
        let (control_tx, control) = mpsc::channel(16);
        let (clients_tx, clients) = mpsc::channel(10_000);
        let mut inbox = CoreInbox { control, clients };
        for conn in 0..5000 {
            clients_tx
                .try_send(CoreMsg::Disconnected { conn })
                .expect("room");
        }
        control_tx.try_send(CoreMsg::Tick).expect("room");
        let mut batch = Vec::new();
        assert!(inbox.next_batch(&mut batch));
        assert!(matches!(batch[0], CoreMsg::Tick), "control comes first");
        assert_eq!(batch.len(), 1 + CLIENT_SHARE);

        // A tick that arrives while a batch is handled leads the next one.
        batch.clear();
        control_tx.try_send(CoreMsg::Tick).expect("room");
        assert!(inbox.next_batch(&mut batch));
        assert!(matches!(batch[0], CoreMsg::Tick));
        assert!(matches!(batch[1], CoreMsg::Disconnected { conn: c } if c == CLIENT_SHARE as u64));

        // Client messages alone still come in batches of the share.
        batch.clear();
        assert!(inbox.next_batch(&mut batch));
        assert_eq!(batch.len(), CLIENT_SHARE);

        drop((control_tx, clients_tx));
        let mut left = 0;
        loop {
            batch.clear();
            if !inbox.next_batch(&mut batch) {
                break;
            }
            left += batch.len();
        }
        assert_eq!(left, 5000 - 3 * CLIENT_SHARE);
    }
}
