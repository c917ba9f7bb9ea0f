//! Missing-sidecar detection: pods annotated `baton.dev/inject: "true"` that run without the
//! `baton-sidecar` container (created while the webhook was unreachable, with
//! `failurePolicy: Ignore`, or before their namespace was labelled for injection). The leading
//! operator replica looks every `interval` at the pods of the namespaces labelled
//! `baton.dev/injection=enabled` (a label-selected namespace list, then one pod list per
//! namespace, both served from the API server's watch cache) and reports each such pod: a
//! Warning Event `SidecarMissing` on the pod (once per pod), the gauge
//! `baton_operator_pods_missing_sidecar{ensemble}`, and the condition `SidecarsMissing` on the
//! ensemble the pod names (the webhook's rules: `baton.dev/ensemble`, else the namespace's only
//! one), written by the next reconcile, which this triggers.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use crate::events::EventSink;
use crate::metrics::Metrics;
use crate::webhook::inject::{Wanted, wanted};
use crate::webhook::lookup::{EnsembleLookup, resolve};

/// The ensemble condition type, present (status True) only while pods miss their sidecar.
pub const CONDITION: &str = "SidecarsMissing";
/// The reason of the Warning Event on each pod.
pub const EVENT_REASON: &str = "SidecarMissing";
/// The namespace label that opts a namespace in to injection (the chart's default
/// `webhook.namespaceSelector`), with the value [`INJECTION_ENABLED`].
pub const INJECTION_LABEL: &str = "baton.dev/injection";
/// The value of [`INJECTION_LABEL`] that opts in.
pub const INJECTION_ENABLED: &str = "enabled";
/// The namespaces looked at: those opted in to injection.
pub const NAMESPACE_SELECTOR: &str = "baton.dev/injection=enabled";
/// The `ensemble` label of pods whose ensemble cannot be resolved (none, several, missing).
pub const UNRESOLVED: &str = "unresolved";
/// Pod names a condition message lists at most.
const NAMES_SHOWN: usize = 5;

/// The last scan's findings: per ensemble (`NAMESPACE/NAME`), its pods (`NAMESPACE/POD`)
/// missing the sidecar, sorted. Shared with the reconciler, which turns it into the condition.
#[derive(Debug, Default)]
pub struct MissingSidecars {
    by_ensemble: Mutex<BTreeMap<String, Vec<String>>>,
}

impl MissingSidecars {
    /// The pods of `ensemble` (`NAMESPACE/NAME`) missing the sidecar.
    pub fn pods_of(&self, ensemble: &str) -> Vec<String> {
        self.lock().get(ensemble).cloned().unwrap_or_default()
    }

