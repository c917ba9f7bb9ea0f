//! The members' StatefulSet: ordinal → member id, bootstrap or join decided per pod at start,
//! one volume per member, the `NAME-tls` Secret mounted read-only (every port speaks TLS),
//! HTTPS probes on the admin port, spread over nodes and zones, non-root with a read-only root
//! filesystem.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMapEnvSource, Container, ContainerPort, EnvFromSource, EnvVar,
    EnvVarSource, HTTPGetAction, LocalObjectReference, ObjectFieldSelector, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PodAffinityTerm, PodAntiAffinity, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, SeccompProfile, SecretKeySelector, SecretVolumeSource, SecurityContext,
    TopologySpreadConstraint, Volume, VolumeMount, VolumeResourceRequirements,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::backup;
use super::identity::SUPER_DIGEST_KEY;
use crate::crd::{AntiAffinity, CoordinationEnsembleSpec};
use crate::names::{
    ADMIN_PORT, CLIENT_PORT, DATA_VOLUME, EnsembleNames, MEMBER_TLS_DIR, PEER_PORT,
    SECURE_CLIENT_PORT,
};
use crate::validate::ValidSpec;

/// Where each member's volume is mounted; the data dir is a folder inside it (a fresh volume's
/// root may hold `lost+found`).
pub const DATA_DIR: &str = "/var/lib/baton/data";
/// Unprivileged uid and gid the members run as (distroless' "nonroot").
const RUN_AS: i64 = 65532;

/// The container's entry point. The member id comes from the pod name's ordinal (StatefulSet
/// pods are `NAME-ORDINAL`); members at or beyond the bootstrap count start with `--join`
/// (ignored by baton-ensemble once the data dir holds a configuration), so a member created by
/// a scale-up waits for the operator's `POST /v1/members` instead of bootstrapping a second
/// ensemble. The cluster id and `--members` arrive as BATON_CLUSTER_ID and BATON_MEMBERS.
/// The member's certificate is `member-ID.crt`/`.key` in BATON_TLS_DIR (the mounted
/// `NAME-tls` Secret, where every member's pair lies: the id picks this member's), passed as
/// BATON_TLS_CERT/BATON_TLS_KEY; BATON_TLS_CA is set in the pod spec.
pub const START_SCRIPT: &str = r#"set -eu
ordinal="${POD_NAME##*-}"
case "$ordinal" in
  ''|*[!0-9]*) echo "cannot derive a member id from pod name '$POD_NAME'" >&2; exit 64 ;;
esac
export BATON_ID=$((ordinal + 1))
export BATON_TLS_CERT="${BATON_TLS_DIR:?}/member-$BATON_ID.crt"
export BATON_TLS_KEY="$BATON_TLS_DIR/member-$BATON_ID.key"
if [ "$ordinal" -ge "${BATON_BOOTSTRAP_REPLICAS:?}" ]; then set -- "$@" --join; fi
exec baton-ensemble "$@"
"#;

pub(super) fn statefulset(
    names: &EnsembleNames,
    meta: ObjectMeta,
    crd: &CoordinationEnsembleSpec,
    spec: &ValidSpec,
    replicas: i32,
) -> StatefulSet {
    let selector = names.selector_labels();
    StatefulSet {
        metadata: meta,
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(names.peer_service()),
            // Members of a new ensemble must start together: none is ready until a quorum runs.
            pod_management_policy: Some("Parallel".into()),
            // The operator restarts members itself, followers first and the leader last.
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".into()),
                rolling_update: None,
            }),
            // A scaled-away member's volume must go: re-created later, it has to join afresh.
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some("Retain".into()),
                    when_scaled: Some("Delete".into()),
                },
            ),
            selector: LabelSelector {
                match_labels: Some(selector.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(pod_meta(crd, names.labels())),
                spec: Some(pod_spec(names, crd, spec, &selector)),
            },
            volume_claim_templates: Some(vec![volume_claim(crd)]),
            ..StatefulSetSpec::default()
        }),
        status: None,
    }
}

