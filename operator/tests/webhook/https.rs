//! A real TLS server on loopback with a generated CA; the client trusts only that CA, sends
//! AdmissionReviews, and applies the returned JSON patch to the pod it sent.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use baton_operator::crd::CoordinationEnsemble;
use baton_operator::metrics::Metrics;
use baton_operator::webhook::certs::{self, CertBundle};
use baton_operator::webhook::inject::InjectSettings;
use baton_operator::webhook::lookup::{EnsembleLookup, LookupError};
use baton_operator::webhook::review::Injector;
use baton_operator::webhook::server::{self, ReloadableCert};
use baton_tls::HttpClient;
use http::Method;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Ensembles the fake lookup knows, all in their own namespaces.
struct Ensembles(Vec<CoordinationEnsemble>);

impl EnsembleLookup for Ensembles {
    async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<CoordinationEnsemble>, LookupError> {
        Ok(self
            .0
            .iter()
            .find(|ce| {
                ce.metadata.namespace.as_deref() == Some(namespace)
                    && ce.metadata.name.as_deref() == Some(name)
            })
            .cloned())
    }

    async fn list(&self, namespace: &str) -> Result<Vec<CoordinationEnsemble>, LookupError> {
        Ok(self
            .0
            .iter()
            .filter(|ce| ce.metadata.namespace.as_deref() == Some(namespace))
            .cloned()
            .collect())
    }
}

fn ensemble(namespace: &str, name: &str, endpoint: Option<&str>) -> CoordinationEnsemble {
    let mut ce: CoordinationEnsemble = serde_json::from_value(json!({
        "apiVersion": "baton.dev/v1alpha1", "kind": "CoordinationEnsemble",
        "metadata": {"name": name, "namespace": namespace},
        // `image` is what an ensemble of an older CRD could carry: it must not pick the image.
        "spec": {"replicas": 3, "sidecar": {"sessionTimeout": "15s", "image": "evil:latest",
                 "resources": {"requests": {"cpu": "20m", "memory": "40Mi"}}}}
    }))
    .expect("ensemble");
    if namespace == "shared" {
        ce.spec.allowed_namespaces = vec!["team-a".into()];
    }
    if let Some(endpoint) = endpoint {
        ce.status = Some(
            serde_json::from_value(json!({"secureClientEndpoint": endpoint})).expect("status"),
        );
    }
    ce
}

/// The running webhook and what a client needs to reach it.
struct Webhook {
    addr: std::net::SocketAddr,
    ca_pem: String,
    cert: Arc<ReloadableCert>,
    metrics: Arc<Metrics>,
    _stop: oneshot::Sender<()>,
}

fn bundle() -> CertBundle {
    certs::new_bundle(&["localhost".to_string()], None, Timestamp::now()).expect("certificates")
}

async fn start() -> Webhook {
    let bundle = bundle();
    let cert = ReloadableCert::new(
        server::certified_key(
            bundle.cert_pem.as_bytes(),
            bundle.key_pem.as_bytes(),
            "test",
        )
        .expect("key"),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let ensembles = Ensembles(vec![
        ensemble("prod", "zk", Some("zk-client.prod.svc:2281")),
        ensemble("shared", "main", None),
        ensemble("crowded", "a", None),
        ensemble("crowded", "b", None),
    ]);
    let settings = InjectSettings {
        image: "baton:test".into(),
        native_sidecar: true,
    };
    let metrics = Arc::new(Metrics::new());
    let injector = Arc::new(Injector::new(ensembles, settings).with_metrics(metrics.clone()));
    let (stop, stopped) = oneshot::channel::<()>();
    let tls = server::tls_config(cert.clone()).expect("tls config");
    tokio::spawn(server::serve(listener, tls, injector, async move {
        let _ = stopped.await;
    }));
    Webhook {
        addr,
        ca_pem: bundle.ca_bundle_pem,
        cert,
        metrics,
        _stop: stop,
    }
}

/// POSTs `body` to `path` over TLS, trusting only `ca_pem`; returns the status and body.
async fn post(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<(u16, Vec<u8>), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    // The certificate names `localhost`, and the client checks the name it dials.
    let answer = HttpClient::tls(Arc::new(config), Duration::from_secs(10))
        .request(
            &format!("localhost:{}", addr.port()),
            Method::POST,
            path,
            Some(body),
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok((answer.status.as_u16(), answer.body.to_vec()))
}

fn review(namespace: &str, pod: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"]["name"].as_str().unwrap_or_default(),
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                         "groups": ["system:serviceaccounts", "system:authenticated"]},
            "object": pod,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    }))
    .expect("review")
}

