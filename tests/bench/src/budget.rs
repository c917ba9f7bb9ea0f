//! When a run stops: every workload loop claims its operations here, so every loop is bounded.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The bound of a run: a wall-clock duration or a number of operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Duration(Duration),
    Ops(u64),
}

/// Hands out operations to the workers of one run until its [`Limit`] is reached.
#[derive(Debug)]
pub struct Budget {
    deadline: Option<Instant>,
    remaining: Option<AtomicU64>,
}

impl Budget {
    /// Starts the clock (for a duration limit) now.
    pub fn start(limit: Limit) -> Self {
        match limit {
            Limit::Duration(d) => Budget {
                deadline: Some(Instant::now() + d),
                remaining: None,
            },
            Limit::Ops(n) => Budget {
                deadline: None,
                remaining: Some(AtomicU64::new(n)),
            },
        }
    }

    /// Claims `n` operations at once; false once the deadline has passed or fewer than `n` remain.
    ///
    /// Operations that belong together (a create and its delete) are claimed together so that an
    /// ops-limited run never stops between them.
    pub fn claim(&self, n: u64) -> bool {
        if let Some(deadline) = self.deadline {
            return Instant::now() < deadline;
        }
        let Some(remaining) = &self.remaining else {
            return false;
        };
        remaining
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(n)
            })
            .is_ok()
    }
}

/// Parses a duration such as `10s`, `500ms`, `2m` or `1.5s`; a bare number means seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 10s, 500ms or 2m"))?;
    let seconds = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "m" | "min" => value * 60.0,
        other => {
            return Err(format!(
                "unknown duration unit {other:?} in {text:?} (use ms, s or m)"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_budget_hands_out_exactly_the_limit() {
        let budget = Budget::start(Limit::Ops(5));
        assert!(budget.claim(2));
        assert!(budget.claim(2));
        // One left: a pair no longer fits, a single op does.
        assert!(!budget.claim(2));
        assert!(budget.claim(1));
        assert!(!budget.claim(1));
    }

    #[test]
    fn duration_budget_closes_after_deadline() {
        let budget = Budget::start(Limit::Duration(Duration::ZERO));
        assert!(!budget.claim(1));
        let budget = Budget::start(Limit::Duration(Duration::from_secs(3600)));
        assert!(budget.claim(1_000_000));
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5h").is_err());
        assert!(parse_duration("").is_err());
    }
}
