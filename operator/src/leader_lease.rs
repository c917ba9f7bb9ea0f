//! Leader election through a `coordination.k8s.io/v1` Lease, so that two operator replicas
//! never reconcile at once: take the Lease when it is free or expired, renew it well before it
//! runs out, and stop (the process exits) the moment a renewal cannot be confirmed in time.
//! Every write carries the resourceVersion read, so two contenders cannot both win.
//!
//! Expiry is judged on the contender's own monotonic clock, as client-go does: another holder's
//! Lease has expired when its record (holder, renew time, version) has not changed for the
//! Lease's duration since this contender first saw it. Clocks of different nodes never meet.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;

/// Who may hold the Lease and for how long.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// How long a holder's claim lasts without renewal.
    pub duration: Duration,
    /// How often the holder renews and a candidate retries.
    pub retry: Duration,
}

/// Why the Lease could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("lease {name}: {source}")]
pub struct LeaseError {
    pub name: String,
    #[source]
    pub source: kube::Error,
}

/// Another holder's Lease record as this contender last saw it, and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sighting {
    record: String,
    since: Instant,
}

/// Whether `lease` is free for `identity`: unheld, held by `identity`, or held by another
/// whose record has not changed for its duration since `previous` first saw it. Returns the
/// sighting to remember for next time.
pub fn can_take(
    lease: &Lease,
    identity: &str,
    previous: Option<Sighting>,
    now: Instant,
) -> (bool, Option<Sighting>) {
    let Some(spec) = &lease.spec else {
        return (true, None);
    };
    match spec.holder_identity.as_deref() {
        None | Some("") => (true, None),
        Some(holder) if holder == identity => (true, None),
        Some(holder) => {
            let record = format!(
                "{holder}|{:?}|{}",
                spec.renew_time.as_ref().map(|t| t.0),
                lease.metadata.resource_version.as_deref().unwrap_or("")
            );
            let duration = Duration::from_secs(
                u64::try_from(spec.lease_duration_seconds.unwrap_or(15)).unwrap_or(15),
            );
            match previous {
                Some(seen) if seen.record == record => (
                    now.saturating_duration_since(seen.since) >= duration,
                    Some(seen),
                ),
                // A new record: the holder is alive as of now.
                _ => (false, Some(Sighting { record, since: now })),
            }
        }
    }
}

/// Holds (or tries to hold) the Lease.
pub struct LeaderLease {
    api: Api<Lease>,
    config: LeaseConfig,
    sighting: Mutex<Option<Sighting>>,
}

impl LeaderLease {
    /// A contender for the Lease `config.name` in `config.namespace`.
    pub fn new(client: kube::Client, config: LeaseConfig) -> Self {
        LeaderLease {
            api: Api::namespaced(client, &config.namespace),
            config,
            sighting: Mutex::new(None),
        }
    }

    /// One attempt to take or renew; `Ok(true)` when this replica holds the Lease now.
    pub async fn try_hold(&self) -> Result<bool, LeaseError> {
        let now = Timestamp::now();
        let err = |source| LeaseError {
            name: self.config.name.clone(),
            source,
        };
        let duration_secs = self.config.duration.as_secs().clamp(1, i32::MAX as u64) as i32;
        let Some(mut lease) = self.api.get_opt(&self.config.name).await.map_err(err)? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(duration_secs),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(err(e)),
            };
        };
        let free = match self.sighting.lock() {
            Ok(mut sighting) => {
                let (free, seen) = can_take(
                    &lease,
                    &self.config.identity,
                    sighting.take(),
                    Instant::now(),
                );
                *sighting = seen;
                free
            }
            Err(_) => false,
        };
        if !free {
            return Ok(false);
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            spec.holder_identity = Some(self.config.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(duration_secs);
        // `replace` sends the resourceVersion we read: a concurrent writer makes this a 409.
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(err(e)),
        }
    }

    /// Returns once this replica holds the Lease.
    pub async fn acquire(&self) {
        loop {
            match self.try_hold().await {
                Ok(true) => return,
                Ok(false) => tracing::debug!(lease = %self.config.name, "another replica leads"),
                Err(e) => tracing::warn!(error = %e, "cannot take the leader lease"),
            }
            tokio::time::sleep(self.config.retry).await;
        }
    }

    /// Gives the Lease up if this replica holds it, so another can take over at once instead
    /// of after the Lease's duration (called on shutdown, after reconciling has stopped).
    pub async fn release(&self) -> Result<(), LeaseError> {
        let err = |source| LeaseError {
            name: self.config.name.clone(),
            source,
        };
        let Some(mut lease) = self.api.get_opt(&self.config.name).await.map_err(err)? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        spec.acquire_time = None;
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            // Someone else wrote it meanwhile: then it is not ours to give up any more.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(err(e)),
        }
    }

    /// Renews until a renewal has not succeeded for two thirds of the Lease's duration, then
    /// returns: the caller must stop reconciling before another replica may take over.
    pub async fn hold(&self) {
        let margin = self.config.duration * 2 / 3;
        let mut last_renewed = Instant::now();
        loop {
            tokio::time::sleep(self.config.retry).await;
            match self.try_hold().await {
                Ok(true) => last_renewed = Instant::now(),
                Ok(false) => {
                    tracing::error!(lease = %self.config.name, "the leader lease was taken over");
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "cannot renew the leader lease"),
            }
            if last_renewed.elapsed() >= margin {
                tracing::error!(lease = %self.config.name, "leader lease not renewed in time");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, version: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_lease_is_free_when_unheld_ours_or_unchanged_for_its_duration() {
        let t0 = Instant::now();
        let later = |secs| t0 + Duration::from_secs(secs);
        assert!(can_take(&Lease::default(), "a", None, t0).0);
        assert!(can_take(&lease("a", "1"), "a", None, t0).0);
        // Another holder: first seen now, so alive now.
        let (free, seen) = can_take(&lease("b", "1"), "a", None, t0);
        assert!(!free);
        let (free, seen) = can_take(&lease("b", "1"), "a", seen, later(10));
        assert!(!free, "unchanged for 10 s of 15");
        // It renewed: the clock starts again.
        let (free, seen) = can_take(&lease("b", "2"), "a", seen, later(14));
        assert!(!free);
        let (free, seen) = can_take(&lease("b", "2"), "a", seen, later(20));
        assert!(!free, "unchanged for 6 s since the renewal was seen");
        let (free, _) = can_take(&lease("b", "2"), "a", seen, later(29));
        assert!(free, "unchanged for 15 s: expired");
    }
}
