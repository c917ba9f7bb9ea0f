//! The `CoordinationEnsemble` custom resource (`baton.dev/v1alpha1`): what users write and what
//! the operator reports back. `baton-operator crd` prints the CRD generated from these types.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LocalObjectReference, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Kubernetes quantity for volume sizes: a number with an optional binary or decimal suffix.
pub const SIZE_PATTERN: &str = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$";
/// Durations as every Baton binary reads them (`baton_duration`, Go's style): `500ms`, `30s`,
/// `1m30s`, `2h`, `1.5s`, or `0`. No bare number other than `0`, no spaces, no other units.
pub const DURATION_PATTERN: &str = r"^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ms|h|m|s))+)$";

/// A Baton ensemble: a ZooKeeper-compatible, Raft-replicated coordination service run as a
/// StatefulSet of 1, 3, 5 or 7 members.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "baton.dev",
    version = "v1alpha1",
    kind = "CoordinationEnsemble",
    namespaced,
    shortname = "ce",
    status = "CoordinationEnsembleStatus",
    derive = "PartialEq",
    doc = "A Baton ensemble: 1, 3, 5 or 7 members of baton-ensemble, reconciled by baton-operator.",
    scale = r#"{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.readyReplicas","labelSelectorPath":".status.selector"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas"}"#,
    printcolumn = r#"{"name":"Leader","type":"integer","description":"Raft id of the leading member","jsonPath":".status.leader"}"#,
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.restoreFrom) || (has(oldSelf.restoreFrom) && self.restoreFrom == oldSelf.restoreFrom)",
    "message": "restoreFrom is only for a new ensemble: it cannot be added or changed later (create another CoordinationEnsemble with it)"
}]))]
pub struct CoordinationEnsembleSpec {
    /// Number of members: 1, 3, 5 or 7 (odd, so a majority survives a minority failing).
    #[serde(default = "default_replicas")]
    #[schemars(extend("enum" = [1, 3, 5, 7]))]
    pub replicas: i32,
    /// Container image holding `baton-ensemble`; the operator's `--default-image` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Image pull policy of the ensemble container (Kubernetes' default when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Always", "IfNotPresent", "Never"]))]
    pub image_pull_policy: Option<String>,
    /// CPU and memory of each member's container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Each member's persistent volume (Raft log and snapshots). Fixed at creation: a
    /// StatefulSet's volume claim templates cannot change.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == oldSelf",
        "message": "storage cannot change after creation (volume claim templates are immutable)"
    }]))]
    pub storage: StorageSpec,
    /// Bounds on the session timeouts the ensemble grants to clients.
    #[serde(default)]
    pub session_timeout: SessionTimeoutSpec,
    /// The PodDisruptionBudget that keeps voluntary evictions to one member at a time.
    #[serde(default)]
    pub pod_disruption_budget: PodDisruptionBudgetSpec,
    /// Where members may run: spread over nodes and zones by default.
    #[serde(default)]
    pub scheduling: SchedulingSpec,
    /// Settings of every pod the operator makes for this ensemble: the members (whose pods
    /// also run the restore init container) and the backup Jobs. A change rolls the members.
    #[serde(default, skip_serializing_if = "PodsSpec::is_empty")]
    pub pods: PodsSpec,
    /// The ServiceAccount `NAME` the members and the backup Jobs run as.
    #[serde(default, skip_serializing_if = "ServiceAccountSpec::is_empty")]
    pub service_account: ServiceAccountSpec,
    /// Defaults for sidecars that the operator's webhook injects into pods using this ensemble.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar: Option<SidecarDefaults>,
    /// Other namespaces whose pods may use this ensemble (its own is always served): the
    /// webhook injects sidecars there, the NetworkPolicy opens the client port to them and the
    /// CA certificate is published into each as the ConfigMap `NAMESPACE.NAME-ca`. Names only:
    /// no `*`, every namespace that may use the ensemble is listed by its owner.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "maxItems" = 256,
        "items" = {"type": "string", "minLength": 1, "maxLength": 63, "pattern": NAMESPACE_PATTERN}
    ))]
    pub allowed_namespaces: Vec<String>,
    /// Also serve ZooKeeper clients without TLS on port 2181 (for clients that cannot do TLS).
    /// Off by default: clients use TLS on port 2281 with the CA from the ConfigMap `NAME-ca`.
    #[serde(default)]
    pub plain_client_port: bool,
    /// Scheduled backups: a CronJob `NAME-backup` saves a snapshot of the ensemble to a
    /// PersistentVolumeClaim or an S3 bucket. Removing it deletes the CronJob (not the backups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupSpec>,
    /// Start a NEW ensemble from a backup: each bootstrapping member restores it into its empty
    /// data dir before its first start. Only at creation: adding or changing it later is
    /// refused (a restore replaces what a running ensemble holds: create another ensemble).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_from: Option<RestoreSource>,
    /// What one tenant can take: the quotas, kept in the ensemble's replicated settings and
    /// changed by the operator through `PUT /v1/settings` whenever they differ from these, and
    /// each member's free-space watermark (a flag).
    #[serde(default)]
    pub limits: LimitsSpec,
}

