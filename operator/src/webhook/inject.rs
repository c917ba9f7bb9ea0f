//! The injection decision and the JSON patch: a pure function from the pod and the ensemble it
//! uses to the patch, unit-tested from inline YAML (`tests.rs`).

use json_patch::Patch;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::sidecar::{self, CONTAINER_NAME, SidecarSpec};
use crate::crd::{CoordinationEnsemble, SidecarDefaults};
use crate::names::{EnsembleNames, TOKEN_AUDIENCE};

/// `"true"` asks for the sidecar.
pub const INJECT_ANNOTATION: &str = "baton.dev/inject";
/// Elections to stand in (comma-separated); the owning workload's name when absent.
pub const ELECTION_ANNOTATION: &str = "baton.dev/election";
/// The ensemble, `NAME` (the pod's namespace) or `NAMESPACE/NAME`; the namespace's only one when
/// absent.
pub const ENSEMBLE_ANNOTATION: &str = "baton.dev/ensemble";
/// `"false"` injects a plain container instead of a native sidecar (it gets SIGTERM together
/// with the app, and it keeps a Job's pod from completing).
pub const NATIVE_SIDECAR_ANNOTATION: &str = "baton.dev/native-sidecar";
/// `"leader"` makes the sidecar's readiness (and so the pod's) follow leadership of the first
/// election, without a probe on the app; `"session"` (the default) follows the session.
pub const READY_WHEN_ANNOTATION: &str = "baton.dev/ready-when";
/// `"true"` makes the sidecar mirror each election it leads into the Lease `baton-<election>`
/// (`BATON_MIRROR_LEASE`); only with the pod's API token mounted, as for pod labels.
pub const MIRROR_LEASE_ANNOTATION: &str = "baton.dev/mirror-lease";
/// `PORT/PATH` of the app's health endpoint in the pod (e.g. `8080/healthz`): the sidecar
/// checks `http://127.0.0.1:PORT/PATH` (`BATON_APP_HEALTH`) and stands aside while it fails.
pub const APP_HEALTH_ANNOTATION: &str = "baton.dev/app-health";
/// `"app"`: the pod stands in its elections only while the app holds
/// `GET /leader/NAME/campaign` open (`BATON_CANDIDACY=app`); `"always"` (the default): from
/// start to shutdown.
pub const CANDIDACY_ANNOTATION: &str = "baton.dev/candidacy";
/// The sidecar needs this long after SIGTERM to resign and release its locks.
pub const MIN_GRACE_SECONDS: i64 = 5;

/// Operator-wide injection settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectSettings {
    /// The sidecar's image (`--sidecar-image`): the only place it comes from, since the sidecar
    /// runs in other workloads' pods with their tokens.
    pub image: String,
    /// Native sidecars unless a pod's `baton.dev/native-sidecar` says otherwise.
    pub native_sidecar: bool,
}

/// What the webhook needs of a `CoordinationEnsemble`.
#[derive(Debug, Clone, PartialEq)]
pub struct EnsembleView {
    /// `NAMESPACE/NAME`, for messages.
    pub ensemble: String,
    /// `HOST:PORT` of the TLS client port.
    pub endpoint: String,
    /// The ConfigMap with the ensemble's CA certificate in the pod's namespace, when the
    /// ensemble serves that namespace (its own or one of `spec.allowedNamespaces`, where the
    /// operator publishes `NAMESPACE.NAME-ca`); `None`: the pod is refused.
    pub ca_config_map: Option<String>,
    /// The namespaces the ensemble serves, for the refusal's message.
    pub served: Vec<String>,
    /// `spec.sidecar`.
    pub sidecar: SidecarDefaults,
}

