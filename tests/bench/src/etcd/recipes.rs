//! etcd's own lock and election services, on the rows where ZooKeeper runs the fair-lock recipe.
//!
//! Both are etcd's server-side recipes (v3lock, v3election): a key under the name, bound to the
//! caller's lease, and a wait for every older key to go. A lock is held by the lease of its
//! worker and an election candidate campaigns with its own, as ZooKeeper's ephemeral nodes
//! belong to a session.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use etcd_client::{Client, GetOptions, LeaderKey, LockOptions, ResignOptions};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, timeout};

use super::{Lease, closed_loop, connect_all, op, remove_prefix};
use crate::budget::Budget;
use crate::error::BenchError;
use crate::latency::LatencyRecorder;
use crate::workload::RunConfig;

/// Longest wait for one grant or hand-over before the run is declared stuck.
const GRANT_TIMEOUT: Duration = Duration::from_secs(60);
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(30);

/// Lock rows: all workers on one lock (`contended`) or each on its own. An operation is a grant
/// and its unlock; its latency is the lock call (ask → granted), as on ZooKeeper.
pub(super) async fn lock(
    endpoints: &[String],
    config: &RunConfig,
    prefix: &str,
    contended: bool,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let clients = connect_all(endpoints, config.workers).await?;
    let mut admin = clients[0].clone();
    let mut owners = Vec::with_capacity(clients.len());
    for mut client in clients {
        let lease = Lease::grant(&mut client).await?;
        owners.push((client, lease));
    }
    // Every contended grant checks that nobody else holds the lock, as the ZooKeeper row does.
    let held = Arc::new(AtomicBool::new(false));
    let result = closed_loop(
        owners,
        config.limit,
        |worker, (mut client, lease), budget| {
            let held = Arc::clone(&held);
            let name = if contended {
                format!("{prefix}lock")
            } else {
                format!("{prefix}lock-w{worker}")
            };
            async move {
                let mut latencies = LatencyRecorder::new()?;
                while budget.claim(1) {
                    let options = LockOptions::new().with_lease(lease.id);
                    let started = Instant::now();
                    let granted = timeout(GRANT_TIMEOUT, client.lock(name.as_str(), Some(options)))
                        .await
                        .map_err(|_| BenchError::Timeout {
                            what: format!("etcd lock {name}"),
                            timeout: GRANT_TIMEOUT,
                        })?
                        .map_err(op("lock", &name))?;
                    latencies.record(started.elapsed());
                    let key = granted.key().to_vec();
                    if contended && held.swap(true, Ordering::SeqCst) {
                        return Err(BenchError::MutualExclusion {
                            path: String::from_utf8_lossy(&key).into_owned(),
                        });
                    }
                    held.store(false, Ordering::SeqCst);
                    client.unlock(key).await.map_err(op("unlock", &name))?;
                }
                lease.revoke(&mut client).await;
                Ok(latencies)
            }
        },
    )
    .await;
    remove_prefix(&mut admin, prefix).await;
    result
}

/// A candidate whose campaign returned: it leads, since `at`.
struct Elected {
    worker: usize,
    client: Client,
    key: LeaderKey,
    at: Instant,
}

/// Election hand-over: --workers candidates campaign on one election, each with its own lease;
/// each round the leader resigns, and the latency runs from the resign until the candidate next
/// in line has its campaign answered. An observer (etcd's Observe stream) must then name that
/// candidate too. The one that resigned campaigns again at the back of the line.
pub(super) async fn election(
    endpoints: &[String],
    config: &RunConfig,
    prefix: &str,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    if config.workers < 2 {
        return Err(BenchError::InvalidOption(
            "election-failover needs --workers 2 or more (candidates)".into(),
        ));
    }
    let name = format!("{prefix}election");
    let mut admin = connect_all(endpoints, 1).await?.remove(0);
    let result = rounds(endpoints, config, &name, &mut admin).await;
    remove_prefix(&mut admin, prefix).await;
    result
}

