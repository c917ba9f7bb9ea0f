//! The injected `baton-sidecar` container: env from the downward API, the ensemble's endpoint and
//! defaults, an exec readiness probe that keeps the sidecar's HTTP API on localhost.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, EnvVarSource, ExecAction, ObjectFieldSelector, Probe,
    ResourceRequirements, SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::crd::SidecarDefaults;

/// Name of the injected container; a pod that has one is never injected again.
pub const CONTAINER_NAME: &str = "baton-sidecar";
/// Where the sidecar's HTTP API listens: localhost only (anyone reaching it can resign and take
/// locks as this pod), so the app reaches it and the network does not.
pub const LISTEN: &str = "127.0.0.1:4040";
/// The readiness probe runs this program in the sidecar's container (the Baton image holds it):
/// an HTTP probe would go to the pod IP, where the sidecar does not listen.
pub const PROBE_COMMAND: [&str; 3] = ["baton-operator", "probe", "--url"];
/// Ready when the session is connected.
pub const READYZ_URL: &str = "http://127.0.0.1:4040/readyz";
/// Ready only on the leader of the first election (the pod's Ready condition follows it).
pub const LEADER_READY_URL: &str = "http://127.0.0.1:4040/leader/ready";

/// Everything the container depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct SidecarSpec {
    /// Image holding `baton-sidecar` (and `baton-operator`, for the probe).
    pub image: String,
    /// `HOST:PORT[,HOST:PORT]` of the ensemble's clients.
    pub ensemble_endpoint: String,
    /// Elections to stand in, comma-separated.
    pub elections: String,
    /// `--address` after `$(BATON_POD_IP)`, e.g. `:8080`; empty for the bare IP.
    pub address_port_suffix: String,
    /// Whether the pod's service account token is mounted (the sidecar labels its pod with it).
    pub label_pod: bool,
    /// Native sidecar (an init container with `restartPolicy: Always`).
    pub native: bool,
    /// What the readiness probe GETs: `READYZ_URL` or `LEADER_READY_URL`.
    pub probe_url: &'static str,
    /// The ensemble's `spec.sidecar`.
    pub defaults: SidecarDefaults,
}

/// The container to inject.
pub fn container(spec: &SidecarSpec) -> Container {
    let mut env = vec![
        field_env("BATON_POD_IP", "status.podIP"),
        field_env("BATON_IDENTITY", "metadata.name"),
        plain_env("BATON_ENSEMBLE", &spec.ensemble_endpoint),
        plain_env("BATON_LISTEN", LISTEN),
        plain_env("BATON_ELECTION", &spec.elections),
        plain_env(
            "BATON_ADDRESS",
            &format!("$(BATON_POD_IP){}", spec.address_port_suffix),
        ),
    ];
    if let Some(timeout) = &spec.defaults.session_timeout {
        env.push(plain_env("BATON_SESSION_TIMEOUT", timeout));
    }
    if spec.label_pod {
        env.push(field_env("BATON_POD", "metadata.name"));
        env.push(field_env("BATON_NAMESPACE", "metadata.namespace"));
    }
    Container {
        name: CONTAINER_NAME.into(),
        image: Some(
            spec.defaults
                .image
                .clone()
                .unwrap_or_else(|| spec.image.clone()),
        ),
        command: Some(vec!["baton-sidecar".into()]),
        env: Some(env),
        // Native sidecars start before, and stop after, the app containers; SIGTERM then
        // resigns every election and releases every lock at once.
        restart_policy: spec.native.then(|| "Always".into()),
        readiness_probe: Some(Probe {
            exec: Some(ExecAction {
                command: Some(
                    PROBE_COMMAND
                        .iter()
                        .chain([&spec.probe_url])
                        .map(|s| s.to_string())
                        .collect(),
                ),
            }),
            period_seconds: Some(5),
            timeout_seconds: Some(2),
            failure_threshold: Some(2),
            ..Probe::default()
        }),
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
