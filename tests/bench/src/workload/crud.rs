//! Plain data workloads: create/delete, reads, read/write mixes, and populating the tree.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use zookeeper_client::{Acls, Client, CreateMode, CreateOptions};

use super::{RunConfig, closed_loop, make_dir, payload, remove_dir};
use crate::ensemble::Ensemble;
use crate::error::BenchError;
use crate::latency::LatencyRecorder;

/// How many nodes the read and mixed workloads spread their operations over.
const DATA_NODES: u64 = 100;

fn persistent() -> CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

/// Connects the workers and returns a spare handle on worker 0's session for set-up and clean-up.
async fn connect(ensemble: &Ensemble, workers: usize) -> Result<(Vec<Client>, Client), BenchError> {
    let clients = ensemble.connect_all(workers).await?;
    let first = clients
        .first()
        .cloned()
        .ok_or_else(|| BenchError::InvalidOption("--workers must be at least 1".into()))?;
    Ok((clients, first))
}

/// Each worker creates a node of --data-size bytes and deletes it; both requests are timed.
pub(super) async fn create_delete(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let (clients, admin) = connect(ensemble, config.workers).await?;
    make_dir(&admin, dir).await?;
    let data = Arc::new(payload(config.data_size));
    let result = closed_loop(clients, config.limit, |worker, client, budget| {
        let data = Arc::clone(&data);
        let dir = dir.to_owned();
        async move {
            let mut latencies = LatencyRecorder::new()?;
            let options = persistent();
            let mut n = 0u64;
            // A create and its delete are claimed together so an ops-limited run leaves no node.
            while budget.claim(2) {
                let path = format!("{dir}/w{worker}-{n}");
                n += 1;
                let started = Instant::now();
                client
                    .create(&path, &data, &options)
                    .await
                    .map_err(BenchError::op("create", &path))?;
                let created = Instant::now();
                latencies.record(created - started);
                client
                    .delete(&path, None)
                    .await
                    .map_err(BenchError::op("delete", &path))?;
                latencies.record(created.elapsed());
            }
            Ok(latencies)
        }
    })
    .await;
    remove_dir(&admin, dir).await;
    result
}

/// getData (and setData for the rest of `read_percent`) on random nodes of a fixed set; with
/// `sync_first`, each getData follows a sync (ZooKeeper's way to read the latest), and the
/// operation timed is the pair.
pub(super) async fn mixed(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
    read_percent: u64,
    sync_first: bool,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let (clients, admin) = connect(ensemble, config.workers).await?;
    make_dir(&admin, dir).await?;
    let data = Arc::new(payload(config.data_size));
    create_data_nodes(&admin, dir, &data).await?;
    let result = closed_loop(clients, config.limit, |worker, client, budget| {
        let data = Arc::clone(&data);
        let dir = dir.to_owned();
        async move {
            let mut latencies = LatencyRecorder::new()?;
            let mut random = SplitMix64(worker as u64);
            while budget.claim(1) {
                let path = format!("{dir}/n{}", random.next() % DATA_NODES);
                let read = random.next() % 100 < read_percent;
                let started = Instant::now();
                if read {
                    if sync_first {
                        client
                            .sync(&path)
                            .await
                            .map_err(BenchError::op("sync", &path))?;
                    }
                    client
                        .get_data(&path)
                        .await
                        .map_err(BenchError::op("getData", &path))?;
                } else {
                    client
                        .set_data(&path, &data, None)
                        .await
                        .map_err(BenchError::op("setData", &path))?;
                }
                latencies.record(started.elapsed());
            }
            Ok(latencies)
        }
    })
    .await;
    remove_dir(&admin, dir).await;
    result
}

/// Creates the fixed node set, all requests in flight at once, before the clock starts.
async fn create_data_nodes(
    client: &Client,
    dir: &str,
    data: &Arc<Vec<u8>>,
) -> Result<(), BenchError> {
    let mut creates = JoinSet::new();
    for n in 0..DATA_NODES {
        let client = client.clone();
        let data = Arc::clone(data);
        let path = format!("{dir}/n{n}");
        creates.spawn(async move {
            client
                .create(&path, &data, &persistent())
                .await
                .map(drop)
                .map_err(BenchError::op("create", &path))
        });
    }
    while let Some(created) = creates.join_next().await {
        created??;
    }
    Ok(())
}

/// Creates --ops nodes of --data-size bytes in one directory and leaves them there.
pub(super) async fn populate(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let (clients, admin) = connect(ensemble, config.workers).await?;
    make_dir(&admin, dir).await?;
    let data = Arc::new(payload(config.data_size));
    let next = Arc::new(AtomicU64::new(0));
    closed_loop(clients, config.limit, |_, client, budget| {
        let data = Arc::clone(&data);
        let next = Arc::clone(&next);
        let dir = dir.to_owned();
        async move {
            let mut latencies = LatencyRecorder::new()?;
            let options = persistent();
            while budget.claim(1) {
                let path = format!("{dir}/n{}", next.fetch_add(1, Ordering::Relaxed));
                let started = Instant::now();
                client
                    .create(&path, &data, &options)
                    .await
                    .map_err(BenchError::op("create", &path))?;
                latencies.record(started.elapsed());
            }
            Ok(latencies)
        }
    })
    .await
}

/// A tiny deterministic generator: runs are repeatable and need no dependency.
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    #[test]
    fn mix_ratio_is_close_to_requested() {
        let mut random = SplitMix64(7);
        let reads = (0..10_000).filter(|_| random.next() % 100 < 90).count();
        assert!((8_800..=9_200).contains(&reads), "{reads} reads of 10000");
    }
}
