//! What a change of leader (or of term) means for the requests and sessions on this member,
//! how a follower that lost its leader's link stands for election early, and how a member cut
//! off from the leader tells its clients.

use std::time::{Duration, Instant};

use super::messages::ConnId;
use super::{Core, clock};

/// A request waiting on the ensemble longer than this is presumed lost (a forward dropped by
/// a broken peer link): its connection is closed so the client retries.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The (leader, term) this member last saw, to notice a change after each batch, and when it
/// last knew itself in touch with a quorum through a leader.
#[derive(Debug, Default)]
pub(super) struct LeaderWatch {
    leader: u64,
    term: u64,
    contact: Option<Instant>,
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

    /// Notes contact with a quorum at `at` (never moving back); returns the latest known.
    fn note_contact(&mut self, at: Option<Instant>) -> Option<Instant> {
        self.contact = match (self.contact, at) {
            (Some(old), Some(new)) => Some(old.max(new)),
            (old, new) => old.or(new),
        };
        self.contact
    }
}

/// How long a member may be out of touch with a quorum before it closes a connection whose
/// session has `timeout_ms`: a third of the timeout, the interval at which ZooKeeper clients
/// ping, so an election shorter than that disturbs no one, and a client cut off is told with
/// two thirds of its timeout left to resume its session on another member.
pub(super) fn cut_off_after(timeout_ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0) / 3)
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

    /// The last moment this member knew a quorum could hear it through a leader: while leading,
    /// when a quorum of voters (this one counted now) was last heard from; as a follower, when
    /// it sent the last contact probe the leader answered (`contact_probe`: hearing the leader
    /// alone proves nothing of the way back). None while no leader is known.
    fn leader_contact(&self) -> Option<Instant> {
        let leader = self.node.raft.leader_id;
        if leader == 0 {
            return None;
        }
        if leader != self.cfg.id {
            return self.contact_probes.confirmed();
        }
        let now = self.now();
        let voters = &self.conf_state.voters;
        let mut heard: Vec<Instant> = voters
            .iter()
            .filter_map(|id| {
                if *id == self.cfg.id {
                    Some(now)
                } else {
                    self.last_heard.get(id).copied()
                }
            })
            .collect();
        heard.sort_unstable_by(|a, b| b.cmp(a));
        heard.get(voters.len() / 2).copied()
    }

    /// Closes the connections of clients whose sessions this member can no longer vouch for.
    /// A member cut off from the leader still answers its clients' pings, but their sessions
    /// live on the leader's clock, which hears nothing of them: the majority expires them a
    /// timeout after their last touch, and an app holding a lock or leading through this
    /// member would act on after the ensemble gave that to another. ZooKeeper's followers close
    /// their clients' connections when they lose the leader; this closes each once the member
    /// has been out of touch for a third of its session's timeout (`cut_off_after`).
    pub(super) fn close_cut_off_connections(&mut self) {
        let contact = self.leader_contact();
        let Some(contact) = self.leader_watch.note_contact(contact) else {
            return;
        };
        let out_of_touch = clock::since(self.now(), contact);
        // Every tick: in touch (the usual case), no session can be due, so no connection is
        // looked at.
        if out_of_touch <= cut_off_after(self.cfg.min_session_timeout_ms) {
            return;
        }
        let cut_off = self.clients.ids_where(|c| {
            c.session_id
                .and_then(|id| self.sm.session(id))
                .is_some_and(|s| out_of_touch > cut_off_after(s.timeout_ms))
        });
        if cut_off.is_empty() {
            return;
        }
        tracing::warn!(
            connections = cut_off.len(),
            out_of_touch = ?out_of_touch,
            leader = self.node.raft.leader_id,
            "no quorum heard through a leader for a third of these sessions' timeout; closing their connections so their clients resume them on a member that has one"
        );
        for conn_id in cut_off {
            self.drop_connection(conn_id);
        }
    }

    /// A heartbeat's commit index is what the leader knows this member holds (`min(matched,
    /// committed)`): one past the end of the log means entries this member acknowledged are
    /// gone, as when a damaged last record was dropped at start. raft-rs panics on it; this
    /// names what happened and what to do instead. A member short of acknowledged entries must
    /// not vote either: the entry may be committed on its acknowledgement alone.
    pub(super) fn lost_acknowledged(&self, m: &raft::eraftpb::Message) -> Option<super::CoreError> {
        let last = self.node.raft.raft_log.last_index();
        (m.get_msg_type() == raft::eraftpb::MessageType::MsgHeartbeat
            && m.term >= self.node.raft.term
            && m.commit > last)
            .then_some(super::CoreError::LostAcknowledged {
                leader: m.from,
                commit: m.commit,
                last,
                member: self.cfg.id,
            })
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

    #[test]
    fn contact_with_a_quorum_is_kept_through_a_leaderless_spell_and_never_goes_back() {
        let mut w = LeaderWatch::default();
        assert_eq!(
            w.note_contact(None),
            None,
            "never in touch: nothing to close"
        );
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(w.note_contact(Some(t1)), Some(t1));
        assert_eq!(
            w.note_contact(None),
            Some(t1),
            "no leader: the last contact stands"
        );
        assert_eq!(
            w.note_contact(Some(t0)),
            Some(t1),
            "an older message moves nothing"
        );
    }

    #[test]
    fn a_connection_is_cut_off_after_a_third_of_its_session_timeout() {
        assert_eq!(cut_off_after(6000), Duration::from_secs(2));
        assert_eq!(cut_off_after(10_000), Duration::from_millis(3333));
        assert_eq!(cut_off_after(-1), Duration::ZERO);
    }
}
