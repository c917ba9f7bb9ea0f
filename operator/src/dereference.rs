//! Stage 1 of the reconcile pipeline: read what exists — the PKI's Secrets, the ConfigMap's
//! recorded membership, the StatefulSet, its pods — and ask the ensemble's members for their
//! status over HTTPS with the stored admin certificate.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret};
use kube::Api;
use kube::api::ListParams;

use crate::build::StoredMembership;
use crate::ensemble::{AdminConnector, EnsembleView, Roster};
use crate::names::EnsembleNames;
use crate::pki::secrets::{self, CA_CERT_KEY};
use crate::pki::{AdminCredentials, StoredPki};
use crate::plan::{Observed, ObservedPod, ObservedStatefulSet, ObservedVolume};

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

/// The PKI's Secrets as read (compared with the built ones, so unchanged ones are not rewritten).
#[derive(Debug, Clone, Default)]
pub struct StoredSecrets {
    pub ca_key: Option<Secret>,
    pub members: Option<Secret>,
    pub admin: Option<Secret>,
}

impl StoredSecrets {
    /// The stored Secret named `name`, if it is one of the three.
    pub fn by_name(&self, name: &str) -> Option<&Secret> {
        [&self.ca_key, &self.members, &self.admin]
            .into_iter()
            .flatten()
            .find(|s| s.metadata.name.as_deref() == Some(name))
    }
}

/// Everything the rest of the pipeline works from.
pub struct Dereferenced {
    pub observed: Observed,
    pub secrets: StoredSecrets,
    pub pki: StoredPki,
    /// Whether `NAME-super` exists (made once, then left alone: only its existence matters).
    pub super_secret_exists: bool,
    /// The backup CronJob `NAME-backup`, if it exists (its status is `status.lastBackup`).
    pub backup_cron_job: Option<CronJob>,
}

/// The roster of members 1..=replicas at their stable DNS names.
pub fn roster(names: &EnsembleNames, replicas: i32) -> Roster {
    let mut roster = Roster::default();
    for id in 1..=replicas.max(0) as u64 {
        roster.insert(id, names.admin_addr(id), names.peer_addr(id));
    }
    roster
}

/// The admin credentials the `NAME-admin` Secret holds, if it holds them whole.
pub fn admin_credentials(secret: &Secret) -> Option<AdminCredentials> {
    Some(AdminCredentials {
        ca_pem: secrets::text(secret, CA_CERT_KEY)?,
        cert_pem: secrets::text(secret, "admin.crt")?,
        key_pem: secrets::text(secret, "admin.key")?,
    })
}

/// Reads the ensemble's objects and its members' statuses.
pub async fn observe<C: AdminConnector>(
    client: &kube::Client,
    admins: &C,
    names: &EnsembleNames,
) -> Result<Dereferenced, ReadError> {
    let ns = names.namespace.as_str();
    let read = |what: String| move |source| ReadError { what, source };
    let secret_api = Api::<Secret>::namespaced(client.clone(), ns);
    let secret = |name: String| {
        let api = secret_api.clone();
        async move {
            api.get_opt(&name)
                .await
                .map_err(read(format!("Secret {name}")))
        }
    };
    let stored_secrets = StoredSecrets {
        ca_key: secret(names.ca_key_secret()).await?,
        members: secret(names.tls_secret()).await?,
        admin: secret(names.admin_secret()).await?,
    };
    let super_secret_exists = secret(names.super_secret()).await?.is_some();
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
    let backup_cron_job = Api::<CronJob>::namespaced(client.clone(), ns)
        .get_opt(&names.backup_cron_job())
        .await
        .map_err(read(format!("CronJob {}", names.backup_cron_job())))?;
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
        Some(sts) => {
            let roster = roster(names, sts.replicas);
            let admin = stored_secrets
                .admin
                .as_ref()
                .and_then(admin_credentials)
                .ok_or_else(|| format!("no admin certificate in Secret {}", names.admin_secret()))
                .and_then(|c| admins.connect(&c).map_err(|e| e.to_string()));
            match admin {
                Ok(admin) => EnsembleView::observe(&admin, &roster).await,
                // Members answer only the admin certificate: until one is stored (the apply
                // stage writes it), every member counts as unreachable and no step is taken.
                Err(reason) => EnsembleView::unreachable(&roster, &reason),
            }
        }
        // Without a StatefulSet there are no members to ask.
        None => EnsembleView::default(),
    };
    let pki = secrets::stored(
        stored_secrets.ca_key.as_ref(),
        stored_secrets.members.as_ref(),
        stored_secrets.admin.as_ref(),
    );
    Ok(Dereferenced {
        observed: Observed {
            statefulset,
            stored: config_map
                .as_ref()
                .and_then(StoredMembership::from_config_map),
            pods,
            ensemble,
            volumes: Vec::new(),
        },
        secrets: stored_secrets,
        pki,
        super_secret_exists,
        backup_cron_job,
    })
}

/// Member `id`'s data volume claim, if it exists (read only while that member is reseeded).
pub async fn observe_volume(
    client: &kube::Client,
    names: &EnsembleNames,
    id: u64,
) -> Result<Option<ObservedVolume>, ReadError> {
    let name = names.volume_claim(id);
    let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &names.namespace)
        .get_opt(&name)
        .await
        .map_err(|source| ReadError {
            what: format!("PersistentVolumeClaim {name}"),
            source,
        })?;
    Ok(claim.map(|claim| ObservedVolume {
        id,
        created: claim.metadata.creation_timestamp.map(|t| t.0),
        terminating: claim.metadata.deletion_timestamp.is_some(),
    }))
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
