//! The injected `baton-sidecar` container: env from the downward API, the ensemble's endpoint and
//! defaults, the full HTTP API on localhost and kubelet probes on its read-only probe listener.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, Probe, ResourceRequirements, SeccompProfile, SecurityContext, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::crd::SidecarDefaults;

/// Name of the injected container; a pod that has one is never injected again.
pub const CONTAINER_NAME: &str = "baton-sidecar";
/// Where the sidecar's HTTP API listens: localhost only (anyone reaching it can resign and take
/// locks as this pod), so the app reaches it and the network does not.
pub const LISTEN: &str = "127.0.0.1:4040";
/// Port of the sidecar's read-only probe listener (`--probe-listen`): kubelet probes go to the
/// pod IP, never its localhost; this listener answers only GETs of health, readiness, leader and
/// metrics, so nothing on the network can take a lock or resign through it.
pub const PROBE_PORT: i32 = 4041;
/// `--probe-listen`: every address of the pod (IPv4; the probes come to the pod IP).
pub const PROBE_LISTEN: &str = "[::]:4041";
/// Name of the probe port in the pod spec.
pub const PROBE_PORT_NAME: &str = "baton-probe";
/// Volume holding the ensemble's CA certificate (the ConfigMap `ENSEMBLE-ca`).
pub const CA_VOLUME: &str = "baton-ensemble-ca";
/// Where the sidecar finds the ensemble's CA: it connects to the TLS client port and trusts
/// only this CA.
pub const CA_DIR: &str = "/etc/baton/ensemble-ca";
/// `--ensemble-ca`, in `CA_DIR`.
pub const CA_FILE: &str = "/etc/baton/ensemble-ca/ca.crt";
/// Volume holding the projected ServiceAccount token the sidecar presents to the ensemble
/// (ZooKeeper auth scheme `k8s`; the ensemble checks it with the TokenReview API).
pub const TOKEN_VOLUME: &str = "baton-token";
/// Where that token is mounted.
pub const TOKEN_DIR: &str = "/var/run/secrets/baton";
/// `BATON_TOKEN_FILE`: the kubelet rewrites it before it expires; the sidecar re-reads it on
/// every (re)connect.
pub const TOKEN_FILE: &str = "/var/run/secrets/baton/token";
/// Lifetime asked of the kubelet for that token (it renews at 80%).
pub const TOKEN_EXPIRATION_SECONDS: i64 = 3600;
/// Ready when the session is connected.
pub const READYZ_PATH: &str = "/readyz";
/// Ready only on the leader of the first election (the pod's Ready condition follows it).
pub const LEADER_READY_PATH: &str = "/leader/ready";

/// Everything the container depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct SidecarSpec {
    /// Image holding `baton-sidecar`: the operator's `--sidecar-image`, never an ensemble's.
    pub image: String,
    /// `HOST:PORT[,HOST:PORT]` of the ensemble's TLS client port.
    pub ensemble_endpoint: String,
    /// Elections to stand in, comma-separated.
    pub elections: String,
    /// `--address` after `$(BATON_POD_IP)`, e.g. `:8080`; empty for the bare IP.
    pub address_port_suffix: String,
    /// Whether the pod's service account token is mounted (the sidecar labels its pod with it).
    pub label_pod: bool,
    /// `baton.dev/mirror-lease: "true"`: `BATON_MIRROR_LEASE=true` (with `label_pod` only).
    pub mirror_lease: bool,
    /// `baton.dev/app-health`: the URL the sidecar checks (`BATON_APP_HEALTH`).
    pub app_health: Option<String>,
    /// `baton.dev/candidacy: app`: `BATON_CANDIDACY=app`.
    pub app_candidacy: bool,
    /// Native sidecar (an init container with `restartPolicy: Always`).
    pub native: bool,
    /// What the readiness probe GETs: `READYZ_PATH` or `LEADER_READY_PATH`.
    pub ready_path: &'static str,
    /// The ensemble's `spec.sidecar`.
    pub defaults: SidecarDefaults,
}

/// The container to inject.
pub fn container(spec: &SidecarSpec) -> Container {
    let mut env = vec![
        field_env("BATON_POD_IP", "status.podIP"),
        field_env("BATON_IDENTITY", "metadata.name"),
        plain_env("BATON_ENSEMBLE", &spec.ensemble_endpoint),
        plain_env("BATON_ENSEMBLE_CA", CA_FILE),
        plain_env("BATON_LISTEN", LISTEN),
        plain_env("BATON_PROBE_LISTEN", PROBE_LISTEN),
        plain_env("BATON_ELECTION", &spec.elections),
        plain_env("BATON_TOKEN_FILE", TOKEN_FILE),
        // The znode namespace (/baton/<namespace>/...), not only a label: always set.
        field_env("BATON_NAMESPACE", "metadata.namespace"),
        plain_env(
            "BATON_ADDRESS",
            &format!("$(BATON_POD_IP){}", spec.address_port_suffix),
        ),
    ];
    if let Some(timeout) = &spec.defaults.session_timeout {
        env.push(plain_env("BATON_SESSION_TIMEOUT", timeout));
    }
    if let Some(url) = &spec.app_health {
        env.push(plain_env("BATON_APP_HEALTH", url));
    }
    if spec.app_candidacy {
        env.push(plain_env("BATON_CANDIDACY", "app"));
    }
    if spec.label_pod {
        env.push(field_env("BATON_POD", "metadata.name"));
        if spec.mirror_lease {
            env.push(plain_env("BATON_MIRROR_LEASE", "true"));
        }
    }
    Container {
        name: CONTAINER_NAME.into(),
        image: Some(spec.image.clone()),
        command: Some(vec!["baton-sidecar".into()]),
        env: Some(env),
        volume_mounts: Some(vec![
            VolumeMount {
                name: CA_VOLUME.into(),
                mount_path: CA_DIR.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: TOKEN_VOLUME.into(),
                mount_path: TOKEN_DIR.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
        ]),
        // Native sidecars start before, and stop after, the app containers; SIGTERM then
        // resigns every election and releases every lock at once.
        restart_policy: spec.native.then(|| "Always".into()),
        ports: Some(vec![ContainerPort {
            name: Some(PROBE_PORT_NAME.into()),
            container_port: PROBE_PORT,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(http_probe(spec.ready_path, 5, 2)),
        // Restarts a wedged sidecar; generous, since a restart costs the pod its session.
        liveness_probe: Some(http_probe("/healthz", 10, 3)),
        resources: Some(
            spec.defaults
                .resources
                .clone()
                .unwrap_or_else(default_resources),
        ),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Capabilities::default()
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..SeccompProfile::default()
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    }
}

/// Requests and limits when the ensemble's `spec.sidecar.resources` names none: one session and
/// a small HTTP server.
pub fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".into(), Quantity("10m".into())),
            ("memory".into(), Quantity("32Mi".into())),
        ])),
        limits: Some(BTreeMap::from([(
            "memory".into(),
            Quantity("128Mi".into()),
        )])),
        ..ResourceRequirements::default()
    }
}

fn http_probe(path: &str, period_seconds: i32, failure_threshold: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(PROBE_PORT),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period_seconds),
        timeout_seconds: Some(2),
        failure_threshold: Some(failure_threshold),
        ..Probe::default()
    }
}

fn plain_env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
    }
}
