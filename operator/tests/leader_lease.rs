//! Leader election through a Lease, against a mocked API server: what the real API server
//! cannot be made to show on cue. An expired Lease is taken with the resourceVersion read, a
//! renewal seen in time keeps it, a lost race is not leadership, and shutdown releases only our
//! own Lease. Creating an absent Lease, a second replica waiting while the first holds it, and
//! taking over from a killed leader run against the real API server
//! (`tests/kube/tests/operator.rs`).

use std::time::Duration;

use baton_operator::leader_lease::{LeaderLease, LeaseConfig};
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::Handle;

const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/baton-system/leases/baton-operator";

fn contender() -> (LeaderLease, Handle<Request<Body>, Response<Body>>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let lease = LeaderLease::new(
        kube::Client::new(service, "default"),
        LeaseConfig {
            namespace: "baton-system".into(),
            name: "baton-operator".into(),
            identity: "op-a".into(),
            duration: Duration::from_secs(15),
            retry: Duration::from_secs(2),
        },
    );
    (lease, handle)
}

/// Answers the next request with `status` and `answer` (`Value::Null`: the request's own body,
/// as a create returns the object), returning its method, path and body.
async fn answer(
    handle: &mut Handle<Request<Body>, Response<Body>>,
    status: StatusCode,
    answer: Value,
) -> (Method, String, Value) {
    let (request, reply) = tokio::time::timeout(Duration::from_secs(30), handle.next_request())
        .await
        .expect("a request in time")
        .expect("a request");
    let (parts, body) = request.into_parts();
    let bytes = body.collect_bytes().await.expect("body");
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let answer = if answer.is_null() {
        body.clone()
    } else {
        answer
    };
    reply.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&answer).expect("json")))
            .expect("response"),
    );
    (parts.method, parts.uri.path().to_string(), body)
}

fn lease(holder: &str, renewed: Timestamp, transitions: i32) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "baton-operator", "namespace": "baton-system", "resourceVersion": "41"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                 "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
                 "leaseTransitions": transitions}
    })
}

/// Two attempts of one contender; between them, `pause` passes on its clock.
async fn two_attempts(
    pause: Duration,
    first: Value,
    second: Value,
    expect_write: bool,
) -> (Vec<(Method, String, Value)>, bool, bool) {
    let (lease_holder, mut handle) = contender();
    let lease_holder = std::sync::Arc::new(lease_holder);
    let contender_a = lease_holder.clone();
    let attempt = tokio::spawn(async move { contender_a.try_hold().await });
    let mut seen = vec![answer(&mut handle, StatusCode::OK, first).await];
    let took_first = attempt.await.expect("task").expect("no API error");
    tokio::time::advance(pause).await;
    let attempt = tokio::spawn(async move { lease_holder.try_hold().await });
    seen.push(answer(&mut handle, StatusCode::OK, second).await);
    if expect_write {
        seen.push(answer(&mut handle, StatusCode::OK, Value::Null).await);
    }
    let took_second = attempt.await.expect("task").expect("no API error");
    (seen, took_first, took_second)
}

#[tokio::test(start_paused = true)]
async fn an_unchanged_lease_is_taken_over_after_its_duration_with_the_version_read() {
    // The holder's clock is far off (renewTime in the past): only our own clock counts.
    let stale: Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
    let (seen, first, second) = two_attempts(
        Duration::from_secs(16),
        lease("op-b", stale, 3),
        lease("op-b", stale, 3),
        true,
    )
    .await;
    assert!(!first, "a holder seen for the first time is alive");
    assert!(second, "unchanged for longer than its duration: expired");
    let (method, path, body) = &seen[2];
    assert_eq!((method, path.as_str()), (&Method::PUT, PATH));
    assert_eq!(body["metadata"]["resourceVersion"], "41");
    assert_eq!(body["spec"]["holderIdentity"], "op-a");
    assert_eq!(body["spec"]["leaseTransitions"], 4);
}

#[tokio::test(start_paused = true)]
async fn a_lease_renewed_meanwhile_is_not_taken() {
    let stale: Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
    let mut renewed = lease("op-b", Timestamp::now(), 3);
    renewed["metadata"]["resourceVersion"] = json!("42");
    let (seen, first, second) = two_attempts(
        Duration::from_secs(16),
        lease("op-b", stale, 3),
        renewed,
        false,
    )
    .await;
    assert!(!first && !second);
    assert_eq!(seen.len(), 2, "no write");
}

#[tokio::test(start_paused = true)]
async fn losing_the_race_for_an_expired_lease_is_not_leadership() {
    let (lease_holder, mut handle) = contender();
    let lease_holder = std::sync::Arc::new(lease_holder);
    let stale: Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
    let first = lease_holder.clone();
    let attempt = tokio::spawn(async move { first.try_hold().await });
    answer(&mut handle, StatusCode::OK, lease("op-b", stale, 3)).await;
    assert!(!attempt.await.expect("task").expect("no API error"));
    tokio::time::advance(Duration::from_secs(16)).await;
    let attempt = tokio::spawn(async move { lease_holder.try_hold().await });
    answer(&mut handle, StatusCode::OK, lease("op-b", stale, 3)).await;
    let conflict = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409});
    let (method, _, _) = answer(&mut handle, StatusCode::CONFLICT, conflict).await;
    assert_eq!(method, Method::PUT);
    assert!(
        !attempt
            .await
            .expect("task")
            .expect("a conflict is no error")
    );
}

#[tokio::test]
async fn a_held_lease_is_released_on_shutdown() {
    let (lease_holder, mut handle) = contender();
    let release = tokio::spawn(async move { lease_holder.release().await });
    answer(
        &mut handle,
        StatusCode::OK,
        lease("op-a", Timestamp::now(), 4),
    )
    .await;
    let (method, path, body) = answer(&mut handle, StatusCode::OK, Value::Null).await;
    assert_eq!((method, path.as_str()), (Method::PUT, PATH));
    assert_eq!(body["metadata"]["resourceVersion"], "41");
    assert!(body["spec"].get("holderIdentity").is_none(), "{body}");
    release.await.expect("task").expect("released");
}

#[tokio::test]
async fn another_holders_lease_is_left_alone_on_shutdown() {
    let (lease_holder, mut handle) = contender();
    let release = tokio::spawn(async move { lease_holder.release().await });
    answer(
        &mut handle,
        StatusCode::OK,
        lease("op-b", Timestamp::now(), 4),
    )
    .await;
    release.await.expect("task").expect("nothing to release");
    // No write followed: the client is gone with the task, so the mock sees no more requests.
    assert!(handle.next_request().await.is_none());
}
