//! Stage 4 of the reconcile pipeline: server-side apply of the built objects (field manager
//! `baton-operator`, forced: the operator owns these fields), and the one pod deletion a
//! rolling update step makes. The PKI's Secrets are written only when they change, so private
//! keys are not re-sent on every reconcile.

use std::fmt::Debug;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::build::Built;
use crate::dereference::StoredSecrets;
use crate::names::{ENSEMBLE_NAME_LABEL, ENSEMBLE_NAMESPACE_LABEL, EnsembleNames, FIELD_MANAGER};
use crate::pki::secrets;

/// A write to the API server failed.
#[derive(Debug, thiserror::Error)]
#[error("{verb} {what}: {source}")]
pub struct WriteError {
    pub verb: &'static str,
    pub what: String,
    #[source]
    pub source: kube::Error,
}

/// Every built object, in dependency order: the certificates the pods mount, the super
/// Secret, ServiceAccount and token-review binding they run with, the CA clients trust (here
/// and in every served namespace, stale copies pruned), the ConfigMap they read, the Services
/// their names resolve through and the NetworkPolicy that guards them exist before the
/// StatefulSet that starts them; the backup CronJob last (or deleted when `spec.backup` is
/// gone and `backup_exists` says it is there). `stored` are the PKI Secrets as read.
pub async fn apply_all(
    client: &kube::Client,
    names: &EnsembleNames,
    built: &Built,
    stored: &StoredSecrets,
    backup_exists: bool,
) -> Result<(), WriteError> {
    let ns = names.namespace.as_str();
    for secret in built.secrets.in_order() {
        let name = secret.metadata.name.as_deref().unwrap_or_default();
        if !secrets::holds(stored.by_name(name), secret) {
            apply::<Secret>(client, ns, secret).await?;
        }
    }
    if let Some(secret) = &built.super_secret {
        create_once(client, ns, secret).await?;
    }
    apply::<ServiceAccount>(client, ns, &built.service_account).await?;
    apply_cluster(client, &built.token_review_binding).await?;
    apply::<ConfigMap>(client, ns, &built.ca_config_map).await?;
    let mut served = Vec::new();
    for cm in &built.published_ca_config_maps {
        let target = cm.metadata.namespace.clone().unwrap_or_default();
        if publish(client, &target, cm).await? {
            served.push(target);
        }
    }
    prune_published_ca(client, names, &served).await?;
    apply::<ConfigMap>(client, ns, &built.config_map).await?;
    apply::<Service>(client, ns, &built.peer_service).await?;
    apply::<Service>(client, ns, &built.client_service).await?;
    match &built.pdb {
        Some(pdb) => apply::<PodDisruptionBudget>(client, ns, pdb).await?,
        None => delete_if_present::<PodDisruptionBudget>(client, ns, &names.statefulset()).await?,
    }
    apply::<NetworkPolicy>(client, ns, &built.network_policy).await?;
    apply::<StatefulSet>(client, ns, &built.statefulset).await?;
    match &built.backup {
        Some(cron_job) => apply::<CronJob>(client, ns, cron_job).await,
        None if backup_exists => {
            tracing::info!("spec.backup removed: deleting the backup CronJob");
            // Its Jobs and their pods go with it (the backups stay where they are).
            let name = names.backup_cron_job();
            match Api::<CronJob>::namespaced(client.clone(), ns)
                .delete(&name, &DeleteParams::background())
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                Err(source) => Err(WriteError {
                    verb: "delete",
                    what: format!("CronJob {name}"),
                    source,
                }),
            }
        }
        None => Ok(()),
    }
}

/// Creates `secret` unless it exists: what it holds is made once and never rewritten.
async fn create_once(client: &kube::Client, ns: &str, secret: &Secret) -> Result<(), WriteError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match Api::<Secret>::namespaced(client.clone(), ns)
        .create(&params, secret)
        .await
    {
        Ok(_) => Ok(()),
        // Made meanwhile (another round, or by a person): theirs stays.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(WriteError {
            verb: "create",
            what: format!("Secret {name}"),
            source,
        }),
    }
}

/// Publishes a CA ConfigMap into another namespace, without forcing, and only into a ConfigMap
/// that is absent or already ours (carries this ensemble's labels): a ConfigMap of that name
/// that someone else made is never written, so an ensemble's owner cannot replace what another
/// namespace's pods trust. Server-side apply alone does not keep that promise: it conflicts
/// only on fields both managers set to different values, so it would merge `ca.crt` and our
/// labels into someone else's ConfigMap that lacks `ca.crt` (and the labels would later have
/// it pruned). Returns whether it is published; a namespace that does not exist (yet), or a
/// name someone else holds, is skipped (and logged).
async fn publish(client: &kube::Client, ns: &str, cm: &ConfigMap) -> Result<bool, WriteError> {
    let name = cm.metadata.name.clone().unwrap_or_default();
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let fail = |verb, source| WriteError {
        verb,
        what: format!("ConfigMap {ns}/{name}"),
        source,
    };
    // A missing namespace reads as a missing ConfigMap; the apply below then says which.
    let existing = api
        .get_metadata_opt(&name)
        .await
        .map_err(|source| fail("read", source))?;
    if let Some(existing) = existing
        && !same_ensemble(
            existing.metadata.labels.as_ref(),
            cm.metadata.labels.as_ref(),
        )
    {
        // Not a reason to stop reconciling the ensemble itself: that namespace's pods are
        // refused by nothing here, they just cannot mount the CA until the name is freed.
        tracing::warn!(namespace = %ns, configmap = %name,
            "a ConfigMap of that name is someone else's: CA not published there");
        return Ok(false);
    }
    match api
        .patch(&name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(cm))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            tracing::warn!(namespace = %ns, "allowed namespace does not exist: CA not published");
            Ok(false)
        }
        // Someone else set a field of ours meanwhile (made it between the read and the apply).
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::warn!(namespace = %ns, configmap = %name, message = %status.message,
                "a ConfigMap of that name is someone else's: CA not published there");
            Ok(false)
        }
        Err(source) => Err(fail("publish", source)),
    }
}