/// A pod template's labels and annotations: `spec.pods`' with the operator's `labels` (which
/// validation keeps `spec.pods.labels` from naming) on top.
pub(super) fn pod_meta(
    crd: &CoordinationEnsembleSpec,
    labels: BTreeMap<String, String>,
) -> ObjectMeta {
    let mut all = crd.pods.labels.clone();
    all.extend(labels);
    ObjectMeta {
        labels: Some(all),
        annotations: Some(crd.pods.annotations.clone()).filter(|a| !a.is_empty()),
        ..ObjectMeta::default()
    }
}

/// `spec.pods.imagePullSecrets`, as a pod spec takes them.
pub(super) fn image_pull_secrets(
    crd: &CoordinationEnsembleSpec,
) -> Option<Vec<LocalObjectReference>> {
    Some(crd.pods.image_pull_secrets.clone()).filter(|s| !s.is_empty())
}

fn pod_spec(
    names: &EnsembleNames,
    crd: &CoordinationEnsembleSpec,
    spec: &ValidSpec,
    selector: &BTreeMap<String, String>,
) -> PodSpec {
    let restore = spec.restore.as_ref().filter(|r| r.pending);
    PodSpec {
        containers: vec![container(names, crd, spec)],
        security_context: Some(pod_security_context()),
        affinity: affinity(crd.scheduling.anti_affinity, selector),
        topology_spread_constraints: crd.scheduling.zone_spread.then(|| {
            vec![TopologySpreadConstraint {
                max_skew: 1,
                topology_key: "topology.kubernetes.io/zone".into(),
                when_unsatisfiable: "ScheduleAnyway".into(),
                label_selector: Some(LabelSelector {
                    match_labels: Some(selector.clone()),
                    ..LabelSelector::default()
                }),
                ..TopologySpreadConstraint::default()
            }]
        }),
        node_selector: crd.scheduling.node_selector.clone(),
        tolerations: crd.scheduling.tolerations.clone(),
        // For the restore init container too: it runs Baton's image in this pod.
        image_pull_secrets: image_pull_secrets(crd),
        priority_class_name: crd.pods.priority_class_name.clone(),
        // The member checks sidecars' tokens with the TokenReview API as this ServiceAccount
        // (bound to system:auth-delegator), through the token mounted here.
        service_account_name: Some(names.service_account()),
        automount_service_account_token: Some(true),
        termination_grace_period_seconds: Some(30),
        volumes: Some({
            let mut volumes = vec![
                Volume {
                    name: "tmp".into(),
                    empty_dir: Some(Default::default()),
                    ..Volume::default()
                },
                secret_volume("tls", names.tls_secret()),
            ];
            volumes.extend(restore.map(backup::restore_volumes).into_iter().flatten());
            volumes
        }),
        // A new ensemble restored from a backup: each bootstrapping member fills its empty
        // data dir before its first start. Gone once the ensemble has had a quorum.
        init_containers: restore.map(|r| vec![backup::restore_container(names, crd, spec, r)]),
        ..PodSpec::default()
    }
}

/// A Secret mounted read-only: owner and group (fsGroup) read, nobody else; the containers
/// run as that group.
pub(super) fn secret_volume(name: &str, secret: String) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret),
            default_mode: Some(0o440),
            optional: Some(false),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// Non-root (distroless' "nonroot" uid and gid, which also owns the volumes), RuntimeDefault
/// seccomp: every pod the operator makes.
pub(super) fn pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS),
        run_as_group: Some(RUN_AS),
        fs_group: Some(RUN_AS),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}

/// No privileges, no capabilities, a read-only root filesystem: every container.
pub(super) fn container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}

