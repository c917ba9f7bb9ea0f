//! The injection decision and patch, from inline YAML pods.

use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::Value;

use super::inject::{self, EnsembleChoice, EnsembleView, InjectError, InjectSettings, Wanted};
use super::sidecar::CONTAINER_NAME;
use crate::crd::{CoordinationEnsemble, SidecarDefaults};

fn pod(yaml: &str) -> Pod {
    serde_saphyr::from_str(yaml).expect("test YAML parses")
}

fn settings() -> InjectSettings {
    InjectSettings {
        image: "baton:dev".into(),
        native_sidecar: true,
    }
}

fn view() -> EnsembleView {
    EnsembleView {
        ensemble: "prod/zk".into(),
        endpoint: "zk-client.prod.svc:2281".into(),
        ca_config_map: Some("zk-ca".into()),
        served: vec!["prod".into()],
        sidecar: SidecarDefaults::default(),
    }
}

/// `pod` after its patch.
fn patched(pod: &Pod, view: &EnsembleView, settings: &InjectSettings) -> Pod {
    let patch = inject::patch(pod, "prod", view, settings).expect("patch");
    let mut doc = serde_json::to_value(pod).expect("pod serializes");
    json_patch::patch(&mut doc, &patch).expect("patch applies");
    serde_json::from_value(doc).expect("a valid Pod")
}

fn sidecar(pod: &Pod) -> Container {
    let spec = pod.spec.as_ref().expect("spec");
    let all: Vec<&Container> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .filter(|c| c.name == CONTAINER_NAME)
        .collect();
    assert_eq!(all.len(), 1, "exactly one sidecar");
    all[0].clone()
}

fn env(c: &Container, name: &str) -> Value {
    let var = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("no {name}"));
    serde_json::to_value(var).expect("env serializes")
}

