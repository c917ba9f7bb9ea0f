//! Lock workloads on the fair-lock recipe: many sessions on one lock, or one lock each.
//!
//! An operation is one grant followed by its release; its latency is the wait from asking for
//! the lock to holding it (what a caller blocks on). Locks are released as soon as they are held.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{RunConfig, closed_loop, make_dir, remove_dir};
use crate::ensemble::Ensemble;
use crate::error::BenchError;
use crate::fair_lock::FairLock;
use crate::latency::LatencyRecorder;

/// Longest wait for one grant before the run is declared stuck.
const GRANT_TIMEOUT: Duration = Duration::from_secs(60);

/// All workers take turns on one lock.
pub(super) async fn contended(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let clients = ensemble.connect_all(config.workers).await?;
    let Some(admin) = clients.first().cloned() else {
        return Err(BenchError::InvalidOption(
            "--workers must be at least 1".into(),
        ));
    };
    make_dir(&admin, dir).await?;
    // Every grant checks that nobody else holds the lock: cheap proof the numbers are of a
    // lock that actually excludes.
    let held = Arc::new(AtomicBool::new(false));
    let lock = FairLock::new(dir);
    let result = closed_loop(clients, config.limit, |_, client, budget| {
        let lock = lock.clone();
        let held = Arc::clone(&held);
        async move {
            let mut latencies = LatencyRecorder::new()?;
            while budget.claim(1) {
                let started = Instant::now();
                let node = lock.acquire(&client, GRANT_TIMEOUT).await?;
                latencies.record(started.elapsed());
                if held.swap(true, Ordering::SeqCst) {
                    return Err(BenchError::MutualExclusion { path: node.path() });
                }
                held.store(false, Ordering::SeqCst);
                lock.release(&client, node).await?;
            }
            Ok(latencies)
        }
    })
    .await;
    remove_dir(&admin, dir).await;
    result
}

/// Each worker takes and releases a lock nobody else uses.
pub(super) async fn uncontended(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let clients = ensemble.connect_all(config.workers).await?;
    let Some(admin) = clients.first().cloned() else {
        return Err(BenchError::InvalidOption(
            "--workers must be at least 1".into(),
        ));
    };
    for worker in 0..clients.len() {
        make_dir(&admin, &format!("{dir}/w{worker}")).await?;
    }
    let result = closed_loop(clients, config.limit, |worker, client, budget| {
        let lock = FairLock::new(format!("{dir}/w{worker}"));
        async move {
            let mut latencies = LatencyRecorder::new()?;
            while budget.claim(1) {
                let started = Instant::now();
                let node = lock.acquire(&client, GRANT_TIMEOUT).await?;
                latencies.record(started.elapsed());
                lock.release(&client, node).await?;
            }
            Ok(latencies)
        }
    })
    .await;
    for worker in 0..config.workers {
        remove_dir(&admin, &format!("{dir}/w{worker}")).await;
    }
    remove_dir(&admin, dir).await;
    result
}
