//! Stage 1 of the reconcile pipeline: read what exists — the ConfigMap's recorded membership,
//! the StatefulSet, its pods — and ask the ensemble's members for their status.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::ListParams;

use crate::build::StoredMembership;
use crate::ensemble::{EnsembleAdmin, EnsembleView, Roster};
use crate::names::EnsembleNames;
use crate::plan::{Observed, ObservedPod, ObservedStatefulSet};

/// Label the StatefulSet controller puts on each pod: the revision it was created from.
const REVISION_LABEL: &str = "controller-revision-hash";

/// A read from the API server failed.
#[derive(Debug, thiserror::Error)]
#[error("read {what}: {source}")]
pub struct ReadError {
    pub what: String,
    #[source]
    pub source: kube::Error,
}

/// The roster of members 1..=replicas at their stable DNS names.
pub fn roster(names: &EnsembleNames, replicas: i32) -> Roster {
    let mut roster = Roster::default();
    for id in 1..=replicas.max(0) as u64 {
        roster.insert(id, names.admin_addr(id), names.peer_addr(id));
    }
    roster
}

/// Reads the ensemble's objects and its members' statuses.
pub async fn observe<A: EnsembleAdmin>(
    client: &kube::Client,
    admin: &A,
    names: &EnsembleNames,
) -> Result<Observed, ReadError> {
    let ns = names.namespace.as_str();
    let read = |what: String| move |source| ReadError { what, source };
    let config_map = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(&names.config_map())
        .await
        .map_err(read(format!("ConfigMap {}", names.config_map())))?;
    let statefulset = Api::<StatefulSet>::namespaced(client.clone(), ns)
        .get_opt(&names.statefulset())
        .await
        .map_err(read(format!("StatefulSet {}", names.statefulset())))?;
    let statefulset = statefulset.map(|sts| ObservedStatefulSet {
        replicas: sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        generation: sts.metadata.generation,
        observed_generation: sts.status.as_ref().and_then(|s| s.observed_generation),
        update_revision: sts.status.as_ref().and_then(|s| s.update_revision.clone()),
    });
    let pods = match &statefulset {
        Some(_) => Api::<Pod>::namespaced(client.clone(), ns)
            .list(&ListParams::default().labels(&names.selector_string()))
            .await
            .map_err(read("member pods".into()))?
            .items
            .iter()
            .filter_map(|pod| observed_pod(names, pod))
            .collect(),
        None => Vec::new(),
    };
    let ensemble = match &statefulset {
        Some(sts) => EnsembleView::observe(admin, &roster(names, sts.replicas)).await,
        // Without a StatefulSet there are no members to ask.
        None => EnsembleView::default(),
    };
    Ok(Observed {
        statefulset,
        stored: config_map
            .as_ref()
            .and_then(StoredMembership::from_config_map),
        pods,
        ensemble,
    })
}

fn observed_pod(names: &EnsembleNames, pod: &Pod) -> Option<ObservedPod> {
    let id = names.member_of_pod(pod.metadata.name.as_deref()?)?;
    Some(ObservedPod {
        id,
        revision: pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(REVISION_LABEL).cloned()),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        ready: pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
    })
}