impl EnsembleView {
    /// The view of `ce` for a pod in `pod_namespace`: its reported TLS client endpoint, else
    /// the client Service's TLS port.
    pub fn of(ce: &CoordinationEnsemble, pod_namespace: &str) -> EnsembleView {
        let name = ce.metadata.name.as_deref().unwrap_or_default();
        let namespace = ce.metadata.namespace.as_deref().unwrap_or(pod_namespace);
        let names = EnsembleNames::new(name, namespace);
        let endpoint = ce
            .status
            .as_ref()
            .and_then(|s| s.secure_client_endpoint.clone())
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| names.secure_client_endpoint());
        let mut served = vec![namespace.to_string()];
        served.extend(
            ce.spec
                .allowed_namespaces
                .iter()
                .filter(|ns| ns.as_str() != namespace)
                .cloned(),
        );
        EnsembleView {
            ensemble: format!("{namespace}/{name}"),
            endpoint,
            ca_config_map: served
                .iter()
                .any(|ns| ns == pod_namespace)
                .then(|| names.ca_config_map_in(pod_namespace)),
            served,
            sidecar: ce.spec.sidecar.clone().unwrap_or_default(),
        }
    }
}

/// Which ensemble a pod asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnsembleChoice {
    /// `baton.dev/ensemble` names it.
    Named { namespace: String, name: String },
    /// The only one in the pod's namespace.
    OnlyIn { namespace: String },
}

/// The first look at a pod, before any API lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    /// Pass the pod untouched, for this reason.
    Skip(&'static str),
    /// Inject, with the sidecar talking to this ensemble.
    Inject(EnsembleChoice),
}

/// A pod that asks for the sidecar but cannot have it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InjectError {
    /// An election name the sidecar would refuse to start with.
    #[error("{ELECTION_ANNOTATION}: {0}")]
    BadElection(String),
    /// Neither the annotation nor an owner nor the pod's name gives an election.
    #[error(
        "no election name: set the {ELECTION_ANNOTATION} annotation (the pod has no owner, name or generateName)"
    )]
    NoElection,
    /// The ensemble does not serve the pod's namespace.
    #[error(
        "CoordinationEnsemble {ensemble} does not serve namespace {namespace} (it serves {}): \
         its owner may add {namespace} to spec.allowedNamespaces, or use an ensemble that \
         serves {namespace}",
        served.join(", ")
    )]
    NotServed {
        ensemble: String,
        namespace: String,
        served: Vec<String>,
    },
    /// An annotation value that means nothing.
    #[error("{annotation}: {value:?} is not {expected}")]
    BadAnnotation {
        annotation: &'static str,
        value: String,
        expected: &'static str,
    },
}

/// Whether `pod` (created in `namespace`) asks for injection, and from which ensemble.
pub fn wanted(pod: &Pod, namespace: &str) -> Wanted {
    if annotation(pod, INJECT_ANNOTATION) != Some("true") {
        return Wanted::Skip("not annotated baton.dev/inject: \"true\"");
    }
    if has_sidecar(pod) {
        return Wanted::Skip("already has a baton-sidecar container");
    }
    let choice = match annotation(pod, ENSEMBLE_ANNOTATION).map(str::trim) {
        Some(named) if !named.is_empty() => match named.split_once('/') {
            Some((ns, name)) => EnsembleChoice::Named {
                namespace: ns.into(),
                name: name.into(),
            },
            None => EnsembleChoice::Named {
                namespace: namespace.into(),
                name: named.into(),
            },
        },
        _ => EnsembleChoice::OnlyIn {
            namespace: namespace.into(),
        },
    };
    Wanted::Inject(choice)
}

