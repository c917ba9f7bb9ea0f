//! Returning the memory a log compaction freed to the kernel.
//!
//! glibc keeps freed memory in its arenas unless asked (`malloc_trim`), so without a trim RSS
//! stays at the in-memory log's high-water mark (one member with 100k znodes after the bench
//! matrix: 234 MiB without, 99 MiB with). A large compaction's entries are not freed by the
//! snapshot call itself: `baton-raftlog` drops them on a thread of its own and does not say
//! when it is done. A trim started at once would run beside that free and return little of
//! it, so the trim waits `TRIM_DELAY` after the latest snapshot (the free takes tens of ms).
//! Snapshots in quick succession share one trim, after the last of them: while a load keeps
//! snapshotting, new entries reuse the freed memory anyway, and the trim comes once it calms.

use std::time::{Duration, Instant};

/// How long after the latest snapshot the trim runs: far longer than freeing the entries of
/// one compaction takes.
const TRIM_DELAY: Duration = Duration::from_secs(1);

/// When the next trim is due, if one is.
#[derive(Debug, Default)]
pub(super) struct TrimSchedule {
    due: Option<Instant>,
}

impl TrimSchedule {
    /// A snapshot compacted the log at `now`: trim `TRIM_DELAY` later (a pending trim moves).
    pub fn after_snapshot(&mut self, now: Instant) {
        self.due = Some(now + TRIM_DELAY);
    }

    /// Whether a trim is due at `now`; true once per scheduled trim.
    pub fn take_due(&mut self, now: Instant) -> bool {
        if self.due.is_some_and(|due| now >= due) {
            self.due = None;
            return true;
        }
        false
    }
}

/// Returns free pages to the kernel on a thread of its own: the trim took 17-26 ms here, which
/// the core thread would spend answering nobody.
pub(super) fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only returns free pages to the kernel; it is thread-safe and
        // does not touch memory that is in use.
        let trim = || unsafe {
            libc::malloc_trim(0);
        };
        if let Err(e) = std::thread::Builder::new()
            .name("baton-trim".into())
            .spawn(trim)
        {
            tracing::debug!(error = %e, "no thread to return freed memory to the kernel");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trim_waits_for_the_background_free_and_runs_once() {
        let t0 = Instant::now();
        let mut s = TrimSchedule::default();
        assert!(!s.take_due(t0), "nothing scheduled");
        s.after_snapshot(t0);
        assert!(
            !s.take_due(t0),
            "not beside the free of the compaction just made"
        );
        assert!(!s.take_due(t0 + TRIM_DELAY / 2));
        assert!(s.take_due(t0 + TRIM_DELAY));
        assert!(!s.take_due(t0 + 2 * TRIM_DELAY), "once per snapshot");
    }

    #[test]
    fn snapshots_in_quick_succession_share_one_later_trim() {
        let t0 = Instant::now();
        let mut s = TrimSchedule::default();
        s.after_snapshot(t0);
        s.after_snapshot(t0 + TRIM_DELAY / 2);
        assert!(
            !s.take_due(t0 + TRIM_DELAY),
            "the second compaction's free comes later"
        );
        assert!(s.take_due(t0 + TRIM_DELAY / 2 + TRIM_DELAY));
        assert!(!s.take_due(t0 + 3 * TRIM_DELAY));
    }
}
