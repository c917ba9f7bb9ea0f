//! `--token-file`: the sidecar sends its projected ServiceAccount token as ZooKeeper auth
//! scheme `k8s` on every connection, re-sends it when the kubelet rotates the file, retries
//! with the file's current token after the ensemble refuses one, and will not start without
//! a readable token. Against a recording fake server (no ensemble checks `k8s` tokens yet in
//! these tests); the ensemble's own tests cover TokenReview.

mod common;

use std::process::Command;

use common::fake_zk::FakeZk;
use common::{BOUND, Sidecar};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_sent_as_k8s_auth_and_resent_when_rotated() {
    let server = FakeZk::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let token = dir.path().join("token");
    std::fs::write(&token, "first.jwt\n").expect("write the token");
    let token_arg = token.to_string_lossy().into_owned();
    let sidecar = Sidecar::spawn(
        &server.addr.to_string(),
        "token-pod",
        &[],
        &["--token-file", &token_arg],
        &[],
    );
    let first = server.next_auth(BOUND).await;
    assert_eq!(
        (first.scheme.as_str(), first.auth.as_slice()),
        ("k8s", &b"first.jwt"[..])
    );
    sidecar.wait_log("session established");

    // The kubelet rotates the token: it is sent on the live session, same connection.
    std::fs::write(&token, "second.jwt").expect("rotate the token");
    let rotated = server.next_auth(BOUND).await;
    assert_eq!(
        (rotated.scheme.as_str(), rotated.auth.as_slice()),
        ("k8s", &b"second.jwt"[..])
    );
    assert_eq!(
        rotated.connection, first.connection,
        "on the same connection"
    );
    sidecar.wait_log("the rotated token was accepted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_reported_and_the_current_file_is_sent_next() {
    let server = FakeZk::start().await;
    server.refuse(b"revoked.jwt");
    let dir = tempfile::tempdir().expect("temp dir");
    let token = dir.path().join("token");
    std::fs::write(&token, "revoked.jwt").expect("write the token");
    let token_arg = token.to_string_lossy().into_owned();
    let sidecar = Sidecar::spawn(
        &server.addr.to_string(),
        "refused-pod",
        &[],
        &["--token-file", &token_arg],
        &[],
    );
    let refused = server.next_auth(BOUND).await;
    assert_eq!(refused.auth, b"revoked.jwt");
    let line = sidecar.wait_log("refused this pod's credentials");
    assert!(line.contains(&token_arg), "names the token file: {line}");
    assert!(line.contains("audience"), "says what to check: {line}");
    let health = sidecar.call("GET", "/readyz").await;
    assert_eq!(health.status, 503, "no session: {health:?}");

    // A fresh token (the pod's new projected token): the next attempt sends it.
    std::fs::write(&token, "fresh.jwt").expect("rotate the token");
    let next = loop {
        let seen = server.next_auth(BOUND).await;
        if seen.auth != b"revoked.jwt" {
            break seen;
        }
    };
    assert_eq!(
        (next.scheme.as_str(), next.auth.as_slice()),
        ("k8s", &b"fresh.jwt"[..])
    );
    sidecar.wait_log("session established");
}

#[test]
fn an_unreadable_token_file_stops_the_sidecar_at_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("absent");
    let output = Command::new(env!("CARGO_BIN_EXE_baton-sidecar"))
        .args(["--ensemble", "127.0.0.1:1", "--identity", "x"])
        .args(["--listen", "127.0.0.1:0"])
        .arg("--token-file")
        .arg(&missing)
        .env_remove("BATON_ELECTION")
        .output()
        .expect("run the sidecar");
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot read the ServiceAccount token") && stderr.contains("absent"),
        "{stderr}"
    );
}
