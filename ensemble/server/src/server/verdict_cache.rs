//! What TokenReview said about recent tokens, so a reconnecting sidecar costs no API call and
//! a refused token sprayed at the member is reviewed once per [`REFUSED_TTL`].
//!
//! Accepted and refused verdicts are kept apart, each bounded: anyone can make up refused
//! tokens (any string with a far `exp`), only the API server makes accepted ones, so a flood of
//! junk fills the refused side alone and never pushes a pod's identity out. No verdict is
//! trusted past [`MAX_TRUST`], whatever the token's `exp` says.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use baton_proto::Id;

use super::token_review::Refusal;

/// Longest an accepted verdict is trusted without asking the API server again: a deleted
/// pod's token keeps working at most this long on new connections. Two minutes, as the API
/// server's own webhook token cache (`--authentication-token-webhook-cache-ttl`).
pub const MAX_TRUST: Duration = Duration::from_secs(120);
/// How long a refused token is remembered, whatever its `exp`: long enough that re-sending one
/// costs no API call, short enough that nothing refused by mistake stays refused for long.
pub const REFUSED_TTL: Duration = Duration::from_secs(30);
/// Accepted verdicts kept at most (one per live pod token; far above a member's sessions).
pub const DEFAULT_ACCEPTED_ENTRIES: usize = 10_000;
/// Refused verdicts kept at most; past it the oldest goes.
pub const DEFAULT_REFUSED_ENTRIES: usize = 4_096;

/// A token's digest (SHA-256), never the token itself.
pub type TokenKey = [u8; 32];

/// Accepted and refused verdicts, each side bounded on its own.
pub struct VerdictCache {
    accepted: Bounded<Id>,
    refused: Bounded<Refusal>,
}

/// A verdict found in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remembered {
    Accepted(Id),
    Refused(Refusal),
}

impl VerdictCache {
    /// A cache keeping at most `accepted` and `refused` verdicts.
    pub fn new(accepted: usize, refused: usize) -> Self {
        VerdictCache {
            accepted: Bounded::new(accepted),
            refused: Bounded::new(refused),
        }
    }

    /// The verdict on `key` still trusted at `now`, if any.
    pub fn get(&self, key: &TokenKey, now: Instant) -> Option<Remembered> {
        if let Some(id) = self.accepted.get(key, now) {
            return Some(Remembered::Accepted(id.clone()));
        }
        self.refused
            .get(key, now)
            .map(|r| Remembered::Refused(r.clone()))
    }

    /// Remembers an accepted token until `valid_for` from `now` (its `exp`), at most
    /// [`MAX_TRUST`].
    pub fn accept(&mut self, key: TokenKey, id: Id, valid_for: Duration, now: Instant) {
        self.refused.remove(&key);
        self.accepted
            .insert(key, id, now + valid_for.min(MAX_TRUST), now);
    }

    /// Remembers a refused token for [`REFUSED_TTL`].
    pub fn refuse(&mut self, key: TokenKey, why: Refusal, now: Instant) {
        self.accepted.remove(&key);
        self.refused.insert(key, why, now + REFUSED_TTL, now);
    }

    /// Verdicts held: (accepted, refused), expired ones included until they are swept.
    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        (self.accepted.entries.len(), self.refused.entries.len())
    }
}

/// One side of the cache: at most `cap` entries; a full side first drops what expired, then
/// the entry that expires soonest, the oldest of those (for refused verdicts, all alike, the
/// oldest).
struct Bounded<V> {
    /// Token → (verdict, trusted until, insertion number).
    entries: HashMap<TokenKey, (V, Instant, u64)>,
    cap: usize,
    inserted: u64,
}

impl<V> Bounded<V> {
    fn new(cap: usize) -> Self {
        Bounded {
            entries: HashMap::new(),
            cap,
            inserted: 0,
        }
    }

    fn get(&self, key: &TokenKey, now: Instant) -> Option<&V> {
        self.entries
            .get(key)
            .filter(|(_, until, _)| *until > now)
            .map(|(v, _, _)| v)
    }

    fn remove(&mut self, key: &TokenKey) {
        self.entries.remove(key);
    }