fn container(names: &EnsembleNames, crd: &CoordinationEnsembleSpec, spec: &ValidSpec) -> Container {
    let probe = |path: &str, period: i32, failures: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("admin".into()),
            // The admin port serves only HTTPS; /healthz and /readyz need no client certificate,
            // and the kubelet does not verify the serving certificate.
            scheme: Some("HTTPS".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(2),
        ..Probe::default()
    };
    let port = |name: &str, port: i32| ContainerPort {
        name: Some(name.into()),
        container_port: port,
        protocol: Some("TCP".into()),
        ..ContainerPort::default()
    };
    Container {
        name: "ensemble".into(),
        image: Some(spec.image.clone()),
        image_pull_policy: crd.image_pull_policy.clone(),
        // `$0` of the script is the program name; the flags follow as "$@".
        command: Some(vec![
            "/bin/sh".into(),
            "-c".into(),
            START_SCRIPT.into(),
            "baton-ensemble".into(),
        ]),
        args: Some(vec![
            format!("--data-dir={DATA_DIR}"),
            if spec.plain_client_port {
                format!("--client-addr=[::]:{CLIENT_PORT}")
            } else {
                "--client-addr=off".into()
            },
            format!("--secure-client-addr=[::]:{SECURE_CLIENT_PORT}"),
            format!("--peer-addr=[::]:{PEER_PORT}"),
            format!("--admin-addr=[::]:{ADMIN_PORT}"),
            format!("--min-session-timeout={}", spec.min_session_timeout),
            format!("--max-session-timeout={}", spec.max_session_timeout),
            // Each member's own watermark (not replicated): a change rolls the members.
            format!("--min-free-disk-bytes={}", spec.limits.min_free_disk_bytes),
        ]),
        env: Some(vec![
            EnvVar {
                name: "POD_NAME".into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "metadata.name".into(),
                        ..ObjectFieldSelector::default()
                    }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            },
            plain_env("BATON_TLS_DIR", MEMBER_TLS_DIR),
            plain_env("BATON_TLS_CA", &format!("{MEMBER_TLS_DIR}/ca.crt")),
            // `k8s` auth packets are checked with TokenReview, and only sessions of namespace
            // NS may use /baton/NS/... (DESIGN.md §4, Tenancy).
            plain_env("BATON_K8S_AUTH", "true"),
            // The first value of the replicated setting; the operator keeps it on with
            // `PUT /v1/settings` (an ensemble made before the settings, or restored from a
            // backup without the policy, is turned on that way).
            plain_env("BATON_CHECK_IDENTITIES", "true"),
            // From the Secret, never a literal: the StatefulSet is readable more widely.
            EnvVar {
                name: "BATON_SUPER_DIGEST".into(),
                value: None,
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: names.super_secret(),
                        key: SUPER_DIGEST_KEY.into(),
                        optional: Some(false),
                    }),
                    ..EnvVarSource::default()
                }),
            },
        ]),
        env_from: Some(vec![EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: names.config_map(),
                optional: Some(false),
            }),
            ..EnvFromSource::default()
        }]),
        ports: Some({
            let mut ports = vec![
                port("client-tls", SECURE_CLIENT_PORT),
                port("peer", PEER_PORT),
                port("admin", ADMIN_PORT),
            ];
            if spec.plain_client_port {
                ports.push(port("client", CLIENT_PORT));
            }
            ports
        }),
        // Ready = knows the leader and has applied everything committed (the client Service
        // and the PodDisruptionBudget count only such members).
        readiness_probe: Some(probe("/readyz", 5, 2)),
        // Alive = the process answers; a member without a quorum is not restarted for it.
        liveness_probe: Some(probe("/healthz", 10, 6)),
        resources: crd.resources.clone(),
        security_context: Some(container_security_context()),
        volume_mounts: Some(vec![
            VolumeMount {
                name: DATA_VOLUME.into(),
                mount_path: "/var/lib/baton".into(),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: "tmp".into(),
                mount_path: "/tmp".into(),
                ..VolumeMount::default()
            },
            // Not a subPath mount: the kubelet refreshes these files when the Secret changes
            // (renewal, scale-up), and the member re-reads them without a restart.
            VolumeMount {
                name: "tls".into(),
                mount_path: MEMBER_TLS_DIR.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
        ]),
        ..Container::default()
    }
}

pub(super) fn plain_env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn affinity(mode: AntiAffinity, selector: &BTreeMap<String, String>) -> Option<Affinity> {
    let term = PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(selector.clone()),
            ..LabelSelector::default()
        }),
        topology_key: "kubernetes.io/hostname".into(),
        ..PodAffinityTerm::default()
    };
    let anti = match mode {
        AntiAffinity::None => return None,
        AntiAffinity::Preferred => PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: term,
                },
            ]),
            ..PodAntiAffinity::default()
        },
        AntiAffinity::Required => PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![term]),
            ..PodAntiAffinity::default()
        },
    };
    Some(Affinity {
        pod_anti_affinity: Some(anti),
        ..Affinity::default()
    })
}

fn volume_claim(crd: &CoordinationEnsembleSpec) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(DATA_VOLUME.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: crd.storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(crd.storage.size.clone()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}