/// What the webhook answered about `pod`, and the pod after its patch (if any).
struct Outcome {
    response: Value,
    pod: Pod,
}

async fn admit(hook: &Webhook, namespace: &str, pod: Value) -> Outcome {
    let (status, body) = post(
        hook.addr,
        &hook.ca_pem,
        "/mutate-pods",
        review(namespace, &pod),
    )
    .await
    .expect("POST");
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_slice(&body).expect("JSON answer");
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    let response = answer["response"].clone();
    assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    let mut doc = pod;
    if let Some(encoded) = response["patch"].as_str() {
        assert_eq!(response["patchType"], "JSONPatch");
        // As the API server reads it: a base64 string holding a JSON patch.
        let bytes = STANDARD.decode(encoded).expect("patch is base64");
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("a JSON patch");
        json_patch::patch(&mut doc, &patch).expect("the patch applies");
    }
    let pod: Pod = serde_json::from_value(doc).expect("a valid k8s-openapi Pod");
    Outcome { response, pod }
}

fn sidecars(pod: &Pod) -> Vec<k8s_openapi::api::core::v1::Container> {
    let spec = pod.spec.clone().unwrap_or_default();
    spec.init_containers
        .unwrap_or_default()
        .into_iter()
        .chain(spec.containers)
        .filter(|c| c.name == "baton-sidecar")
        .collect()
}

fn env(c: &k8s_openapi::api::core::v1::Container, name: &str) -> Option<String> {
    c.env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

fn deployment_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": "web-6f7c9d8b4-",
            "labels": {"app": "web", "pod-template-hash": "6f7c9d8b4"},
            "annotations": {"baton.dev/inject": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-6f7c9d8b4",
                                  "uid": "1b2c", "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {"containers": [{"name": "app", "image": "web:1", "ports": [{"containerPort": 8080}],
                                  "readinessProbe": {"httpGet": {"path": "/leader/ready", "port": 8080}}}]}
    })
}

#[tokio::test]
async fn a_deployment_pod_gets_the_sidecar_once() {
    let hook = start().await;
    let out = admit(&hook, "prod", deployment_pod()).await;
    assert_eq!(out.response["allowed"], true);
    let found = sidecars(&out.pod);
    assert_eq!(found.len(), 1);
    let sidecar = &found[0];
    assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"));
    assert_eq!(env(sidecar, "BATON_ELECTION").as_deref(), Some("web"));
    assert_eq!(
        env(sidecar, "BATON_ENSEMBLE").as_deref(),
        Some("zk-client.prod.svc:2281")
    );
    assert_eq!(
        env(sidecar, "BATON_ENSEMBLE_CA").as_deref(),
        Some("/etc/baton/ensemble-ca/ca.crt")
    );
    let volumes = out.pod.spec.as_ref().and_then(|s| s.volumes.clone());
    let ca = volumes
        .iter()
        .flatten()
        .find(|v| v.name == "baton-ensemble-ca")
        .and_then(|v| v.config_map.clone())
        .expect("the CA ConfigMap volume");
    assert_eq!(ca.name, "zk-ca");
    assert_eq!(
        env(sidecar, "BATON_SESSION_TIMEOUT").as_deref(),
        Some("15s")
    );
    let requests = sidecar
        .resources
        .clone()
        .and_then(|r| r.requests)
        .expect("requests");
    assert_eq!(requests.get("memory").map(|q| q.0.as_str()), Some("40Mi"));
    assert_eq!(out.pod.spec.as_ref().map(|s| s.containers.len()), Some(1));

    // Sent again (a retried create, a re-invocation), the injected pod passes untouched.
    let again = admit(&hook, "prod", serde_json::to_value(&out.pod).expect("pod")).await;
    assert_eq!(again.response["allowed"], true);
    assert!(again.response.get("patch").is_none());
    assert_eq!(sidecars(&again.pod).len(), 1);
}

