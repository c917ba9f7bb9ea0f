//! Stage 3 of the reconcile pipeline: pure functions from a validated spec (and the membership
//! the plan chose) to the Kubernetes objects the operator applies. No I/O here.

pub mod backup;
mod config;
pub mod identity;
pub mod network;
mod services;
mod statefulset;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::crd::CoordinationEnsemble;
use crate::names::EnsembleNames;
use crate::pki::Pki;
use crate::pki::secrets::{self, CA_CERT_KEY, PkiSecrets};
use crate::validate::ValidSpec;

pub use backup::{BACKUP_SCRIPT, RESTORE_SCRIPT};
pub use config::{BOOTSTRAP_KEY, REPLICAS_KEY, StoredMembership};
pub use identity::SuperCredentials;
pub use network::{OperatorPods, ScraperPods};
pub use statefulset::{DATA_DIR, START_SCRIPT};

/// Why objects could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("the CoordinationEnsemble has no uid to own its objects with")]
    NoOwner,
}

/// Every object of one ensemble, ready to be applied in this order.
#[derive(Debug, Clone, PartialEq)]
pub struct Built {
    /// The CA, the members' and the admin's certificates (written only when they change).
    pub secrets: PkiSecrets,
    /// `NAME-super`, only when it does not exist yet (it is made once, never rewritten).
    pub super_secret: Option<Secret>,
    /// The members' ServiceAccount.
    pub service_account: ServiceAccount,
    /// `system:auth-delegator` for that ServiceAccount (cluster-scoped, labelled, no owner).
    pub token_review_binding: ClusterRoleBinding,
    /// `NAME-ca`: the CA certificate (public) for clients such as the injected sidecar.
    pub ca_config_map: ConfigMap,
    /// The same certificate in each other namespace the ensemble serves, as
    /// `NAMESPACE.NAME-ca` (labelled, no owner: a cross-namespace owner is not allowed).
    pub published_ca_config_maps: Vec<ConfigMap>,
    pub config_map: ConfigMap,
    pub peer_service: Service,
    pub client_service: Service,
    /// Absent when `spec.podDisruptionBudget.enabled` is false.
    pub pdb: Option<PodDisruptionBudget>,
    /// Applied before the StatefulSet, so no member runs unguarded.
    pub network_policy: NetworkPolicy,
    pub statefulset: StatefulSet,
    /// `NAME-backup`, with `spec.backup` (deleted without it).
    pub backup: Option<CronJob>,
}

/// Builds every object for `ce` with the StatefulSet at `membership.replicas`, the
/// certificates of `pki`, the admin port open to the `operator`'s pods, and the super Secret
/// holding `new_super` when it is still to be made.
pub fn build(
    ce: &CoordinationEnsemble,
    spec: &ValidSpec,
    membership: StoredMembership,
    pki: &Pki,
    operator: &OperatorPods,
    new_super: Option<&SuperCredentials>,
) -> Result<Built, BuildError> {
    let names = EnsembleNames::new(&spec.name, &spec.namespace);
    let owner = ce
        .metadata
        .uid
        .as_ref()
        .map(|_| owner_reference(ce))
        .ok_or(BuildError::NoOwner)?;
    let meta = |name: String| ObjectMeta {
        name: Some(name),
        namespace: Some(spec.namespace.clone()),
        labels: Some(names.labels()),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    };
    let client_namespaces = spec.served_namespaces();
    let ca_data = BTreeMap::from([(CA_CERT_KEY.to_string(), pki.ca.bundle_pem.clone())]);
    let reach = network::Reach {
        operator,
        client_namespaces: &client_namespaces,
        plain_client_port: spec.plain_client_port,
        backup: spec.backup.is_some(),
    };
    Ok(Built {
        secrets: secrets::secrets(pki, &names, meta),
        super_secret: new_super.map(|c| identity::super_secret(meta(names.super_secret()), c)),
        service_account: identity::service_account(ObjectMeta {
            annotations: Some(ce.spec.service_account.annotations.clone())
                .filter(|a| !a.is_empty()),
            ..meta(names.service_account())
        }),
        token_review_binding: identity::token_review_binding(&names),
        ca_config_map: ConfigMap {
            metadata: meta(names.ca_config_map()),
            data: Some(ca_data.clone()),
            ..ConfigMap::default()
        },
        published_ca_config_maps: spec
            .allowed_namespaces
            .iter()
            .map(|ns| ConfigMap {
                metadata: ObjectMeta {
                    name: Some(names.ca_config_map_in(ns)),
                    namespace: Some(ns.clone()),
                    labels: Some(names.foreign_labels()),
                    ..ObjectMeta::default()
                },
                data: Some(ca_data.clone()),
                ..ConfigMap::default()
            })
            .collect(),
        config_map: config::config_map(&names, meta(names.config_map()), membership, spec),
        peer_service: services::peer_service(
            &names,
            meta(names.peer_service()),
            spec.plain_client_port,
        ),
        client_service: services::client_service(
            &names,
            meta(names.client_service()),
            spec.plain_client_port,
        ),
        pdb: ce
            .spec
            .pod_disruption_budget
            .enabled
            .then(|| services::pdb(&names, meta(names.statefulset()))),
        network_policy: network::network_policy(&names, meta(names.network_policy()), &reach),
        statefulset: statefulset::statefulset(
            &names,
            meta(names.statefulset()),
            &ce.spec,
            spec,
            membership.replicas,
        ),
        backup: spec.backup.as_ref().map(|backup| {
            backup::cron_job(
                &names,
                meta(names.backup_cron_job()),
                &ce.spec,
                spec,
                backup,
                membership.replicas,
            )
        }),
    })
}

/// A controller owner reference to `ce`, so its objects are garbage-collected with it.
fn owner_reference(ce: &CoordinationEnsemble) -> OwnerReference {
    use kube::Resource;
    OwnerReference {
        api_version: CoordinationEnsemble::api_version(&()).into_owned(),
        kind: CoordinationEnsemble::kind(&()).into_owned(),
        name: ce.metadata.name.clone().unwrap_or_default(),
        uid: ce.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

#[cfg(test)]
mod tests;