    fn insert(&mut self, key: TokenKey, value: V, until: Instant, now: Instant) {
        if self.cap == 0 {
            return;
        }
        if !self.entries.contains_key(&key) && self.entries.len() >= self.cap {
            // O(cap), only when full: each insert follows a TokenReview call, which the
            // per-address and total review slots already pace.
            self.entries.retain(|_, (_, until, _)| *until > now);
            if self.entries.len() >= self.cap
                && let Some(soonest) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (_, until, n))| (*until, *n))
                    .map(|(k, _)| *k)
            {
                self.entries.remove(&soonest);
            }
        }
        self.inserted += 1;
        self.entries.insert(key, (value, until, self.inserted));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32) -> TokenKey {
        let mut k = [0u8; 32];
        k[..4].copy_from_slice(&n.to_be_bytes());
        k
    }

    fn pod(n: u32) -> Id {
        Id::new("k8s", format!("ns/sa/pod-{n}"))
    }

    #[test]
    fn junk_fills_only_the_refused_side() {
        let now = Instant::now();
        let mut cache = VerdictCache::new(4, 8);
        for n in 0..4 {
            cache.accept(key(n), pod(n), Duration::from_secs(3600), now);
        }
        // A flood of refused tokens, each with a far `exp`: the oldest refusals go, every
        // accepted verdict stays.
        for n in 100..10_100 {
            cache.refuse(key(n), Refusal::NotAuthenticated, now);
        }
        assert_eq!(cache.len(), (4, 8));
        for n in 0..4 {
            assert_eq!(cache.get(&key(n), now), Some(Remembered::Accepted(pod(n))));
        }
        assert_eq!(cache.get(&key(100), now), None, "the oldest refusal went");
        assert_eq!(
            cache.get(&key(10_099), now),
            Some(Remembered::Refused(Refusal::NotAuthenticated))
        );
    }

    #[test]
    fn no_verdict_outlives_its_cap() {
        let now = Instant::now();
        let mut cache = VerdictCache::new(4, 4);
        cache.accept(key(1), pod(1), Duration::from_secs(86_400 * 365), now);
        cache.accept(key(2), pod(2), Duration::from_secs(10), now);
        cache.refuse(key(3), Refusal::NotAuthenticated, now);
        let later = |d: Duration| now + d + Duration::from_millis(1);
        assert!(
            cache
                .get(&key(1), later(MAX_TRUST - Duration::from_secs(1)))
                .is_some()
        );
        assert_eq!(cache.get(&key(1), later(MAX_TRUST)), None);
        assert_eq!(cache.get(&key(2), later(Duration::from_secs(10))), None);
        assert!(cache.get(&key(3), now).is_some());
        assert_eq!(cache.get(&key(3), later(REFUSED_TTL)), None);
    }

    #[test]
    fn a_full_side_drops_the_expired_then_the_soonest_to_expire() {
        let now = Instant::now();
        let mut cache = VerdictCache::new(3, 1);
        cache.accept(key(1), pod(1), Duration::from_secs(60), now);
        cache.accept(key(2), pod(2), Duration::from_secs(5), now);
        cache.accept(key(3), pod(3), Duration::from_secs(90), now);
        cache.accept(key(4), pod(4), Duration::from_secs(90), now);
        assert_eq!(cache.get(&key(2), now), None, "the soonest to expire went");
        assert!(cache.get(&key(1), now).is_some() && cache.get(&key(4), now).is_some());
        // Once some have expired, they go first.
        let later = now + Duration::from_secs(61);
        cache.accept(key(5), pod(5), Duration::from_secs(5), later);
        assert_eq!(cache.len(), (3, 0));
        assert!(cache.get(&key(3), later).is_some() && cache.get(&key(5), later).is_some());
    }

    #[test]
    fn a_new_verdict_replaces_the_other_side() {
        let now = Instant::now();
        let mut cache = VerdictCache::new(2, 2);
        cache.refuse(key(1), Refusal::NotAuthenticated, now);
        cache.accept(key(1), pod(1), Duration::from_secs(60), now);
        assert_eq!(cache.get(&key(1), now), Some(Remembered::Accepted(pod(1))));
        assert_eq!(cache.len(), (1, 0));
    }
}
