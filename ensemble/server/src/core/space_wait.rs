//! A full volume is survived, never a reason to exit: the core waits for space.
//!
//! When the Raft log refuses a write for lack of space (`LogError::NoSpace`: nothing written,
//! the log still writable), the `Ready` whose entries it could not persist is held here and
//! Raft is not advanced past it: nothing in it is acknowledged, voted for or reported
//! persisted, exactly as if the disk were very slow. Meanwhile the core keeps serving reads
//! from its tree, keeps its sessions' connections, and takes no new `Ready`. The write is
//! retried with a backoff; before each retry the log compacts again and a snapshot is due
//! whatever the log's size (the space reserved for it lets it be written on a full volume),
//! which is what frees segments. Other members, not hearing from this one, carry on without it
//! (a leader that waits stops heartbeating and is replaced).

use std::time::{Duration, Instant};

use raft::Ready;

/// First wait before retrying a refused write; doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait between two retries: space freed by hand is used within this.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Where a held `Ready` stopped: the leader's snapshot it carries could not be installed, or
/// its entries and hard state could not be persisted (messages, snapshot and committed
/// entries before that are done).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    Install,
    Persist,
}

/// A `Ready` waiting for space, and when to try it again.
pub(super) struct Held {
    pub ready: Ready,
    pub stage: Stage,
}

/// Retries with a doubling backoff.
#[derive(Debug, Default)]
struct Backoff {
    next: Option<Instant>,
    wait: Duration,
}

impl Backoff {
    fn failed(&mut self, now: Instant) {
        self.wait = (self.wait * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
        self.next = Some(now + self.wait);
    }

    fn due(&self, now: Instant) -> bool {
        self.next.is_none_or(|at| now >= at)
    }

    fn reset(&mut self) {
        *self = Backoff::default();
    }
}

/// What the core holds while its volume is full.
#[derive(Default)]
pub(super) struct SpaceWait {
    held: Option<Held>,
    since: Option<Instant>,
    writes: Backoff,
    snapshots: Backoff,
}

impl SpaceWait {
    /// Whether a `Ready` waits for space: no new one may be taken meanwhile.
    pub fn is_waiting(&self) -> bool {
        self.held.is_some()
    }

    /// Holds `ready` after the volume refused it at `stage`. Returns whether this starts a
    /// wait (for a log line once per wait, not per retry).
    pub fn hold(&mut self, ready: Ready, stage: Stage, now: Instant) -> bool {
        self.held = Some(Held { ready, stage });
        self.writes.failed(now);
        let first = self.since.is_none();
        self.since.get_or_insert(now);
        first
    }

    /// The held `Ready`, once its retry is due.
    pub fn take_due(&mut self, now: Instant) -> Option<Held> {
        if self.writes.due(now) {
            self.held.take()
        } else {
            None
        }
    }

    /// The held write went through: how long the member waited, if it did.
    pub fn resumed(&mut self, now: Instant) -> Option<Duration> {
        self.writes.reset();
        self.since
            .take()
            .map(|since| now.saturating_duration_since(since))
    }

    /// A snapshot the volume refused: the next one waits a while.
    pub fn snapshot_refused(&mut self, now: Instant) {
        self.snapshots.failed(now);
    }

    /// A snapshot was written.
    pub fn snapshot_written(&mut self) {
        self.snapshots.reset();
    }

    /// Whether a snapshot may be started now (none refused lately).
    pub fn snapshot_may_start(&self, now: Instant) -> bool {
        self.snapshots.due(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_cap_and_resets() {
        let t0 = Instant::now();
        let mut b = Backoff::default();
        assert!(b.due(t0));
        b.failed(t0);
        assert!(!b.due(t0));
        assert!(b.due(t0 + FIRST_BACKOFF));
        for _ in 0..10 {
            b.failed(t0);
        }
        assert_eq!(b.wait, MAX_BACKOFF);
        b.reset();
        assert!(b.due(t0));
    }
}
