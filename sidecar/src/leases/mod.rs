//! Locks taken over HTTP: they belong to the application, not to the sidecar, so each has a
//! lease (`ttl`) and the sidecar releases it when the lease runs out, or is bound to the app's
//! connection (`hold=stream`) and released when that connection closes (DESIGN.md §2).
//!
//! Every grant has a guard task that notices a lost session (the grant is gone with it) and a
//! lease running out. However a grant ends, the table publishes it on the [`EventHub`]
//! (`released` or `lost`) and tells a stream hold's task, which ends the stream with it.
//!
//! One entry per lock name per pod: a second acquisition of a name this pod holds or is
//! acquiring is refused (locks are not reentrant). Renew and release name the grant's fencing
//! token: the workers of one pod share its sidecar, and a worker whose lease ran out must not
//! renew or release the grant another worker has taken since (DESIGN.md §4).
//!
//! The table and its entries are in `table`, each grant's guard task in `guard`, and what is
//! particular to stream holds in `stream`; this module holds what the API answers with.
//!
//! [`EventHub`]: crate::events::EventHub

mod guard;
mod stream;
mod table;

use std::time::{Duration, SystemTime};

use crate::recipe::timestamp::rfc3339;
use crate::recipe::{LockMode, RecipeError, ResourceName};

pub use stream::StreamHold;
pub use table::LockTable;

/// How the application holds a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldKind {
    /// A lease (`ttl`): renewed by the app, released by the sidecar when it runs out.
    Lease,
    /// Bound to the app's connection (`hold=stream`): released when that connection closes.
    Stream,
}

impl HoldKind {
    /// The name used in JSON answers.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldKind::Lease => "lease",
            HoldKind::Stream => "stream",
        }
    }
}

/// What the application holds: the answer to acquire and renew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub lock: ResourceName,
    pub mode: LockMode,
    pub token: i64,
    pub hold: HoldKind,
    /// When a lease runs out; `None` for a stream hold.
    pub expires_at: Option<SystemTime>,
    /// Until when the app may act on the grant without the sidecar hearing from the ensemble
    /// again: the session's bound ([`SessionHandle::valid_until`]), and no later than the
    /// lease. `None` unless the grant certainly holds now (session CONNECTED).
    ///
    /// [`SessionHandle::valid_until`]: crate::recipe::SessionHandle::valid_until
    pub valid_until: Option<SystemTime>,
    /// A semaphore permit's count (`mode` is `permit`); `None` for a lock.
    pub permits: Option<u32>,
}

impl Lease {
    /// The JSON of a grant: `{lock, mode, token, hold, expiresAt, validUntil}`.
    /// A semaphore permit says `semaphore` (and `permits`) instead of `lock`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut json = serde_json::json!({
            "lock": self.lock,
            "mode": self.mode,
            "token": self.token,
            "hold": self.hold.as_str(),
            "expiresAt": self.expires_at.map(rfc3339),
            "validUntil": self.valid_until.map(rfc3339),
        });
        self.name_semaphore(&mut json);
        json
    }

    /// Renames `lock` to `semaphore` and adds `permits` in a semaphore permit's JSON.
    fn name_semaphore(&self, json: &mut serde_json::Value) {
        if let (Some(permits), Some(object)) = (self.permits, json.as_object_mut())
            && let Some(name) = object.remove("lock")
        {
            object.insert("semaphore".to_owned(), name);
            object.insert("permits".to_owned(), permits.into());
        }
    }
}

/// How a grant ended, as the `released` or `lost` event (and a stream hold's last event)
/// says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Let go on purpose: `released` (DELETE), `lease ran out`, `stream closed`, `shutdown`.
    Released(&'static str),
    /// Taken away: `session lost`, `app unhealthy`.
    Lost(&'static str),
}

impl Ending {
    /// The event name: `released` or `lost`.
    pub fn event(self) -> &'static str {
        match self {
            Ending::Released(_) => "released",
            Ending::Lost(_) => "lost",
        }
    }

    /// Why, in a few words.
    pub fn reason(self) -> &'static str {
        match self {
            Ending::Released(why) | Ending::Lost(why) => why,
        }
    }

    /// The event's JSON: `{lock, mode, token, hold, reason}`.
    pub fn to_json(self, lease: &Lease) -> serde_json::Value {
        let mut json = serde_json::json!({
            "lock": lease.lock,
            "mode": lease.mode,
            "token": lease.token,
            "hold": lease.hold.as_str(),
            "reason": self.reason(),
        });
        lease.name_semaphore(&mut json);
        json
    }
}

/// Why a lease operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("this pod already holds lock {lock} (token {token}); renew or release it")]
    AlreadyHeld { lock: ResourceName, token: i64 },
    #[error("this pod is already acquiring lock {lock}")]
    AcquireInProgress { lock: ResourceName },
    #[error("lock {lock} was not granted within wait={}", baton_duration::format(*.waited))]
    NotGranted {
        lock: ResourceName,
        waited: Duration,
    },
    #[error(
        "semaphore {lock}: this request asks for permits={ours}, a pod queued on it for permits={theirs}; every pod must use the same count"
    )]
    PermitsMismatch {
        lock: ResourceName,
        ours: u32,
        theirs: u32,
    },
    #[error("this pod does not hold lock {lock} (never taken, released, or its lease ran out)")]
    NotHeld { lock: ResourceName },
    #[error(
        "token {given} is not the current grant of lock {lock}: that grant ended (released, or its lease ran out) and the lock was granted again since; acquire it again"
    )]
    StaleToken { lock: ResourceName, given: i64 },
    #[error("lock {lock} was lost with the session (or its node was deleted); acquire it again")]
    Lost { lock: ResourceName },
    #[error(
        "lock {lock} is held by a stream (hold=stream): it lasts as long as that connection, there is no lease to renew"
    )]
    StreamHold { lock: ResourceName },
    #[error(
        "the application is failing its health checks (--app-health): no new locks until it is healthy"
    )]
    AppUnhealthy,
    #[error(transparent)]
    Recipe(RecipeError),
}