fn default_replicas() -> i32 {
    3
}

/// Persistent storage of each member.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Volume size as a Kubernetes quantity, e.g. `1Gi`.
    #[serde(default = "default_storage_size")]
    #[schemars(pattern(SIZE_PATTERN))]
    pub size: String,
    /// Storage class of the volumes; the cluster's default class when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

impl Default for StorageSpec {
    fn default() -> Self {
        StorageSpec {
            size: default_storage_size(),
            storage_class_name: None,
        }
    }
}

fn default_storage_size() -> String {
    "1Gi".into()
}

/// Quotas and the disk watermark (`spec.limits`). Byte sizes are integers (bytes), not
/// quantities: they are exactly what the members' flags and `GET /v1/settings` say, so the
/// spec, the status and the ensemble compare number for number (no rounding of `1.5Mi`), and
/// the API server checks their ranges itself. Each range keeps the ensemble usable: a quota
/// too small to hold a namespace's own nodes, or a watermark the volume cannot clear, is
/// refused.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LimitsSpec {
    /// Znodes one namespace (`/baton/<ns>` and below) may hold (default 100000).
    #[serde(default = "default_namespace_znodes")]
    #[schemars(range(min = 100, max = 100_000_000))]
    pub namespace_znodes: i64,
    /// Bytes (paths plus data) one namespace may hold (default 67108864: 64 MiB; 1 MiB to 64 GiB).
    #[serde(default = "default_namespace_bytes")]
    #[schemars(range(min = 1_048_576, max = 68_719_476_736_i64))]
    pub namespace_bytes: i64,
    /// Znodes everything outside `/baton/<ns>` may hold together (default 2000000).
    #[serde(default = "default_shared_znodes")]
    #[schemars(range(min = 1_000, max = 100_000_000))]
    pub shared_znodes: i64,
    /// Bytes everything outside `/baton/<ns>` may hold together (default 268435456: 256 MiB;
    /// 16 MiB to 64 GiB).
    #[serde(default = "default_shared_bytes")]
    #[schemars(range(min = 16_777_216, max = 68_719_476_736_i64))]
    pub shared_bytes: i64,
    /// Ephemeral nodes one session may own (default 10000).
    #[serde(default = "default_ephemerals_per_session")]
    #[schemars(range(min = 10, max = 1_000_000))]
    pub ephemerals_per_session: i64,
    /// Free bytes each member keeps on its volume: below it the NOSPACE alarm refuses writes
    /// that add data until twice this is free again (default 67108864: 64 MiB; 0 turns the
    /// alarm off). Each member's own flag, so a change rolls the members. Twice it must stay
    /// below `storage.size`, or the alarm could never clear.
    #[serde(default = "default_min_free_disk_bytes")]
    #[schemars(range(min = 0, max = 1_099_511_627_776_i64))]
    pub min_free_disk_bytes: i64,
}