/// The projected token (audience `baton`, an hour, file `token`) is mounted read-only at
/// /var/run/secrets/baton and named by BATON_TOKEN_FILE; the namespace is always set.
fn assert_token(pod: &Pod) {
    let c = sidecar(pod);
    let volume = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .find(|v| v.name == "baton-token")
        .expect("a token volume");
    assert_eq!(
        serde_json::to_value(&volume.projected).expect("projected"),
        serde_json::json!({"sources": [{"serviceAccountToken":
            {"audience": "baton", "expirationSeconds": 3600, "path": "token"}}]})
    );
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "baton-token")
        .expect("a token mount");
    assert_eq!(mount.mount_path, "/var/run/secrets/baton");
    assert_eq!(mount.read_only, Some(true));
    assert_eq!(
        env(&c, "BATON_TOKEN_FILE")["value"],
        "/var/run/secrets/baton/token"
    );
    assert_eq!(
        env(&c, "BATON_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
}

const DEPLOYMENT_POD: &str = r#"
metadata:
  generateName: web-7d9f8c6b5-
  labels: {app: web, pod-template-hash: 7d9f8c6b5}
  annotations: {baton.dev/inject: "true"}
  ownerReferences:
  - {apiVersion: apps/v1, kind: ReplicaSet, name: web-7d9f8c6b5, uid: u1, controller: true}
spec:
  containers:
  - name: app
    image: web:1
    ports: [{containerPort: 8080}]
"#;

#[test]
fn a_deployment_pod_gets_a_native_sidecar_first_among_init_containers() {
    let original = pod(DEPLOYMENT_POD);
    assert_eq!(
        inject::wanted(&original, "prod"),
        Wanted::Inject(EnsembleChoice::OnlyIn {
            namespace: "prod".into()
        })
    );
    let after = patched(&original, &view(), &settings());
    let spec = after.spec.as_ref().expect("spec");
    assert_eq!(spec.init_containers.as_ref().map(Vec::len), Some(1));
    let c = sidecar(&after);
    assert_eq!(c.restart_policy.as_deref(), Some("Always"));
    assert_eq!(c.image.as_deref(), Some("baton:dev"));
    assert_eq!(c.command, Some(vec!["baton-sidecar".to_string()]));
    assert_eq!(env(&c, "BATON_ELECTION")["value"], "web");
    assert_eq!(
        env(&c, "BATON_ENSEMBLE")["value"],
        "zk-client.prod.svc:2281"
    );
    // TLS to the ensemble, trusting its CA from the ConfigMap it publishes.
    assert_eq!(
        env(&c, "BATON_ENSEMBLE_CA")["value"],
        "/etc/baton/ensemble-ca/ca.crt"
    );
    let mounts = c.volume_mounts.clone().unwrap_or_default();
    assert_eq!(mounts.len(), 2);
    assert_eq!(mounts[0].name, "baton-ensemble-ca");
    assert_eq!(mounts[0].mount_path, "/etc/baton/ensemble-ca");
    assert_eq!(mounts[0].read_only, Some(true));
    let volumes = spec.volumes.clone().unwrap_or_default();
    assert_eq!(volumes.len(), 2);
    let ca = volumes[0].config_map.clone().expect("a ConfigMap volume");
    assert_eq!(volumes[0].name, "baton-ensemble-ca");
    assert_eq!(ca.name, "zk-ca");
    assert_token(&after);
    assert_eq!(env(&c, "BATON_LISTEN")["value"], "127.0.0.1:4040");
    assert_eq!(env(&c, "BATON_ADDRESS")["value"], "$(BATON_POD_IP):8080");
    assert_eq!(
        env(&c, "BATON_POD_IP")["valueFrom"]["fieldRef"]["fieldPath"],
        "status.podIP"
    );
    assert_eq!(
        env(&c, "BATON_IDENTITY")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    assert_eq!(
        env(&c, "BATON_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert_eq!(env(&c, "BATON_PROBE_LISTEN")["value"], "[::]:4041");
    let probe = c
        .readiness_probe
        .clone()
        .and_then(|p| p.http_get)
        .expect("httpGet probe");
    assert_eq!(probe.path.as_deref(), Some("/readyz"));
    assert_eq!(serde_json::to_value(&probe.port).expect("port"), 4041);
    let live = c
        .liveness_probe
        .clone()
        .and_then(|p| p.http_get)
        .expect("liveness");
    assert_eq!(live.path.as_deref(), Some("/healthz"));
    let ports = c.ports.clone().unwrap_or_default();
    assert_eq!(ports.first().map(|p| p.container_port), Some(4041));
    assert!(c.resources.is_some());
    assert_eq!(spec.containers.len(), 1, "the app is untouched");

    let leader_only = DEPLOYMENT_POD.replace(
        "{baton.dev/inject: \"true\"}",
        "{baton.dev/inject: \"true\", baton.dev/ready-when: leader}",
    );
    let c = sidecar(&patched(&pod(&leader_only), &view(), &settings()));
    let probe = c
        .readiness_probe
        .and_then(|p| p.http_get)
        .expect("httpGet probe");
    assert_eq!(probe.path.as_deref(), Some("/leader/ready"));
}

#[test]
fn the_sidecar_goes_before_existing_init_containers() {
    let pod = pod(r#"
metadata:
  name: job-pod
  annotations: {baton.dev/inject: "true", baton.dev/election: "migrate"}
spec:
  initContainers: [{name: setup, image: busybox}]
  containers: [{name: app, image: app:1}]
"#);
    let after = patched(&pod, &view(), &settings());
    let init = after.spec.and_then(|s| s.init_containers).expect("init");
    let names: Vec<&str> = init.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, [CONTAINER_NAME, "setup"]);
}

#[test]
fn election_names_come_from_the_owner_or_the_pod() {
    let statefulset = pod(r#"
metadata:
  name: db-2
  annotations: {baton.dev/inject: "true"}
  ownerReferences: [{apiVersion: apps/v1, kind: StatefulSet, name: db, uid: u, controller: true}]
spec: {containers: [{name: db, image: db}]}
"#);
    assert_eq!(inject::elections(&statefulset), Ok("db".into()));
    let bare = pod(
        "metadata: {name: solo, annotations: {baton.dev/inject: \"true\"}}\nspec: {containers: []}",
    );
    assert_eq!(inject::elections(&bare), Ok("solo".into()));
    let generated = pod(
        "metadata: {generateName: batch-, annotations: {baton.dev/inject: \"true\"}}\nspec: {containers: []}",
    );
    assert_eq!(inject::elections(&generated), Ok("batch".into()));
    // A ReplicaSet without the hash label: its last dash-segment is the hash.
    let rs = pod(r#"
metadata:
  annotations: {baton.dev/inject: "true"}
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: api-server-5c4d, uid: u, controller: true}]
spec: {containers: []}
"#);
    assert_eq!(inject::elections(&rs), Ok("api-server".into()));
    let named = pod(r#"
metadata:
  name: x
  annotations: {baton.dev/inject: "true", baton.dev/election: "a, b.c"}
spec: {containers: []}
"#);
    assert_eq!(inject::elections(&named), Ok("a,b.c".into()));
}

#[test]
fn bad_election_names_are_refused_before_the_sidecar_would_be() {
    for bad in [
        "ready",
        "resign",
        "campaign",
        "release",
        "web,release",
        "a,a",
        "-x",
        "a b",
        "",
    ] {
        let yaml = format!(
            "metadata: {{name: x, annotations: {{baton.dev/election: \"{bad}\"}}}}\nspec: {{containers: []}}"
        );
        assert!(
            matches!(
                inject::elections(&pod(&yaml)),
                Err(InjectError::BadElection(_))
            ),
            "{bad:?} accepted"
        );
    }
    let nameless =
        pod("metadata: {annotations: {baton.dev/inject: \"true\"}}\nspec: {containers: []}");
    assert_eq!(inject::elections(&nameless), Err(InjectError::NoElection));
}

#[test]
fn pods_without_the_annotation_or_with_the_sidecar_are_skipped() {
    let plain = pod("metadata: {name: a}\nspec: {containers: [{name: app}]}");
    assert!(matches!(inject::wanted(&plain, "prod"), Wanted::Skip(_)));
    let off = pod(
        "metadata: {name: a, annotations: {baton.dev/inject: \"false\"}}\nspec: {containers: [{name: app}]}",
    );
    assert!(matches!(inject::wanted(&off, "prod"), Wanted::Skip(_)));
    let once = patched(&pod(DEPLOYMENT_POD), &view(), &settings());
    assert!(inject::has_sidecar(&once));
    assert!(matches!(inject::wanted(&once, "prod"), Wanted::Skip(_)));
}

#[test]
fn the_ensemble_annotation_names_one_here_or_elsewhere() {
    let here = pod(
        "metadata: {name: a, annotations: {baton.dev/inject: \"true\", baton.dev/ensemble: zk}}\nspec: {containers: []}",
    );
    assert_eq!(
        inject::wanted(&here, "prod"),
        Wanted::Inject(EnsembleChoice::Named {
            namespace: "prod".into(),
            name: "zk".into()
        })
    );
    let there = pod(
        "metadata: {name: a, annotations: {baton.dev/inject: \"true\", baton.dev/ensemble: shared/zk}}\nspec: {containers: []}",
    );
    assert_eq!(
        inject::wanted(&there, "prod"),
        Wanted::Inject(EnsembleChoice::Named {
            namespace: "shared".into(),
            name: "zk".into()
        })
    );
}

#[test]
fn older_clusters_get_a_plain_container_last() {
    let mut settings = settings();
    settings.native_sidecar = false;
    let after = patched(&pod(DEPLOYMENT_POD), &view(), &settings);
    let spec = after.spec.as_ref().expect("spec");
    assert!(spec.init_containers.is_none());
    assert_eq!(
        spec.containers.last().map(|c| c.name.as_str()),
        Some(CONTAINER_NAME)
    );
    assert_eq!(sidecar(&after).restart_policy, None);
    // The annotation overrides the operator's default both ways.
    let yaml = DEPLOYMENT_POD.replace(
        "{baton.dev/inject: \"true\"}",
        "{baton.dev/inject: \"true\", baton.dev/native-sidecar: \"true\"}",
    );
    let after = patched(&pod(&yaml), &view(), &settings);
    assert_eq!(sidecar(&after).restart_policy.as_deref(), Some("Always"));
    let bad = DEPLOYMENT_POD.replace(
        "{baton.dev/inject: \"true\"}",
        "{baton.dev/inject: \"true\", baton.dev/native-sidecar: \"no\"}",
    );
    assert!(matches!(
        inject::patch(&pod(&bad), "prod", &view(), &settings),
        Err(InjectError::BadAnnotation { .. })
    ));
}

#[test]
fn ensemble_defaults_and_a_short_grace_period_are_applied() {
    let ce: CoordinationEnsemble = serde_saphyr::from_str(
        r#"
apiVersion: baton.dev/v1alpha1
kind: CoordinationEnsemble
metadata: {name: zk, namespace: prod}
spec:
  sidecar:
    sessionTimeout: 20s
    resources: {requests: {cpu: 5m}}
"#,
    )
    .expect("ensemble");
    let view = EnsembleView::of(&ce, "prod");
    assert_eq!(
        view.endpoint, "zk-client.prod.svc:2281",
        "the client Service's TLS port before any status"
    );
    assert_eq!(view.ca_config_map.as_deref(), Some("zk-ca"));
    let yaml = DEPLOYMENT_POD.replace(
        "spec:\n",
        "spec:\n  terminationGracePeriodSeconds: 1\n  automountServiceAccountToken: false\n",
    );
    let after = patched(&pod(&yaml), &view, &settings());
    let c = sidecar(&after);
    assert_eq!(c.image.as_deref(), Some("baton:dev"));
    assert_eq!(env(&c, "BATON_SESSION_TIMEOUT")["value"], "20s");
    let requests = c.resources.and_then(|r| r.requests).expect("requests");
    assert_eq!(requests.get("cpu").map(|q| q.0.as_str()), Some("5m"));
    assert!(
        !c.env.iter().flatten().any(|e| e.name == "BATON_POD"),
        "no API token, no pod labelling"
    );
    // The ensemble token is projected whatever automountServiceAccountToken says.
    assert_token(&after);
    assert_eq!(
        after.spec.and_then(|s| s.termination_grace_period_seconds),
        Some(inject::MIN_GRACE_SECONDS)
    );
}

#[test]
fn a_pod_keeps_its_volumes_and_gets_the_ca_appended() {
    let yaml = DEPLOYMENT_POD.replace(
        "spec:\n",
        "spec:\n  volumes: [{name: cache, emptyDir: {}}]\n",
    );
    let after = patched(&pod(&yaml), &view(), &settings());
    let volumes: Vec<String> = after
        .spec
        .and_then(|s| s.volumes)
        .unwrap_or_default()
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(volumes, ["cache", "baton-ensemble-ca", "baton-token"]);
}

#[test]
fn an_ensemble_serves_its_allowed_namespaces_and_refuses_the_rest() {
    let ce: CoordinationEnsemble = serde_saphyr::from_str(
        "apiVersion: baton.dev/v1alpha1\nkind: CoordinationEnsemble\nmetadata: {name: zk, namespace: shared}\nspec: {allowedNamespaces: [prod, batch]}\n",
    )
    .expect("ensemble");
    // An allowed namespace mounts the copy of the CA published there.
    let view = EnsembleView::of(&ce, "prod");
    assert_eq!(view.ca_config_map.as_deref(), Some("shared.zk-ca"));
    assert_eq!(view.endpoint, "zk-client.shared.svc:2281");
    let after = patched(&pod(DEPLOYMENT_POD), &view, &settings());
    let volumes = after
        .spec
        .clone()
        .and_then(|s| s.volumes)
        .unwrap_or_default();
    assert_eq!(
        volumes[0].config_map.as_ref().map(|c| c.name.as_str()),
        Some("shared.zk-ca")
    );
    assert_token(&after);
    // Its own namespace keeps the owned ConfigMap.
    let own = EnsembleView::of(&ce, "shared");
    assert_eq!(own.ca_config_map.as_deref(), Some("zk-ca"));
    // Any other namespace is refused, saying which ones it serves and who can change that.
    let view = EnsembleView::of(&ce, "intruder");
    assert_eq!(view.ca_config_map, None);
    let refused =
        inject::patch(&pod(DEPLOYMENT_POD), "intruder", &view, &settings()).expect_err("refused");
    assert_eq!(
        refused,
        InjectError::NotServed {
            ensemble: "shared/zk".into(),
            namespace: "intruder".into(),
            served: vec!["shared".into(), "prod".into(), "batch".into()],
        }
    );
    assert_eq!(
        refused.to_string(),
        "CoordinationEnsemble shared/zk does not serve namespace intruder (it serves shared, \
         prod, batch): its owner may add intruder to spec.allowedNamespaces, or use an ensemble \
         that serves intruder"
    );
}

#[test]
fn an_ensemble_of_another_namespace_is_refused_by_default() {
    let ce: CoordinationEnsemble = serde_saphyr::from_str(
        "apiVersion: baton.dev/v1alpha1\nkind: CoordinationEnsemble\nmetadata: {name: zk, namespace: shared}\nspec: {}\n",
    )
    .expect("ensemble");
    let view = EnsembleView::of(&ce, "prod");
    assert_eq!(view.ca_config_map, None);
    let refused = inject::patch(&pod(DEPLOYMENT_POD), "prod", &view, &settings());
    assert!(matches!(refused, Err(InjectError::NotServed { .. })));
}

#[test]
fn an_ensemble_cannot_choose_the_sidecar_image() {
    // The field is gone from the CRD (the API server prunes it); an old object that still
    // carries it is read without it, and the operator's image is injected.
    let ce: CoordinationEnsemble = serde_saphyr::from_str(
        "apiVersion: baton.dev/v1alpha1\nkind: CoordinationEnsemble\nmetadata: {name: zk, namespace: prod}\nspec: {sidecar: {image: evil:latest, sessionTimeout: 9s}}\n",
    )
    .expect("an old object still reads");
    let view = EnsembleView::of(&ce, "prod");
    let c = sidecar(&patched(&pod(DEPLOYMENT_POD), &view, &settings()));
    assert_eq!(c.image.as_deref(), Some("baton:dev"));
    assert_eq!(env(&c, "BATON_SESSION_TIMEOUT")["value"], "9s");
    let schema = serde_json::to_value(<CoordinationEnsemble as kube::CustomResourceExt>::crd())
        .expect("crd");
    let sidecar_props = &schema["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["sidecar"]["properties"];
    assert!(sidecar_props.get("sessionTimeout").is_some());
    assert!(
        sidecar_props.get("image").is_none(),
        "no image field in the CRD"
    );
}

#[test]
fn the_mirror_lease_annotation_turns_the_lease_mirror_on() {
    let has = |c: &Container, name: &str| c.env.iter().flatten().any(|e| e.name == name);
    let c = sidecar(&patched(&pod(DEPLOYMENT_POD), &view(), &settings()));
    assert!(!has(&c, "BATON_MIRROR_LEASE"), "off by default");

    let mirrored = DEPLOYMENT_POD.replace(
        "{baton.dev/inject: \"true\"}",
        "{baton.dev/inject: \"true\", baton.dev/mirror-lease: \"true\"}",
    );
    let c = sidecar(&patched(&pod(&mirrored), &view(), &settings()));
    assert_eq!(
        env(&c, "BATON_MIRROR_LEASE"),
        serde_json::json!({"name": "BATON_MIRROR_LEASE", "value": "true"})
    );

    // Without the API token there is no pod access, so no Lease either.
    let no_token = mirrored.replace("spec:", "spec:\n  automountServiceAccountToken: false");
    let c = sidecar(&patched(&pod(&no_token), &view(), &settings()));
    assert!(!has(&c, "BATON_MIRROR_LEASE") && !has(&c, "BATON_POD"));

    let bad = DEPLOYMENT_POD.replace(
        "{baton.dev/inject: \"true\"}",
        "{baton.dev/inject: \"true\", baton.dev/mirror-lease: \"yes\"}",
    );
    assert!(matches!(
        inject::patch(&pod(&bad), "prod", &view(), &settings()),
        Err(InjectError::BadAnnotation { .. })
    ));
}

#[test]
fn app_health_and_candidacy_annotations_reach_the_sidecar() {
    let has = |c: &Container, name: &str| c.env.iter().flatten().any(|e| e.name == name);
    let c = sidecar(&patched(&pod(DEPLOYMENT_POD), &view(), &settings()));
    assert!(!has(&c, "BATON_APP_HEALTH") && !has(&c, "BATON_CANDIDACY"));
    let with = |annotations: &str| {
        DEPLOYMENT_POD.replace(
            "{baton.dev/inject: \"true\"}",
            &format!("{{baton.dev/inject: \"true\", {annotations}}}"),
        )
    };

    let annotated = with("baton.dev/app-health: \"8080/healthz?deep=1\", baton.dev/candidacy: app");
    let c = sidecar(&patched(&pod(&annotated), &view(), &settings()));
    assert_eq!(
        env(&c, "BATON_APP_HEALTH"),
        serde_json::json!({"name": "BATON_APP_HEALTH", "value": "http://127.0.0.1:8080/healthz?deep=1"})
    );
    assert_eq!(
        env(&c, "BATON_CANDIDACY"),
        serde_json::json!({"name": "BATON_CANDIDACY", "value": "app"})
    );
    let bare = with("baton.dev/app-health: \"9000\", baton.dev/candidacy: always");
    let c = sidecar(&patched(&pod(&bare), &view(), &settings()));
    assert_eq!(
        env(&c, "BATON_APP_HEALTH")["value"],
        "http://127.0.0.1:9000/"
    );
    assert!(!has(&c, "BATON_CANDIDACY"), "always is the default");

    for garbage in [
        "baton.dev/app-health: \"healthz\"",
        "baton.dev/app-health: \"/healthz\"",
        "baton.dev/app-health: \"0/healthz\"",
        "baton.dev/app-health: \"70000/healthz\"",
        "baton.dev/app-health: \"+80/healthz\"",
        "baton.dev/app-health: \"http://127.0.0.1:8080/healthz\"",
        "baton.dev/app-health: \"8080/health z\"",
        "baton.dev/candidacy: sometimes",
    ] {
        let refused = inject::patch(&pod(&with(garbage)), "prod", &view(), &settings());
        let Err(e @ InjectError::BadAnnotation { .. }) = refused else {
            panic!("{garbage}: {refused:?}");
        };
        let message = e.to_string();
        let key = garbage.split(':').next().unwrap_or_default();
        assert!(message.starts_with(key), "{garbage}: {message}");
    }
}