/// The JSON patch that adds the sidecar to `pod` (created in `namespace`), which `wanted` said
/// to inject.
pub fn patch(
    pod: &Pod,
    namespace: &str,
    ensemble: &EnsembleView,
    settings: &InjectSettings,
) -> Result<Patch, InjectError> {
    let ca_config_map = ensemble
        .ca_config_map
        .clone()
        .ok_or_else(|| InjectError::NotServed {
            ensemble: ensemble.ensemble.clone(),
            namespace: namespace.into(),
            served: ensemble.served.clone(),
        })?;
    let elections = elections(pod)?;
    let native = match annotation(pod, NATIVE_SIDECAR_ANNOTATION) {
        None => settings.native_sidecar,
        Some("true") => true,
        Some("false") => false,
        Some(other) => {
            return Err(InjectError::BadAnnotation {
                annotation: NATIVE_SIDECAR_ANNOTATION,
                value: other.into(),
                expected: "\"true\" or \"false\"",
            });
        }
    };
    let ready_path = match annotation(pod, READY_WHEN_ANNOTATION) {
        None | Some("session") => sidecar::READYZ_PATH,
        Some("leader") => sidecar::LEADER_READY_PATH,
        Some(other) => {
            return Err(InjectError::BadAnnotation {
                annotation: READY_WHEN_ANNOTATION,
                value: other.into(),
                expected: "\"session\" or \"leader\"",
            });
        }
    };
    let mirror_lease = match annotation(pod, MIRROR_LEASE_ANNOTATION) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(InjectError::BadAnnotation {
                annotation: MIRROR_LEASE_ANNOTATION,
                value: other.into(),
                expected: "\"true\" or \"false\"",
            });
        }
    };
    let app_health = annotation(pod, APP_HEALTH_ANNOTATION)
        .map(|value| {
            app_health_url(value).ok_or_else(|| InjectError::BadAnnotation {
                annotation: APP_HEALTH_ANNOTATION,
                value: value.into(),
                expected: "PORT/PATH, e.g. 8080/healthz (the app's port in the pod, 1 to 65535, and an HTTP path)",
            })
        })
        .transpose()?;
    let app_candidacy = match annotation(pod, CANDIDACY_ANNOTATION) {
        None | Some("always") => false,
        Some("app") => true,
        Some(other) => {
            return Err(InjectError::BadAnnotation {
                annotation: CANDIDACY_ANNOTATION,
                value: other.into(),
                expected: "\"always\" or \"app\"",
            });
        }
    };
    let spec = pod.spec.clone().unwrap_or_default();
    let address_port_suffix = spec
        .containers
        .first()
        .and_then(|c| c.ports.as_ref()?.first())
        .map(|p| format!(":{}", p.container_port))
        .unwrap_or_default();
    let container = sidecar::container(&SidecarSpec {
        image: settings.image.clone(),
        ensemble_endpoint: ensemble.endpoint.clone(),
        elections,
        address_port_suffix,
        label_pod: spec.automount_service_account_token != Some(false),
        mirror_lease,
        app_health,
        app_candidacy,
        native,
        ready_path,
        defaults: ensemble.sidecar.clone(),
    });
    let container = serde_json::to_value(&container).unwrap_or(Value::Null);
    let mut ops = Vec::new();
    if native {
        // First among the init containers, so later init containers can already use it.
        match spec.init_containers.as_ref().filter(|c| !c.is_empty()) {
            Some(_) => ops.push(add("/spec/initContainers/0", container)),
            None => ops.push(add("/spec/initContainers", json!([container]))),
        }
    } else {
        // Last, so `kubectl logs` and `exec` keep defaulting to the app.
        ops.push(add("/spec/containers/-", container));
    }
    // The CA as a ConfigMap volume: public, refreshed by the kubelet when the CA rotates.
    let volume = json!({
        "name": sidecar::CA_VOLUME,
        "configMap": {"name": ca_config_map, "items": [{"key": "ca.crt", "path": "ca.crt"}]},
    });
    // The pod's own ServiceAccount token for audience `baton` only (useless against the API
    // server), short-lived and rotated by the kubelet: the sidecar's identity at the ensemble.
    let token = json!({
        "name": sidecar::TOKEN_VOLUME,
        "projected": {"sources": [{"serviceAccountToken": {
            "audience": TOKEN_AUDIENCE,
            "expirationSeconds": sidecar::TOKEN_EXPIRATION_SECONDS,
            "path": "token",
        }}]},
    });
    match spec.volumes.as_ref().filter(|v| !v.is_empty()) {
        Some(_) => {
            ops.push(add("/spec/volumes/-", volume));
            ops.push(add("/spec/volumes/-", token));
        }
        None => ops.push(add("/spec/volumes", json!([volume, token]))),
    }
    if spec
        .termination_grace_period_seconds
        .is_some_and(|s| s < MIN_GRACE_SECONDS)
    {
        ops.push(add(
            "/spec/terminationGracePeriodSeconds",
            json!(MIN_GRACE_SECONDS),
        ));
    }
    Ok(serde_json::from_value(Value::Array(ops)).unwrap_or_default())
}

