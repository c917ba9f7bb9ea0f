//! Where the core reads time. Production uses the system's clocks; the deterministic
//! simulation (`tests/sim/`) moves a virtual clock itself, so a run is replayable from its seed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The two clocks the core reads: a monotonic one for deadlines, and wall-clock milliseconds
/// for the timestamps replicated in every entry (ZooKeeper's `ctime`/`mtime`).
pub trait Clock: Send + Sync + 'static {
    /// Monotonic now.
    fn now(&self) -> Instant;
    /// Milliseconds since the Unix epoch.
    fn wall_ms(&self) -> i64;
}

/// The machine's clocks.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to: every reader sees the same virtual time.
#[derive(Debug)]
pub struct ManualClock {
    origin: Instant,
    wall_origin_ms: i64,
    elapsed_nanos: AtomicU64,
}

impl ManualClock {
    /// A clock at `wall_origin_ms` on the wall and an arbitrary monotonic origin.
    pub fn new(wall_origin_ms: i64) -> ManualClock {
        ManualClock {
            origin: Instant::now(),
            wall_origin_ms,
            elapsed_nanos: AtomicU64::new(0),
        }
    }

    /// Moves time forward to `since_origin` (never backwards).
    pub fn set(&self, since_origin: Duration) {
        let nanos = since_origin.as_nanos().min(u64::MAX as u128) as u64;
        self.elapsed_nanos.fetch_max(nanos, Ordering::Relaxed);
    }

    /// Time since the origin.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.elapsed_nanos.load(Ordering::Relaxed))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.origin + self.elapsed()
    }

    fn wall_ms(&self) -> i64 {
        self.wall_origin_ms + self.elapsed().as_millis() as i64
    }
}

/// `now - since`, zero if `since` is later (it never is with one clock; this keeps a mixed-up
/// caller from panicking).
pub(crate) fn since(now: Instant, since: Instant) -> Duration {
    now.saturating_duration_since(since)
}