/// The ensemble's built-in defaults (`baton_machine::settings`, `--min-free-disk-bytes`).
pub const DEFAULT_NAMESPACE_ZNODES: i64 = 100_000;
pub const DEFAULT_NAMESPACE_BYTES: i64 = 64 << 20;
pub const DEFAULT_SHARED_ZNODES: i64 = 2_000_000;
pub const DEFAULT_SHARED_BYTES: i64 = 256 << 20;
pub const DEFAULT_EPHEMERALS_PER_SESSION: i64 = 10_000;
pub const DEFAULT_MIN_FREE_DISK_BYTES: i64 = 64 << 20;

fn default_namespace_znodes() -> i64 {
    DEFAULT_NAMESPACE_ZNODES
}
fn default_namespace_bytes() -> i64 {
    DEFAULT_NAMESPACE_BYTES
}
fn default_shared_znodes() -> i64 {
    DEFAULT_SHARED_ZNODES
}
fn default_shared_bytes() -> i64 {
    DEFAULT_SHARED_BYTES
}
fn default_ephemerals_per_session() -> i64 {
    DEFAULT_EPHEMERALS_PER_SESSION
}
fn default_min_free_disk_bytes() -> i64 {
    DEFAULT_MIN_FREE_DISK_BYTES
}

impl Default for LimitsSpec {
    fn default() -> Self {
        LimitsSpec {
            namespace_znodes: DEFAULT_NAMESPACE_ZNODES,
            namespace_bytes: DEFAULT_NAMESPACE_BYTES,
            shared_znodes: DEFAULT_SHARED_ZNODES,
            shared_bytes: DEFAULT_SHARED_BYTES,
            ephemerals_per_session: DEFAULT_EPHEMERALS_PER_SESSION,
            min_free_disk_bytes: DEFAULT_MIN_FREE_DISK_BYTES,
        }
    }
}

/// Session timeout bounds (ZooKeeper's minSessionTimeout and maxSessionTimeout).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionTimeoutSpec {
    /// Smallest session timeout granted: a duration such as `4s`, `1.5s` or `1m30s` (Go's
    /// style; units h, m, s, ms; a bare number is refused), at most `24h`.
    #[serde(default = "default_min_session_timeout")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub min: String,
    /// Largest session timeout granted: a duration such as `40s` or `1m30s` (Go's style; units
    /// h, m, s, ms; a bare number is refused), at most `24h`.
    #[serde(default = "default_max_session_timeout")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub max: String,
}

impl Default for SessionTimeoutSpec {
    fn default() -> Self {
        SessionTimeoutSpec {
            min: default_min_session_timeout(),
            max: default_max_session_timeout(),
        }
    }
}

fn default_min_session_timeout() -> String {
    baton_duration::format(std::time::Duration::from_secs(4))
}

fn default_max_session_timeout() -> String {
    baton_duration::format(std::time::Duration::from_secs(40))
}

/// The PodDisruptionBudget (maxUnavailable 1).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodDisruptionBudgetSpec {
    /// Whether the operator manages a PodDisruptionBudget for the members.
    #[serde(default = "default_true")]
    pub enabled: bool,
}

impl Default for PodDisruptionBudgetSpec {
    fn default() -> Self {
        PodDisruptionBudgetSpec { enabled: true }
    }
}

fn default_true() -> bool {
    true
}

/// How members are spread over the cluster.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingSpec {
    /// Pod anti-affinity between members on one node.
    #[serde(default)]
    pub anti_affinity: AntiAffinity,
    /// Whether to spread members evenly over zones (`topology.kubernetes.io/zone`).
    #[serde(default = "default_true")]
    pub zone_spread: bool,
    /// Node labels every member's node must carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Taints the members tolerate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
}

