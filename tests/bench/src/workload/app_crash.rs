//! App crash → lock free: how long a waiting pod waits for a lock whose holder's app crashed,
//! three ways side by side (one workload each):
//!
//! - `stream`: the app holds `POST /lock/NAME?hold=stream` open through its sidecar; SIGKILL of
//!   the app closes its socket, and the sidecar releases at once.
//! - `ttl`: the app holds a lease (`ttl`, renewed every third of it); after SIGKILL nobody
//!   renews, and the lock frees when the lease runs out.
//! - `zk-session`: no sidecar, a plain ZooKeeper client holding the fair lock; after SIGKILL its
//!   session expires after its timeout, and its node goes with it.
//!
//! Each round: the app child (a process of its own, [`AppChild`]) takes the lock; a second pod
//! asks for it and is queued (its node is seen in the lock's folder, so asking is not timed);
//! the clock starts just before the SIGKILL and stops when the waiter's grant arrives.

use std::time::Duration;

use hyper::Method;
use tokio::time::{Instant, timeout, timeout_at};
use zookeeper_client::Client;

use super::sidecars::{Sidecars, resource_name};
use super::{RunConfig, make_dir, remove_dir};
use crate::app_child::{AppChild, AppMode};
use crate::budget::Budget;
use crate::ensemble::Ensemble;
use crate::error::BenchError;
use crate::fair_lock::{join, wait_until_first};
use crate::http_client::HttpClient;
use crate::latency::LatencyRecorder;

/// Where the sidecar keeps its lock nodes (DESIGN.md §2; the sidecars run in namespace
/// `default`).
const LOCKS_ROOT: &str = "/baton/default/locks";
/// The lease of the `ttl` way: short, as an app that wants a fast hand-over would pick, yet
/// well above a renewal's round trip.
pub const TTL: Duration = Duration::from_secs(2);
/// The plain client's session timeout: ZooKeeper's smallest by default (2 × tickTime) and
/// Baton's `--min-session-timeout`.
pub const ZK_SESSION_TIMEOUT: Duration = Duration::from_secs(4);
/// Longest acceptable wait for the lock to pass before the run is declared stuck.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(60);
/// What the waiting pod asks for: it must still be waiting when the lock frees.
const WAITER_QUERY: &str = "wait=60s&ttl=30s";

/// How the crashed app held its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    Stream,
    Ttl,
    ZkSession,
}

/// Runs the crash rounds of one way and records each hand-over.
pub(super) async fn run(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
    way: Way,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    if way == Way::ZkSession {
        return zk_rounds(ensemble, config, dir).await;
    }
    let name = resource_name(dir);
    let folder = format!("{LOCKS_ROOT}/{name}");
    let admin = ensemble.connect(0).await?;
    // Two pods: worker 0's app holds and crashes, worker 1 waits; they use different members.
    let mut two = config.clone();
    two.workers = 2;
    let sidecars = Sidecars::start(ensemble, &two, None).await?;
    let result = sidecar_rounds(&admin, &sidecars, config, &name, &folder, way).await;
    let stopped = sidecars.stop().await;
    remove_dir(&admin, &folder).await;
    let result = result?;
    stopped?;
    Ok(result)
}

