//! The pod view: this pod's role in each election, written to its own labels and annotations
//! so `kubectl get pods -l baton.dev/role=leader` and Service selectors work (DESIGN.md §2).
//!
//! What to write is a pure function of the election views ([`desired_metadata`]); how to
//! write it is a [`PodLabeler`]. Without `--pod/--namespace` the labeler does nothing; with
//! them, [`KubePodLabeler`] merge-patches the pod's metadata through the Kubernetes API.
//! With `--mirror-lease` too, [`run_lease_mirror`] writes each led election into the Lease
//! `baton-<election>`.

#[cfg(feature = "k8s")]
mod kubernetes;
#[cfg(feature = "k8s")]
mod lease;
// Without the `k8s` feature (baton-playground's build): no pod labels, no Leases.
#[cfg(not(feature = "k8s"))]
#[path = "lease_off.rs"]
mod lease;

#[cfg(feature = "k8s")]
pub use kubernetes::{FIELD_MANAGER, KubePodLabeler, merge_patch};
#[cfg(feature = "k8s")]
pub use lease::{LEASE_PREFIX, lease_name};
pub use lease::{LeaseMirror, run_lease_mirror};

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::recipe::{ElectionRecipe, ElectionView};

/// Label saying whether this pod leads (`leader`) or waits (`candidate`).
pub const ROLE_LABEL: &str = "baton.dev/role";
/// Annotation with the time the current term began (RFC 3339), while this pod leads.
pub const LEADER_SINCE_ANNOTATION: &str = "baton.dev/leader-since";
/// Annotation with the current term's fencing token, while this pod leads.
pub const FENCING_TOKEN_ANNOTATION: &str = "baton.dev/fencing-token";

/// One `baton.dev/*` key the sidecar writes (the documentation's "Annotations and labels" page
/// lists these with the operator's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodKey {
    pub key: &'static str,
    /// `label` or `annotation`.
    pub kind: &'static str,
    pub on: &'static str,
    pub values: &'static str,
    pub meaning: &'static str,
    /// Whether elections after the first have their own key, `<key>-<election>`.
    pub per_election: bool,
}

/// Every key the sidecar writes.
pub const POD_KEYS: &[PodKey] = &[
    PodKey {
        key: ROLE_LABEL,
        kind: "label",
        on: "its own Pod (with `--pod`)",
        values: "`leader`, `candidate`",
        meaning: "Whether this pod leads the election: `kubectl get pods -l \
                  baton.dev/role=leader` and a Service selector work.",
        per_election: true,
    },
    PodKey {
        key: LEADER_SINCE_ANNOTATION,
        kind: "annotation",
        on: "its own Pod (with `--pod`)",
        values: "RFC 3339 time",
        meaning: "When the current term began, while this pod leads (removed otherwise).",
        per_election: true,
    },
    PodKey {
        key: FENCING_TOKEN_ANNOTATION,
        kind: "annotation",
        on: "its own Pod (with `--pod`)",
        values: "integer",
        meaning: "The current term's fencing token, while this pod leads (removed otherwise).",
        per_election: true,
    },
    PodKey {
        key: FENCING_TOKEN_ANNOTATION,
        kind: "annotation",
        on: "the Lease `baton-<election>` (with `--mirror-lease`)",
        values: "integer",
        meaning: "The fencing token of the term the Lease mirrors (cleared with the holder on \
                  stepping down).",
        per_election: false,
    },
];

/// Labels and annotations to set on the pod; `None` means "remove the key".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodMetadata {
    pub labels: BTreeMap<String, Option<String>>,
    pub annotations: BTreeMap<String, Option<String>>,
}

/// Why the pod could not be labelled.
#[derive(Debug, thiserror::Error)]
#[error("labelling pod {namespace}/{pod}: {message}")]
pub struct PodLabelError {
    pub namespace: String,
    pub pod: String,
    pub message: String,
}

/// Writes a [`PodMetadata`] onto this pod. Implementations must be idempotent: the same
/// metadata may be applied again after an error.
pub trait PodLabeler: Send + Sync {
    /// Applies `metadata` (set the `Some` keys, remove the `None` ones).
    fn apply<'a>(
        &'a self,
        metadata: &'a PodMetadata,
    ) -> Pin<Box<dyn Future<Output = Result<(), PodLabelError>> + Send + 'a>>;
}

/// The labeler used without `--pod/--namespace`: it only logs what it would write.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopPodLabeler;

impl PodLabeler for NoopPodLabeler {
    fn apply<'a>(
        &'a self,
        metadata: &'a PodMetadata,
    ) -> Pin<Box<dyn Future<Output = Result<(), PodLabelError>> + Send + 'a>> {
        tracing::debug!(?metadata, "no pod to label (--pod/--namespace not given)");
        Box::pin(std::future::ready(Ok(())))
    }
}

/// The label/annotation key for `base` in the election at `position`: the first election
/// (the one `/leader` refers to) uses the plain keys, later ones `<base>-<election>` when that
/// is a valid Kubernetes key name (at most 63 characters, alphanumeric at both ends).
fn key_for(base: &str, position: usize, election: &str) -> Option<String> {
    if position == 0 {
        return Some(base.to_owned());
    }
    let key = format!("{base}-{election}");
    let name = key.rsplit_once('/').map_or(key.as_str(), |(_, n)| n);
    let valid = name.len() <= 63
        && name
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    valid.then_some(key)
}

