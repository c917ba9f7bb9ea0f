//! The status and gauges the core publishes, so the admin API and four-letter words read them
//! without a round trip to the core thread.

use std::time::Duration;

use super::Core;
use crate::status::{ClientLine, Detail, Role, Status};

/// Min/avg/max request latency, as `srvr` reports it.
#[derive(Debug, Default)]
pub(super) struct LatencyStats {
    count: u64,
    total: Duration,
    min: Option<Duration>,
    max: Duration,
}

impl LatencyStats {
    pub fn record(&mut self, d: Duration) {
        self.count += 1;
        self.total += d;
        self.min = Some(self.min.map_or(d, |m| m.min(d)));
        self.max = self.max.max(d);
    }

    /// (min, avg, max) in milliseconds; zeros before the first request.
    fn millis(&self) -> (f64, f64, f64) {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let avg = if self.count == 0 {
            0.0
        } else {
            ms(self.total) / self.count as f64
        };
        (self.min.map_or(0.0, ms), avg, ms(self.max))
    }
}

/// The role `srvr` and `/v1/status` show for a Raft state.
fn role(state: raft::StateRole, promotable: bool) -> Role {
    match state {
        raft::StateRole::Leader => Role::Leader,
        raft::StateRole::Candidate | raft::StateRole::PreCandidate => Role::Candidate,
        raft::StateRole::Follower if promotable => Role::Follower,
        raft::StateRole::Follower => Role::Learner,
    }
}

impl Core {
    /// Publishes the status that readers borrow without asking the core (health, readiness,
    /// the admin API's fallbacks), on every tick. The per-connection detail is left as it was:
    /// building it walks every connection and session (a third of an idle leader's core
    /// thread with 19,000 sessions), and what shows it (four-letter words, `/v1/status`) asks
    /// for [`Core::publish_full_status`].
    pub(super) fn publish_status(&mut self) {
        self.publish(None);
    }

    /// [`Core::publish_status`] with the per-connection detail built afresh.
    pub(super) fn publish_full_status(&mut self) {
        let detail = self.detail();
        self.publish(Some(detail));
    }

    fn detail(&self) -> Detail {
        let (latency_min_ms, latency_avg_ms, latency_max_ms) = self.latency.millis();
        Detail {
            connections: self.clients.len(),
            outstanding: self.clients.values().map(|c| c.pipeline.len()).sum(),
            watches: self.watches.count(),
            watched_paths: self.watches.paths(),
            ephemerals: self.sm.ephemeral_count(),
            approximate_data_size: self.sm.approximate_data_size(),
            packets_received: self.clients.values().map(|c| c.received).sum(),
            packets_sent: self.clients.values().map(|c| c.sent).sum(),
            latency_min_ms,
            latency_avg_ms,
            latency_max_ms,
            clients: self
                .clients
                .values()
                .map(|c| ClientLine {
                    peer: c.peer.to_string(),
                    session_id: c.session_id.unwrap_or(0),
                    queued: c.pipeline.len(),
                    received: c.received,
                    sent: c.sent,
                })
                .collect(),
        }
    }

    fn publish(&mut self, detail: Option<Detail>) {
        let raft = &self.node.raft;
        let leader = raft.leader_id;
        let role = role(raft.state, raft.promotable());
        let commit = raft.raft_log.committed;
        let applied = raft.raft_log.applied;
        let m = &self.metrics;
        m.term.set(raft.term as i64);
        m.commit_index.set(commit as i64);
        m.applied_index.set(applied as i64);
        m.is_leader.set((role == Role::Leader) as i64);
        let sessions = self.sm.session_count();
        m.sessions.set(sessions as i64);
        m.znodes.set(self.sm.node_count() as i64);
        m.watches.set(self.watches.count() as i64);
        m.connections.set(self.clients.len() as i64);
        let mut members: Vec<u64> = self.conf_state.voters.clone();
        members.extend(self.conf_state.learners.iter().copied());
        members.sort_unstable();
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
            sessions,
            znodes: self.sm.node_count(),
            settings: self.settings_json(),
            feature_level: self.sm.settings().feature_level.get(),
            max_feature_level: self.max_feature_level(),
            detail: Detail::default(),
            addresses: self.sm.members().clone(),
        };
        self.status.send_modify(|published| {
            let kept = std::mem::take(&mut published.detail);
            *published = status;
            published.detail = detail.unwrap_or(kept);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_is_zero_until_measured_then_min_avg_max() {
        let mut l = LatencyStats::default();
        assert_eq!(l.millis(), (0.0, 0.0, 0.0));
        for secs in [4, 1, 7] {
            l.record(Duration::from_secs(secs));
        }
        assert_eq!(l.millis(), (1000.0, 4000.0, 7000.0));
    }

    #[test]
    fn a_follower_that_cannot_vote_shows_as_a_learner() {
        assert_eq!(role(raft::StateRole::Leader, true), Role::Leader);
        assert_eq!(role(raft::StateRole::PreCandidate, true), Role::Candidate);
        assert_eq!(role(raft::StateRole::Candidate, true), Role::Candidate);
        assert_eq!(role(raft::StateRole::Follower, true), Role::Follower);
        assert_eq!(role(raft::StateRole::Follower, false), Role::Learner);
    }
}