/// Whether `existing` labels name the same ensemble as `ours` (both ensemble labels equal).
fn same_ensemble(
    existing: Option<&std::collections::BTreeMap<String, String>>,
    ours: Option<&std::collections::BTreeMap<String, String>>,
) -> bool {
    [ENSEMBLE_NAMESPACE_LABEL, ENSEMBLE_NAME_LABEL]
        .iter()
        .all(|key| {
            let value = |labels: Option<&std::collections::BTreeMap<String, String>>| {
                labels.and_then(|l| l.get(*key)).cloned()
            };
            value(ours).is_some() && value(existing) == value(ours)
        })
}

/// Deletes the CA ConfigMaps the ensemble published into namespaces other than `keep` (found
/// by their labels in every namespace).
pub async fn prune_published_ca(
    client: &kube::Client,
    names: &EnsembleNames,
    keep: &[String],
) -> Result<(), WriteError> {
    let all = Api::<ConfigMap>::all(client.clone());
    let published = all
        .list_metadata(&ListParams::default().labels(&names.foreign_selector()))
        .await
        .map_err(|source| WriteError {
            verb: "list",
            what: format!("ConfigMaps published by {}", names.cluster_id()),
            source,
        })?;
    for cm in published.items {
        let (Some(ns), Some(name)) = (cm.metadata.namespace, cm.metadata.name) else {
            continue;
        };
        // Only the published copies; the ensemble's own namespace keeps its owned ConfigMap.
        if ns == names.namespace || keep.contains(&ns) || name != names.ca_config_map_in(&ns) {
            continue;
        }
        tracing::info!(namespace = %ns, configmap = %name, "no longer served: removing its CA");
        let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
        delete_unless_gone(api, &name, || format!("ConfigMap {ns}/{name}")).await?;
    }
    Ok(())
}

/// Server-side apply of a cluster-scoped object.
async fn apply_cluster(
    client: &kube::Client,
    object: &ClusterRoleBinding,
) -> Result<(), WriteError> {
    server_side_apply(Api::all(client.clone()), object).await
}

/// Deletes member `id`'s pod; the StatefulSet re-creates it from the current template.
pub async fn restart_member(
    client: &kube::Client,
    names: &EnsembleNames,
    id: u64,
) -> Result<(), WriteError> {
    delete_if_present::<Pod>(client, &names.namespace, &names.pod(id)).await
}

/// Deletes member `id`'s data volume claim, then its pod (which holds the claim until it goes),
/// so the StatefulSet controller re-creates both and the member starts empty. Gone already is
/// fine: a step repeated after a restart.
pub async fn replace_volume(
    client: &kube::Client,
    names: &EnsembleNames,
    id: u64,
) -> Result<(), WriteError> {
    delete_if_present::<PersistentVolumeClaim>(client, &names.namespace, &names.volume_claim(id))
        .await?;
    delete_if_present::<Pod>(client, &names.namespace, &names.pod(id)).await
}

async fn apply<K>(client: &kube::Client, ns: &str, object: &K) -> Result<(), WriteError>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    server_side_apply(Api::namespaced(client.clone(), ns), object).await
}

/// Server-side apply of `object` through `api` (namespaced or cluster-wide), forced, as the
/// operator's field manager.
async fn server_side_apply<K>(api: Api<K>, object: &K) -> Result<(), WriteError>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let name = object.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map(|_| ())
    .map_err(|source| WriteError {
        verb: "apply",
        what: format!("{} {name}", K::kind(&())),
        source,
    })
}

async fn delete_if_present<K>(client: &kube::Client, ns: &str, name: &str) -> Result<(), WriteError>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned,
{
    let api = Api::<K>::namespaced(client.clone(), ns);
    delete_unless_gone(api, name, || format!("{} {name}", K::kind(&()))).await
}

/// Deletes `name` through `api` (namespaced or cluster-wide); gone already is fine. `what`
/// names the object in the error.
pub async fn delete_unless_gone<K>(
    api: Api<K>,
    name: &str,
    what: impl FnOnce() -> String,
) -> Result<(), WriteError>
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(WriteError {
            verb: "delete",
            what: what(),
            source,
        }),
    }
}