/// What the pod's metadata should say, given the views of its elections in flag order.
pub fn desired_metadata(views: &[ElectionView]) -> PodMetadata {
    let mut meta = PodMetadata::default();
    for (position, view) in views.iter().enumerate() {
        let election = view.election.as_str();
        let (Some(role), Some(since), Some(token)) = (
            key_for(ROLE_LABEL, position, election),
            key_for(LEADER_SINCE_ANNOTATION, position, election),
            key_for(FENCING_TOKEN_ANNOTATION, position, election),
        ) else {
            continue;
        };
        let leader = view.leader.as_ref().filter(|_| view.is_leader);
        let role_value = if leader.is_some() {
            "leader"
        } else {
            "candidate"
        };
        meta.labels.insert(role, Some(role_value.to_owned()));
        meta.annotations
            .insert(since, leader.map(|l| l.since.clone()));
        meta.annotations
            .insert(token, leader.map(|l| l.token.to_string()));
    }
    meta
}

/// Keeps the pod's metadata in step with the elections until `stop` is set, then applies the
/// final state once more (so a pod that resigned on SIGTERM is relabelled `candidate`).
pub async fn run_pod_view(
    elections: Vec<ElectionRecipe>,
    labeler: Arc<dyn PodLabeler>,
    mut stop: watch::Receiver<bool>,
) {
    if elections.is_empty() {
        return;
    }
    let mut receivers: Vec<_> = elections.iter().map(ElectionRecipe::subscribe).collect();
    let mut open = vec![true; receivers.len()];
    let mut applied: Option<PodMetadata> = None;
    let mut backoff = Duration::from_millis(500);
    loop {
        // Read before the views: `stop` is set once every election has stepped down, so a
        // pass that begins stopped writes the final state. One that was stopped while its
        // patch was on the way wrote views from before, and must look once more.
        let final_pass = *stop.borrow();
        let views: Vec<_> = elections.iter().map(ElectionRecipe::view).collect();
        let desired = desired_metadata(&views);
        if applied.as_ref() != Some(&desired) {
            match labeler.apply(&desired).await {
                Ok(()) => {
                    applied = Some(desired);
                    backoff = Duration::from_millis(500);
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_ms = backoff.as_millis() as u64, "pod labels not updated");
                    if final_pass {
                        return;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = stopped(&mut stop) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    continue;
                }
            }
        }
        if final_pass {
            return;
        }
        tokio::select! {
            _ = any_changed(&mut receivers, &mut open) => {}
            _ = stopped(&mut stop) => {}
        }
    }
}

/// Resolves when any open receiver sees a change; a closed one (its election left) is marked
/// in `open` so it cannot wake the caller in a loop. Pending forever when none is open.
async fn any_changed<T>(receivers: &mut [watch::Receiver<T>], open: &mut [bool]) {
    let mut changes: Vec<_> = receivers
        .iter_mut()
        .zip(open.iter_mut())
        .filter(|(_, open)| **open)
        .map(|(r, open)| (Box::pin(r.changed()), open))
        .collect();
    // A handful of elections at most: polling each in turn is fine.
    std::future::poll_fn(|cx| {
        for (change, open) in changes.iter_mut() {
            if let std::task::Poll::Ready(result) = change.as_mut().poll(cx) {
                **open = result.is_ok();
                return std::task::Poll::Ready(());
            }
        }
        std::task::Poll::Pending
    })
    .await;
}

/// Resolves when `stop` is set (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns must not live across an await.
    let _ = stop.wait_for(|s| *s).await.is_ok();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::{ConnectionState, LeaderInfo, ResourceName};

    fn view(name: &str, leading: bool) -> ElectionView {
        ElectionView {
            election: ResourceName::new(name).expect("valid"),
            leader: Some(LeaderInfo {
                identity: "me".into(),
                address: None,
                pod: None,
                since: "2026-01-01T00:00:00.000Z".into(),
                token: 42,
                node: "candidate-0000000001".into(),
            }),
            is_leader: leading,
            state: ConnectionState::Connected,
            node: None,
            leader_since: None,
            generation: 1,
        }
    }

    #[test]
    fn leader_gets_role_since_and_token() {
        let meta = desired_metadata(&[view("orders", true)]);
        assert_eq!(meta.labels[ROLE_LABEL].as_deref(), Some("leader"));
        assert_eq!(
            meta.annotations[LEADER_SINCE_ANNOTATION].as_deref(),
            Some("2026-01-01T00:00:00.000Z")
        );
        assert_eq!(
            meta.annotations[FENCING_TOKEN_ANNOTATION].as_deref(),
            Some("42")
        );
    }

    #[test]
    fn candidate_loses_the_annotations() {
        let meta = desired_metadata(&[view("orders", false)]);
        assert_eq!(meta.labels[ROLE_LABEL].as_deref(), Some("candidate"));
        assert_eq!(meta.annotations[LEADER_SINCE_ANNOTATION], None);
        assert_eq!(meta.annotations[FENCING_TOKEN_ANNOTATION], None);
    }

    #[test]
    fn later_elections_get_suffixed_keys_when_valid() {
        let long = "x".repeat(60);
        let meta = desired_metadata(&[
            view("orders", false),
            view("billing", true),
            view(&long, true),
            view("a-", true),
        ]);
        assert_eq!(meta.labels[ROLE_LABEL].as_deref(), Some("candidate"));
        assert_eq!(
            meta.labels["baton.dev/role-billing"].as_deref(),
            Some("leader")
        );
        assert_eq!(
            meta.annotations["baton.dev/fencing-token-billing"].as_deref(),
            Some("42")
        );
        assert_eq!(meta.labels.len(), 2, "invalid keys are skipped: {meta:?}");
        assert!(
            !meta
                .labels
                .keys()
                .any(|k| k.contains(&long) || k.ends_with('-'))
        );
    }

    #[test]
    fn noop_labeler_accepts_anything() {
        let meta = desired_metadata(&[view("orders", true)]);
        let result = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(NoopPodLabeler.apply(&meta));
        assert!(result.is_ok());
    }
}