#[tokio::test]
async fn a_statefulset_pod_stands_in_its_set_s_election_on_a_named_ensemble() {
    let hook = start().await;
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "db-1",
            "annotations": {"baton.dev/inject": "true", "baton.dev/ensemble": "main"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "9", "controller": true}]
        },
        "spec": {"initContainers": [{"name": "init-db", "image": "db:1"}],
                 "containers": [{"name": "db", "image": "db:1"}]}
    });
    let out = admit(&hook, "shared", pod.clone()).await;
    assert_eq!(out.response["allowed"], true);
    let found = sidecars(&out.pod);
    assert_eq!(found.len(), 1);
    assert_eq!(env(&found[0], "BATON_ELECTION").as_deref(), Some("db"));
    // No status yet: the TLS port of the client Service the operator makes for that ensemble.
    assert_eq!(
        env(&found[0], "BATON_ENSEMBLE").as_deref(),
        Some("main-client.shared.svc:2281")
    );
    let init = out
        .pod
        .spec
        .and_then(|s| s.init_containers)
        .expect("init containers");
    assert_eq!(
        init.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["baton-sidecar", "init-db"]
    );
}

#[tokio::test]
async fn a_bare_pod_uses_its_own_name_and_may_ask_for_a_plain_container() {
    let hook = start().await;
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "solo", "annotations": {"baton.dev/inject": "true", "baton.dev/native-sidecar": "false"}},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}
    });
    let out = admit(&hook, "prod", pod).await;
    let found = sidecars(&out.pod);
    assert_eq!(found.len(), 1);
    assert_eq!(env(&found[0], "BATON_ELECTION").as_deref(), Some("solo"));
    assert_eq!(found[0].restart_policy, None);
    let spec = out.pod.spec.expect("spec");
    assert!(spec.init_containers.is_none());
    assert_eq!(
        spec.containers
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["app", "baton-sidecar"]
    );
}

#[tokio::test]
async fn pods_without_the_annotation_pass_untouched() {
    let hook = start().await;
    let mut pod = deployment_pod();
    pod["metadata"]["annotations"] = json!({"other": "x"});
    let out = admit(&hook, "prod", pod.clone()).await;
    assert_eq!(out.response["allowed"], true);
    assert!(out.response.get("patch").is_none());
    assert_eq!(
        serde_json::to_value(&out.pod).expect("pod"),
        serde_json::to_value(serde_json::from_value::<Pod>(pod).expect("pod")).expect("pod")
    );
}

