//! What owner references cannot clean up: the ClusterRoleBinding (cluster-scoped) and the CA
//! ConfigMaps published into other namespaces (an owner must be in the same namespace). The
//! finalizer `baton.dev/cleanup` keeps a deleted ensemble until the operator has removed them;
//! everything in the ensemble's own namespace still goes with it through owner references.
//!
//! The finalizer is added before any of those objects is written, so none can outlive the
//! ensemble unnoticed. Adding and removing it are JSON patches that `test` the list first: a
//! finalizer another controller adds or removes meanwhile is never lost.

use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::apply::{WriteError, delete_unless_gone, prune_published_ca};
use crate::crd::CoordinationEnsemble;
use crate::names::{EnsembleNames, FINALIZER};

/// Whether the ensemble carries our finalizer.
pub fn has_finalizer(ce: &CoordinationEnsemble) -> bool {
    ce.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

/// Adds the finalizer unless it is there.
pub async fn ensure(client: &kube::Client, ce: &CoordinationEnsemble) -> Result<(), WriteError> {
    if has_finalizer(ce) {
        return Ok(());
    }
    let ops = match &ce.metadata.finalizers {
        None => json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ]),
        Some(current) => json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
        ]),
    };
    patch_ensemble(client, ce, ops, "add the finalizer to").await
}

/// Deletes what the ensemble left outside its namespace, then removes the finalizer so the
/// deletion completes.
pub async fn cleanup(client: &kube::Client, ce: &CoordinationEnsemble) -> Result<(), WriteError> {
    if !has_finalizer(ce) {
        return Ok(());
    }
    let (Some(name), Some(ns)) = (&ce.metadata.name, &ce.metadata.namespace) else {
        return Ok(());
    };
    let names = EnsembleNames::new(name, ns);
    tracing::info!("ensemble deleted: removing its token-review binding and published CAs");
    delete_binding(client, &names).await?;
    prune_published_ca(client, &names, &[]).await?;
    let current = ce.metadata.finalizers.clone().unwrap_or_default();
    let kept: Vec<&String> = current.iter().filter(|f| *f != FINALIZER).collect();
    let ops = json!([
        {"op": "test", "path": "/metadata/finalizers", "value": current},
        {"op": "replace", "path": "/metadata/finalizers", "value": kept},
    ]);
    patch_ensemble(client, ce, ops, "remove the finalizer from").await
}

/// Deletes the ensemble's ClusterRoleBinding (gone already is fine).
pub async fn delete_binding(
    client: &kube::Client,
    names: &EnsembleNames,
) -> Result<(), WriteError> {
    let name = names.token_review_binding();
    let api = Api::<ClusterRoleBinding>::all(client.clone());
    delete_unless_gone(api, &name, || format!("ClusterRoleBinding {name}")).await
}

/// A JSON patch of the ensemble itself (its metadata); `verb` names it in the error.
pub(crate) async fn patch_ensemble(
    client: &kube::Client,
    ce: &CoordinationEnsemble,
    ops: Value,
    verb: &'static str,
) -> Result<(), WriteError> {
    let name = ce.metadata.name.clone().unwrap_or_default();
    let ns = ce.metadata.namespace.clone().unwrap_or_default();
    let patch: json_patch::Patch = serde_json::from_value(ops).unwrap_or_default();
    Api::<CoordinationEnsemble>::namespaced(client.clone(), &ns)
        .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
        .map(|_| ())
        .map_err(|source| WriteError {
            verb,
            what: format!("CoordinationEnsemble {ns}/{name}"),
            source,
        })
}
