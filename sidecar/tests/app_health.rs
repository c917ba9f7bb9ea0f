//! `--app-health`: an app that fails its health checks loses leadership and its locks, and
//! stands again once healthy; with real sidecars and a tiny HTTP app flipped between 200 and
//! 500, observed through `/events` and the log (no sleeps).

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use common::sse::EventStream;
use common::{Sidecar, unique};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// An app whose health endpoint answers whatever status it is set to.
struct FakeApp {
    addr: SocketAddr,
    status: Arc<AtomicU16>,
}

impl FakeApp {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let status = Arc::new(AtomicU16::new(200));
        let answer = status.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let code = answer.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let code = code.load(Ordering::SeqCst);
                    let reply = format!(
                        "HTTP/1.1 {code} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    );
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        Self { addr, status }
    }

    fn answer(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }
}

fn names(body: &Value, identity: &str, leads: bool) -> bool {
    body["leader"]["identity"] == identity && body["self"]["isLeader"] == leads
}

async fn metric(s: &Sidecar, line: &str) -> bool {
    let metrics = s.call("GET", "/metrics").await;
    metrics.body.as_str().is_some_and(|t| t.contains(line))
}

async fn an_unhealthy_app_loses_leadership_and_locks_and_stands_again_when_healthy() {
    let election = unique("health");
    let (lease_lock, stream_lock) = (unique("health-lease"), unique("health-stream"));
    let app = FakeApp::start().await;
    let url = format!("http://{}/healthz", app.addr);
    let a = Sidecar::start_with(
        &format!("{election}-a"),
        &[&election],
        &[
            "--app-health",
            &url,
            "--app-health-interval",
            "100ms",
            "--app-health-failures",
            "2",
        ],
    );
    let leads = a
        .call("GET", &format!("/leader/{election}?wait=30s&token=0"))
        .await;
    assert_eq!(leads.body["self"]["isLeader"], true, "{leads:?}");
    let mut b = Sidecar::start(&format!("{election}-b"), &[&election]);
    let mut events = EventStream::open(a.addr, "GET", "/events")
        .await
        .expect("a stream");
    let lease = a.call("POST", &format!("/lock/{lease_lock}?ttl=60s")).await;
    assert_eq!(lease.status, 200, "{lease:?}");
    let mut hold = EventStream::open(a.addr, "POST", &format!("/lock/{stream_lock}?hold=stream"))
        .await
        .expect("a stream hold");
    hold.wait_for("granted", |_| true).await;
    assert!(metric(&a, "baton_sidecar_app_healthy 1").await);

    // The app fails: a stands aside (b leads) and its locks are lost.
    app.answer(500);
    let (mut lost, mut b_leads) = (Vec::new(), false);
    while lost.len() < 2 || !b_leads {
        let (name, data) = events.next_event().await.expect("more events");
        match name.as_str() {
            "lost" => {
                assert_eq!(data["reason"], "app unhealthy", "{data}");
                lost.push(data["lock"].as_str().unwrap_or_default().to_owned());
            }
            "leader" if names(&data, &b.identity, false) => b_leads = true,
            _ => {}
        }
    }
    lost.sort();
    let mut expected = vec![lease_lock.clone(), stream_lock.clone()];
    expected.sort();
    assert_eq!(lost, expected);
    let (name, data) = hold.next_event().await.expect("the stream hold's end");
    assert_eq!(
        (name.as_str(), &data["reason"]),
        ("lost", &Value::from("app unhealthy"))
    );
    assert!(hold.next_event().await.is_none(), "the stream ended");
    let line = a.wait_log("app unhealthy");
    assert!(line.contains("500"), "the log says why: {line}");
    let refused = a
        .call("POST", &format!("/lock/{}", unique("refused")))
        .await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.error_code(), "AppUnhealthy");
    assert!(metric(&a, "baton_sidecar_app_healthy 0").await);
    assert!(
        metric(
            &a,
            "baton_sidecar_app_health_transitions_total{to=\"unhealthy\"} 1"
        )
        .await
    );
    let seen = b.call("GET", &format!("/leader/{election}")).await;
    assert_eq!(seen.body["self"]["isLeader"], true, "{seen:?}");

    // Healthy again: a stands again, behind b; it leads once b goes.
    app.answer(200);
    a.wait_log("app healthy again");
    b.terminate();
    events
        .wait_for("leader", |d| names(d, &a.identity, true))
        .await;
    assert!(metric(&a, "baton_sidecar_app_healthy 1").await);
    assert!(
        metric(
            &a,
            "baton_sidecar_app_health_transitions_total{to=\"healthy\"} 1"
        )
        .await
    );
    let granted = a.call("POST", &format!("/lock/{lease_lock}?ttl=60s")).await;
    assert_eq!(granted.status, 200, "{granted:?}");
}

async fn an_unhealthy_campaigning_app_is_deposed_and_elected_again_when_healthy() {
    let election = unique("health-campaign");
    let app = FakeApp::start().await;
    let url = format!("http://{}/healthz", app.addr);
    let a = Sidecar::start_with(
        &format!("{election}-a"),
        &[&election],
        &[
            "--candidacy",
            "app",
            "--app-health",
            &url,
            "--app-health-interval",
            "100ms",
            "--app-health-failures",
            "2",
        ],
    );
    let mut campaign = EventStream::open(a.addr, "GET", &format!("/leader/{election}/campaign"))
        .await
        .expect("a campaign stream");
    let first = campaign.wait_for("elected", |_| true).await;
    app.answer(500);
    let deposed = campaign.wait_for("deposed", |_| true).await;
    assert_eq!(deposed["reason"], "app unhealthy", "{deposed}");
    assert_eq!(deposed["token"], first["token"], "{deposed}");
    // Healthy and still campaigning: it stands again, in a new term.
    app.answer(200);
    let again = campaign.wait_for("elected", |_| true).await;
    assert!(
        again["token"].as_i64() > first["token"].as_i64(),
        "{again} after {first}"
    );
}

against_both!(
    an_unhealthy_app_loses_leadership_and_locks_and_stands_again_when_healthy,
    an_unhealthy_campaigning_app_is_deposed_and_elected_again_when_healthy,
);
