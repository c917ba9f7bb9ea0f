//! `CertStore` against a tower-test API server that follows a script: each request must be the
//! next one expected (method and path); its answer is scripted, or the request's own body echoed.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use baton_operator::webhook::cert_store::{CertStore, CertStoreError, bundle_of, secret_of};
use baton_operator::webhook::certs::{self, CertBundle};
use http::{Method, Request, Response};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::client::Body;
use serde_json::{Value, json};

const SECRET: &str = "/api/v1/namespaces/baton-system/secrets/baton-webhook-tls";
const SECRETS: &str = "/api/v1/namespaces/baton-system/secrets";
const MWC: &str =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/baton-sidecar-injector";

fn now() -> Timestamp {
    "2026-11-23T12:00:00Z"
        .parse()
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

fn names() -> Vec<String> {
    certs::service_dns_names("baton-webhook", "baton-system")
}

/// One expected request and its answer (`None`: echo the request body).
struct Step {
    method: Method,
    path: &'static str,
    status: u16,
    answer: Option<Value>,
}

fn step(method: Method, path: &'static str, status: u16, answer: Option<Value>) -> Step {
    Step {
        method,
        path,
        status,
        answer,
    }
}

fn not_found() -> Option<Value> {
    Some(
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
    )
}

fn conflict() -> Option<Value> {
    Some(
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists", "code": 409, "message": "already exists"}),
    )
}

fn webhook_config(ca: Option<&str>) -> Value {
    let client_config = |ca: Option<&str>| {
        let mut c = json!({"service": {"name": "baton-webhook", "namespace": "baton-system", "path": "/mutate-pods"}});
        if let Some(ca) = ca {
            c["caBundle"] = json!(STANDARD.encode(ca));
        }
        c
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "baton-sidecar-injector", "resourceVersion": "5"},
        "webhooks": [
            {"name": "pods.baton.dev", "clientConfig": client_config(ca), "sideEffects": "None", "admissionReviewVersions": ["v1"]},
            {"name": "pods-system.baton.dev", "clientConfig": client_config(ca), "sideEffects": "None", "admissionReviewVersions": ["v1"]}
        ]
    })
}

fn stored(bundle: &CertBundle, version: &str) -> Value {
    let mut secret = serde_json::to_value(secret_of(bundle, "baton-webhook-tls")).expect("secret");
    secret["metadata"]["namespace"] = json!("baton-system");
    secret["metadata"]["resourceVersion"] = json!(version);
    secret
}

/// Runs `ensure` at `at` against `script`; returns its result and the bodies the store sent.
async fn run(script: Vec<Step>, at: Timestamp) -> (Result<CertBundle, CertStoreError>, Vec<Value>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let store = CertStore {
        client: kube::Client::new(service, "baton-system"),
        namespace: "baton-system".into(),
        secret_name: "baton-webhook-tls".into(),
        webhook_config: "baton-sidecar-injector".into(),
        dns_names: names(),
    };
    let task = tokio::spawn(async move { store.ensure(at).await });
    let mut bodies = Vec::new();
    for expected in script {
        // A bound, not a synchronisation: a missing request fails instead of stalling.
        let next = tokio::time::timeout(Duration::from_secs(30), handle.next_request()).await;
        let Ok(Some((request, reply))) = next else {
            panic!("no {} {} request", expected.method, expected.path);
        };
        let (parts, body) = request.into_parts();
        assert_eq!(
            (&parts.method, parts.uri.path()),
            (&expected.method, expected.path)
        );
        let bytes = body.collect_bytes().await.expect("body");
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("JSON body")
        };
        let answer = expected.answer.unwrap_or_else(|| body.clone());
        bodies.push(body);
        let response = Response::builder()
            .status(expected.status)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&answer).expect("answer")))
            .expect("response");
        reply.send_response(response);
    }
    let result = task.await.expect("ensure task");
    drop(handle);
    (result, bodies)
}

