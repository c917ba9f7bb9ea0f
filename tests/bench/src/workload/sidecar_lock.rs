//! Locks through the sidecar's HTTP API: each worker is one `baton-sidecar` process with one
//! application loop on it, `POST /lock/NAME?wait=10s&ttl=30s` then `DELETE /lock/NAME?token=T` with the grant's token.
//!
//! One operation is the whole cycle, ask → granted → released, as an application pays for it
//! (HTTP on loopback, the sidecar's recipe, the ensemble's writes). Contended: every sidecar
//! asks for one lock, so each grant also waits for the holders before it; the run checks that no
//! two applications hold the lock at once and that fencing tokens rise with every grant.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use hyper::Method;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::sidecars::{Sidecars, resource_name};
use super::{RunConfig, remove_dir};
use crate::budget::Budget;
use crate::ensemble::Ensemble;
use crate::error::BenchError;
use crate::http_client::HttpClient;
use crate::latency::LatencyRecorder;

/// What the application asks for: wait long enough that a stuck lock fails the run rather than
/// turning into a 409, and a lease far longer than any hold.
const ACQUIRE_QUERY: &str = "wait=10s&ttl=30s";

/// Where the sidecar keeps its lock nodes (DESIGN.md §2).
/// (The sidecars run without --namespace, so in the namespace `default`.)
const LOCKS_ROOT: &str = "/baton/default/locks";

/// Runs the lock loop on `config.workers` sidecars: one lock for all when `contended`, else
/// one lock each.
pub(super) async fn run(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
    contended: bool,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let base = resource_name(dir);
    let names: Vec<String> = (0..config.workers)
        .map(|w| {
            if contended {
                base.clone()
            } else {
                format!("{base}-w{w}")
            }
        })
        .collect();
    let sidecars = Sidecars::start(ensemble, config, None).await?;
    let result = lock_loops(&sidecars, config, &names, contended).await;
    let stopped = sidecars.stop().await;
    // The sidecar leaves a lock's folder behind once its last holder is gone.
    let admin = ensemble.connect(0).await?;
    for name in names.iter().take(if contended { 1 } else { names.len() }) {
        remove_dir(&admin, &format!("{LOCKS_ROOT}/{name}")).await;
    }
    let result = result?;
    stopped?;
    Ok(result)
}

async fn lock_loops(
    sidecars: &Sidecars,
    config: &RunConfig,
    names: &[String],
    contended: bool,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let mut apps = Vec::new();
    for sidecar in sidecars.running() {
        apps.push(HttpClient::connect(sidecar.addr).await?);
    }
    let held = Arc::new(AtomicBool::new(false));
    let last_token = Arc::new(AtomicI64::new(i64::MIN));
    let budget = Arc::new(Budget::start(config.limit));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for (app, name) in apps.into_iter().zip(names) {
        let acquire = format!("/lock/{name}?{ACQUIRE_QUERY}");
        let release = format!("/lock/{name}");
        let budget = Arc::clone(&budget);
        let held = Arc::clone(&held);
        let last_token = Arc::clone(&last_token);
        tasks.spawn(async move {
            let mut app = app;
            let mut latencies = LatencyRecorder::new()?;
            while budget.claim(1) {
                let asked = Instant::now();
                let grant = app.call_ok(Method::POST, &acquire).await?;
                if contended {
                    check_exclusive(&grant, &held, &last_token, &acquire)?;
                    held.store(false, Ordering::SeqCst);
                }
                let token = grant["token"]
                    .as_i64()
                    .ok_or_else(|| BenchError::BadReply {
                        addr: "sidecar".into(),
                        request: format!("POST {acquire}"),
                        detail: "no integer token".into(),
                        body: grant.to_string(),
                    })?;
                app.call_ok(Method::DELETE, &format!("{release}?token={token}"))
                    .await?;
                latencies.record(asked.elapsed());
            }
            Ok::<_, BenchError>(latencies)
        });
    }
    let mut total = LatencyRecorder::new()?;
    while let Some(joined) = tasks.join_next().await {
        total.merge(&joined??)?;
    }
    Ok((total, started.elapsed()))
}

/// Proof the numbers are of a lock that excludes: nobody else holds it now, and this grant's
/// fencing token is above every earlier one (tokens are the granted nodes' czxids).
fn check_exclusive(
    grant: &serde_json::Value,
    held: &AtomicBool,
    last_token: &AtomicI64,
    request: &str,
) -> Result<(), BenchError> {
    let token = grant["token"]
        .as_i64()
        .ok_or_else(|| BenchError::BadReply {
            addr: "sidecar".into(),
            request: format!("POST {request}"),
            detail: "no integer token".into(),
            body: grant.to_string(),
        })?;
    if held.swap(true, Ordering::SeqCst) {
        return Err(BenchError::MutualExclusion {
            path: format!("token {token}"),
        });
    }
    let previous = last_token.fetch_max(token, Ordering::SeqCst);
    if previous >= token {
        return Err(BenchError::TokenNotRising { previous, token });
    }
    Ok(())
}
