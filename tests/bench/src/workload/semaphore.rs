//! Semaphores through the sidecar's HTTP API: each worker is one `baton-sidecar` process with
//! one application loop on it, `POST /semaphore/NAME?permits=N&wait=10s&ttl=30s` then
//! `DELETE /semaphore/NAME?token=T`.
//!
//! One operation is the whole cycle, ask → granted → released, as the application pays for it.
//! Uncontended: one semaphore per worker. Contended: every sidecar asks for one semaphore of
//! [`PERMITS`] permits, and the run checks that never more than that many applications hold
//! one at once (an application counts itself out before it sends its release, so the count
//! can only be high if the semaphore granted too many).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
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

/// Permits of every semaphore of the run.
pub const PERMITS: u32 = 2;
/// Wait long enough that a stuck semaphore fails the run rather than turning into a 409, and a
/// lease far longer than any hold.
const ACQUIRE_QUERY: &str = "wait=10s&ttl=30s";
/// Where the sidecar keeps its semaphores (DESIGN.md §2; namespace `default`).
const SEMAPHORES_ROOT: &str = "/baton/default/semaphores";

/// Runs the semaphore loop on `config.workers` sidecars: one semaphore for all when
/// `contended`, else one each.
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
    let result = loops(&sidecars, config, &names, contended).await;
    let stopped = sidecars.stop().await;
    let admin = ensemble.connect(0).await?;
    let mut folders: Vec<&String> = names.iter().collect();
    folders.dedup();
    for name in folders {
        remove_dir(&admin, &format!("{SEMAPHORES_ROOT}/{name}")).await;
    }
    let result = result?;
    stopped?;
    Ok(result)
}

async fn loops(
    sidecars: &Sidecars,
    config: &RunConfig,
    names: &[String],
    contended: bool,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let mut apps = Vec::new();
    for sidecar in sidecars.running() {
        apps.push(HttpClient::connect(sidecar.addr).await?);
    }
    // Holders of the contended run's one semaphore.
    let holders = Arc::new(AtomicU32::new(0));
    let budget = Arc::new(Budget::start(config.limit));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for (app, name) in apps.into_iter().zip(names) {
        let acquire = format!("/semaphore/{name}?permits={PERMITS}&{ACQUIRE_QUERY}");
        let release = format!("/semaphore/{name}");
        let budget = Arc::clone(&budget);
        let holders = Arc::clone(&holders);
        tasks.spawn(async move {
            let mut app = app;
            let mut latencies = LatencyRecorder::new()?;
            while budget.claim(1) {
                let asked = Instant::now();
                let grant = app.call_ok(Method::POST, &acquire).await?;
                let token = grant["token"]
                    .as_i64()
                    .ok_or_else(|| BenchError::BadReply {
                        addr: "sidecar".into(),
                        request: format!("POST {acquire}"),
                        detail: "no integer token".into(),
                        body: grant.to_string(),
                    })?;
                let now_holding = holders.fetch_add(1, Ordering::SeqCst) + 1;
                if contended && now_holding > PERMITS {
                    return Err(BenchError::MutualExclusion {
                        path: format!(
                            "{now_holding} holders of a {PERMITS}-permit semaphore (token {token})"
                        ),
                    });
                }
                holders.fetch_sub(1, Ordering::SeqCst);
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
