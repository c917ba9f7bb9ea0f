//! The table of this pod's HTTP-owned grants: one slot per lock name, acquiring, renewing,
//! releasing and ending them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::guard::guard_grant;
use super::{Ending, HoldKind, Lease, LeaseError};
use crate::events::EventHub;
use crate::metrics::Metrics;
use crate::recipe::{
    ConnectionState, LockError, LockGrant, LockMode, LockRecipe, RecipeError, ResourceName,
    SessionHandle,
};

/// The HTTP-owned locks of this pod.
#[derive(Clone)]
pub struct LockTable {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) session: SessionHandle,
    identity: String,
    pub(super) metrics: Arc<Metrics>,
    events: EventHub,
    /// False while the app fails its health checks: acquisitions are refused.
    accepting: AtomicBool,
    slots: Mutex<HashMap<ResourceName, Slot>>,
    /// The lock table's semaphore permits, a table of their own (names apart from locks');
    /// `None` in that table itself.
    semaphores: Option<LockTable>,
}

pub(super) enum Slot {
    Acquiring,
    Held(Box<Held>),
}

/// A lease's clock; stream holds have none.
pub(super) struct LeaseClock {
    ttl: Duration,
    pub(super) deadline: Instant,
    expires_at: SystemTime,
}

pub(super) struct Held {
    /// Distinguishes this grant from a later one of the same name (for the guard task).
    pub(super) token: i64,
    grant: LockGrant,
    /// `None`: a stream hold.
    pub(super) lease: Option<LeaseClock>,
    /// A stream hold's task, told how the grant ended.
    ended: Option<oneshot::Sender<Ending>>,
}