async fn sidecar_rounds(
    admin: &Client,
    sidecars: &Sidecars,
    config: &RunConfig,
    name: &str,
    folder: &str,
    way: Way,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let running: Vec<_> = sidecars.running().collect();
    let (holder, waiter) = (running[0].addr, running[1].addr);
    let mode = match way {
        Way::Stream => AppMode::Stream {
            sidecar: holder,
            path: format!("/lock/{name}?hold=stream&wait=30s"),
        },
        _ => AppMode::Ttl {
            sidecar: holder,
            name: name.to_owned(),
            ttl: TTL,
        },
    };
    let budget = Budget::start(config.limit);
    let started = Instant::now();
    let mut latencies = LatencyRecorder::new()?;
    while budget.claim(1) {
        let app = AppChild::start(&mode).await?;
        if way == Way::Ttl {
            // A crash lands anywhere between two renewals, not just after the grant.
            tokio::time::sleep(jitter(TTL / 3)).await;
        }
        let mut http = HttpClient::connect(waiter).await?;
        let acquire = format!("/lock/{name}?{WAITER_QUERY}");
        let ask = tokio::spawn(async move {
            let grant = http.call_ok(Method::POST, &acquire).await;
            (grant.map(|g| (g, Instant::now())), http)
        });
        queued(admin, folder, 2).await?;
        let killed_at = Instant::now();
        app.kill()?;
        let stuck = || BenchError::Timeout {
            what: format!("the waiting pod's grant of {name} after the app's crash"),
            timeout: HANDOVER_TIMEOUT,
        };
        let (grant, mut http) = timeout(HANDOVER_TIMEOUT, ask)
            .await
            .map_err(|_| stuck())??;
        let (grant, at) = grant?;
        latencies.record(at.saturating_duration_since(killed_at));
        app.reap().await;
        let token = grant["token"].as_i64().unwrap_or_default();
        http.call_ok(Method::DELETE, &format!("/lock/{name}?token={token}"))
            .await?;
        // The next app must find the lock free, not queue behind this round's leftovers.
        queued(admin, folder, 0).await?;
    }
    Ok((latencies, started.elapsed()))
}

async fn zk_rounds(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    // The waiter on member 1, the crashing app on member 0 (worker 0's server).
    let waiter = ensemble.connect(1).await?;
    make_dir(&waiter, dir).await?;
    let mode = AppMode::ZkSession {
        server: ensemble.server_for(0).to_owned(),
        dir: dir.to_owned(),
        session_timeout: ZK_SESSION_TIMEOUT,
        tls_ca: ensemble.tls_ca().map(ToOwned::to_owned),
    };
    let result = async {
        let budget = Budget::start(config.limit);
        let started = Instant::now();
        let mut latencies = LatencyRecorder::new()?;
        while budget.claim(1) {
            let app = AppChild::start(&mode).await?;
            let node = join(&waiter, dir, "lock-", &[]).await?;
            let killed_at = Instant::now();
            app.kill()?;
            wait_until_first(&waiter, &node, "lock-", HANDOVER_TIMEOUT).await?;
            latencies.record(killed_at.elapsed());
            app.reap().await;
            waiter
                .delete(&node.path(), None)
                .await
                .map_err(BenchError::op("delete", node.path()))?;
        }
        Ok((latencies, started.elapsed()))
    }
    .await;
    remove_dir(&waiter, dir).await;
    result
}

/// Returns once the lock's folder has exactly `count` nodes (a watch on its children; a
/// missing folder counts as none).
async fn queued(admin: &Client, folder: &str, count: usize) -> Result<(), BenchError> {
    let limit = Duration::from_secs(30);
    let deadline = Instant::now() + limit;
    loop {
        let (children, watcher) = match admin.get_and_watch_children(folder).await {
            Ok((children, _, watcher)) => (children, Some(watcher)),
            Err(zookeeper_client::Error::NoNode) => (Vec::new(), None),
            Err(e) => return Err(BenchError::op("getChildren", folder)(e)),
        };
        if children.len() == count {
            return Ok(());
        }
        let stuck = || BenchError::Timeout {
            what: format!("{count} node(s) in {folder} (now {})", children.len()),
            timeout: limit,
        };
        match watcher {
            Some(watcher) => {
                timeout_at(deadline, watcher.changed())
                    .await
                    .map_err(|_| stuck())?;
            }
            None => {
                // No folder yet: the sidecar makes it with the first node; watch for it.
                let (stat, exists) = admin
                    .check_and_watch_stat(folder)
                    .await
                    .map_err(BenchError::op("exists", folder))?;
                if stat.is_some() {
                    // Made between the two reads: list it again.
                    continue;
                }
                timeout_at(deadline, exists.changed())
                    .await
                    .map_err(|_| stuck())?;
            }
        }
    }
}

/// A duration in `[0, bound)` that differs from round to round (the clock's nanoseconds: no
/// need for a seeded generator here).
fn jitter(bound: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    bound.mul_f64(f64::from(nanos) / 1e9)
}
