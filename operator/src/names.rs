//! Names, labels, ports and DNS addresses of everything one ensemble consists of. Member ids
//! are StatefulSet ordinals plus one (Raft ids must be positive).

use std::collections::BTreeMap;

/// Plain port for ZooKeeper clients (off unless `spec.plainClientPort`).
pub const CLIENT_PORT: i32 = 2181;
/// TLS port for ZooKeeper clients (ZooKeeper's `secureClientPort`).
pub const SECURE_CLIENT_PORT: i32 = 2281;
/// Port for Raft traffic between members.
pub const PEER_PORT: i32 = 2888;
/// Port of the admin API, HTTPS (open probes; status and membership need the admin certificate).
pub const ADMIN_PORT: i32 = 8080;
/// Where members mount the `NAME-tls` Secret (the CA certificate and every member's pair).
pub const MEMBER_TLS_DIR: &str = "/etc/baton/tls";
/// Field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "baton-operator";
/// Label naming the ensemble's namespace on objects outside it (cluster-scoped or published into
/// other namespaces), which cannot carry an owner reference to it.
pub const ENSEMBLE_NAMESPACE_LABEL: &str = "baton.dev/ensemble-namespace";
/// Label naming the ensemble on those objects.
pub const ENSEMBLE_NAME_LABEL: &str = "baton.dev/ensemble-name";
/// The finalizer that removes those objects when the ensemble is deleted.
pub const FINALIZER: &str = "baton.dev/cleanup";
/// Annotation on a `CoordinationEnsemble` naming a member (`"2"`) to rebuild from the ensemble:
/// removed from Raft, its data volume replaced, added back as a learner; then the annotation goes.
pub const RESEED_ANNOTATION: &str = "baton.dev/reseed-member";
/// Name of the StatefulSet's volumeClaimTemplate, the members' data volume: member `id`'s claim
/// is `DATA_VOLUME-NAME-ORDINAL`.
pub const DATA_VOLUME: &str = "data";
/// ClusterRole that lets the members check client tokens with the TokenReview API.
pub const AUTH_DELEGATOR_ROLE: &str = "system:auth-delegator";
/// Audience of the projected token the sidecar presents (the ensemble's TokenReview asks for it).
pub const TOKEN_AUDIENCE: &str = "baton";

/// The names derived from one `CoordinationEnsemble`'s name and namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsembleNames {
    pub name: String,
    pub namespace: String,
}

impl EnsembleNames {
    /// Names for the ensemble `name` in `namespace`.
    pub fn new(name: &str, namespace: &str) -> Self {
        EnsembleNames {
            name: name.to_string(),
            namespace: namespace.to_string(),
        }
    }

    /// The StatefulSet (and PodDisruptionBudget) name: the ensemble's own.
    pub fn statefulset(&self) -> String {
        self.name.clone()
    }

    /// The headless Service giving each member a stable DNS name.
    pub fn peer_service(&self) -> String {
        format!("{}-peers", self.name)
    }

    /// The ClusterIP Service clients connect to (ready members only).
    pub fn client_service(&self) -> String {
        format!("{}-client", self.name)
    }

    /// The ConfigMap holding the cluster id and membership the pods start from.
    pub fn config_map(&self) -> String {
        format!("{}-config", self.name)
    }

    /// Secret mounted by every member: `ca.crt` and `member-ID.crt`/`member-ID.key` per member.
    pub fn tls_secret(&self) -> String {
        format!("{}-tls", self.name)
    }

    /// Secret holding the ensemble CA's private key; never mounted anywhere.
    pub fn ca_key_secret(&self) -> String {
        format!("{}-ca-key", self.name)
    }

    /// Secret holding the admin client certificate (`ca.crt`, `admin.crt`, `admin.key`).
    pub fn admin_secret(&self) -> String {
        format!("{}-admin", self.name)
    }

