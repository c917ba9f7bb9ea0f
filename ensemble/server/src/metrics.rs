//! Prometheus metrics for the member, rendered at `GET /metrics`.

use baton_metrics::{Catalog, FamilyInfo};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Every metric the member exports. Cheap to update from the core thread (atomics).
pub struct Metrics {
    registry: Registry,
    families: Vec<FamilyInfo>,
    pub term: Gauge,
    pub commit_index: Gauge,
    pub applied_index: Gauge,
    pub is_leader: Gauge,
    pub leader_changes: Counter,
    pub sessions: Gauge,
    pub znodes: Gauge,
    pub watches: Gauge,
    pub connections: Gauge,
    pub requests: Counter,
    pub writes: Counter,
    pub proposal_seconds: Histogram,
    pub fsync_seconds: Histogram,
    pub fsyncs: Counter,
    pub snapshots: Counter,
    /// Time from the core's copy of the state to the durable snapshot file.
    pub snapshot_seconds: Histogram,
    /// Size of the newest snapshot this member wrote.
    pub snapshot_bytes: Gauge,
    /// How long the core took over each batch it handled (messages, then Raft's `Ready`):
    /// nothing else is served meanwhile, so this is the core's pause.
    pub core_step_seconds: Histogram,
    /// The longest of them since the member started.
    pub core_step_max_seconds: Gauge<f64, AtomicU64>,
    core_step_max_nanos: AtomicU64,
    /// The longest batch less the fsyncs in it: the core's own work, apart from the disk.
    pub core_work_max_seconds: Gauge<f64, AtomicU64>,
    core_work_max_nanos: AtomicU64,
    /// Client connections closed at accept, by `reason`: `per_ip_limit` or `connection_limit`.
    pub client_connections_refused: Family<[(&'static str, &'static str); 1], Counter>,
    pub client_handshake_timeouts: Counter,
    pub client_paused_connections: Gauge,
    pub client_read_pauses: Counter,
    pub client_reply_queue_bytes: Gauge,
    pub client_replies_held: Counter,
    pub client_write_stalls: Counter,
    pub watch_limit_refusals: Counter,
    /// Requests refused because the session's watched paths would pass
    /// `--max-watch-bytes-per-session`.
    pub watch_bytes_limit_refusals: Counter,
    /// Committed entries that could not be applied and were applied as no-ops instead.
    pub entries_skipped: Counter,
    /// 1 while this member's Raft log waits for space on a full volume (its writes held back,
    /// reads served); 0 otherwise.
    pub log_waiting_for_space: Gauge,
    /// Raft log and snapshot writes a full volume refused (nothing written; retried).
    pub log_no_space_errors: Counter,
    /// Writes forwarded by a member that the leader refused to put in the log.
    pub forwards_refused: Counter,
    /// `k8s` auth packets by `result`: accepted, rejected, unavailable (API trouble), disabled.
    pub k8s_auth: Family<[(&'static str, &'static str); 1], Counter>,
    /// TokenReview API calls by `result`: authenticated, refused, error.
    pub k8s_token_reviews: Family<[(&'static str, &'static str); 1], Counter>,
    pub k8s_token_review_cache_hits: Counter,
    pub k8s_token_review_seconds: Histogram,
    /// Requests of sessions on this member refused by the recipe-tree policy, by `reason`.
    pub tenancy_refusals: Family<[(&'static str, &'static str); 1], Counter>,
    /// Writes of sessions on this member refused with BadArguments (-8) by a quota or the alarm,
    /// by `reason` (`baton_machine::QuotaRefusal::label`).
    pub quota_refusals: Family<[(&'static str, &'static str); 1], Counter>,
    /// 1 while any member has an alarm of `kind` up (the replicated alarm set).
    pub alarm: Family<[(&'static str, &'static str); 1], Gauge>,
    /// Free bytes on this member's data volume at the last check.
    pub disk_free_bytes: Gauge,
    /// The ensemble's replicated feature level.
    pub feature_level: Gauge,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Catalog::with_prefix("baton");
        let m = Metrics {
            term: Gauge::default(),
            commit_index: Gauge::default(),
            applied_index: Gauge::default(),
            is_leader: Gauge::default(),
            leader_changes: Counter::default(),
            sessions: Gauge::default(),
            znodes: Gauge::default(),
            watches: Gauge::default(),
            connections: Gauge::default(),
            requests: Counter::default(),
            writes: Counter::default(),
            proposal_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            fsync_seconds: Histogram::new(exponential_buckets(0.00005, 2.0, 16)),
            fsyncs: Counter::default(),
            snapshots: Counter::default(),
            snapshot_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 12)),
            snapshot_bytes: Gauge::default(),
            core_step_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 14)),
            core_step_max_seconds: Gauge::default(),
            core_step_max_nanos: AtomicU64::new(0),
            core_work_max_seconds: Gauge::default(),
            core_work_max_nanos: AtomicU64::new(0),
            client_connections_refused: Family::default(),
            client_handshake_timeouts: Counter::default(),
            client_paused_connections: Gauge::default(),
            client_read_pauses: Counter::default(),
            client_reply_queue_bytes: Gauge::default(),
            client_replies_held: Counter::default(),
            client_write_stalls: Counter::default(),
            watch_limit_refusals: Counter::default(),
            watch_bytes_limit_refusals: Counter::default(),
            entries_skipped: Counter::default(),
            log_waiting_for_space: Gauge::default(),
            log_no_space_errors: Counter::default(),
            forwards_refused: Counter::default(),
            k8s_auth: Family::default(),
            k8s_token_reviews: Family::default(),
            k8s_token_review_cache_hits: Counter::default(),
            k8s_token_review_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            tenancy_refusals: Family::default(),
            quota_refusals: Family::default(),
            alarm: Family::default(),
            disk_free_bytes: Gauge::default(),
            feature_level: Gauge::default(),
            registry: Registry::default(),
            families: Vec::new(),
        };
        // Every known reason from the start: a rate over a series that appears only with its
        // first event misses that event, and dashboards show "no data" instead of zero.
        for reason in ["per_ip_limit", "connection_limit"] {
            m.client_connections_refused
                .get_or_create(&[("reason", reason)])
                .inc_by(0);
        }
        for why in baton_machine::QuotaRefusal::ALL {
            m.quota_refusals
                .get_or_create(&[("reason", why.label())])
                .inc_by(0);
        }
        for kind in baton_machine::AlarmKind::ALL {
            m.alarm.get_or_create(&[("kind", kind.label())]).set(0);
        }
        for refusal in baton_machine::tenancy::Refusal::ALL {
            m.tenancy_refusals
                .get_or_create(&[("reason", refusal.label())])
                .inc_by(0);
        }
        registry.register("raft_term", "Current Raft term", m.term.clone());
        registry.register(
            "raft_log_waiting_for_space",
            "1 while this member's Raft log waits for space on a full volume: its writes are held back (never acknowledged) and retried, reads are served",
            m.log_waiting_for_space.clone(),
        );
        registry.register(
            "raft_log_no_space_errors",
            "Raft log and snapshot writes a full volume refused; nothing was written and the member retries",
            m.log_no_space_errors.clone(),
        );
        registry.register(
            "entries_skipped",
            "Committed entries that could not be applied and were applied as no-ops on every member",
            m.entries_skipped.clone(),
        );
        registry.register(
            "forwards_refused",
            "Writes forwarded by a member that the leader refused to put in the log (undecodable, inconsistent or not a client write)",
            m.forwards_refused.clone(),
        );
        registry.register(
            "raft_commit_index",
            "Highest Raft index known committed",
            m.commit_index.clone(),
        );
        registry.register(
            "raft_applied_index",
            "Highest Raft index applied to the tree",
            m.applied_index.clone(),
        );
        registry.register(
            "raft_is_leader",
            "1 when this member leads",
            m.is_leader.clone(),
        );
        registry.register(
            "raft_leader_changes",
            "Leader changes seen by this member",
            m.leader_changes.clone(),
        );
        registry.register(
            "sessions",
            "Live client sessions in the ensemble",
            m.sessions.clone(),
        );
        registry.register("znodes", "Znodes in the tree", m.znodes.clone());
        registry.register(
            "watches",
            "Watches registered on this member",
            m.watches.clone(),
        );
        registry.register(
            "client_connections",
            "Open client connections on this member",
            m.connections.clone(),
        );
        registry.register(
            "client_requests",
            "Client requests received by this member",
            m.requests.clone(),
        );
        registry.register(
            "client_writes",
            "Client writes proposed by this member",
            m.writes.clone(),
        );
        registry.register(
            "proposal_latency_seconds",
            "Time from proposing a client write to applying it",
            m.proposal_seconds.clone(),
        );
        registry.register(
            "fsync_latency_seconds",
            "Time to make one batch of Raft log entries durable",
            m.fsync_seconds.clone(),
        );
        registry.register(
            "log_fsyncs",
            "Batches of Raft log entries made durable",
            m.fsyncs.clone(),
        );
        registry.register(
            "snapshots",
            "Snapshots of the tree taken",
            m.snapshots.clone(),
        );
        m.register_core(&mut registry);
        m.register_client_limits(&mut registry);
        m.register_identities(&mut registry);
        let (registry, families) = registry.finish();
        Metrics {
            registry,
            families,
            ..m
        }
    }

    /// One batch of the core took `took`, of which `fsync` waiting for the disk.
    pub fn observe_core_step(&self, took: Duration, fsync: Duration) {
        self.core_step_seconds.observe(took.as_secs_f64());
        raise_max(&self.core_step_max_nanos, &self.core_step_max_seconds, took);
        let work = took.saturating_sub(fsync);
        raise_max(&self.core_work_max_nanos, &self.core_work_max_seconds, work);
    }

    /// A snapshot of `bytes` became durable `took` after the core copied the state.
    pub fn observe_snapshot(&self, took: Duration, bytes: usize) {
        self.snapshot_seconds.observe(took.as_secs_f64());
        self.snapshot_bytes.set(bytes as i64);
    }

    /// The core thread's pauses and the snapshots it hands off.
    fn register_core(&self, registry: &mut Catalog) {
        registry.register(
            "core_step_seconds",
            "Time the core thread took over one batch (messages, then Raft's Ready); it serves nothing else meanwhile",
            self.core_step_seconds.clone(),
        );
        registry.register(
            "core_step_max_seconds",
            "The longest batch of the core thread since the member started",
            self.core_step_max_seconds.clone(),
        );
        registry.register(
            "core_work_max_seconds",
            "The longest batch of the core thread less the fsyncs in it (its own work, apart from the disk)",
            self.core_work_max_seconds.clone(),
        );
        registry.register(
            "snapshot_seconds",
            "Time from the core's copy of the state to the durable snapshot file (serialized off the core)",
            self.snapshot_seconds.clone(),
        );
        registry.register(
            "snapshot_bytes",
            "Size of the newest snapshot this member wrote",
            self.snapshot_bytes.clone(),
        );
    }

    /// The client port's limits (DESIGN.md §4): what each refused, paused or held back.
    fn register_client_limits(&self, registry: &mut Catalog) {
        registry.register(
            "client_connections_refused",
            "Client connections closed at accept, by reason (per_ip_limit, connection_limit)",
            self.client_connections_refused.clone(),
        );
        registry.register(
            "client_handshake_timeouts",
            "Client connections closed because their TLS and connect handshake did not finish in time",
            self.client_handshake_timeouts.clone(),
        );
        registry.register(
            "client_paused_connections",
            "Client connections not being read now (too many requests or reply bytes outstanding)",
            self.client_paused_connections.clone(),
        );
        registry.register(
            "client_read_pauses",
            "Times a client connection stopped being read until its client caught up",
            self.client_read_pauses.clone(),
        );
        registry.register(
            "client_reply_queue_bytes",
            "Reply bytes queued for clients and not yet written to their sockets",
            self.client_reply_queue_bytes.clone(),
        );
        registry.register(
            "client_replies_held",
            "Times a client request was held back because its connection left too many reply bytes unread",
            self.client_replies_held.clone(),
        );
        registry.register(
            "client_write_stalls",
            "Client connections closed because their replies made no progress for the stall limit",
            self.client_write_stalls.clone(),
        );
        registry.register(
            "watch_limit_refusals",
            "Requests refused (BadArguments, -8) because the session would pass the watch limit",
            self.watch_limit_refusals.clone(),
        );
        registry.register(
            "watch_bytes_limit_refusals",
            "Requests refused (BadArguments, -8) because the bytes of the paths the session watches would pass the limit",
            self.watch_bytes_limit_refusals.clone(),
        );
    }

    /// Client identities (`k8s` auth) and the recipe-tree policy (DESIGN.md §4).
    fn register_identities(&self, registry: &mut Catalog) {
        registry.register(
            "k8s_auth",
            "k8s auth packets by result (accepted, rejected, unavailable: TokenReview API trouble, disabled: no --k8s-auth)",
            self.k8s_auth.clone(),
        );
        registry.register(
            "k8s_token_reviews",
            "TokenReview API calls by result (authenticated, refused, error)",
            self.k8s_token_reviews.clone(),
        );
        registry.register(
            "k8s_token_review_cache_hits",
            "k8s tokens answered from the verdict cache without a TokenReview call",
            self.k8s_token_review_cache_hits.clone(),
        );
        registry.register(
            "k8s_token_review_latency_seconds",
            "Time of one TokenReview API call",
            self.k8s_token_review_seconds.clone(),
        );
        registry.register(
            "tenancy_refusals",
            "Requests of this member's sessions refused NoAuth by the namespace policy or owner-only deletion, by reason",
            self.tenancy_refusals.clone(),
        );
        registry.register(
            "quota_refusals",
            "Writes of this member's sessions refused (BadArguments, -8), by reason (namespace or shared pool znodes or bytes, ephemerals per session, alarm)",
            self.quota_refusals.clone(),
        );
        registry.register(
            "alarm",
            "1 while any member of the ensemble has an alarm of this kind up (nospace: a data volume below --min-free-disk-bytes); writes that add data are refused meanwhile",
            self.alarm.clone(),
        );
        registry.register(
            "feature_level",
            "The ensemble's feature level (replicated; raised once every member supports it): which behaviour changes every member applies",
            self.feature_level.clone(),
        );
        registry.register(
            "disk_free_bytes",
            "Free bytes on this member's data volume at the last check (every second)",
            self.disk_free_bytes.clone(),
        );
    }

    /// Every family registered, with its help and type, including labelled ones that have no
    /// series yet (the metrics reference is made from this).
    pub fn families(&self) -> &[FamilyInfo] {
        &self.families
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Only the core thread writes these, so load-then-store loses nothing.
fn raise_max(nanos: &AtomicU64, gauge: &Gauge<f64, AtomicU64>, took: Duration) {
    let n = took.as_nanos().min(u64::MAX as u128) as u64;
    if n > nanos.load(Ordering::Relaxed) {
        nanos.store(n, Ordering::Relaxed);
        gauge.set(took.as_secs_f64());
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