/// `PORT/PATH` (or `PORT`) as the URL the sidecar checks on the pod's loopback; `None` for
/// anything else. The path is kept to visible ASCII so the sidecar's own check of the URL
/// cannot fail on a pod the webhook admitted.
fn app_health_url(value: &str) -> Option<String> {
    let (port, path) = value.split_once('/').unwrap_or((value, ""));
    let port: u16 = port.parse().ok().filter(|p| *p > 0)?;
    if port.to_string() != port_text(value)
        || !path
            .chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '#' | '\\' | '"' | '<' | '>'))
    {
        return None;
    }
    Some(format!("http://127.0.0.1:{port}/{path}"))
}

/// The port part of `PORT/PATH`, as written.
fn port_text(value: &str) -> &str {
    value.split_once('/').map_or(value, |(port, _)| port)
}

/// Whether `pod` already runs the sidecar (as a native sidecar or a plain container).
pub fn has_sidecar(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|spec| {
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .any(|c| c.name == CONTAINER_NAME)
    })
}

/// `baton.dev/election`, else the owning workload's name, else the pod's own.
pub fn elections(pod: &Pod) -> Result<String, InjectError> {
    if let Some(value) = annotation(pod, ELECTION_ANNOTATION) {
        let names: Vec<&str> = value.split(',').map(str::trim).collect();
        for (i, name) in names.iter().enumerate() {
            check_election(name)?;
            if names[..i].contains(name) {
                return Err(InjectError::BadElection(format!("{name:?} is given twice")));
            }
        }
        return Ok(names.join(","));
    }
    let name = workload_name(pod).ok_or(InjectError::NoElection)?;
    check_election(&name)?;
    Ok(name)
}

/// The name of the workload that made `pod`: a ReplicaSet's Deployment (its name without the
/// pod-template-hash), a StatefulSet's or any other controller's own name; for a bare pod its
/// `generateName` without the trailing dash, else its name.
pub fn workload_name(pod: &Pod) -> Option<String> {
    let meta = &pod.metadata;
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    if let Some(owner) = owner {
        if owner.kind == "ReplicaSet" {
            let hash = meta
                .labels
                .as_ref()
                .and_then(|l| l.get("pod-template-hash"));
            let stripped = match hash {
                Some(hash) => owner.name.strip_suffix(&format!("-{hash}")),
                None => owner.name.rsplit_once('-').map(|(head, _)| head),
            };
            return Some(stripped.unwrap_or(&owner.name).to_string());
        }
        return Some(owner.name.clone());
    }
    let generated = meta
        .generate_name
        .as_deref()
        .map(|g| g.trim_end_matches('-'))
        .filter(|g| !g.is_empty());
    generated
        .or(meta.name.as_deref().filter(|n| !n.is_empty()))
        .map(str::to_string)
}

/// The sidecar's own rule for election names (`baton_names`, the one copy both use): a pod it
/// would refuse to start for is refused here instead of crash-looping.
fn check_election(name: &str) -> Result<(), InjectError> {
    baton_names::check_election(name).map_err(|e| InjectError::BadElection(e.to_string()))
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn add(path: &str, value: Value) -> Value {
    json!({"op": "add", "path": path, "value": value})
}