#[tokio::test]
async fn a_pod_of_an_allowed_namespace_gets_the_sidecar_with_its_token() {
    let hook = start().await;
    let mut pod = deployment_pod();
    pod["metadata"]["annotations"]["baton.dev/ensemble"] = json!("shared/main");
    let out = admit(&hook, "team-a", pod).await;
    assert_eq!(out.response["allowed"], true, "{}", out.response);
    let found = sidecars(&out.pod);
    assert_eq!(found.len(), 1);
    let sidecar = &found[0];
    assert_eq!(
        sidecar.image.as_deref(),
        Some("baton:test"),
        "the operator's image"
    );
    assert_eq!(
        env(sidecar, "BATON_ENSEMBLE").as_deref(),
        Some("main-client.shared.svc:2281")
    );
    assert_eq!(
        env(sidecar, "BATON_TOKEN_FILE").as_deref(),
        Some("/var/run/secrets/baton/token")
    );
    let namespace = sidecar
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "BATON_NAMESPACE")
        .and_then(|e| e.value_from.clone())
        .and_then(|v| v.field_ref)
        .map(|f| f.field_path);
    assert_eq!(namespace.as_deref(), Some("metadata.namespace"));
    let volumes = out.pod.spec.as_ref().and_then(|s| s.volumes.clone());
    let volume = |name: &str| {
        volumes
            .iter()
            .flatten()
            .find(|v| v.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("no volume {name}"))
    };
    // The copy of the CA the operator publishes in team-a.
    let ca = volume("baton-ensemble-ca")
        .config_map
        .expect("a ConfigMap volume");
    assert_eq!(ca.name, "shared.main-ca");
    let token = volume("baton-token").projected.expect("a projected volume");
    assert_eq!(
        serde_json::to_value(&token).expect("token"),
        json!({"sources": [{"serviceAccountToken":
            {"audience": "baton", "expirationSeconds": 3600, "path": "token"}}]})
    );
    let mount = sidecar
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "baton-token")
        .expect("token mount");
    assert_eq!(mount.mount_path, "/var/run/secrets/baton");
    assert_eq!(mount.read_only, Some(true));
}

#[tokio::test]
async fn a_pod_of_a_namespace_the_ensemble_does_not_serve_is_denied() {
    let hook = start().await;
    let mut pod = deployment_pod();
    pod["metadata"]["annotations"]["baton.dev/ensemble"] = json!("shared/main");
    let out = admit(&hook, "prod", pod).await;
    assert_eq!(out.response["allowed"], false);
    assert_eq!(out.response["status"]["code"], 403);
    let message = out.response["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        message,
        "CoordinationEnsemble shared/main does not serve namespace prod (it serves shared, \
         team-a): its owner may add prod to spec.allowedNamespaces, or use an ensemble that \
         serves prod"
    );
    assert!(sidecars(&out.pod).is_empty());
}

#[tokio::test]
async fn an_ensemble_cannot_pick_the_sidecar_image() {
    let hook = start().await;
    let out = admit(&hook, "prod", deployment_pod()).await;
    let found = sidecars(&out.pod);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].image.as_deref(), Some("baton:test"));
}