#[tokio::test]
async fn a_first_start_makes_the_secret_and_fills_every_ca_bundle() {
    let (result, bodies) = run(
        vec![
            step(Method::GET, SECRET, 404, not_found()),
            step(Method::POST, SECRETS, 201, None),
            step(Method::GET, MWC, 200, Some(webhook_config(None))),
            step(Method::PATCH, MWC, 200, Some(webhook_config(None))),
        ],
        now(),
    )
    .await;
    let bundle = result.expect("ensured");
    let written: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(bodies[1].clone()).expect("a Secret");
    assert_eq!(written.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(bundle_of(&written), Some(bundle.clone()));
    assert_eq!(bundle.dns_names, names());
    let ca = STANDARD.encode(&bundle.ca_bundle_pem);
    assert_eq!(
        bodies[3],
        json!([
            {"op": "test", "path": "/webhooks/0/name", "value": "pods.baton.dev"},
            {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": ca},
            {"op": "test", "path": "/webhooks/1/name", "value": "pods-system.baton.dev"},
            {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": ca},
        ])
    );
}

#[tokio::test]
async fn a_good_secret_and_current_ca_bundles_change_nothing() {
    let bundle = certs::new_bundle(&names(), None, now()).expect("bundle");
    let (result, _) = run(
        vec![
            step(Method::GET, SECRET, 200, Some(stored(&bundle, "7"))),
            step(
                Method::GET,
                MWC,
                200,
                Some(webhook_config(Some(&bundle.ca_bundle_pem))),
            ),
        ],
        now(),
    )
    .await;
    assert_eq!(result.expect("ensured"), bundle);
}

#[tokio::test]
async fn an_expiring_serving_certificate_is_replaced_under_the_same_ca() {
    let bundle = certs::new_bundle(&names(), None, now()).expect("bundle");
    let later = now() + certs::SERVING_VALIDITY - SignedDuration::from_hours(24 * 10);
    let (result, bodies) = run(
        vec![
            step(Method::GET, SECRET, 200, Some(stored(&bundle, "7"))),
            step(Method::PUT, SECRET, 200, None),
            step(
                Method::GET,
                MWC,
                200,
                Some(webhook_config(Some(&bundle.ca_bundle_pem))),
            ),
        ],
        later,
    )
    .await;
    let renewed = result.expect("ensured");
    assert_eq!(
        renewed.ca_bundle_pem, bundle.ca_bundle_pem,
        "the API server's trust is unchanged"
    );
    assert_ne!(renewed.cert_pem, bundle.cert_pem);
    assert_eq!(
        bodies[1]["metadata"]["resourceVersion"], "7",
        "an optimistic-concurrency replace"
    );
    assert_eq!(renewed.cert_not_after, later + certs::SERVING_VALIDITY);
}

#[tokio::test]
async fn a_replica_that_loses_the_race_serves_the_winner_s_certificate() {
    let theirs = certs::new_bundle(&names(), None, now()).expect("bundle");
    let (result, _) = run(
        vec![
            step(Method::GET, SECRET, 404, not_found()),
            step(Method::POST, SECRETS, 409, conflict()),
            step(Method::GET, SECRET, 200, Some(stored(&theirs, "3"))),
            step(
                Method::GET,
                MWC,
                200,
                Some(webhook_config(Some(&theirs.ca_bundle_pem))),
            ),
        ],
        now(),
    )
    .await;
    assert_eq!(result.expect("ensured"), theirs);
}

#[tokio::test]
async fn a_missing_webhook_configuration_is_an_error_to_retry() {
    let bundle = certs::new_bundle(&names(), None, now()).expect("bundle");
    let (result, _) = run(
        vec![
            step(Method::GET, SECRET, 200, Some(stored(&bundle, "7"))),
            step(Method::GET, MWC, 404, not_found()),
        ],
        now(),
    )
    .await;
    assert!(
        matches!(result, Err(CertStoreError::NoWebhookConfiguration(_))),
        "{result:?}"
    );
}

#[tokio::test]
async fn an_ageing_ca_is_replaced_and_both_cas_go_into_every_ca_bundle() {
    let old = certs::new_bundle(&names(), None, now()).expect("bundle");
    let later = now() + certs::CA_VALIDITY - certs::CA_RENEW_BEFORE + SignedDuration::from_hours(1);
    let (result, bodies) = run(
        vec![
            step(Method::GET, SECRET, 200, Some(stored(&old, "7"))),
            step(Method::PUT, SECRET, 200, None),
            step(
                Method::GET,
                MWC,
                200,
                Some(webhook_config(Some(&old.ca_bundle_pem))),
            ),
            step(Method::PATCH, MWC, 200, Some(webhook_config(None))),
        ],
        later,
    )
    .await;
    let renewed = result.expect("ensured");
    assert_ne!(renewed.ca_key_pem, old.ca_key_pem);
    assert!(
        renewed.ca_bundle_pem.ends_with(&old.ca_bundle_pem),
        "the old CA is still trusted while a replica may serve its certificate"
    );
    assert_eq!(
        renewed.ca_bundle_pem.matches("BEGIN CERTIFICATE").count(),
        2
    );
    let ca = STANDARD.encode(&renewed.ca_bundle_pem);
    assert_eq!(
        bodies[3][1],
        json!({"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": ca})
    );
    assert_eq!(bodies[3][3]["value"], json!(ca));
}

#[tokio::test]
async fn a_secret_that_holds_no_whole_bundle_is_replaced() {
    let foreign = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "baton-webhook-tls", "namespace": "baton-system", "resourceVersion": "2"},
        "data": {"tls.crt": STANDARD.encode("not a certificate")}});
    let (result, bodies) = run(
        vec![
            step(Method::GET, SECRET, 200, Some(foreign)),
            step(Method::PUT, SECRET, 200, None),
            step(Method::GET, MWC, 200, Some(webhook_config(None))),
            step(Method::PATCH, MWC, 200, Some(webhook_config(None))),
        ],
        now(),
    )
    .await;
    let bundle = result.expect("ensured");
    assert_eq!(bodies[1]["metadata"]["resourceVersion"], "2");
    assert_eq!(bundle.ca_bundle_pem.matches("BEGIN CERTIFICATE").count(), 1);
}

