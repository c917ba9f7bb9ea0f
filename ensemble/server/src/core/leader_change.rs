//! What a change of leader (or of term) means for the requests and sessions on this member,
//! and how a follower that lost its leader's link stands for election early.

use std::time::Duration;

use super::messages::ConnId;
use super::{Core, clock};

/// A request waiting on the ensemble longer than this is presumed lost (a forward dropped by
/// a broken peer link): its connection is closed so the client retries.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The (leader, term) this member last saw, to notice a change after each batch.
#[derive(Debug, Default)]
pub(super) struct LeaderWatch {
    leader: u64,
    term: u64,
}

/// What changed since the last look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LeaderChange {
    None,
    /// A new term under the same leader (or still none known).
    Term,
    /// Another leader, or none now.
    Leader,
}

impl LeaderWatch {
    pub fn observe(&mut self, leader: u64, term: u64) -> LeaderChange {
        let change = if leader != self.leader {
            LeaderChange::Leader
        } else if term != self.term {
            LeaderChange::Term
        } else {
            LeaderChange::None
        };
        (self.leader, self.term) = (leader, term);
        change
    }
}

/// The election tick a follower that lost its leader's link waits for: 1-3 ticks before the
/// end of its randomised timeout, never before the lease (`election_timeout`). The wait differs
/// by member id so followers that noticed together do not split the vote; no randomness, so
/// the simulation stays deterministic.
fn early_election_due(
    member: u64,
    term: u64,
    randomized_timeout: usize,
    election_timeout: usize,
) -> usize {
    let wait = 1 + ((member + term) % 3) as usize;
    randomized_timeout
        .saturating_sub(wait)
        .max(election_timeout)
}

impl Core {
    /// Notices leader changes after every batch (cheap), so a new leader resets session
    /// deadlines before it could expire anyone.
    pub(super) fn observe_leader(&mut self) {
        let leader = self.node.raft.leader_id;
        let change = self.leader_watch.observe(leader, self.node.raft.term);
        if change == LeaderChange::None {
            return;
        }
        self.fail_requests_of_old_terms();
        // ReadIndex requests do not outlive a term; their connections were just closed.
        self.reads.forget_pending();
        self.forget_pending_backups();
        self.redirect_claims();
        if change != LeaderChange::Leader {
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
            // Before any client write of this term reaches the log (new ensembles).
            self.propose_initial_settings();
            // Likewise the feature level, once every member's hello is in (at once for a
            // member alone), so a new ensemble's first writes already see its behaviour.
            self.maybe_raise_feature_level();
        }
        self.publish_status();
    }

    /// A follower whose link to the leader just broke (a killed or crashed leader's sockets close
    /// at once) shortens its wait for an election to 1-3 ticks instead of the whole randomised
    /// timeout: ZooKeeper's followers act on the same signal, which is why its failover was
    /// faster. Safety is Raft's as ever; pre-vote keeps a leader that is in fact alive in place,
    /// since the followers that still hear it refuse to vote.
    pub(super) fn on_leader_link_broken(&mut self, peer: u64) {
        let raft = &mut self.node.raft;
        if peer == 0 || raft.leader_id != peer || raft.state != raft::StateRole::Follower {
            return;
        }
        let due = early_election_due(
            self.cfg.id,
            raft.term,
            raft.randomized_election_timeout(),
            raft.election_timeout(),
        );
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

    /// Requests sent on their way under an earlier leader may have been dropped with it; their
    /// clients get ConnectionLoss (the connection closes) and retry, as ZooKeeper's do.
    fn fail_requests_of_old_terms(&mut self) {
        let term = self.term();
        let stale = self.clients.ids_where(|c| {
            c.pipeline
                .iter()
                .any(|p| p.waiting_since().is_some_and(|(_, t)| t != term))
        });
        for conn_id in stale {
            tracing::info!(
                conn = conn_id,
                "leader changed with requests in flight; closing the connection"
            );
            self.drop_connection(conn_id);
        }
    }

    /// The backstop for a request lost without a trace (e.g. on a peer link that broke).
    pub(super) fn expire_stuck_requests(&mut self) {
        let now = self.now();
        let stuck: Vec<ConnId> = self.clients.ids_where(|c| {
            c.pipeline
                .front()
                .and_then(|p| p.waiting_since())
                .is_some_and(|(since, _)| clock::since(now, since) > REQUEST_TIMEOUT)
        });
        for conn_id in stuck {
            tracing::warn!(conn = conn_id, timeout = ?REQUEST_TIMEOUT, "a request got no answer from the ensemble; closing the connection");
            self.drop_connection(conn_id);
        }
        self.expire_stuck_claims();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_of_leader_and_of_term_are_told_apart() {
        let mut w = LeaderWatch::default();
        assert_eq!(w.observe(0, 0), LeaderChange::None);
        assert_eq!(w.observe(0, 1), LeaderChange::Term, "an election started");
        assert_eq!(w.observe(2, 1), LeaderChange::Leader);
        assert_eq!(w.observe(2, 1), LeaderChange::None);
        assert_eq!(w.observe(2, 2), LeaderChange::Term);
        assert_eq!(w.observe(0, 3), LeaderChange::Leader, "leader lost");
    }

    #[test]
    fn an_early_election_comes_one_to_three_ticks_early_but_never_inside_the_lease() {
        assert_eq!(early_election_due(1, 1, 15, 10), 12);
        assert_eq!(early_election_due(2, 1, 15, 10), 14);
        assert_eq!(early_election_due(3, 1, 15, 10), 13);
        assert_eq!(early_election_due(1, 1, 11, 10), 10, "the lease is a floor");
        assert_eq!(early_election_due(1, 1, 1, 0), 0);
    }
}
