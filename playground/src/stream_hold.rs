//! The stream-hold demonstration, run once after the banner: one pod's app holds a lock with
//! `POST /lock/NAME?hold=stream`, a second pod waits for it, the first app "crashes" (its
//! connection to its sidecar closes, as the kernel closes a dead process's sockets), and the
//! console shows how many milliseconds later the waiting pod got the lock.
//!
//! The app is a socket of the playground's own: to the sidecar a crashed app is exactly that
//! socket closing, with no goodbye (no DELETE).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use baton_tls::HttpClient;
use http::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::console::Console;
use crate::watch::WatchedPod;

/// The demonstration's lock (apart from the banner's `demo` lock, which the user may try).
pub const LOCK: &str = "crash-demo";
/// Bound on each step: a busy two-core machine, right after the start.
const STEP: Duration = Duration::from_secs(30);
/// Between two looks at the lock's queue while the waiter joins it (the set-up, not timed).
const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// Lets the user read the banner before the demonstration prints.
const PAUSE: Duration = Duration::from_secs(1);

/// Runs the demonstration with the second and third pods (the first leads "demo"); prints why
/// not instead of failing the playground.
pub async fn demonstrate(pods: &[WatchedPod], console: Console) {
    let (Some(holder), Some(waiter)) = (pods.get(1), pods.get(2).or(pods.first())) else {
        return;
    };
    if holder.pod.identity == waiter.pod.identity {
        return;
    }
    tokio::time::sleep(PAUSE).await;
    if let Err(e) = run(holder, waiter, console).await {
        console.event(format!("stream-hold demonstration skipped: {e:#}"));
    }
}

async fn run(holder: &WatchedPod, waiter: &WatchedPod, console: Console) -> Result<()> {
    let (app, waiting) = (&holder.pod.identity, &waiter.pod.identity);
    let mut stream = hold(holder.pod.listen).await?;
    console.event(format!(
        "stream hold: {app}'s app holds lock \"{LOCK}\" (POST /lock/{LOCK}?hold=stream, the \
         connection kept open); {waiting} asks for it and waits"
    ));
    let ask = tokio::spawn(acquire(waiter.pod.listen));
    queued(waiter.pod.listen).await?;
    // Draining the keep-alives until now: unread bytes would turn the close into a reset,
    // which a crash does not always do.
    let mut buf = [0u8; 1024];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::ZERO, stream.read(&mut buf)).await {
        if n == 0 {
            bail!("the sidecar ended the stream hold early");
        }
    }
    let crashed = Instant::now();
    drop(stream);
    console.event(format!(
        "{app}'s app crashed (its connection to the sidecar closed, no DELETE)"
    ));
    let (token, granted) = ask.await.context("the waiting app")??;
    let after = granted.saturating_duration_since(crashed);
    console.event(format!(
        "lock \"{LOCK}\": {waiting} got it {:.1} ms after {app}'s app crashed (fencing token \
         {token}); with ttl=30s it would have waited for the lease",
        after.as_secs_f64() * 1e3
    ));
    release(waiter.pod.listen, token).await
}

/// Takes the lock as a stream hold and returns the open connection once `granted` arrived.
async fn hold(sidecar: SocketAddr) -> Result<TcpStream> {
    let mut stream = tokio::time::timeout(STEP, TcpStream::connect(sidecar))
        .await
        .context("connecting to the sidecar")??;
    let request = format!(
        "POST /lock/{LOCK}?hold=stream&wait=30s HTTP/1.1\r\nHost: {sidecar}\r\nContent-Length: 0\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + STEP;
    while !String::from_utf8_lossy(&seen).contains("event: granted") {
        let n = tokio::time::timeout_at(deadline, stream.read(&mut buf))
            .await
            .context("no grant in time")??;
        if n == 0 {
            bail!(
                "the sidecar answered without a grant: {}",
                String::from_utf8_lossy(&seen)
            );
        }
        seen.extend_from_slice(&buf[..n]);
    }
    Ok(stream)
}

/// `POST /lock/NAME?wait=30s`: the fencing token and when the grant arrived.
async fn acquire(sidecar: SocketAddr) -> Result<(i64, Instant)> {
    let reply = HttpClient::plain(STEP + STEP)
        .request(
            &sidecar.to_string(),
            Method::POST,
            &format!("/lock/{LOCK}?wait=30s&ttl=30s"),
            None,
        )
        .await?;
    let at = Instant::now();
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap_or_default();
    if reply.status != http::StatusCode::OK {
        bail!("the waiting pod was answered {}: {body}", reply.status);
    }
    let token = body["token"].as_i64().context("a grant without a token")?;
    Ok((token, at))
}

/// Waits until the lock's queue shows a waiter behind the holder.
async fn queued(sidecar: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + STEP;
    loop {
        let reply = HttpClient::plain(STEP)
            .request(
                &sidecar.to_string(),
                Method::GET,
                &format!("/lock/{LOCK}"),
                None,
            )
            .await?;
        let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap_or_default();
        if body["waiters"].as_array().is_some_and(|w| !w.is_empty()) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("the waiting pod never showed in the queue: {body}");
        }
        // The sidecar offers no way to wait for another pod's node; this is only the set-up.
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

async fn release(sidecar: SocketAddr, token: i64) -> Result<()> {
    HttpClient::plain(STEP)
        .request(
            &sidecar.to_string(),
            Method::DELETE,
            &format!("/lock/{LOCK}?token={token}"),
            None,
        )
        .await?;
    Ok(())
}
