//! Locks bound to the app's connection (`POST /lock/NAME?hold=stream`): granted as a
//! server-sent event, held while the stream is open, released when the app's socket closes
//! (a crash closes it too), and ended with an event when the grant ends some other way.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::sse::EventStream;
use common::{BOUND, Sidecar, unique};

/// An app process holding `lock` through `sidecar` with `curl -N`, until it is killed.
struct CurlHolder {
    child: std::process::Child,
    granted: serde_json::Value,
}

impl CurlHolder {
    /// Starts curl and waits for its `event: granted`.
    fn start(sidecar: &Sidecar, lock: &str) -> Self {
        let url = format!("http://{}/lock/{lock}?hold=stream", sidecar.addr);
        let mut child = Command::new("curl")
            .args(["-sN", "-X", "POST", &url])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run curl");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(Ok(line)) = lines.next() {
                if line == "event: granted"
                    && let Some(Ok(data)) = lines.next()
                {
                    let _ = tx.send(data);
                }
            }
        });
        let data = rx.recv_timeout(BOUND).expect("curl got `event: granted`");
        let granted = serde_json::from_str(data.trim_start_matches("data:").trim())
            .expect("the grant's JSON");
        Self { child, granted }
    }

    /// `kill -9`: no goodbye, the kernel closes the socket.
    fn kill(mut self) {
        self.child.kill().expect("kill -9 curl");
        let _ = self.child.wait();
    }
}

async fn a_killed_app_hands_its_stream_lock_to_a_waiting_pod() {
    let lock = unique("stream");
    let holder = Sidecar::start(&format!("{lock}-a"), &[]);
    let waiter = Sidecar::start(&format!("{lock}-b"), &[]);
    let app = CurlHolder::start(&holder, &lock);
    let token = app.granted["token"].as_i64().expect("a token");
    assert_eq!(app.granted["hold"], "stream", "{}", app.granted);
    assert_eq!(app.granted["lock"], lock.as_str(), "{}", app.granted);
    assert!(app.granted["expiresAt"].is_null(), "{}", app.granted);

    let seen = holder.call("GET", &format!("/lock/{lock}")).await;
    assert_eq!(seen.body["self"]["holds"], true, "{seen:?}");
    assert_eq!(seen.body["self"]["hold"], "stream", "{seen:?}");
    let busy = waiter.call("POST", &format!("/lock/{lock}?wait=0")).await;
    assert_eq!(busy.status, 409, "held while the stream is open: {busy:?}");

    // The waiting pod queues; the app dies; the lock moves to the waiter.
    let handoff = tokio::spawn({
        let addr = waiter.addr;
        let path = format!("/lock/{lock}?wait=60s&ttl=60s");
        async move { common::http(addr, "POST", &path, None).await }
    });
    // The waiter's node is in the queue before the kill (polled: no event says so).
    loop {
        assert!(
            !handoff.is_finished(),
            "the waiter was answered while the app held the lock"
        );
        let seen = holder.call("GET", &format!("/lock/{lock}")).await;
        if seen.body["waiters"]
            .as_array()
            .is_some_and(|w| !w.is_empty())
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    app.kill();
    let granted = tokio::time::timeout(BOUND, handoff)
        .await
        .expect("the waiter was granted the lock")
        .expect("the waiter's call");
    assert_eq!(granted.status, 200, "{granted:?}");
    assert!(
        granted.body["token"].as_i64().is_some_and(|t| t > token),
        "{granted:?}"
    );
    holder.wait_log("why=\"stream closed\"");
    let after = holder.call("GET", &format!("/lock/{lock}")).await;
    assert_eq!(after.body["self"]["holds"], false, "{after:?}");
}

async fn a_stream_hold_ends_with_its_connection_or_with_an_event() {
    let lock = unique("stream-events");
    let a = Sidecar::start(&format!("{lock}-a"), &[]);
    let b = Sidecar::start(&format!("{lock}-b"), &[]);
    let path = format!("/lock/{lock}?hold=stream&mode=write");

    // Refusals come before any stream, as JSON.
    let with_ttl = EventStream::open(a.addr, "POST", &format!("{path}&ttl=5s")).await;
    let refused = with_ttl.err().expect("refused");
    assert_eq!(refused.status, 400, "{refused:?}");
    assert_eq!(
        refused.body["error"]["code"], "TtlWithStream",
        "{refused:?}"
    );
    let bad = EventStream::open(a.addr, "POST", &format!("/lock/{lock}?hold=forever")).await;
    assert_eq!(
        bad.err().expect("refused").body["error"]["code"],
        "InvalidHold"
    );

    let mut first = EventStream::open(a.addr, "POST", &path)
        .await
        .expect("a stream");
    let (name, granted) = first.next_event().await.expect("an event");
    assert_eq!(name, "granted", "{granted}");
    assert_eq!(granted["mode"], "write", "{granted}");
    let token = granted["token"].as_i64().expect("a token");

    // A wait that runs out answers 409 before any stream starts.
    let timed_out = EventStream::open(b.addr, "POST", &format!("{path}&wait=0")).await;
    let refused = timed_out.err().expect("not granted");
    assert_eq!(refused.status, 409, "{refused:?}");
    assert_eq!(refused.body["error"]["code"], "NotGranted", "{refused:?}");
    // A stream hold has no lease to renew.
    let renew = a
        .call("POST", &format!("/lock/{lock}/renew?token={token}"))
        .await;
    assert_eq!(renew.status, 409, "{renew:?}");
    assert_eq!(renew.error_code(), "StreamHold");

    // The app closes its connection: the lock is free for the other pod at once.
    drop(first);
    let mut second = EventStream::open(b.addr, "POST", &format!("{path}&wait=60s"))
        .await
        .expect("a stream");
    let granted = second.wait_for("granted", |_| true).await;
    let second_token = granted["token"].as_i64().expect("a token");
    assert!(second_token > token, "{granted}");

    // Released by token from elsewhere in the pod: the stream says so and ends.
    let released = b
        .call("DELETE", &format!("/lock/{lock}?token={second_token}"))
        .await;
    assert_eq!(released.status, 200, "{released:?}");
    let (name, data) = second.next_event().await.expect("the ending event");
    assert_eq!(name, "released", "{data}");
    assert_eq!(data["reason"], "released", "{data}");
    assert_eq!(data["token"], second_token, "{data}");
    assert!(second.next_event().await.is_none(), "the stream ended");
}

against_both!(
    a_killed_app_hands_its_stream_lock_to_a_waiting_pod,
    a_stream_hold_ends_with_its_connection_or_with_an_event,
);