#[tokio::test]
async fn a_missing_or_ambiguous_ensemble_is_a_clear_denial() {
    let hook = start().await;
    let none = admit(&hook, "empty", deployment_pod()).await;
    assert_eq!(none.response["allowed"], false);
    let message = none.response["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("no CoordinationEnsemble in namespace empty"),
        "{message}"
    );
    assert!(sidecars(&none.pod).is_empty());

    let two = admit(&hook, "crowded", deployment_pod()).await;
    let message = two.response["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("2 CoordinationEnsembles") && message.contains("baton.dev/ensemble"),
        "{message}"
    );

    let mut named = deployment_pod();
    named["metadata"]["annotations"]["baton.dev/ensemble"] = json!("gone");
    let gone = admit(&hook, "prod", named).await;
    assert_eq!(gone.response["allowed"], false);
    let message = gone.response["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("prod/gone does not exist"), "{message}");

    let mut bad = deployment_pod();
    bad["metadata"]["annotations"]["baton.dev/election"] = json!("ready");
    let refused = admit(&hook, "prod", bad).await;
    assert_eq!(refused.response["allowed"], false);
    let message = refused.response["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("reserved"), "{message}");
}

/// The README promises pods whose election the sidecar would refuse are denied rather than
/// crash-looping: a Deployment named `campaign` (its election by default) and a bare pod named
/// `release` are refused, naming the reserved words; `campaigns` is an ordinary name.
#[tokio::test]
async fn a_deployment_named_like_a_leader_sub_resource_is_refused() {
    let hook = start().await;
    let mut campaign = deployment_pod();
    campaign["metadata"]["generateName"] = json!("campaign-6f7c9d8b4-");
    campaign["metadata"]["ownerReferences"][0]["name"] = json!("campaign-6f7c9d8b4");
    let out = admit(&hook, "prod", campaign).await;
    assert_eq!(out.response["allowed"], false, "{}", out.response);
    let message = out.response["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("\"campaign\" is reserved") && message.contains("release"),
        "{message}"
    );

    let mut release = deployment_pod();
    let meta = release["metadata"].as_object_mut().expect("metadata");
    meta.remove("ownerReferences");
    meta.remove("generateName");
    meta.insert("name".into(), json!("release"));
    let out = admit(&hook, "prod", release).await;
    assert_eq!(out.response["allowed"], false, "{}", out.response);

    let mut fine = deployment_pod();
    fine["metadata"]["generateName"] = json!("campaigns-6f7c9d8b4-");
    fine["metadata"]["ownerReferences"][0]["name"] = json!("campaigns-6f7c9d8b4");
    let out = admit(&hook, "prod", fine).await;
    assert_eq!(out.response["allowed"], true, "{}", out.response);
    assert_eq!(
        env(&sidecars(&out.pod)[0], "BATON_ELECTION").as_deref(),
        Some("campaigns")
    );
}

#[tokio::test]
async fn garbage_is_a_bad_request_and_other_paths_are_not_found() {
    let hook = start().await;
    for body in [
        b"not json".to_vec(),
        b"{}".to_vec(),
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":1}}"#
            .to_vec(),
    ] {
        let (status, answer) = post(hook.addr, &hook.ca_pem, "/mutate-pods", body)
            .await
            .expect("POST");
        assert_eq!(status, 400);
        let answer: Value = serde_json::from_slice(&answer).expect("JSON");
        assert_eq!(answer["response"]["allowed"], false);
    }
    let (status, _) = post(hook.addr, &hook.ca_pem, "/elsewhere", b"{}".to_vec())
        .await
        .expect("POST");
    assert_eq!(status, 404);
}

/// `baton_operator_webhook_reviews_total`, which the chart's `BatonWebhookFailing` alert reads.
#[tokio::test]
async fn every_answer_is_counted_by_its_outcome() {
    let hook = start().await;
    let injected = admit(&hook, "prod", deployment_pod()).await;
    assert!(injected.response["patch"].is_string());
    let mut plain = deployment_pod();
    plain["metadata"]["annotations"] = json!({});
    let skipped = admit(&hook, "prod", plain).await;
    assert!(skipped.response.get("patch").is_none());
    let denied = admit(&hook, "empty", deployment_pod()).await;
    assert_eq!(denied.response["allowed"], false);
    let (status, _) = post(hook.addr, &hook.ca_pem, "/mutate-pods", b"garbage".to_vec())
        .await
        .expect("POST");
    assert_eq!(status, 400);
    let text = hook.metrics.render();
    for outcome in ["injected", "skipped", "denied", "unreadable"] {
        let line = format!("baton_operator_webhook_reviews_total{{outcome=\"{outcome}\"}} 1");
        assert!(text.contains(&line), "no `{line}` in\n{text}");
    }
}

#[tokio::test]
async fn a_replaced_certificate_is_served_without_a_restart() {
    let hook = start().await;
    let next = bundle();
    // The old CA does not vouch for the new certificate, nor the new CA for the old one.
    assert!(
        post(
            hook.addr,
            &next.ca_bundle_pem,
            "/mutate-pods",
            b"{}".to_vec()
        )
        .await
        .is_err()
    );
    hook.cert.replace(
        server::certified_key(next.cert_pem.as_bytes(), next.key_pem.as_bytes(), "next")
            .expect("key"),
    );
    let (status, _) = post(
        hook.addr,
        &next.ca_bundle_pem,
        "/mutate-pods",
        b"{}".to_vec(),
    )
    .await
    .expect("new certificate");
    assert_eq!(status, 400);
    assert!(
        post(hook.addr, &hook.ca_pem, "/mutate-pods", b"{}".to_vec())
            .await
            .is_err()
    );
}
