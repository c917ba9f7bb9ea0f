//! Kubernetes-visible elections: while this pod leads an election, it mirrors the term into the
//! `coordination.k8s.io/v1` Lease `baton-<election>` of its namespace (holderIdentity = the
//! pod, acquireTime = the term's start, renewTime, leaseTransitions, leaseDurationSeconds = the
//! session timeout, the fencing token as the annotation `baton.dev/fencing-token`), renewed every
//! third of the duration, and released (holderIdentity cleared) when it steps down, so
//! `kubectl get lease` shows who leads (DESIGN.md §2, Pod view).
//!
//! The Lease is a mirror, not the election: Baton decides who leads, the Lease only reports
//! it. Writes are a read then a create or an update with the read `resourceVersion`, so two
//! sidecars racing through a hand-over never overwrite each other blindly, and a sidecar that
//! stepped down clears the holder only while the Lease still names it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{FENCING_TOKEN_ANNOTATION, any_changed, stopped};
use crate::recipe::ElectionRecipe;

/// Prefix of every mirrored Lease's name.
pub const LEASE_PREFIX: &str = "baton-";

/// The Lease mirroring `election`, when `baton-<election>` is a valid object name (a DNS
/// subdomain: at most 253 characters, dot-separated parts of lowercase letters, digits and
/// `-`, each alphanumeric at both ends: the API server refuses `baton-a.-b` and `baton-a..b`).
pub fn lease_name(election: &str) -> Option<String> {
    let name = format!("{LEASE_PREFIX}{election}");
    let alphanumeric =
        |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let valid = name.len() <= 253
        && name.split('.').all(|part| {
            part.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && alphanumeric(part.chars().next())
                && alphanumeric(part.chars().last())
        });
    valid.then_some(name)
}

/// Writes this pod's Leases through the Kubernetes API.
#[derive(Clone)]
pub struct LeaseMirror {
    leases: Api<Lease>,
    holder: String,
    duration: Duration,
}

impl LeaseMirror {
    /// Leases in `namespace` held as `pod`, for `duration` (the session timeout).
    pub fn new(client: kube::Client, namespace: &str, pod: &str, duration: Duration) -> Self {
        LeaseMirror {
            leases: Api::namespaced(client, namespace),
            holder: pod.to_owned(),
            duration,
        }
    }