impl Default for SchedulingSpec {
    fn default() -> Self {
        SchedulingSpec {
            anti_affinity: AntiAffinity::default(),
            zone_spread: true,
            node_selector: None,
            tolerations: None,
        }
    }
}

/// Pod settings shared by the members and the backup Jobs (`spec.pods`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodsSpec {
    /// Secrets of the ensemble's namespace to pull the image with (a private registry).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = 16))]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// The pods' PriorityClass (e.g. `system-cluster-critical`, or one of your own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(OBJECT_NAME_PATTERN))]
    pub priority_class_name: Option<String>,
    /// Labels added to the pods (cost allocation, policy selectors). The operator's own keys
    /// (`app.kubernetes.io/name`, `instance`, `component`, `managed-by`) are refused: the
    /// Services, the PodDisruptionBudget and the NetworkPolicy select pods by them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to the pods (e.g. a service mesh's or a log shipper's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub annotations: BTreeMap<String, String>,
}

impl PodsSpec {
    fn is_empty(&self) -> bool {
        *self == PodsSpec::default()
    }
}

/// The members' ServiceAccount (`spec.serviceAccount`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountSpec {
    /// Annotations of the ServiceAccount `NAME`, e.g. `eks.amazonaws.com/role-arn` (IRSA):
    /// EKS then gives its pods (members, backup Jobs) a web-identity token for that IAM role,
    /// which S3 backups and restores use when no `credentialsSecret` is named.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub annotations: BTreeMap<String, String>,
}

impl ServiceAccountSpec {
    fn is_empty(&self) -> bool {
        self.annotations.is_empty()
    }
}

/// How strongly two members avoid sharing a node.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum AntiAffinity {
    /// Prefer different nodes, but schedule anyway on a small cluster.
    #[default]
    Preferred,
    /// Never two members on one node (a node failure costs at most one member).
    Required,
    /// No anti-affinity.
    None,
}

/// A PersistentVolumeClaim, Secret or ConfigMap name (RFC 1123 subdomain).
pub const OBJECT_NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$";

/// Scheduled backups of the ensemble (`spec.backup`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// When to take a backup, in cron syntax as a CronJob takes it (`0 3 * * *`, `@daily`),
    /// in the kube-controller-manager's time zone.
    #[schemars(length(min = 1, max = 128))]
    pub schedule: String,
    /// Where backups go: exactly one of `pvc` and `s3`.
    pub target: BackupTarget,
    /// How many of this ensemble's backups to keep at the target (older ones are deleted after
    /// each successful backup).
    #[serde(default = "default_keep")]
    #[schemars(range(min = 1, max = 1000))]
    pub keep: i32,
    /// Pause the schedule (the CronJob's `suspend`); the backup alert is quiet meanwhile.
    #[serde(default)]
    pub suspend: bool,
}

fn default_keep() -> i32 {
    7
}

/// Where backups are written: exactly one of `pvc` and `s3`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.pvc) != has(self.s3)",
    "message": "set exactly one of pvc and s3"
}]))]
pub struct BackupTarget {
    /// A PersistentVolumeClaim of the ensemble's namespace; files
    /// `CLUSTER-ID-yyyymmddThhmmssZ.baton-backup` in `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<PvcLocation>,
    /// An S3 (or S3-compatible) bucket; objects `PREFIX/CLUSTER-ID-INDEX-TIME.baton-backup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Backup>,
}

/// A folder (backups) or a file (a restore) on a PersistentVolumeClaim.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PvcLocation {
    /// The claim, in the ensemble's namespace. Every pod that mounts it must be able to: for
    /// a restore every bootstrapping member at once, so ReadOnlyMany or ReadWriteMany.
    #[schemars(length(min = 1, max = 253), pattern(OBJECT_NAME_PATTERN))]
    pub claim_name: String,
    /// A path relative to the claim's root: for backups the folder they go in (default: the
    /// root); for `restoreFrom` one backup file, or a folder ending in `/` whose newest backup
    /// is restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub path: Option<String>,
}

