//! The HTTP contract on bad input: every refusal is a JSON envelope with a fitting status.

mod common;

use common::{Sidecar, http, raw_status, send_raw, unique};

async fn bad_input_gets_clear_json_errors() {
    let election = unique("api");
    let s = Sidecar::start("api-pod", &[&election]);
    let lock = unique("api-lock");
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("GET", "/nope".into(), 404, "NotFound"),
        ("GET", "/".into(), 404, "NotFound"),
        ("GET", "/lock".into(), 404, "NotFound"),
        ("GET", "/leader/".into(), 404, "NotFound"),
        (
            "GET",
            "/leader/other-election".into(),
            404,
            "UnknownElection",
        ),
        ("POST", "/leader".into(), 405, "MethodNotAllowed"),
        ("PUT", format!("/lock/{lock}"), 405, "MethodNotAllowed"),
        ("GET", "/leader/resign".into(), 405, "MethodNotAllowed"),
        ("GET", "/leader?wait=soon".into(), 400, "InvalidDuration"),
        ("GET", "/leader?wait=11m".into(), 400, "InvalidDuration"),
        ("GET", "/leader?wait=-1s".into(), 400, "InvalidDuration"),
        (
            "GET",
            "/leader?wait=1s&token=latest".into(),
            400,
            "InvalidToken",
        ),
        ("GET", "/leader?wiat=1s".into(), 400, "UnknownParameter"),
        (
            "GET",
            "/leader?wait=1s&wait=2s".into(),
            400,
            "DuplicateParameter",
        ),
        ("GET", "/leader/ready?x=1".into(), 400, "UnknownParameter"),
        ("GET", "/leader/bad%2Fname".into(), 400, "InvalidName"),
        ("POST", "/lock/bad%2Fname".into(), 400, "InvalidName"),
        ("POST", "/lock/-leading-dash".into(), 400, "InvalidName"),
        ("POST", "/lock/..".into(), 400, "InvalidName"),
        (
            "POST",
            format!("/lock/{}", "x".repeat(129)),
            400,
            "InvalidName",
        ),
        (
            "POST",
            format!("/lock/{lock}?mode=shared"),
            400,
            "InvalidMode",
        ),
        (
            "POST",
            format!("/lock/{lock}?ttl=0"),
            400,
            "InvalidDuration",
        ),
        (
            "POST",
            format!("/lock/{lock}?ttl=25h"),
            400,
            "InvalidDuration",
        ),
        (
            "POST",
            format!("/lock/{lock}?wait=forever"),
            400,
            "InvalidDuration",
        ),
        (
            "POST",
            format!("/lock/{lock}?wait=%zz"),
            400,
            "InvalidQuery",
        ),
        (
            "POST",
            format!("/lock/{lock}/renew?token=1"),
            409,
            "NotHeld",
        ),
        ("POST", format!("/lock/{lock}/renew"), 400, "MissingToken"),
        (
            "POST",
            format!("/lock/{lock}/renew?token=x"),
            400,
            "InvalidToken",
        ),
        (
            "POST",
            format!("/lock/{lock}/renew?token=1&ttl=x"),
            400,
            "InvalidDuration",
        ),
        ("DELETE", format!("/lock/{lock}?token=1"), 409, "NotHeld"),
        ("DELETE", format!("/lock/{lock}"), 400, "MissingToken"),
    ];
    for (method, path, status, code) in &cases {
        let answer = s.call(method, path).await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (*status, *code),
            "{method} {path}: {answer:?}"
        );
    }
    let not_allowed = s.call("DELETE", "/leader").await;
    assert_eq!(not_allowed.header("allow"), Some("GET"), "{not_allowed:?}");

    // Bodies: the API takes none; small ones are tolerated, large ones refused.
    let small = http(
        s.addr,
        "POST",
        &format!("/lock/{lock}?wait=0"),
        Some(b"{}".to_vec()),
    )
    .await;
    assert_eq!(small.status, 200, "{small:?}");
    let token = small.body["token"].as_i64().expect("token");
    assert_eq!(
        s.call("DELETE", &format!("/lock/{lock}?token={token}"))
            .await
            .status,
        200
    );
    let big = vec![b'x'; 10_000];
    let answer = http(s.addr, "POST", &format!("/lock/{lock}"), Some(big.clone())).await;
    assert_eq!(
        (answer.status, answer.error_code()),
        (413, "PayloadTooLarge"),
        "{answer:?}"
    );
    // The same body chunked, which declares no length up front (sent raw: the shared client
    // always declares one).
    let chunked = [
        format!("POST /lock/{lock} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n").into_bytes(),
        b"Transfer-Encoding: chunked\r\n\r\n".to_vec(),
        format!("{:x}\r\n", big.len()).into_bytes(),
        big,
        b"\r\n0\r\n\r\n".to_vec(),
    ]
    .concat();
    let answer = send_raw(s.addr, &chunked, false).await;
    let text = String::from_utf8_lossy(&answer);
    assert_eq!(raw_status(&answer), Some(413), "{text}");
    assert!(text.contains(r#""code":"PayloadTooLarge""#), "{text}");

    // The refusals above changed nothing: the lock is free and the election has its leader.
    let free = s.call("GET", &format!("/lock/{lock}")).await;
    assert_eq!(free.body["holder"], serde_json::Value::Null, "{free:?}");
    assert_eq!(free.body["waiters"], serde_json::json!([]), "{free:?}");
}

async fn health_readiness_and_metrics() {
    let s = Sidecar::start("health-pod", &[]);
    let health = s.call("GET", "/healthz").await;
    assert_eq!(
        (health.status, &health.body["status"]),
        (200, &serde_json::json!("ok"))
    );
    let ready = s.call("GET", "/readyz").await;
    assert_eq!(
        (ready.status, &ready.body["state"]),
        (200, &serde_json::json!("CONNECTED")),
        "{ready:?}"
    );
    let metrics = s.call("GET", "/metrics").await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/openmetrics-text"))
    );
    let text = metrics.body.as_str().expect("text");
    assert!(
        text.contains("baton_sidecar_session_state{state=\"CONNECTED\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("baton_sidecar_http_requests_total{route=\"readyz\",status=\"200\"} 1"),
        "{text}"
    );
    let no_election = s.call("GET", "/leader").await;
    assert_eq!(
        (no_election.status, no_election.error_code()),
        (404, "NoElection"),
        "{no_election:?}"
    );
}

async fn the_probe_port_serves_only_read_only_routes() {
    let election = unique("probe");
    let s = Sidecar::start_with(
        "probe-pod",
        &[&election],
        &["--probe-listen", "127.0.0.1:0"],
    );
    let line = s.wait_log("serving the read-only probe API");
    let probe: std::net::SocketAddr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("addr="))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    s.wait_log("became the leader");

    for path in ["/healthz", "/readyz", "/metrics"] {
        let answer = http(probe, "GET", path, None).await;
        assert_eq!(answer.status, 200, "GET {path}: {answer:?}");
    }
    // Whether this pod leads, and nothing else: no identity, no fencing token, no validUntil
    // for whoever reaches the pod IP (the same call on localhost has them).
    for path in [
        format!("/leader/{election}/ready"),
        "/leader/ready".to_owned(),
    ] {
        let ready = http(probe, "GET", &path, None).await;
        assert_eq!(ready.status, 200, "the sole candidate leads: {ready:?}");
        assert_eq!(
            ready.body,
            serde_json::json!({"election": election, "isLeader": true}),
            "GET {path} on the probe port"
        );
    }
    let local = s.call("GET", &format!("/leader/{election}/ready")).await;
    assert!(local.body["token"].is_u64(), "{local:?}");

    let lock = unique("probe-lock");
    for (method, path) in [
        ("POST", format!("/lock/{lock}?wait=0s&ttl=30s")),
        ("POST", format!("/lock/{lock}/renew")),
        ("DELETE", format!("/lock/{lock}")),
        ("GET", format!("/lock/{lock}")),
        // Who leads is nobody's business on the pod network.
        ("GET", "/leader".to_owned()),
        ("GET", format!("/leader/{election}")),
        ("GET", format!("/leader/{election}?wait=1s&token=0")),
        ("POST", format!("/leader/{election}/resign")),
        ("POST", format!("/lock/{lock}?hold=stream")),
        ("GET", "/events".to_owned()),
        ("GET", format!("/leader/{election}?follow=stream")),
        ("GET", format!("/leader/{election}?f%6Fllow=stream")),
        ("POST", format!("/semaphore/{lock}?permits=2&wait=0s")),
        ("GET", format!("/semaphore/{lock}")),
        ("POST", format!("/barrier/{lock}?parties=1&wait=0s")),
        ("GET", format!("/members/{election}")),
        ("GET", format!("/leader/{election}/campaign")),
        ("POST", format!("/leader/{election}/release")),
    ] {
        let answer = http(probe, method, &path, None).await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (403, "ProbePortReadOnly"),
            "{method} {path}: {answer:?}"
        );
    }
    // Nothing refused there took effect: no holder, and still the leader.
    let inspect = s.call("GET", &format!("/lock/{lock}")).await;
    assert_eq!(
        inspect.body["holder"],
        serde_json::Value::Null,
        "{inspect:?}"
    );
    let leader = s.call("GET", &format!("/leader/{election}")).await;
    assert_eq!(leader.body["self"]["isLeader"], true, "{leader:?}");
}