    /// How often a held Lease is renewed: a third of its duration.
    pub fn renew_every(&self) -> Duration {
        (self.duration / 3).max(Duration::from_millis(100))
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.duration.as_secs_f64().ceil() as u64)
            .unwrap_or(i32::MAX)
            .max(1)
    }

    /// Records this pod as the holder of `name` for the term that began at `since` (RFC
    /// 3339, the election's) with fencing token `token`.
    pub async fn hold(&self, name: &str, token: i64, since: &str) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let acquired = since.parse::<Timestamp>().unwrap_or(now);
        let current = self.leases.get_opt(name).await?;
        let mut lease = current.clone().unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            spec: None,
        });
        let mut spec = lease.spec.take().unwrap_or_default();
        let ours = spec.holder_identity.as_deref() == Some(self.holder.as_str());
        if !ours && current.is_some() {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        let token_text = token.to_string();
        let annotations = lease.metadata.annotations.get_or_insert_default();
        let same_term = ours
            && annotations
                .get(FENCING_TOKEN_ANNOTATION)
                .map(String::as_str)
                == Some(token_text.as_str());
        annotations.insert(FENCING_TOKEN_ANNOTATION.to_owned(), token_text);
        if !same_term || spec.acquire_time.is_none() {
            spec.acquire_time = Some(MicroTime(acquired));
        }
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.holder.clone()),
            lease_duration_seconds: Some(self.duration_seconds()),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(spec.lease_transitions.unwrap_or(0)),
            ..spec
        });
        let params = PostParams {
            field_manager: Some(super::FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        match current {
            None => self.leases.create(&params, &lease).await.map(drop),
            Some(_) => self.leases.replace(name, &params, &lease).await.map(drop),
        }
    }

    /// Clears the holder of `name` (and the token) if it is still this pod.
    pub async fn release(&self, name: &str) -> Result<(), kube::Error> {
        let Some(mut lease) = self.leases.get_opt(name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.holder.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        if let Some(annotations) = lease.metadata.annotations.as_mut() {
            annotations.remove(FENCING_TOKEN_ANNOTATION);
        }
        let params = PostParams {
            field_manager: Some(super::FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        self.leases.replace(name, &params, &lease).await.map(drop)
    }
}

/// Says what a Lease error means for whoever reads the log.
fn explain(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if status.code == 403 => format!(
            "forbidden: the pod's service account needs get, create and update on leases \
             (coordination.k8s.io) in its namespace (the chart grants them with \
             sidecarRbac.leases=true, off by default): {}",
            status.message
        ),
        kube::Error::Api(status) if status.code == 409 => {
            "changed meanwhile (another sidecar's write); retrying".to_owned()
        }
        other => other.to_string(),
    }
}

/// What this pod last wrote for one election.
#[derive(Clone, Copy)]
struct Held {
    token: i64,
    /// When the next write is due (renewal, or a retry after an error).
    due: Instant,
}

/// Mirrors the elections this pod leads into Leases until `stop` is set, then makes one last
/// pass (after the resign at shutdown, which releases them).
pub async fn run_lease_mirror(
    elections: Vec<ElectionRecipe>,
    mirror: Arc<LeaseMirror>,
    mut stop: watch::Receiver<bool>,
) {
    let names: Vec<Option<String>> = elections
        .iter()
        .map(|e| {
            let view = e.view();
            let name = lease_name(view.election.as_str());
            if name.is_none() {
                tracing::warn!(election = %view.election.as_str(),
                    "no Lease mirror: baton-<election> is not a valid Kubernetes name");
            }
            name
        })
        .collect();
    if names.iter().all(Option::is_none) {
        return;
    }
    let mut receivers: Vec<_> = elections.iter().map(ElectionRecipe::subscribe).collect();
    let mut open = vec![true; receivers.len()];
    // `Some`: this pod wrote itself as the holder (and must release).
    let mut held: Vec<Option<Held>> = vec![None; elections.len()];
    // A failed release is retried at this time.
    let mut release_retry: Vec<Option<Instant>> = vec![None; elections.len()];
    let retry = Duration::from_secs(1);
    loop {
        let now = Instant::now();
        let final_pass = *stop.borrow();
        for (i, election) in elections.iter().enumerate() {
            let Some(name) = &names[i] else { continue };
            let view = election.view();
            let leading = view.leader.as_ref().filter(|_| view.is_leader);
            match leading {
                Some(leader) if !final_pass => {
                    let token = leader.token;
                    let due = held[i].is_none_or(|h| h.token != token || h.due <= now);
                    if !due {
                        continue;
                    }
                    match mirror.hold(name, token, &leader.since).await {
                        Ok(()) => {
                            tracing::debug!(lease = %name, token, "Lease renewed");
                            held[i] = Some(Held {
                                token,
                                due: Instant::now() + mirror.renew_every(),
                            });
                            // A release that failed in an earlier term is moot: this term's
                            // release must not wait for its retry time.
                            release_retry[i] = None;
                        }
                        Err(e) => {
                            tracing::warn!(lease = %name, error = %explain(&e), "Lease not updated");
                            held[i] = Some(Held {
                                token,
                                due: Instant::now() + retry,
                            });
                        }
                    }
                }
                _ => {
                    // The final pass is the last chance: no waiting for a retry time.
                    let waiting = !final_pass && release_retry[i].is_some_and(|t| t > now);
                    if held[i].is_none() || waiting {
                        continue;
                    }
                    match mirror.release(name).await {
                        Ok(()) => {
                            tracing::debug!(lease = %name, "Lease released");
                            held[i] = None;
                            release_retry[i] = None;
                        }
                        Err(e) => {
                            tracing::warn!(lease = %name, error = %explain(&e), "Lease not released");
                            release_retry[i] = Some(Instant::now() + retry);
                        }
                    }
                }
            }
        }
        if final_pass {
            return;
        }
        let next = held
            .iter()
            .flatten()
            .map(|h| h.due)
            .chain(release_retry.iter().flatten().copied())
            .min();
        let wake = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = any_changed(&mut receivers, &mut open) => {}
            _ = wake => {}
            _ = stopped(&mut stop) => {}
        }
    }
}