#[tokio::test]
async fn the_rotation_loop_serves_the_stored_certificate_even_without_a_configuration() {
    use baton_operator::webhook::server::{ReloadableCert, certified_key};
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let stored_bundle = certs::new_bundle(&names(), None, Timestamp::now()).expect("bundle");
    let interim = certs::new_bundle(&names(), None, Timestamp::now()).expect("bundle");
    let cert = ReloadableCert::new(
        certified_key(
            interim.cert_pem.as_bytes(),
            interim.key_pem.as_bytes(),
            "interim",
        )
        .expect("key"),
    );
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let store = CertStore {
        client: kube::Client::new(service, "baton-system"),
        namespace: "baton-system".into(),
        secret_name: "baton-webhook-tls".into(),
        webhook_config: "baton-sidecar-injector".into(),
        dns_names: names(),
    };
    let task = tokio::spawn(store.keep_rotated(cert.clone(), Duration::from_secs(3600)));
    for (path, status, answer) in [
        (SECRET, 200, stored(&stored_bundle, "7")),
        (MWC, 404, not_found().unwrap_or_default()),
    ] {
        let next = tokio::time::timeout(Duration::from_secs(30), handle.next_request()).await;
        let Ok(Some((request, reply))) = next else {
            panic!("no GET {path}");
        };
        assert_eq!(
            (request.method(), request.uri().path()),
            (&Method::GET, path)
        );
        reply.send_response(
            Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&answer).expect("answer")))
                .expect("response"),
        );
    }
    // The configuration is read only after the stored certificate is in place.
    let expected = CertificateDer::from_pem_slice(stored_bundle.cert_pem.as_bytes()).expect("pem");
    assert_eq!(cert.current().cert[0], expected);
    task.abort();
}