/// An S3 bucket and prefix backups are written under.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Backup {
    #[schemars(length(min = 1, max = 255))]
    pub bucket: String,
    /// Key prefix, e.g. `baton/prod/` (a `/` is added when missing); the bucket's root when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub prefix: Option<String>,
    /// Endpoint of an S3-compatible store (e.g. `https://minio.storage.svc:9000`); AWS when
    /// absent. Over HTTPS its certificate is checked against the image's CA bundle, or
    /// against `caConfigMap`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub region: Option<String>,
    /// A Secret of the ensemble's namespace with the keys `AWS_ACCESS_KEY_ID` and
    /// `AWS_SECRET_ACCESS_KEY`. Without it the credentials come from the pod's environment: a
    /// web identity (`AWS_ROLE_ARN`, `AWS_WEB_IDENTITY_TOKEN_FILE`) that IRSA puts there for
    /// a ServiceAccount annotated `eks.amazonaws.com/role-arn` (`spec.serviceAccount`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(OBJECT_NAME_PATTERN))]
    pub credentials_secret: Option<String>,
    /// A ConfigMap of the ensemble's namespace whose key `ca.crt` holds the PEM certificates
    /// to trust for an `https://` endpoint (e.g. a private CA of an in-cluster MinIO). Mounted
    /// read-only and named by `SSL_CERT_FILE`, it REPLACES the image's system bundle for
    /// that container: add the public roots to it if the endpoint's certificate chains to
    /// one. Without it the system bundle is trusted. A missing ConfigMap or key keeps the
    /// pod from starting (the kubelet's `FailedMount` event says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(OBJECT_NAME_PATTERN))]
    pub ca_config_map: Option<String>,
}

/// The backup a new ensemble starts from: exactly one of `pvc` and `s3`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.pvc) != has(self.s3)",
    "message": "set exactly one of pvc and s3"
}]))]
pub struct RestoreSource {
    /// A backup file on a PersistentVolumeClaim (`path`), or the newest in a folder (`path`
    /// ending in `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<PvcLocation>,
    /// A backup object in S3 (`key`), or the newest under a prefix (`key` ending in `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Object>,
}

/// One S3 object, or the newest backup under a prefix.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Object {
    #[schemars(length(min = 1, max = 255))]
    pub bucket: String,
    /// The object's key, or a prefix ending in `/` (its newest backup).
    #[schemars(length(min = 1, max = 1024))]
    pub key: String,
    /// Endpoint of an S3-compatible store (e.g. `https://minio.storage.svc:9000`); AWS when
    /// absent. Over HTTPS its certificate is checked against the image's CA bundle, or
    /// against `caConfigMap`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub region: Option<String>,
    /// A Secret of the ensemble's namespace with the keys `AWS_ACCESS_KEY_ID` and
    /// `AWS_SECRET_ACCESS_KEY`. Without it the credentials come from the pod's environment: a
    /// web identity (`AWS_ROLE_ARN`, `AWS_WEB_IDENTITY_TOKEN_FILE`) that IRSA puts there for
    /// a ServiceAccount annotated `eks.amazonaws.com/role-arn` (`spec.serviceAccount`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(OBJECT_NAME_PATTERN))]
    pub credentials_secret: Option<String>,
    /// A ConfigMap of the ensemble's namespace whose key `ca.crt` holds the PEM certificates
    /// to trust for an `https://` endpoint (e.g. a private CA of an in-cluster MinIO). Mounted
    /// read-only and named by `SSL_CERT_FILE`, it REPLACES the image's system bundle for
    /// that container: add the public roots to it if the endpoint's certificate chains to
    /// one. Without it the system bundle is trusted. A missing ConfigMap or key keeps the
    /// pod from starting (the kubelet's `FailedMount` event says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(OBJECT_NAME_PATTERN))]
    pub ca_config_map: Option<String>,
}

