//! The leader's proposal gate: the last line of defence for ZooKeeper's per-session FIFO order
//! once writes travel from the member holding the client's connection to the leader.
//!
//! A write may be lost on its way (a full peer queue, a reset peer connection, a leader that
//! stepped down). If a *later* write of the same session still reached the log, the session's
//! writes would apply out of order. So every proposal names the xid of the session's previous
//! write still pending at its member (`prev_xid`), and the leader appends a write only if that
//! predecessor is the last write it appended for the session in this term. Writes of a session
//! owned by another member are refused as `SessionMoved`, as ZooKeeper's leader does, so a
//! request left behind on an abandoned connection can never land after the client's newer ones.
//!
//! Everything is forgotten at a term change: the new leader knows nothing of what its
//! predecessor appended, so it accepts only writes with no pending predecessor.

use std::collections::BTreeMap;

use baton_proto::ErrorCode;

/// A proposal as the gate sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proposal {
    /// The member that holds the client's connection.
    pub member: u64,
    pub session_id: i64,
    pub xid: i32,
    /// The session's previous write still awaiting its reply at `member`, if any.
    pub prev_xid: Option<i32>,
}

#[derive(Debug, Clone, Copy)]
struct SessionState {
    owner: u64,
    last_xid: Option<i32>,
}

/// Per-term, per-session admission of proposals at the leader.
#[derive(Debug, Default)]
pub struct ProposalGate {
    term: u64,
    sessions: BTreeMap<i64, SessionState>,
}

impl ProposalGate {
    /// Decides whether `p` may be appended now; on `Ok` it is recorded as appended.
    pub fn admit(&mut self, term: u64, p: Proposal) -> Result<(), ErrorCode> {
        if term != self.term {
            self.term = term;
            self.sessions.clear();
        }
        match self.sessions.get(&p.session_id) {
            Some(s) if s.owner != p.member => return Err(ErrorCode::SessionMoved),
            Some(s) if p.prev_xid.is_some() && p.prev_xid != s.last_xid => {
                return Err(ErrorCode::ConnectionLoss);
            }
            None if p.prev_xid.is_some() => return Err(ErrorCode::ConnectionLoss),
            _ => {}
        }
        self.sessions.insert(
            p.session_id,
            SessionState {
                owner: p.member,
                last_xid: Some(p.xid),
            },
        );
        Ok(())
    }

    /// Records that `session_id` now lives on `member` (a reconnect, or a new session):
    /// later writes of the session from any other member are refused.
    pub fn claim(&mut self, term: u64, session_id: i64, member: u64) {
        if term != self.term {
            self.term = term;
            self.sessions.clear();
        }
        self.sessions.insert(
            session_id,
            SessionState {
                owner: member,
                last_xid: None,
            },
        );
    }

    /// Forgets a closed session.
    pub fn forget(&mut self, session_id: i64) {
        self.sessions.remove(&session_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(member: u64, xid: i32, prev: Option<i32>) -> Proposal {
        Proposal {
            member,
            session_id: 7,
            xid,
            prev_xid: prev,
        }
    }

    #[test]
    fn in_order_writes_pass() {
        let mut g = ProposalGate::default();
        assert_eq!(g.admit(1, p(2, 1, None)), Ok(()));
        assert_eq!(g.admit(1, p(2, 2, Some(1))), Ok(()));
        assert_eq!(g.admit(1, p(2, 3, Some(2))), Ok(()));
    }

    #[test]
    fn a_lost_predecessor_stops_its_successor() {
        let mut g = ProposalGate::default();
        assert_eq!(g.admit(1, p(2, 1, None)), Ok(()));
        // xid 2 was lost on the way; 3 names it as predecessor.
        assert_eq!(g.admit(1, p(2, 3, Some(2))), Err(ErrorCode::ConnectionLoss));
    }

    #[test]
    fn a_new_term_forgets_predecessors_from_the_old_one() {
        let mut g = ProposalGate::default();
        assert_eq!(g.admit(1, p(2, 1, None)), Ok(()));
        assert_eq!(g.admit(2, p(2, 2, Some(1))), Err(ErrorCode::ConnectionLoss));
        assert_eq!(g.admit(2, p(2, 4, None)), Ok(()));
    }

    #[test]
    fn writes_from_the_previous_owner_are_refused_after_a_claim() {
        let mut g = ProposalGate::default();
        assert_eq!(g.admit(1, p(2, 1, None)), Ok(()));
        g.claim(1, 7, 3);
        assert_eq!(g.admit(1, p(2, 2, None)), Err(ErrorCode::SessionMoved));
        assert_eq!(g.admit(1, p(3, 5, None)), Ok(()));
    }

    #[test]
    fn forgotten_sessions_start_clean() {
        let mut g = ProposalGate::default();
        g.claim(1, 7, 3);
        g.forget(7);
        assert_eq!(g.admit(1, p(2, 1, None)), Ok(()));
    }
}
