//! The leader's session deadlines, in ZooKeeper's expiry buckets (sans-IO: time is passed in).
//!
//! Deadlines are rounded up to the next multiple of the tick, so the sessions due at one tick
//! share a bucket: a touch that lands in the same bucket costs a map lookup, one that moves a
//! session costs O(log n), and expiring takes whole buckets off the front of an ordered map.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Session deadlines of the leader. Expired sessions stay, marked closing, until `remove`.
#[derive(Debug)]
pub struct SessionTracker {
    tick_ms: u64,
    sessions: HashMap<i64, Tracked>,
    /// Deadline → live (not closing) sessions due then. Closing sessions are in no bucket.
    buckets: BTreeMap<u64, BTreeSet<i64>>,
}

#[derive(Debug, Clone, Copy)]
struct Tracked {
    timeout_ms: u32,
    /// The bucket the session is in; meaningless while closing.
    deadline: u64,
    closing: bool,
}

/// ZooKeeper's default lower bound for a negotiated session timeout: two ticks.
pub fn default_min_session_timeout(tick_ms: u32) -> i32 {
    i32::try_from(tick_ms.saturating_mul(2)).unwrap_or(i32::MAX)
}

/// ZooKeeper's default upper bound for a negotiated session timeout: twenty ticks.
pub fn default_max_session_timeout(tick_ms: u32) -> i32 {
    i32::try_from(tick_ms.saturating_mul(20)).unwrap_or(i32::MAX)
}

/// The session timeout granted for a requested one: raised to `min_ms`, then lowered to
/// `max_ms`, in that order as ZooKeeper does (so `max_ms` wins if the bounds cross). Never panics.
pub fn negotiate_timeout(requested_ms: i32, min_ms: i32, max_ms: i32) -> i32 {
    let mut timeout = requested_ms;
    if timeout < min_ms {
        timeout = min_ms;
    }
    if timeout > max_ms {
        timeout = max_ms;
    }
    timeout
}

impl SessionTracker {
    /// A tracker whose deadlines are rounded up to multiples of `tick_ms` (0 is taken as 1).
    pub fn new(tick_ms: u64) -> Self {
        SessionTracker {
            tick_ms: tick_ms.max(1),
            sessions: HashMap::new(),
            buckets: BTreeMap::new(),
        }
    }

    /// Tracks a session with a deadline of `timeout_ms` from `now_ms`. Adding a known session
    /// replaces its timeout and revives it, even if it was closing.
    pub fn add(&mut self, id: i64, timeout_ms: u32, now_ms: u64) {
        if let Some(old) = self.sessions.get(&id).copied()
            && !old.closing
        {
            self.unbucket(id, old.deadline);
        }
        let deadline = self.deadline_for(now_ms, timeout_ms);
        self.sessions.insert(
            id,
            Tracked {
                timeout_ms,
                deadline,
                closing: false,
            },
        );
        self.buckets.entry(deadline).or_default().insert(id);
    }

    /// Pushes a live session's deadline to `timeout` after `now_ms` (never earlier than it
    /// was). Returns false, changing nothing, if the session is unknown or closing: the
    /// client's request must then be refused as for an expired session.
    pub fn touch(&mut self, id: i64, now_ms: u64) -> bool {
        let Some(tracked) = self.sessions.get(&id).copied() else {
            return false;
        };
        if tracked.closing {
            return false;
        }
        let deadline = self.deadline_for(now_ms, tracked.timeout_ms);
        // A touch stamped earlier than the last one (members batch and forward them) must
        // not shorten the session's life.
        if deadline <= tracked.deadline {
            return true;
        }
        self.unbucket(id, tracked.deadline);
        self.buckets.entry(deadline).or_default().insert(id);
        if let Some(t) = self.sessions.get_mut(&id) {
            t.deadline = deadline;
        }
        true
    }

    /// Forgets a session (its close was applied). Unknown ids are ignored.
    pub fn remove(&mut self, id: i64) {
        if let Some(tracked) = self.sessions.remove(&id)
            && !tracked.closing
        {
            self.unbucket(id, tracked.deadline);
        }
    }

    /// Sessions whose deadline is at or before `now_ms`, ordered by deadline then id. Each is
    /// returned once: it is marked closing (touches no longer revive it) until `remove`d or
    /// re-armed by `add` or `reset_all`.
    pub fn expired(&mut self, now_ms: u64) -> Vec<i64> {
        let mut expired = Vec::new();
        while let Some(entry) = self.buckets.first_entry() {
            if *entry.key() > now_ms {
                break;
            }
            let due = entry.remove();
            for id in due {
                if let Some(tracked) = self.sessions.get_mut(&id) {
                    tracked.closing = true;
                }
                expired.push(id);
            }
        }
        expired
    }

    /// Gives every session, closing ones included, a full timeout from `now_ms`: a new leader
    /// cannot know how long clients were cut off, nor whether the old leader's close entries
    /// were committed (those sessions expire again later if they are still unknown to clients).
    pub fn reset_all(&mut self, now_ms: u64) {
        self.buckets.clear();
        let tick_ms = self.tick_ms;
        for (&id, tracked) in &mut self.sessions {
            tracked.closing = false;
            tracked.deadline = round_up(
                now_ms.saturating_add(u64::from(tracked.timeout_ms)),
                tick_ms,
            );
            self.buckets.entry(tracked.deadline).or_default().insert(id);
        }
    }

    /// The earliest deadline of a live session, so the runtime can sleep until then.
    pub fn next_deadline(&self) -> Option<u64> {
        self.buckets.keys().next().copied()
    }

    /// The deadline of a live session (None if unknown or closing).
    pub fn deadline(&self, id: i64) -> Option<u64> {
        self.sessions
            .get(&id)
            .filter(|t| !t.closing)
            .map(|t| t.deadline)
    }

    /// Whether the session is known (live or closing).
    pub fn contains(&self, id: i64) -> bool {
        self.sessions.contains_key(&id)
    }

    /// Whether the session expired and awaits its close.
    pub fn is_closing(&self, id: i64) -> bool {
        self.sessions.get(&id).is_some_and(|t| t.closing)
    }

    /// Number of sessions tracked, closing ones included.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether no session is tracked.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Number of non-empty expiry buckets (for metrics and tests of the bucketing).
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    fn deadline_for(&self, now_ms: u64, timeout_ms: u32) -> u64 {
        round_up(now_ms.saturating_add(u64::from(timeout_ms)), self.tick_ms)
    }

    fn unbucket(&mut self, id: i64, deadline: u64) {
        if let Some(bucket) = self.buckets.get_mut(&deadline) {
            bucket.remove(&id);
            if bucket.is_empty() {
                self.buckets.remove(&deadline);
            }
        }
    }
}

/// The next multiple of `tick` strictly after `t`, as ZooKeeper's `ExpiryQueue` rounds (a
/// session never expires early; it may live up to one tick longer than its timeout).
fn round_up(t: u64, tick: u64) -> u64 {
    (t / tick).saturating_add(1).saturating_mul(tick)
}
