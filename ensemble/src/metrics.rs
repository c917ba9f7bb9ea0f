//! Prometheus metrics for the member, rendered at `GET /metrics`.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Every metric the member exports. Cheap to update from the core thread (atomics).
pub struct Metrics {
    registry: Registry,
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
    /// Committed entries that could not be applied and were applied as no-ops instead.
    pub entries_skipped: Counter,
    /// Writes forwarded by a member that the leader refused to put in the log.
    pub forwards_refused: Counter,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("baton");
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
            entries_skipped: Counter::default(),
            forwards_refused: Counter::default(),
            registry: Registry::default(),
        };
        registry.register("raft_term", "Current Raft term", m.term.clone());
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
        Metrics { registry, ..m }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