#[test]
fn flags_are_documented_and_checked() {
    let binary = env!("CARGO_BIN_EXE_baton-sidecar");
    let help = std::process::Command::new(binary)
        .arg("--help")
        .output()
        .expect("run --help");
    let text = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--ensemble",
        "--listen",
        "--probe-listen",
        "--identity",
        "--election",
        "--session-timeout",
        "--pod",
        "--namespace",
        "--app-health",
        "--app-health-interval",
        "--app-health-failures",
        "--candidacy",
        "--release-grace",
    ] {
        assert!(text.contains(flag), "--help documents {flag}:\n{text}");
    }
    for env in [
        "BATON_ENSEMBLE",
        "BATON_LISTEN",
        "BATON_IDENTITY",
        "BATON_ELECTION",
        "BATON_POD",
        "BATON_NAMESPACE",
        "BATON_APP_HEALTH",
        "BATON_CANDIDACY",
        "BATON_RELEASE_GRACE",
    ] {
        assert!(text.contains(env), "--help names {env}");
    }
    let refused = std::process::Command::new(binary)
        .args([
            "--ensemble",
            "127.0.0.1:1",
            "--identity",
            "x",
            "--election",
            "ready",
        ])
        .env_remove("BATON_ELECTION")
        .output()
        .expect("run");
    assert_eq!(
        refused.status.code(),
        Some(2),
        "a reserved election name is a usage error"
    );
    assert!(String::from_utf8_lossy(&refused.stderr).contains("reserved"));
    let from_env = std::process::Command::new(binary)
        .args(["--listen", "not-an-address"])
        .env("BATON_ENSEMBLE", "127.0.0.1:1")
        .env("BATON_IDENTITY", "x")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&from_env.stderr);
    assert_eq!(from_env.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--listen"),
        "the error names the flag: {stderr}"
    );
}

against_both!(
    the_probe_port_serves_only_read_only_routes,
    bad_input_gets_clear_json_errors,
    health_readiness_and_metrics,
);
