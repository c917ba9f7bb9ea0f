//! What the core publishes for the admin API and four-letter words, without a round trip to it.

use serde::Serialize;

/// This member's role in Raft.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Leader,
    #[default]
    Follower,
    Candidate,
    Learner,
}

/// A snapshot of the member's state, refreshed after every batch the core handles.
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub id: u64,
    pub role: Role,
    /// 0 when no leader is known.
    pub leader_id: u64,
    pub term: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    /// Voters and learners, by id.
    pub members: Vec<u64>,
    pub learners: Vec<u64>,
    pub cluster_id: String,
    pub sessions: usize,
    pub znodes: usize,
    /// The replicated settings and alarms, as `GET /v1/settings` shows them.
    pub settings: serde_json::Value,
    /// The ensemble's replicated feature level (`baton_machine::feature`).
    pub feature_level: u32,
    /// The highest feature level this member supports and advertises to its peers.
    pub max_feature_level: u32,
    #[serde(skip)]
    pub detail: Detail,
    /// Peer addresses by member id (the replicated address book).
    #[serde(skip)]
    pub addresses: std::collections::BTreeMap<u64, String>,
}

/// Figures for `srvr`/`stat`/`mntr` that the JSON status leaves out.
#[derive(Debug, Clone, Default)]
pub struct Detail {
    pub connections: usize,
    pub outstanding: usize,
    pub watches: usize,
    pub watched_paths: usize,
    pub ephemerals: usize,
    pub approximate_data_size: u64,
    pub packets_received: u64,
    pub packets_sent: u64,
    pub latency_min_ms: f64,
    pub latency_avg_ms: f64,
    pub latency_max_ms: f64,
    pub clients: Vec<ClientLine>,
}

/// One line of `stat`'s client list.
#[derive(Debug, Clone, Default)]
pub struct ClientLine {
    pub peer: String,
    pub session_id: i64,
    pub queued: usize,
    pub received: u64,
    pub sent: u64,
}

impl Status {
    /// Ready to serve: a leader is known and everything committed has been applied.
    pub fn is_ready(&self) -> bool {
        self.leader_id != 0 && self.applied_index >= self.commit_index
    }
}