async fn rounds(
    endpoints: &[String],
    config: &RunConfig,
    name: &str,
    admin: &mut Client,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let (elected_tx, mut elected_rx) = mpsc::unbounded_channel();
    // Dropping these when this function returns aborts every campaign and keep-alive.
    let mut campaigns = JoinSet::new();
    let mut leases = Vec::new();
    let mut line = VecDeque::new();
    for (worker, mut client) in connect_all(endpoints, config.workers)
        .await?
        .into_iter()
        .enumerate()
    {
        let lease = Lease::grant(&mut client).await?;
        campaigns.spawn(campaign(
            worker,
            client,
            name.to_owned(),
            lease.id,
            elected_tx.clone(),
        ));
        leases.push(lease);
        line.push_back(worker);
        // Campaigns are served in the order their keys were written: wait for each.
        wait_queued(admin, name, line.len()).await?;
    }
    let mut observer = admin.observe(name).await.map_err(op("observe", name))?;
    let mut leader = next_leader(&mut elected_rx, &line).await?;
    observed(&mut observer, name, leader.worker).await?;

    let budget = Budget::start(config.limit);
    let started = Instant::now();
    let mut latencies = LatencyRecorder::new()?;
    while budget.claim(1) {
        let Elected {
            worker,
            mut client,
            key,
            ..
        } = leader;
        line.pop_front();
        let resigned_at = Instant::now();
        client
            .resign(Some(ResignOptions::new().with_leader(key)))
            .await
            .map_err(op("resign", name))?;
        leader = next_leader(&mut elected_rx, &line).await?;
        latencies.record(leader.at.saturating_duration_since(resigned_at));
        observed(&mut observer, name, leader.worker).await?;

        let lease = leases[worker].id;
        campaigns.spawn(campaign(
            worker,
            client,
            name.to_owned(),
            lease,
            elected_tx.clone(),
        ));
        line.push_back(worker);
        wait_queued(admin, name, line.len()).await?;
    }
    let elapsed = started.elapsed();
    for lease in leases {
        lease.revoke(admin).await;
    }
    Ok((latencies, elapsed))
}

/// Campaigns until elected, then hands the client and leader key to the coordinator.
async fn campaign(
    worker: usize,
    mut client: Client,
    name: String,
    lease: i64,
    elected: mpsc::UnboundedSender<Result<Elected, BenchError>>,
) {
    let outcome = client
        .campaign(name.as_str(), format!("w{worker}"), lease)
        .await
        .map_err(op("campaign", &name))
        .and_then(|answer| {
            let at = Instant::now();
            answer
                .leader()
                .cloned()
                .map(|key| (key, at))
                .ok_or_else(|| {
                    BenchError::Unexpected(format!("etcd campaign on {name}: no leader key"))
                })
        });
    // The coordinator is gone only when the run is over; nobody is left to tell.
    let _ = elected.send(outcome.map(|(key, at)| Elected {
        worker,
        client,
        key,
        at,
    }));
}

/// The next candidate to be elected; it must be the one at the head of `line`.
async fn next_leader(
    elected: &mut mpsc::UnboundedReceiver<Result<Elected, BenchError>>,
    line: &VecDeque<usize>,
) -> Result<Elected, BenchError> {
    let stuck = || BenchError::Timeout {
        what: "the next etcd candidate taking over".into(),
        timeout: HANDOVER_TIMEOUT,
    };
    let leader = timeout(HANDOVER_TIMEOUT, elected.recv())
        .await
        .map_err(|_| stuck())?
        .ok_or_else(stuck)??;
    let expected = line.front().copied().unwrap_or_default();
    if leader.worker != expected {
        return Err(BenchError::WrongLeader {
            expected: format!("w{expected}"),
            observed: format!("w{}", leader.worker),
        });
    }
    Ok(leader)
}

/// The observer's next announcement must name `worker`.
async fn observed(
    observer: &mut etcd_client::ObserveStream,
    name: &str,
    worker: usize,
) -> Result<(), BenchError> {
    let announced = timeout(HANDOVER_TIMEOUT, observer.message())
        .await
        .map_err(|_| BenchError::Timeout {
            what: format!("etcd observe {name} naming the new leader"),
            timeout: HANDOVER_TIMEOUT,
        })?
        .map_err(op("observe", name))?
        .and_then(|answer| answer.kv().map(|kv| kv.value().to_vec()))
        .unwrap_or_default();
    let expected = format!("w{worker}");
    if announced != expected.as_bytes() {
        return Err(BenchError::WrongLeader {
            expected,
            observed: String::from_utf8_lossy(&announced).into_owned(),
        });
    }
    Ok(())
}

/// Waits until `count` candidates' keys are in the election.
async fn wait_queued(admin: &mut Client, name: &str, count: usize) -> Result<(), BenchError> {
    let keys = format!("{name}/");
    let deadline = Instant::now() + HANDOVER_TIMEOUT;
    loop {
        let found = admin
            .get(
                keys.as_str(),
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
            .map_err(op("get", &keys))?
            .count();
        if found as usize >= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(BenchError::Timeout {
                what: format!("{count} candidates queued in etcd election {name}"),
                timeout: HANDOVER_TIMEOUT,
            });
        }
        sleep(Duration::from_millis(1)).await;
    }
}