    /// Replaces the findings; whether they changed.
    pub fn replace(&self, found: BTreeMap<String, Vec<String>>) -> bool {
        let mut current = self.lock();
        let changed = *current != found;
        *current = found;
        changed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<String>>> {
        self.by_ensemble
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The condition's message for `pods` (non-empty).
pub fn condition_message(pods: &[String]) -> String {
    let mut shown = pods
        .iter()
        .take(NAMES_SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if pods.len() > NAMES_SHOWN {
        shown.push_str(&format!(" and {} more", pods.len() - NAMES_SHOWN));
    }
    format!(
        "{} pod(s) annotated baton.dev/inject: \"true\" run without the baton-sidecar container \
         ({shown}): delete them so their controllers re-create them through the injection webhook",
        pods.len()
    )
}

/// The Event note for a pod missing its sidecar.
pub fn event_note(ensemble: &str) -> String {
    format!(
        "annotated baton.dev/inject: \"true\" but runs without the baton-sidecar container \
         (ensemble {ensemble}): it was created while the injection webhook was unreachable or \
         before its namespace was labelled baton.dev/injection=enabled. Delete the pod so its \
         controller re-creates it through the webhook"
    )
}

/// Whether `pod` should have the sidecar and lacks it: annotated, not injected, not being
/// deleted and not finished.
pub fn misses_sidecar(pod: &Pod) -> bool {
    let namespace = pod.namespace().unwrap_or_default();
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|phase| phase == "Succeeded" || phase == "Failed");
    pod.metadata.deletion_timestamp.is_none()
        && !finished
        && matches!(wanted(pod, &namespace), Wanted::Inject(_))
}

/// Looks at the opted-in namespaces' pods and reports those missing the sidecar.
pub struct SidecarAudit<L> {
    pub client: kube::Client,
    pub lookup: L,
    pub events: EventSink,
    pub metrics: std::sync::Arc<Metrics>,
    pub found: std::sync::Arc<MissingSidecars>,
    /// Pods (uid) already given an Event.
    reported: Mutex<HashSet<String>>,
}

impl<L: EnsembleLookup> SidecarAudit<L> {
    /// An audit reporting into `found`, `metrics` and Events.
    pub fn new(
        client: kube::Client,
        lookup: L,
        events: EventSink,
        metrics: std::sync::Arc<Metrics>,
        found: std::sync::Arc<MissingSidecars>,
    ) -> Self {
        SidecarAudit {
            client,
            lookup,
            events,
            metrics,
            found,
            reported: Mutex::new(HashSet::new()),
        }
    }

    /// One look: Events for newly found pods, the gauge, and the findings; whether they
    /// changed (then the ensembles' conditions need a reconcile).
    pub async fn scan(&self) -> Result<bool, kube::Error> {
        // resourceVersion=0: served from the API server's cache, not etcd.
        let cached = ListParams::default().match_any();
        let namespaces = Api::<Namespace>::all(self.client.clone())
            .list_metadata(&cached.clone().labels(NAMESPACE_SELECTOR))
            .await?;
        let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut seen = HashSet::new();
        let mut resolved: BTreeMap<String, String> = BTreeMap::new();
        for namespace in namespaces
            .items
            .iter()
            .filter_map(|ns| ns.metadata.name.clone())
        {
            let pods = Api::<Pod>::namespaced(self.client.clone(), &namespace)
                .list(&cached)
                .await?;
            for pod in pods.items.iter().filter(|p| misses_sidecar(p)) {
                let Wanted::Inject(choice) = wanted(pod, &namespace) else {
                    continue;
                };
                // One lookup per choice and scan, however many pods share it.
                let cache_key = format!("{choice:?}");
                let known = resolved.get(&cache_key).cloned();
                let ensemble = match known {
                    Some(ensemble) => ensemble,
                    None => {
                        let ensemble = match resolve(&self.lookup, &choice).await {
                            Ok(ce) => {
                                format!("{}/{}", ce.namespace().unwrap_or_default(), ce.name_any())
                            }
                            Err(e) => {
                                tracing::debug!(error = %e, pod = %pod.name_any(),
                                    "no ensemble for a pod missing its sidecar");
                                UNRESOLVED.to_string()
                            }
                        };
                        resolved.insert(cache_key, ensemble.clone());
                        ensemble
                    }
                };
                let uid = pod.uid().unwrap_or_else(|| pod.name_any());
                seen.insert(uid.clone());
                let new = self.lock_reported().insert(uid);
                if new {
                    tracing::warn!(pod = %pod.name_any(), %namespace, %ensemble, "pod runs without the baton-sidecar container");
                    self.events
                        .pod_warning(pod, EVENT_REASON, &event_note(&ensemble))
                        .await;
                }
                found
                    .entry(ensemble)
                    .or_default()
                    .push(format!("{namespace}/{}", pod.name_any()));
            }
        }
        // Forget pods that are gone (or fixed), so the set stays bounded.
        self.lock_reported().retain(|uid| seen.contains(uid));
        for pods in found.values_mut() {
            pods.sort();
        }
        self.metrics.observe_missing_sidecars(
            &found
                .iter()
                .map(|(ensemble, pods)| (ensemble.clone(), pods.len()))
                .collect(),
        );
        Ok(self.found.replace(found))
    }

    /// Scans every `interval` until dropped; a scan whose findings changed sends on `changed`.
    pub async fn run(self, interval: Duration, changed: tokio::sync::mpsc::Sender<()>) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match self.scan().await {
                Ok(true) => {
                    let _ = changed.try_send(());
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "cannot look for pods missing the sidecar"),
            }
        }
    }

    fn lock_reported(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.reported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