/// A namespace name as Kubernetes allows it (RFC 1123 label); `*` does not match.
pub const NAMESPACE_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// Defaults for the sidecar the webhook injects (read by the webhook, not by the reconciler).
/// There is no image here: the sidecar runs inside other workloads' pods with their
/// service-account tokens, so its image comes only from the operator's `--sidecar-image`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct SidecarDefaults {
    /// Session timeout the sidecar asks for: a duration from `1s` to `10m` such as `10s` or
    /// `1m30s` (Go's style; units h, m, s, ms; a bare number is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub session_timeout: Option<String>,
    /// CPU and memory of the injected container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

/// What the operator last saw of the ensemble.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct CoordinationEnsembleStatus {
    /// `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Available, Progressing and Degraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Members whose `/readyz` would answer 200 (know the leader, caught up).
    #[serde(default)]
    pub ready_replicas: i32,
    /// Raft ids of the ensemble's voters, as the leader reports them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<i64>,
    /// Raft id of the leader (absent when none is known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<i64>,
    /// `host:port` for plain (unencrypted) ZooKeeper clients; set only when
    /// `spec.plainClientPort` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_endpoint: Option<String>,
    /// `host:port` for ZooKeeper clients over TLS (the client Service's port 2281); the CA
    /// certificate is `ca.crt` in the ConfigMap `NAME-ca`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_client_endpoint: Option<String>,
    /// Label selector of the member pods (for the scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// The membership or rollout step in progress, so a stuck one can be reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepStatus>,
    /// The membership operation in flight, written before each of its steps is taken, so an
    /// operator that restarts (or another replica that takes over) carries on from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub membership_operation: Option<MembershipOperation>,
    /// The backup CronJob's last run (with `spec.backup`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<LastBackup>,
    /// The backup the members were restored from at creation (`spec.restoreFrom`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreStatus>,
    /// The ensemble's replicated settings as its leader last reported them (`GET
    /// /v1/settings`), after any change the operator made to match `spec.limits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<SettingsStatus>,
    /// The ensemble's feature level: which behaviour changes every member applies (the
    /// highest `featureLevel` a member reports in `GET /v1/status`). During a rolling upgrade
    /// it stays where it was; the ensemble raises it by itself once every member runs a build
    /// that supports the next level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_level: Option<i64>,
    /// The lowest `maxFeatureLevel` among the members that answered: the level the ensemble
    /// can rise to now (the previous release's while some member still runs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_feature_level: Option<i64>,
}

/// The replicated settings the ensemble applies (`status.settings`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettingsStatus {
    /// Whether `/baton/<ns>` is reserved to namespace `<ns>`'s identities.
    pub check_identities: bool,
    pub namespace_znodes: i64,
    pub namespace_bytes: i64,
    pub shared_znodes: i64,
    pub shared_bytes: i64,
    pub ephemerals_per_session: i64,
    /// Members whose NOSPACE alarm is up (free space under `limits.minFreeDiskBytes`): while
    /// any is, every member refuses writes that add data. Also the condition `DiskAlarm`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alarms: Vec<AlarmStatus>,
}

/// One member's alarm.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlarmStatus {
    pub member: i64,
    /// `nospace`.
    pub kind: String,
}

/// The backup CronJob's last run, from its status.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastBackup {
    /// When the last run was scheduled (RFC 3339).
    pub time: String,
    pub result: BackupResult,
    /// The Job of that run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// When the last successful run completed (RFC 3339); absent before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_time: Option<String>,
}

/// How the backup CronJob's last run went.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum BackupResult {
    Running,
    Succeeded,
    Failed,
}

