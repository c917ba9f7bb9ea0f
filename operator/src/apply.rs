//! Stage 4 of the reconcile pipeline: server-side apply of the built objects (field manager
//! `baton-operator`, forced: the operator owns these fields), and the one pod deletion a
//! rolling update step makes. The PKI's Secrets are written only when they change, so private
//! keys are not re-sent on every reconcile.

use std::fmt::Debug;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::build::Built;
use crate::dereference::StoredSecrets;
use crate::names::{EnsembleNames, FIELD_MANAGER};
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

/// Every built object, in dependency order: the certificates the pods mount, the ConfigMap
/// they read, the Services their names resolve through and the NetworkPolicy that guards them
/// exist before the StatefulSet that starts them. `stored` are the PKI Secrets as read.
pub async fn apply_all(
    client: &kube::Client,
    names: &EnsembleNames,
    built: &Built,
    stored: &StoredSecrets,
) -> Result<(), WriteError> {
    let ns = names.namespace.as_str();
    for secret in built.secrets.in_order() {
        let name = secret.metadata.name.as_deref().unwrap_or_default();
        if !secrets::holds(stored.by_name(name), secret) {
            apply::<Secret>(client, ns, secret).await?;
        }
    }
    apply::<ConfigMap>(client, ns, &built.ca_config_map).await?;
    apply::<ConfigMap>(client, ns, &built.config_map).await?;
    apply::<Service>(client, ns, &built.peer_service).await?;
    apply::<Service>(client, ns, &built.client_service).await?;
    match &built.pdb {
        Some(pdb) => apply::<PodDisruptionBudget>(client, ns, pdb).await?,
        None => delete_if_present::<PodDisruptionBudget>(client, ns, &names.statefulset()).await?,
    }
    apply::<NetworkPolicy>(client, ns, &built.network_policy).await?;
    apply::<StatefulSet>(client, ns, &built.statefulset).await
}

/// Deletes member `id`'s pod; the StatefulSet re-creates it from the current template.
pub async fn restart_member(
    client: &kube::Client,
    names: &EnsembleNames,
    id: u64,
) -> Result<(), WriteError> {
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
    let name = object.meta().name.clone().unwrap_or_default();
    Api::<K>::namespaced(client.clone(), ns)
        .patch(
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
    match Api::<K>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(WriteError {
            verb: "delete",
            what: format!("{} {name}", K::kind(&())),
            source,
        }),
    }
}