    /// ConfigMap publishing the CA certificate (`ca.crt`, public) for clients such as the
    /// injected sidecar.
    pub fn ca_config_map(&self) -> String {
        format!("{}-ca", self.name)
    }

    /// ConfigMap publishing the CA certificate in `namespace`: `NAME-ca` in the ensemble's own,
    /// `NAMESPACE.NAME-ca` in another it serves. Names of ensembles (Service names) have no
    /// dots, so a published copy can never take the name of another ensemble's own ConfigMap,
    /// nor of a copy from another ensemble.
    pub fn ca_config_map_in(&self, namespace: &str) -> String {
        if namespace == self.namespace {
            self.ca_config_map()
        } else {
            format!("{}.{}-ca", self.namespace, self.name)
        }
    }

    /// ServiceAccount of the members (TokenReview through `system:auth-delegator`).
    pub fn service_account(&self) -> String {
        self.name.clone()
    }

    /// ClusterRoleBinding of `system:auth-delegator` to the members' ServiceAccount.
    pub fn token_review_binding(&self) -> String {
        format!("baton.dev:ensemble:{}:{}", self.namespace, self.name)
    }

    /// Secret holding the super identity (`username`, `password`, `digest`), made once.
    pub fn super_secret(&self) -> String {
        format!("{}-super", self.name)
    }

    /// NetworkPolicy guarding the members' ports.
    pub fn network_policy(&self) -> String {
        format!("{}-members", self.name)
    }

    /// The backup CronJob (with `spec.backup`).
    pub fn backup_cron_job(&self) -> String {
        format!("{}-backup", self.name)
    }

