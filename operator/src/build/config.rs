//! The ConfigMap the members start from: cluster id, `--members`, how many members
//! bootstrapped the ensemble (every later one joins) and the quotas a new ensemble starts with. Pods read it as environment variables at
//! container start, so changing it restarts nothing.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::names::EnsembleNames;
use crate::validate::ValidSpec;

/// ConfigMap key: StatefulSet replicas the operator last applied (to re-create it after a delete).
pub const REPLICAS_KEY: &str = "BATON_REPLICAS";
/// ConfigMap key: members with ordinal below this bootstrap a fresh data dir; the others join.
pub const BOOTSTRAP_KEY: &str = "BATON_BOOTSTRAP_REPLICAS";

/// The membership the pods are started with, as the ConfigMap records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredMembership {
    /// StatefulSet replicas: members 1..=replicas have pods.
    pub replicas: i32,
    /// Members 1..=bootstrap may bootstrap a fresh data dir; never raised after creation, and
    /// lowered with every scale-down, so a member re-created later always joins.
    pub bootstrap: i32,
}

impl StoredMembership {
    /// What an existing ConfigMap recorded, if it holds both numbers.
    pub fn from_config_map(cm: &ConfigMap) -> Option<StoredMembership> {
        let data = cm.data.as_ref()?;
        let number = |key: &str| data.get(key)?.trim().parse::<i32>().ok();
        Some(StoredMembership {
            replicas: number(REPLICAS_KEY)?,
            bootstrap: number(BOOTSTRAP_KEY)?,
        })
    }
}

pub(super) fn config_map(
    names: &EnsembleNames,
    meta: ObjectMeta,
    membership: StoredMembership,
    spec: &ValidSpec,
) -> ConfigMap {
    // The ensemble binary reads BATON_CLUSTER_ID and BATON_MEMBERS itself (its flags' env).
    // The quotas too (`--quota-*`, `--max-ephemerals-per-session`): they only give a new
    // ensemble its first settings, which the operator then keeps at `spec.limits` with
    // `PUT /v1/settings`. Here rather than on the command line, so that changing a quota
    // rolls no member; a member that restarts reads the current values.
    let quotas = spec.limits.settings;
    let data = BTreeMap::from([
        (
            "BATON_QUOTA_NAMESPACE_ZNODES".to_string(),
            quotas.namespace_znodes.to_string(),
        ),
        (
            "BATON_QUOTA_NAMESPACE_BYTES".to_string(),
            quotas.namespace_bytes.to_string(),
        ),
        (
            "BATON_QUOTA_SHARED_ZNODES".to_string(),
            quotas.shared_znodes.to_string(),
        ),
        (
            "BATON_QUOTA_SHARED_BYTES".to_string(),
            quotas.shared_bytes.to_string(),
        ),
        (
            "BATON_MAX_EPHEMERALS_PER_SESSION".to_string(),
            quotas.ephemerals_per_session.to_string(),
        ),
        ("BATON_CLUSTER_ID".to_string(), names.cluster_id()),
        (
            "BATON_MEMBERS".to_string(),
            names.members_flag(membership.replicas),
        ),
        (REPLICAS_KEY.to_string(), membership.replicas.to_string()),
        (BOOTSTRAP_KEY.to_string(), membership.bootstrap.to_string()),
    ]);
    ConfigMap {
        metadata: meta,
        data: Some(data),
        ..ConfigMap::default()
    }
}
