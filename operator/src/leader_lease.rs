//! Leader election through a `coordination.k8s.io/v1` Lease, so that two operator replicas
//! never reconcile at once: take the Lease when it is free or expired, renew it well before it
//! runs out, and stop (the process exits) the moment a renewal cannot be confirmed in time.
//! Every write carries the resourceVersion read, so two contenders cannot both win.

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

/// Whether `lease` is free for `identity` at `now`: unheld, held by `identity`, or expired.
pub fn can_take(lease: &Lease, identity: &str, now: Timestamp) -> bool {
    let Some(spec) = &lease.spec else {
        return true;
    };
    match spec.holder_identity.as_deref() {
        None | Some("") => true,
        Some(holder) if holder == identity => true,
        Some(_) => {
            let Some(renewed) = spec.renew_time.as_ref().map(|t| t.0) else {
                return true;
            };
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
            renewed.as_second().saturating_add(duration) < now.as_second()
        }
    }
}

/// Holds (or tries to hold) the Lease.
pub struct LeaderLease {
    api: Api<Lease>,
    config: LeaseConfig,
}

impl LeaderLease {
    /// A contender for the Lease `config.name` in `config.namespace`.
    pub fn new(client: kube::Client, config: LeaseConfig) -> Self {
        LeaderLease {
            api: Api::namespaced(client, &config.namespace),
            config,
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
        if !can_take(&lease, &self.config.identity, now) {
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

    fn lease(holder: &str, renewed: &str, secs: i32) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: renewed.parse().ok().map(MicroTime),
                lease_duration_seconds: Some(secs),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_lease_is_free_when_unheld_ours_or_expired() {
        let now: Timestamp = "2026-01-01T00:00:30Z".parse().expect("time");
        assert!(can_take(&Lease::default(), "a", now));
        assert!(can_take(&lease("a", "2026-01-01T00:00:29Z", 15), "a", now));
        assert!(!can_take(&lease("b", "2026-01-01T00:00:20Z", 15), "a", now));
        assert!(can_take(&lease("b", "2026-01-01T00:00:10Z", 15), "a", now));
    }
}
