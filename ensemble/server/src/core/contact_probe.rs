//! Proof, for a follower, that the leader hears it: a ReadIndex now and then, whose answer
//! comes only after the leader received it and heard from a quorum since (raft's safe read
//! option). Hearing the leader is not enough: when only this member's packets to it are
//! dropped, the leader's messages still arrive, but the touches of this member's sessions do
//! not, and the majority expires them while their clients think them alive. A follower's
//! contact is when it sent the last probe that was answered.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{Core, clock};

/// An unanswered probe is forgotten after this long (its leader lost, its message dropped).
const FORGET_AFTER: Duration = Duration::from_secs(30);

/// The probes in flight and the latest answered.
#[derive(Debug, Default)]
pub(super) struct ContactProbes {
    /// ReadIndex context → when it was sent.
    in_flight: BTreeMap<u64, Instant>,
    last_sent: Option<Instant>,
    /// When the latest answered probe was sent.
    confirmed: Option<Instant>,
}

impl ContactProbes {
    fn due(&self, now: Instant, every: Duration) -> bool {
        self.last_sent
            .is_none_or(|sent| clock::since(now, sent) >= every)
    }

    fn sent(&mut self, ctx: u64, now: Instant) {
        self.in_flight
            .retain(|_, sent| clock::since(now, *sent) < FORGET_AFTER);
        self.in_flight.insert(ctx, now);
        self.last_sent = Some(now);
    }

    /// `ctx` was answered: `true` if it was a probe.
    fn answered(&mut self, ctx: u64) -> bool {
        let Some(sent) = self.in_flight.remove(&ctx) else {
            return false;
        };
        self.confirmed = Some(self.confirmed.map_or(sent, |c| c.max(sent)));
        true
    }

    pub fn confirmed(&self) -> Option<Instant> {
        self.confirmed
    }
}

impl Core {
    /// On a tick, as a follower: sends a probe if one is due, four per cut-off interval of the
    /// shortest session timeout, so a member in touch is never near it.
    pub(super) fn probe_contact(&mut self) {
        let leader = self.node.raft.leader_id;
        // While a `Ready` waits for space Raft is frozen, and nothing it would answer counts.
        if leader == 0 || leader == self.cfg.id || self.space_wait.is_waiting() {
            return;
        }
        let now = self.now();
        let every = super::leader_change::cut_off_after(self.cfg.min_session_timeout_ms) / 4;
        if !self.contact_probes.due(now, every) {
            return;
        }
        let ctx = self.reads.fresh_context();
        self.read_index(ctx);
        self.contact_probes.sent(ctx, now);
    }

    /// Raft answered a ReadIndex: `true` if it was a contact probe.
    pub(super) fn on_probe_answered(&mut self, ctx: u64) -> bool {
        self.contact_probes.answered(ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contact_is_the_sending_of_the_latest_answered_probe() {
        let t0 = Instant::now();
        let every = Duration::from_millis(300);
        let mut p = ContactProbes::default();
        assert!(p.due(t0, every));
        p.sent(1, t0);
        assert!(!p.due(t0 + Duration::from_millis(100), every));
        let t1 = t0 + every;
        assert!(p.due(t1, every));
        p.sent(2, t1);
        assert_eq!(p.confirmed(), None, "nothing answered yet");
        assert!(p.answered(2));
        assert_eq!(p.confirmed(), Some(t1));
        assert!(p.answered(1), "a late answer is still a probe's");
        assert_eq!(p.confirmed(), Some(t1), "and never moves contact back");
        assert!(!p.answered(2), "answered once");
        assert!(!p.answered(7), "a sync's context is not a probe's");
    }

    #[test]
    fn unanswered_probes_are_forgotten() {
        let t0 = Instant::now();
        let mut p = ContactProbes::default();
        p.sent(1, t0);
        p.sent(2, t0 + FORGET_AFTER);
        assert!(!p.answered(1), "forgotten once older than FORGET_AFTER");
        assert!(p.answered(2));
    }
}
