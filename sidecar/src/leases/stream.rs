//! Stream holds (`hold=stream`): a grant bound to the app's connection rather than a lease.

use std::time::Duration;

use tokio::sync::oneshot;

use super::{Ending, Lease, LeaseError, LockTable};
use crate::recipe::{LockMode, ResourceName};

/// What a stream hold's task gets: the grant, and how it ended once it does.
pub struct StreamHold {
    pub lease: Lease,
    pub ended: oneshot::Receiver<Ending>,
}

impl LockTable {
    /// Acquires `lock` in `mode`, waiting up to `wait`, held until
    /// [`Self::release_stream`] (the app's connection closed) or until it is lost, released
    /// or the sidecar stops: [`StreamHold::ended`] says which.
    pub async fn acquire_stream(
        &self,
        lock: &ResourceName,
        mode: LockMode,
        wait: Duration,
    ) -> Result<StreamHold, LeaseError> {
        let (lease, ended) = self.acquire_as(lock, mode, wait, None, None).await?;
        match ended {
            Some(ended) => Ok(StreamHold { lease, ended }),
            None => Err(LeaseError::NotHeld { lock: lock.clone() }),
        }
    }

    /// Releases stream hold `token` of `lock` because its stream closed (nothing if it ended
    /// otherwise already).
    pub async fn release_stream(&self, lock: &ResourceName, token: i64) {
        let Some(held) = self.inner.take(lock, token) else {
            return;
        };
        let grant = self.inner.end(held, Ending::Released("stream closed"));
        if let Err(e) = grant.release(self.inner.release_bound()).await {
            tracing::warn!(lock = %lock, error = %e, "lock node not deleted yet; deletion continues");
        }
    }
}