impl Held {
    fn lease(&self) -> Lease {
        let expires_at = self.lease.as_ref().map(|l| l.expires_at);
        let valid_until = self
            .grant
            .valid_until()
            .map(|v| expires_at.map_or(v, |e| v.min(e)));
        Lease {
            lock: self.grant.name().clone(),
            mode: self.grant.mode(),
            token: self.token,
            hold: if self.lease.is_some() {
                HoldKind::Lease
            } else {
                HoldKind::Stream
            },
            expires_at,
            valid_until,
            permits: self.grant.permits(),
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
    pub(super) fn slots(&self) -> MutexGuard<'_, HashMap<ResourceName, Slot>> {
        // A panic elsewhere while holding the lock must not take the API down with it.
        self.slots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn release_bound(&self) -> Duration {
        self.session.session_timeout()
    }

    /// Takes grant `token` of `lock` out of the table, if it is still there.
    pub(super) fn take(&self, lock: &ResourceName, token: i64) -> Option<Box<Held>> {
        let mut slots = self.slots();
        match slots.get(lock) {
            Some(Slot::Held(h)) if h.token == token => match slots.remove(lock) {
                Some(Slot::Held(h)) => Some(h),
                _ => None,
            },
            _ => None,
        }
    }

    /// Accounts for a grant taken out of the table: metrics, the log, the event, and the
    /// stream hold's task. Returns the grant for the caller to release.
    pub(super) fn end(&self, mut held: Box<Held>, ending: Ending) -> LockGrant {
        let ended = held.ended.take();
        let lease = held.lease();
        let token = held.token;
        self.metrics.locks_held.dec();
        match ending {
            Ending::Released(why) => {
                tracing::info!(lock = %lease.lock, token, hold = lease.hold.as_str(), why, "lock released")
            }
            Ending::Lost(why) => {
                tracing::warn!(lock = %lease.lock, token, hold = lease.hold.as_str(), why, "lock lost")
            }
        }
        self.events.publish(ending.event(), ending.to_json(&lease));
        if let Some(ended) = ended {
            let _ = ended.send(ending);
        }
        let Held { grant, .. } = *held;
        grant
    }
}

impl LockTable {
    /// An empty table acting as `identity` on `session`, publishing on a hub of its own.
    pub fn new(session: SessionHandle, identity: String, metrics: Arc<Metrics>) -> Self {
        Self::with_events(session, identity, metrics, EventHub::new())
    }

    /// An empty table publishing grants, losses and releases on `events`.
    pub fn with_events(
        session: SessionHandle,
        identity: String,
        metrics: Arc<Metrics>,
        events: EventHub,
    ) -> Self {
        let semaphores = Self::table(
            session.clone(),
            identity.clone(),
            metrics.clone(),
            events.clone(),
            None,
        );
        Self::table(session, identity, metrics, events, Some(semaphores))
    }

    fn table(
        session: SessionHandle,
        identity: String,
        metrics: Arc<Metrics>,
        events: EventHub,
        semaphores: Option<LockTable>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                session,
                identity,
                metrics,
                events,
                accepting: AtomicBool::new(true),
                slots: Mutex::new(HashMap::new()),
                semaphores,
            }),
        }
    }

    /// The semaphore permits this pod holds over HTTP: renew, release and `held` by name there;
    /// acquire with [`Self::acquire_permit`]. The table itself for the semaphore table.
    pub fn semaphores(&self) -> &LockTable {
        self.inner.semaphores.as_ref().unwrap_or(self)
    }

    /// Acquires one of `permits` permits of semaphore `name`, waiting up to `wait`; `ttl`:
    /// a lease, `None`: a stream hold (then the receiver says how it ended).
    pub async fn acquire_permit(
        &self,
        name: &ResourceName,
        permits: u32,
        wait: Duration,
        ttl: Option<Duration>,
    ) -> Result<(Lease, Option<oneshot::Receiver<Ending>>), LeaseError> {
        self.semaphores()
            .acquire_as(name, LockMode::Permit, wait, ttl, Some(permits))
            .await
    }

    /// The hub this table publishes on (and the API's `/events` reads).
    pub fn events(&self) -> &EventHub {
        &self.inner.events
    }

    /// The session the locks are taken on.
    pub fn session(&self) -> &SessionHandle {
        &self.inner.session
    }

    /// Acquires `lock` in `mode`, waiting up to `wait`; the lease then runs for `ttl`.
    pub async fn acquire(
        &self,
        lock: &ResourceName,
        mode: LockMode,
        wait: Duration,
        ttl: Duration,
    ) -> Result<Lease, LeaseError> {
        self.acquire_as(lock, mode, wait, Some(ttl), None)
            .await
            .map(|(lease, _)| lease)
    }

    pub(super) async fn acquire_as(
        &self,
        lock: &ResourceName,
        mode: LockMode,
        wait: Duration,
        ttl: Option<Duration>,
        permits: Option<u32>,
    ) -> Result<(Lease, Option<oneshot::Receiver<Ending>>), LeaseError> {
        let inner = &self.inner;
        if !inner.accepting.load(Ordering::SeqCst) {
            inner.metrics.lock_outcome("refused");
            return Err(LeaseError::AppUnhealthy);
        }
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
                // A grant from a lost session is gone already; its guard task reports it.
                Some(Slot::Held(_)) | None => {}
            }
            if let Some(Slot::Held(stale)) = slots.insert(lock.clone(), Slot::Acquiring) {
                drop(slots);
                drop(inner.end(stale, Ending::Lost("session lost")));
            }
        }
        let mut guard = SlotGuard {
            table: inner,
            lock,
            armed: true,
        };
        let (session, identity) = (inner.session.clone(), inner.identity.clone());
        let recipe = match permits {
            Some(permits) => LockRecipe::semaphore(session, lock.clone(), identity, permits),
            None => LockRecipe::new(session, lock.clone(), identity),
        };
        let grant = match recipe.acquire(mode, wait, None).await {
            Ok(grant) => grant,
            Err(LockError::NotGranted { waited }) => {
                inner.metrics.lock_outcome("not_granted");
                return Err(LeaseError::NotGranted {
                    lock: lock.clone(),
                    waited,
                });
            }
            Err(LockError::PermitsMismatch { ours, theirs, .. }) => {
                inner.metrics.lock_outcome("error");
                return Err(LeaseError::PermitsMismatch {
                    lock: lock.clone(),
                    ours,
                    theirs,
                });
            }
            Err(LockError::Recipe(e)) => {
                inner.metrics.lock_outcome("error");
                return Err(LeaseError::Recipe(e));
            }
        };
        let clock = ttl.map(|ttl| LeaseClock {
            ttl,
            deadline: Instant::now() + ttl,
            expires_at: SystemTime::now() + ttl,
        });
        // For observers (GET /lock on other pods); the lease is enforced here, not by the data.
        if let Some(clock) = &clock
            && let Err(e) = grant.set_lease(clock.expires_at).await
        {
            tracing::warn!(lock = %lock, error = %e, "could not record the lease in the lock node");
        }
        let (ended_tx, ended_rx) = match clock {
            Some(_) => (None, None),
            None => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
        };
        let generation = grant.generation();
        let held = Held {
            token: grant.token(),
            grant,
            lease: clock,
            ended: ended_tx,
        };
        let lease = held.lease();
        inner
            .slots()
            .insert(lock.clone(), Slot::Held(Box::new(held)));
        guard.armed = false;
        inner.metrics.lock_outcome("granted");
        inner.metrics.locks_held.inc();
        tokio::spawn(guard_grant(
            self.inner.clone(),
            lock.clone(),
            lease.token,
            generation,
        ));
        tracing::info!(lock = %lock, mode = mode.as_str(), token = lease.token, hold = lease.hold.as_str(),
            ttl_ms = ttl.map(|t| t.as_millis() as u64), "lock granted");
        inner.events.publish("granted", lease.to_json());
        Ok((lease, ended_rx))
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
            let Some(clock) = held.lease.as_mut() else {
                return Err(LeaseError::StreamHold { lock: lock.clone() });
            };
            let ttl = ttl.unwrap_or(clock.ttl);
            clock.ttl = ttl;
            clock.deadline = Instant::now() + ttl;
            clock.expires_at = SystemTime::now() + ttl;
            held.lease()
        };
        if let Some(expires_at) = lease.expires_at {
            self.record_lease(lock, lease.token, expires_at).await;
        }
        Ok(lease)
    }

    /// Releases grant `token` of `lock` (a lease, or a stream hold, whose stream then ends);
    /// the node is deleted before this returns unless the session is down, in which case
    /// deletion finishes in the background (or the node dies with the session).
    pub async fn release(&self, lock: &ResourceName, token: i64) -> Result<(), LeaseError> {
        let held = {
            let mut slots = self.inner.slots();
            self.usable(&mut slots, lock, token)?;
            match slots.remove(lock) {
                Some(Slot::Held(held)) => held,
                _ => return Err(LeaseError::NotHeld { lock: lock.clone() }),
            }
        };
        let grant = self.inner.end(held, Ending::Released("released"));
        if let Err(e) = grant.release(self.inner.release_bound()).await {
            tracing::warn!(lock = %lock, error = %e, "lock node not deleted yet; deletion continues");
        }
        Ok(())
    }

    /// The grant this pod holds on `lock`, if its session is connected and current.
    pub fn held(&self, lock: &ResourceName) -> Option<Lease> {
        match self.inner.slots().get(lock) {
            Some(Slot::Held(held)) if held.grant.is_held() => Some(held.lease()),
            _ => None,
        }
    }

    /// Releases every held lock at once (SIGTERM), waiting at most `bound` for the deletes.
    pub async fn release_all(&self, bound: Duration) {
        self.end_all(bound, Ending::Released("shutdown")).await;
    }

    /// Refuses (false) or accepts (true) new acquisitions: false while the app is unhealthy.
    pub fn set_accepting(&self, accepting: bool) {
        self.inner.accepting.store(accepting, Ordering::SeqCst);
        if let Some(semaphores) = &self.inner.semaphores {
            semaphores.set_accepting(accepting);
        }
    }

    /// Ends every held lock with `ending` (published as its event, told to its stream),
    /// deleting the nodes and waiting at most `bound` for that.
    pub async fn end_all(&self, bound: Duration, ending: Ending) {
        if let Some(semaphores) = &self.inner.semaphores {
            Box::pin(semaphores.end_all(bound, ending)).await;
        }
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
            let grant = self.inner.end(h, ending);
            releases.spawn(async move {
                let name = grant.name().clone();
                (name, grant.release(bound).await)
            });
        }
        while let Some(done) = releases.join_next().await {
            if let Ok((name, Err(e))) = done {
                tracing::warn!(lock = %name, error = %e, "lock not released cleanly");
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
        // A grant of an earlier session is gone, and so is one of this session once it is LOST:
        // between the expiry and the next session the generation has not moved yet, and a
        // release or renew answered then would claim a grant another pod may already hold.
        let session = self.inner.session.snapshot();
        let ended = |generation: u64| {
            generation != session.generation || session.state == ConnectionState::Lost
        };
        let lost = matches!(slots.get(lock), Some(Slot::Held(h)) if ended(h.grant.generation()));
        if lost {
            if let Some(Slot::Held(h)) = slots.remove(lock) {
                drop(self.inner.end(h, Ending::Lost("session lost")));
            }
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