    /// Labels of the backup Jobs' pods: not the members' (no Service, PDB or policy selects
    /// them as members); the NetworkPolicy lets exactly these reach the admin port.
    pub fn backup_pod_labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("app.kubernetes.io/name".into(), "baton-backup".into()),
            ("app.kubernetes.io/instance".into(), self.name.clone()),
            ("app.kubernetes.io/component".into(), "backup".into()),
            ("app.kubernetes.io/managed-by".into(), FIELD_MANAGER.into()),
        ])
    }

    /// Pod name of member `id`.
    pub fn pod(&self, id: u64) -> String {
        format!("{}-{}", self.name, id.saturating_sub(1))
    }

    /// PersistentVolumeClaim of member `id` (made by the StatefulSet from its template).
    pub fn volume_claim(&self, id: u64) -> String {
        format!("{DATA_VOLUME}-{}", self.pod(id))
    }

    /// Member id of a pod name of this ensemble, if it is one.
    pub fn member_of_pod(&self, pod: &str) -> Option<u64> {
        let ordinal: u64 = pod
            .strip_prefix(&self.name)?
            .strip_prefix('-')?
            .parse()
            .ok()?;
        ordinal.checked_add(1)
    }

    /// Stable DNS name of member `id` (resolvable before it is ready: the peer Service
    /// publishes not-ready addresses, which bootstrapping needs).
    pub fn member_host(&self, id: u64) -> String {
        format!(
            "{}.{}.{}.svc",
            self.pod(id),
            self.peer_service(),
            self.namespace
        )
    }

    /// `HOST:PORT` other members reach member `id` on.
    pub fn peer_addr(&self, id: u64) -> String {
        format!("{}:{PEER_PORT}", self.member_host(id))
    }

    /// `HOST:PORT` of member `id`'s admin API.
    pub fn admin_addr(&self, id: u64) -> String {
        format!("{}:{ADMIN_PORT}", self.member_host(id))
    }

    /// `--members` for members 1..=replicas.
    pub fn members_flag(&self, replicas: i32) -> String {
        (1..=replicas.max(0) as u64)
            .map(|id| format!("{id}={}", self.peer_addr(id)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The ensemble's cluster id: stable for a name in a namespace, so a re-created resource
    /// finds its retained volumes, and a volume of another ensemble is refused.
    pub fn cluster_id(&self) -> String {
        format!("{}.{}", self.namespace, self.name)
    }

    /// Where plain (unencrypted) clients connect, when the plain port is on.
    pub fn client_endpoint(&self) -> String {
        format!(
            "{}.{}.svc:{CLIENT_PORT}",
            self.client_service(),
            self.namespace
        )
    }

    /// Where TLS clients connect (the sidecar always does).
    pub fn secure_client_endpoint(&self) -> String {
        format!(
            "{}.{}.svc:{SECURE_CLIENT_PORT}",
            self.client_service(),
            self.namespace
        )
    }

    /// DNS names member `id`'s certificate answers to besides its identity: its own stable
    /// names and the client Service's, so clients that check host names (zkCli, kazoo, curl)
    /// accept whichever member the Service picks.
    pub fn member_dns_names(&self, id: u64) -> Vec<String> {
        let member = self.member_host(id);
        let client = self.client_service();
        let ns = &self.namespace;
        vec![
            format!("{member}.cluster.local"),
            member,
            format!("{client}.{ns}.svc"),
            format!("{client}.{ns}.svc.cluster.local"),
            format!("{client}.{ns}"),
            client,
        ]
    }

    /// Labels selecting this ensemble's pods.
    pub fn selector_labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("app.kubernetes.io/name".into(), "baton-ensemble".into()),
            ("app.kubernetes.io/instance".into(), self.name.clone()),
        ])
    }

    /// `selector_labels` as a label selector string.
    pub fn selector_string(&self) -> String {
        self.selector_labels()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Labels of objects outside the ensemble's namespace (no owner reference possible): say
    /// whose they are, so they are found again to be pruned and cleaned up.
    pub fn foreign_labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.labels();
        labels.insert(ENSEMBLE_NAMESPACE_LABEL.into(), self.namespace.clone());
        labels.insert(ENSEMBLE_NAME_LABEL.into(), self.name.clone());
        labels
    }

    /// `foreign_labels` as a label selector string (for list and prune).
    pub fn foreign_selector(&self) -> String {
        format!(
            "{ENSEMBLE_NAMESPACE_LABEL}={},{ENSEMBLE_NAME_LABEL}={}",
            self.namespace, self.name
        )
    }

    /// Labels of every object the operator makes for this ensemble.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.selector_labels();
        labels.insert("app.kubernetes.io/component".into(), "ensemble".into());
        labels.insert("app.kubernetes.io/managed-by".into(), FIELD_MANAGER.into());
        labels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_ordinals_plus_one_with_stable_dns_names() {
        let n = EnsembleNames::new("zk", "prod");
        assert_eq!(n.pod(1), "zk-0");
        assert_eq!(n.member_of_pod("zk-4"), Some(5));
        assert_eq!(n.member_of_pod("zk-peers-0"), None);
        assert_eq!(n.member_of_pod("zkx-0"), None);
        assert_eq!(n.peer_addr(2), "zk-1.zk-peers.prod.svc:2888");
        assert_eq!(
            n.members_flag(2),
            "1=zk-0.zk-peers.prod.svc:2888,2=zk-1.zk-peers.prod.svc:2888"
        );
        assert_eq!(n.client_endpoint(), "zk-client.prod.svc:2181");
        assert_eq!(n.ca_config_map_in("prod"), "zk-ca");
        assert_eq!(n.ca_config_map_in("web"), "prod.zk-ca");
        assert_eq!(n.token_review_binding(), "baton.dev:ensemble:prod:zk");
        assert_eq!(n.secure_client_endpoint(), "zk-client.prod.svc:2281");
        assert_eq!(
            n.member_dns_names(2),
            [
                "zk-1.zk-peers.prod.svc.cluster.local",
                "zk-1.zk-peers.prod.svc",
                "zk-client.prod.svc",
                "zk-client.prod.svc.cluster.local",
                "zk-client.prod",
                "zk-client",
            ]
        );
    }
}
