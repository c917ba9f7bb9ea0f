//! Locks taken over HTTP: they belong to the application, not to the sidecar, so each has a
//! lease (`ttl`) and the sidecar releases it when the lease runs out (DESIGN.md §2).
//!
//! One entry per lock name per pod: a second acquisition of a name this pod holds or is
//! acquiring is refused (locks are not reentrant). Renew and release name the grant's fencing
//! token: the workers of one pod share its sidecar, and a worker whose lease ran out must not
//! renew or release the grant another worker has taken since (DESIGN.md §4).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::duration::format_duration;
use crate::metrics::Metrics;
use crate::recipe::{
    LockError, LockGrant, LockMode, LockRecipe, RecipeError, ResourceName, SessionHandle,
};

/// What the application holds: the answer to acquire and renew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub lock: ResourceName,
    pub mode: LockMode,
    pub token: i64,
    pub expires_at: SystemTime,
}

/// Why a lease operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("this pod already holds lock {lock} (token {token}); renew or release it")]
    AlreadyHeld { lock: ResourceName, token: i64 },
    #[error("this pod is already acquiring lock {lock}")]
    AcquireInProgress { lock: ResourceName },
    #[error("lock {lock} was not granted within wait={}", format_duration(*.waited))]
    NotGranted {
        lock: ResourceName,
        waited: Duration,
    },
    #[error("this pod does not hold lock {lock} (never taken, released, or its lease ran out)")]
    NotHeld { lock: ResourceName },
    #[error(
        "token {given} is not the current grant of lock {lock}: that grant ended (released, or its lease ran out) and the lock was granted again since; acquire it again"
    )]
    StaleToken { lock: ResourceName, given: i64 },
    #[error("lock {lock} was lost with the session (or its node was deleted); acquire it again")]
    Lost { lock: ResourceName },
    #[error(transparent)]
    Recipe(RecipeError),
}

/// The HTTP-owned locks of this pod.
#[derive(Clone)]
pub struct LockTable {
    inner: Arc<Inner>,
}

struct Inner {
    session: SessionHandle,
    identity: String,
    metrics: Arc<Metrics>,
    slots: Mutex<HashMap<ResourceName, Slot>>,
}

enum Slot {
    Acquiring,
    Held(Box<Held>),
}

struct Held {
    /// Distinguishes this grant from a later one of the same name (for the reaper).
    token: i64,
    grant: LockGrant,
    ttl: Duration,
    deadline: Instant,
    expires_at: SystemTime,
}

impl Held {
    fn lease(&self) -> Lease {
        Lease {
            lock: self.grant.name().clone(),
            mode: self.grant.mode(),
            token: self.token,
            expires_at: self.expires_at,
        }
    }
}

/// Frees an `Acquiring` slot if the acquisition is abandoned (e.g. the HTTP client hung up).
struct SlotGuard<'a> {
    table: &'a Inner,
    lock: &'a ResourceName,
    armed: bool,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut slots = self.table.slots();
            if matches!(slots.get(self.lock), Some(Slot::Acquiring)) {
                slots.remove(self.lock);
            }
        }
    }
}

impl Inner {
    fn slots(&self) -> MutexGuard<'_, HashMap<ResourceName, Slot>> {
        // A panic elsewhere while holding the lock must not take the API down with it.
        self.slots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn release_bound(&self) -> Duration {
        self.session.session_timeout()
    }
}

