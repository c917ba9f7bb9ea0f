//! Reconnect pacing and log throttling for a peer that is down: retry soon after a blip,
//! back off exponentially (with jitter, so members do not reconnect in lockstep) while it
//! stays down, and say so in the logs once per window rather than once per attempt.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;

/// Exponential backoff with "equal jitter": each delay is half the current step plus a
/// random part of the other half, so it never collapses to zero and never exceeds the cap.
/// The jitter comes from a seeded generator when a simulation needs replayable runs.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    step: Duration,
    rng: StdRng,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration, seed: Option<u64>) -> Self {
        let initial = initial.max(Duration::from_millis(1));
        let max = max.max(initial);
        let rng = match seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_rng(&mut rand::rng()),
        };
        Self {
            initial,
            max,
            step: initial,
            rng,
        }
    }

    /// The delay before the next attempt; doubles the step for the one after.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let step = self.step;
        self.step = (self.step * 2).min(self.max);
        let half = step / 2;
        let jitter_nanos = self.rng.random_range(0..=half.as_nanos() as u64);
        half + Duration::from_nanos(jitter_nanos)
    }

    /// Starts over from the initial step: the peer has been reachable for a while.
    pub(crate) fn reset(&mut self) {
        self.step = self.initial;
    }

    /// The cap: a connection that stayed up this long counts as healthy.
    pub(crate) fn max(&self) -> Duration {
        self.max
    }
}

/// How often a peer that stays down is mentioned at WARN; in between it is DEBUG.
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(30);

/// Decides whether a failure about one peer deserves a WARN line: the first failure, a
/// different kind of failure than the last one reported, or the same one after `WARN_EVERY`;
/// never more than one per `min_gap` (the backoff cap), whatever happens.
#[derive(Debug)]
pub(crate) struct WarnThrottle {
    min_gap: Duration,
    last: Option<(Instant, &'static str)>,
    suppressed: u64,
}

impl WarnThrottle {
    pub(crate) fn new(min_gap: Duration) -> Self {
        Self {
            min_gap,
            last: None,
            suppressed: 0,
        }
    }

    /// Returns `Some(n)` if this failure should be logged at WARN, where `n` is how many
    /// failures were demoted to DEBUG since the last WARN; `None` to log it at DEBUG.
    pub(crate) fn should_warn(&mut self, kind: &'static str) -> Option<u64> {
        self.should_warn_at(Instant::now(), kind)
    }

    fn should_warn_at(&mut self, now: Instant, kind: &'static str) -> Option<u64> {
        let warn = match self.last {
            None => true,
            Some((at, last_kind)) => {
                let elapsed = now.saturating_duration_since(at);
                elapsed >= self.min_gap && (last_kind != kind || elapsed >= WARN_EVERY)
            }
        };
        if warn {
            self.last = Some((now, kind));
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }

    /// Forgets the outage: the next failure is news again. Returns whether one was ongoing.
    pub(crate) fn recovered(&mut self) -> bool {
        self.suppressed = 0;
        self.last.take().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_the_cap_and_stays_within_it() {
        let mut b = Backoff::new(Duration::from_millis(50), Duration::from_secs(1), None);
        let mut step = Duration::from_millis(50);
        for _ in 0..20 {
            let d = b.next_delay();
            assert!(
                d >= step / 2 && d <= step,
                "{d:?} outside [{:?}, {step:?}]",
                step / 2
            );
            step = (step * 2).min(Duration::from_secs(1));
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(50));
    }

    #[test]
    fn seeded_backoff_replays_the_same_delays() {
        let delays = |seed| {
            let mut b = Backoff::new(
                Duration::from_millis(50),
                Duration::from_secs(1),
                Some(seed),
            );
            (0..8).map(|_| b.next_delay()).collect::<Vec<_>>()
        };
        assert_eq!(delays(7), delays(7));
        assert_ne!(delays(7), delays(8));
    }

    #[test]
    fn peer_warn_throttle_reports_once_per_window_and_on_new_kinds() {
        let mut t = WarnThrottle::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        assert_eq!(t.should_warn_at(at(0), "connect"), Some(0));
        assert_eq!(t.should_warn_at(at(0), "connect"), None);
        assert_eq!(
            t.should_warn_at(at(2), "connect"),
            None,
            "same kind within WARN_EVERY"
        );
        assert_eq!(
            t.should_warn_at(at(2), "refused"),
            Some(2),
            "a new kind is news after min_gap"
        );
        assert_eq!(
            t.should_warn_at(at(2), "connect"),
            None,
            "but never twice within min_gap"
        );
        assert_eq!(t.should_warn_at(at(2) + WARN_EVERY, "connect"), Some(1));
        assert!(t.recovered());
        assert_eq!(t.should_warn("connect"), Some(0));
    }
}