/// The restore of a new ensemble (`spec.restoreFrom`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatus {
    /// Where from: `pvc://CLAIM/PATH` or `s3://BUCKET/KEY`, as `spec.restoreFrom` said at
    /// creation (a different one later is refused).
    pub source: String,
    /// When the restored ensemble first had a quorum (RFC 3339). From then on members start
    /// without the restore step (the pods are rolled once to drop it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
}

/// A membership operation in flight: one member added, removed, restarted or reseeded, or
/// leadership moved, step by step (`OperationKind::steps`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MembershipOperation {
    pub kind: OperationKind,
    /// The step about to be taken or awaited; the ones before it are done.
    pub step: OperationStep,
    /// The member added, removed or restarted; for `transfer-leader`, the member leadership
    /// moves off.
    pub member_id: i64,
    /// The StatefulSet's replicas once the operation is done.
    pub target_replicas: i32,
    /// When the operation started (RFC 3339).
    pub started_at: String,
}

/// What a membership operation does.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OperationKind {
    /// Scale up by one member.
    Add,
    /// Scale down by one member (or drop a learner or a voter without a pod).
    Remove,
    /// Move leadership off a member (before it is removed or restarted).
    TransferLeader,
    /// Restart a member at the StatefulSet's new revision (rolling update).
    Restart,
    /// Rebuild a member from the ensemble (annotation `baton.dev/reseed-member`): remove it from
    /// Raft, replace its data volume, add it back as a learner.
    Reseed,
}

/// One step of a membership operation. Action steps do one thing (an apply, an admin call, a
/// pod deletion); await steps wait for its effect.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OperationStep {
    /// `add`: the StatefulSet gets the new member's pod.
    RaiseReplicas,
    /// `add`, `reseed`: `POST /v1/members` on the leader; the member joins as a learner.
    AddLearner,
    /// `add`, `reseed`: the leader promotes the learner to voter once it has caught up.
    AwaitPromotion,
    /// `remove`, `reseed`: `DELETE /v1/members/{id}` on the leader.
    RemoveMember,
    /// `remove`, `reseed`: every remaining member has dropped it.
    AwaitRemoval,
    /// `remove`: the StatefulSet loses the member's pod.
    LowerReplicas,
    /// `transfer-leader`: `POST /v1/leader/transfer` on the leader.
    TransferLeader,
    /// `transfer-leader`: another member leads with a quorum.
    AwaitLeader,
    /// `restart`: the member's pod is deleted.
    DeletePod,
    /// `restart`, `reseed`: the StatefulSet controller has re-created the pod (for `reseed`,
    /// with a new volume).
    AwaitPod,
    /// `reseed`: the member's PersistentVolumeClaim and pod are deleted.
    DeleteVolume,
}

impl OperationKind {
    /// The steps of this kind of operation, in order.
    pub fn steps(self) -> &'static [OperationStep] {
        use OperationStep::*;
        match self {
            OperationKind::Add => &[RaiseReplicas, AddLearner, AwaitPromotion],
            OperationKind::Remove => &[RemoveMember, AwaitRemoval, LowerReplicas],
            OperationKind::TransferLeader => &[TransferLeader, AwaitLeader],
            OperationKind::Restart => &[DeletePod, AwaitPod],
            OperationKind::Reseed => &[
                RemoveMember,
                AwaitRemoval,
                DeleteVolume,
                AwaitPod,
                AddLearner,
                AwaitPromotion,
            ],
        }
    }
}

/// A step the operator started and is waiting on.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepStatus {
    /// What the step does, e.g. `AddMember 4` or `RestartMember 2`.
    pub description: String,
    /// When the step started (RFC 3339).
    pub since: String,
}

/// Every CRD the operator owns, as one multi-document YAML stream (what `crds/` holds).
pub fn crd_yaml() -> Result<String, serde_saphyr::ser::Error> {
    let crd = CoordinationEnsemble::crd();
    let body = serde_saphyr::to_string(&crd)?;
    Ok(format!(
        "# Generated by `baton-operator crd` from operator/src/crd.rs; do not edit.\n---\n{body}"
    ))
}