impl LockTable {
    /// An empty table acting as `identity` on `session`.
    pub fn new(session: SessionHandle, identity: String, metrics: Arc<Metrics>) -> Self {
        Self {
            inner: Arc::new(Inner {
                session,
                identity,
                metrics,
                slots: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Acquires `lock` in `mode`, waiting up to `wait`; the lease then runs for `ttl`.
    pub async fn acquire(
        &self,
        lock: &ResourceName,
        mode: LockMode,
        wait: Duration,
        ttl: Duration,
    ) -> Result<Lease, LeaseError> {
        let inner = &self.inner;
        {
            let mut slots = inner.slots();
            match slots.get(lock) {
                Some(Slot::Held(held)) if held.grant.generation() == inner.session.generation() => {
                    inner.metrics.lock_outcome("busy");
                    return Err(LeaseError::AlreadyHeld {
                        lock: lock.clone(),
                        token: held.token,
                    });
                }
                Some(Slot::Acquiring) => {
                    inner.metrics.lock_outcome("busy");
                    return Err(LeaseError::AcquireInProgress { lock: lock.clone() });
                }
                // A grant from a lost session is gone already: forget it.
                Some(Slot::Held(_)) | None => {}
            }
            slots.insert(lock.clone(), Slot::Acquiring);
        }
        let mut guard = SlotGuard {
            table: inner,
            lock,
            armed: true,
        };
        let recipe = LockRecipe::new(inner.session.clone(), lock.clone(), inner.identity.clone());
        let grant = match recipe.acquire(mode, wait, None).await {
            Ok(grant) => grant,
            Err(LockError::NotGranted { waited }) => {
                inner.metrics.lock_outcome("not_granted");
                return Err(LeaseError::NotGranted {
                    lock: lock.clone(),
                    waited,
                });
            }
            Err(LockError::Recipe(e)) => {
                inner.metrics.lock_outcome("error");
                return Err(LeaseError::Recipe(e));
            }
        };
        let expires_at = SystemTime::now() + ttl;
        // For observers (GET /lock on other pods); the lease is enforced here, not by the data.
        if let Err(e) = grant.set_lease(expires_at).await {
            tracing::warn!(lock = %lock, error = %e, "could not record the lease in the lock node");
        }
        let held = Held {
            token: grant.token(),
            grant,
            ttl,
            deadline: Instant::now() + ttl,
            expires_at,
        };
        let lease = held.lease();
        inner
            .slots()
            .insert(lock.clone(), Slot::Held(Box::new(held)));
        guard.armed = false;
        inner.metrics.lock_outcome("granted");
        inner.metrics.locks_held.inc();
        tokio::spawn(reap(self.inner.clone(), lock.clone(), lease.token));
        tracing::info!(lock = %lock, mode = mode.as_str(), token = lease.token, ttl_ms = ttl.as_millis() as u64, "lock granted");
        Ok(lease)
    }

    /// Extends the lease of grant `token` of `lock` by `ttl` from now (default: the ttl it was
    /// taken with).
    pub async fn renew(
        &self,
        lock: &ResourceName,
        token: i64,
        ttl: Option<Duration>,
    ) -> Result<Lease, LeaseError> {
        let inner = &self.inner;
        let lease = {
            let mut slots = inner.slots();
            let held = self.usable(&mut slots, lock, token)?;
            if !held.grant.is_held() {
                return Err(LeaseError::Recipe(RecipeError::Suspended));
            }
            let ttl = ttl.unwrap_or(held.ttl);
            held.ttl = ttl;
            held.deadline = Instant::now() + ttl;
            held.expires_at = SystemTime::now() + ttl;
            held.lease()
        };
        self.record_lease(lock, lease.token, lease.expires_at).await;
        Ok(lease)
    }

    /// Releases grant `token` of `lock`; the node is deleted before this returns unless the
    /// session is down, in which case deletion finishes in the background (or the node dies
    /// with the session).
    pub async fn release(&self, lock: &ResourceName, token: i64) -> Result<(), LeaseError> {
        let held = {
            let mut slots = self.inner.slots();
            self.usable(&mut slots, lock, token)?;
            match slots.remove(lock) {
                Some(Slot::Held(held)) => held,
                _ => return Err(LeaseError::NotHeld { lock: lock.clone() }),
            }
        };
        self.inner.metrics.locks_held.dec();
        tracing::info!(lock = %lock, token = held.token, "lock released");
        if let Err(e) = held.grant.release(self.inner.release_bound()).await {
            tracing::warn!(lock = %lock, error = %e, "lock node not deleted yet; deletion continues");
        }
        Ok(())
    }

    /// The lease this pod holds on `lock`, if its session is connected and current.
    pub fn held(&self, lock: &ResourceName) -> Option<Lease> {
        match self.inner.slots().get(lock) {
            Some(Slot::Held(held)) if held.grant.is_held() => Some(held.lease()),
            _ => None,
        }
    }

    /// Releases every held lock at once (SIGTERM), waiting at most `bound` for the deletes.
    pub async fn release_all(&self, bound: Duration) {
        let held: Vec<Box<Held>> = {
            let mut slots = self.inner.slots();
            let names: Vec<_> = slots
                .iter()
                .filter(|(_, s)| matches!(s, Slot::Held(_)))
                .map(|(n, _)| n.clone())
                .collect();
            names
                .into_iter()
                .filter_map(|n| match slots.remove(&n) {
                    Some(Slot::Held(h)) => Some(h),
                    _ => None,
                })
                .collect()
        };
        let mut releases = JoinSet::new();
        for h in held {
            self.inner.metrics.locks_held.dec();
            releases.spawn(async move {
                let name = h.grant.name().clone();
                (name, h.grant.release(bound).await)
            });
        }
        while let Some(done) = releases.join_next().await {
            if let Ok((name, Err(e))) = done {
                tracing::warn!(lock = %name, error = %e, "lock not released cleanly at shutdown");
            }
        }
    }

    /// The held slot for grant `token` of `lock`, or why there is none (dropping a grant of a
    /// lost session).
    fn usable<'s>(
        &self,
        slots: &'s mut HashMap<ResourceName, Slot>,
        lock: &ResourceName,
        token: i64,
    ) -> Result<&'s mut Held, LeaseError> {
        let current = self.inner.session.generation();
        let lost =
            matches!(slots.get(lock), Some(Slot::Held(h)) if h.grant.generation() != current);
        if lost {
            slots.remove(lock);
            self.inner.metrics.locks_held.dec();
            return Err(LeaseError::Lost { lock: lock.clone() });
        }
        match slots.get_mut(lock) {
            Some(Slot::Held(held)) if held.token == token => Ok(held),
            Some(Slot::Held(_)) => Err(LeaseError::StaleToken {
                lock: lock.clone(),
                given: token,
            }),
            _ => Err(LeaseError::NotHeld { lock: lock.clone() }),
        }
    }

    async fn record_lease(&self, lock: &ResourceName, token: i64, expires_at: SystemTime) {
        // Hold no lock across the write: find the grant's path and client again after.
        let write = {
            let slots = self.inner.slots();
            match slots.get(lock) {
                Some(Slot::Held(h)) if h.token == token => Some(h.grant.lease_writer(expires_at)),
                _ => None,
            }
        };
        if let Some(write) = write
            && let Err(e) = write.await
        {
            tracing::warn!(lock = %lock, error = %e, "could not record the renewed lease in the lock node");
        }
    }
}

/// Releases `lock` when the lease of grant `token` runs out (renewals push the deadline).
async fn reap(inner: Arc<Inner>, lock: ResourceName, token: i64) {
    loop {
        let deadline = match inner.slots().get(&lock) {
            Some(Slot::Held(h)) if h.token == token => h.deadline,
            _ => return,
        };
        if Instant::now() < deadline {
            tokio::time::sleep_until(deadline).await;
            continue;
        }
        let expired = {
            let mut slots = inner.slots();
            match slots.get(&lock) {
                Some(Slot::Held(h)) if h.token == token && Instant::now() >= h.deadline => {
                    slots.remove(&lock)
                }
                _ => None,
            }
        };
        if let Some(Slot::Held(held)) = expired {
            inner.metrics.locks_held.dec();
            inner.metrics.lease_expirations.inc();
            tracing::warn!(lock = %lock, token, "lease ran out; releasing the lock");
            if let Err(e) = held.grant.release(inner.release_bound()).await {
                tracing::warn!(lock = %lock, error = %e, "expired lock node not deleted yet; deletion continues");
            }
        }
        return;
    }
}
