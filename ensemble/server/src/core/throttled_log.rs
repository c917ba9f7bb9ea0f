//! Log lines about misbehaving clients, at most one per interval: an attacker opening
//! thousands of connections must not be able to fill the disk with our logs, or drown the one
//! line an operator needs. What was left out is counted and reported on the next line (the
//! metrics count every occurrence).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Admits one log line per `interval`, counting the ones it turned away.
#[derive(Debug)]
pub struct ThrottledLog {
    interval: Duration,
    /// When the last line was admitted, and how many were turned away since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl ThrottledLog {
    /// A limiter admitting one line per `interval`.
    pub const fn new(interval: Duration) -> Self {
        ThrottledLog {
            interval,
            state: Mutex::new((None, 0)),
        }
    }

    /// One line per 10 seconds: enough to notice, little enough to never matter.
    pub const fn every_10s() -> Self {
        ThrottledLog::new(Duration::from_secs(10))
    }

    /// `Some(lines turned away since the last admitted one)` when a line may be logged now.
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        // A poisoned lock only means another thread panicked mid-update of two counters.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (last, suppressed) = &mut *state;
        if last.is_some_and(|t| now.saturating_duration_since(t) < self.interval) {
            *suppressed += 1;
            return None;
        }
        *last = Some(now);
        Some(std::mem::take(suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_count_of_the_rest() {
        let log = ThrottledLog::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(log.admit_at(t0), Some(0));
        for s in 1..10 {
            assert_eq!(log.admit_at(t0 + Duration::from_secs(s)), None);
        }
        assert_eq!(log.admit_at(t0 + Duration::from_secs(10)), Some(9));
        assert_eq!(log.admit_at(t0 + Duration::from_secs(11)), None);
    }
}
