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
}
