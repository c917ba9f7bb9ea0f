//! Missing-sidecar detection against a mocked API server: an annotated pod without the sidecar
//! gets one Warning Event, counts in `baton_operator_pods_missing_sidecar` and is listed for
//! its ensemble's `SidecarsMissing` condition; an injected pod and a pod not annotated do not.

use std::sync::Arc;
use std::time::Duration;

use baton_operator::events::EventSink;
use baton_operator::metrics::Metrics;
use baton_operator::sidecar_audit::{MissingSidecars, SidecarAudit};
use baton_operator::webhook::lookup::KubeEnsembles;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

const NAMESPACES: &str = "/api/v1/namespaces";
const PODS: &str = "/api/v1/namespaces/web/pods";
const ENSEMBLES: &str = "/apis/baton.dev/v1alpha1/namespaces/web/coordinationensembles";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/web/events";

fn pod(name: &str, annotated: bool, injected: bool) -> Value {
    let mut annotations = json!({});
    if annotated {
        annotations["baton.dev/inject"] = json!("true");
    }
    let mut init = vec![];
    if injected {
        init.push(json!({"name": "baton-sidecar", "image": "baton:1", "restartPolicy": "Always"}));
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "web", "uid": format!("uid-{name}"),
                     "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "app:1"}], "initContainers": init},
        "status": {"phase": "Running"}
    })
}

/// One scan against a cluster with namespace `web` (opted in) holding `pods` and the ensemble
/// `web/zk`: whether the findings changed, and the requests (method, path, query, body).
async fn scan(
    audit: &SidecarAudit<KubeEnsembles>,
    handle: &mut tower_test::mock::Handle<Request<Body>, Response<Body>>,
    pods: &[Value],
) -> (bool, Vec<(Method, String, String, Value)>) {
    let mut seen = Vec::new();
    let task = audit.scan();
    tokio::pin!(task);
    loop {
        let next = tokio::select! {
            result = &mut task => return (result.expect("scan"), seen),
            next = tokio::time::timeout(Duration::from_secs(30), handle.next_request()) => next,
        };
        let (request, reply) = next.expect("a request in time").expect("a request");
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.expect("body");
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let path = parts.uri.path().to_string();
        let answer = match (parts.method.clone(), path.as_str()) {
            (Method::GET, NAMESPACES) => json!({
                "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                "metadata": {},
                "items": [{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                           "metadata": {"name": "web"}}]
            }),
            (Method::GET, PODS) => json!({
                "apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": pods
            }),
            (Method::GET, ENSEMBLES) => json!({
                "apiVersion": "baton.dev/v1alpha1", "kind": "CoordinationEnsembleList",
                "metadata": {},
                "items": [{"apiVersion": "baton.dev/v1alpha1", "kind": "CoordinationEnsemble",
                           "metadata": {"name": "zk", "namespace": "web"},
                           "spec": {"replicas": 3}}]
            }),
            (Method::POST, EVENTS) => body.clone(),
            (method, path) => panic!("unexpected {method} {path}"),
        };
        reply.send_response(
            Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&answer).expect("json")))
                .expect("response"),
        );
        seen.push((
            parts.method,
            path,
            parts.uri.query().unwrap_or_default().to_string(),
            body,
        ));
    }
}

fn gauge(metrics: &Metrics) -> Vec<String> {
    metrics
        .render()
        .lines()
        .filter(|l| l.starts_with("baton_operator_pods_missing_sidecar{"))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn an_annotated_pod_without_the_sidecar_is_reported_once() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let metrics = Arc::new(Metrics::new());
    let found = Arc::new(MissingSidecars::default());
    let audit = SidecarAudit::new(
        client.clone(),
        KubeEnsembles::new(client.clone()),
        EventSink::new(client, Some("op-a".into())),
        metrics.clone(),
        found.clone(),
    );
    let pods = [
        pod("missing", true, false),
        pod("injected", true, true),
        pod("plain", false, false),
        pod("missing-too", true, false),
    ];

    let (changed, seen) = scan(&audit, &mut handle, &pods).await;
    assert!(changed);
    let lines: Vec<String> = seen.iter().map(|(m, p, _, _)| format!("{m} {p}")).collect();
    assert_eq!(
        lines,
        [
            format!("GET {NAMESPACES}"),
            format!("GET {PODS}"),
            format!("GET {ENSEMBLES}"),
            format!("POST {EVENTS}"),
            format!("POST {EVENTS}"),
        ],
        "one ensemble lookup, and one Event per pod missing its sidecar only"
    );
    assert!(
        seen[0]
            .2
            .contains("labelSelector=baton.dev%2Finjection%3Denabled"),
        "only opted-in namespaces: {}",
        seen[0].2
    );
    assert!(
        seen[1].2.contains("resourceVersion=0"),
        "pods from the watch cache: {}",
        seen[1].2
    );
    let event = &seen[3].3;
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "SidecarMissing");
    assert_eq!(event["regarding"]["kind"], "Pod");
    assert_eq!(event["regarding"]["name"], "missing");
    let note = event["note"].as_str().unwrap_or_default();
    assert!(note.contains("web/zk"), "{note}");
    assert!(note.contains("Delete the pod"), "{note}");
    assert_eq!(
        gauge(&metrics),
        ["baton_operator_pods_missing_sidecar{ensemble=\"web/zk\"} 2"]
    );
    assert_eq!(found.pods_of("web/zk"), ["web/missing", "web/missing-too"]);
    assert_eq!(seen[4].3["regarding"]["name"], "missing-too");

    // The same pods again: no second Event, nothing changed.
    let (changed, seen) = scan(&audit, &mut handle, &pods).await;
    assert!(!changed);
    assert!(
        seen.iter().all(|(m, _, _, _)| *m == Method::GET),
        "no Event twice: {seen:?}"
    );

    // The pods re-created with the sidecar: the series and the finding are gone.
    let pods = [
        pod("missing", true, true),
        pod("plain", false, false),
        pod("missing-too", true, true),
    ];
    let (changed, seen) = scan(&audit, &mut handle, &pods).await;
    assert!(changed);
    assert!(seen.iter().all(|(m, _, _, _)| *m == Method::GET));
    assert!(gauge(&metrics).is_empty(), "{:?}", gauge(&metrics));
    assert!(found.pods_of("web/zk").is_empty());
}

#[tokio::test]
async fn injected_and_unannotated_pods_are_never_reported() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let metrics = Arc::new(Metrics::new());
    let found = Arc::new(MissingSidecars::default());
    let audit = SidecarAudit::new(
        client.clone(),
        KubeEnsembles::new(client.clone()),
        EventSink::new(client, None),
        metrics.clone(),
        found.clone(),
    );
    let pods = [pod("injected", true, true), pod("plain", false, false)];
    let (changed, seen) = scan(&audit, &mut handle, &pods).await;
    assert!(!changed);
    let lines: Vec<String> = seen.iter().map(|(m, p, _, _)| format!("{m} {p}")).collect();
    assert_eq!(lines, [format!("GET {NAMESPACES}"), format!("GET {PODS}")]);
    assert!(gauge(&metrics).is_empty());
    assert!(found.pods_of("web/zk").is_empty());
}
