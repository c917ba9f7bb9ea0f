//! Plain key-value rows on etcd: a put and its delete, reads, and read/write mixes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::GetOptions;

use super::{closed_loop, connect_all, op, remove_prefix};
use crate::error::BenchError;
use crate::latency::LatencyRecorder;
use crate::workload::{RunConfig, SplitMix64, payload};

/// How many keys the read and mixed rows spread their operations over (as on ZooKeeper).
const DATA_KEYS: u64 = 100;

/// Each worker puts a key of --data-size bytes and deletes it; both requests are timed (the
/// counterpart of create-delete: etcd has no create-only put, and none is needed for a new key).
pub(super) async fn create_delete(
    endpoints: &[String],
    config: &RunConfig,
    prefix: &str,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let clients = connect_all(endpoints, config.workers).await?;
    let mut admin = clients[0].clone();
    let data = Arc::new(payload(config.data_size));
    let result = closed_loop(clients, config.limit, |worker, mut client, budget| {
        let data = Arc::clone(&data);
        let prefix = prefix.to_owned();
        async move {
            let mut latencies = LatencyRecorder::new()?;
            let mut n = 0u64;
            while budget.claim(2) {
                let key = format!("{prefix}w{worker}-{n}");
                n += 1;
                let started = Instant::now();
                client
                    .put(key.as_str(), data.as_slice(), None)
                    .await
                    .map_err(op("put", &key))?;
                let created = Instant::now();
                latencies.record(created - started);
                client
                    .delete(key.as_str(), None)
                    .await
                    .map_err(op("delete", &key))?;
                latencies.record(created.elapsed());
            }
            Ok(latencies)
        }
    })
    .await;
    remove_prefix(&mut admin, prefix).await;
    result
}

/// Gets (and puts, for the rest of `read_percent`) on random keys of a fixed set; reads are
/// serializable (member-local, like ZooKeeper's) unless `linearizable`.
pub(super) async fn mixed(
    endpoints: &[String],
    config: &RunConfig,
    prefix: &str,
    read_percent: u64,
    linearizable: bool,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let data = Arc::new(payload(config.data_size));
    let mut setup = connect_all(endpoints, 1).await?.remove(0);
    for n in 0..DATA_KEYS {
        let key = format!("{prefix}n{n}");
        setup
            .put(key.as_str(), data.as_slice(), None)
            .await
            .map_err(op("put", &key))?;
    }
    // Connected after the set-up puts: each client's first (linearizable) read then waits until
    // its member has applied them, so serializable reads find every key.
    let clients = connect_all(endpoints, config.workers).await?;
    let result = closed_loop(clients, config.limit, |worker, mut client, budget| {
        let data = Arc::clone(&data);
        let prefix = prefix.to_owned();
        async move {
            let mut latencies = LatencyRecorder::new()?;
            let mut random = SplitMix64(worker as u64);
            while budget.claim(1) {
                let key = format!("{prefix}n{}", random.next() % DATA_KEYS);
                let read = random.next() % 100 < read_percent;
                let started = Instant::now();
                if read {
                    let options = (!linearizable).then(|| GetOptions::new().with_serializable());
                    let found = client
                        .get(key.as_str(), options)
                        .await
                        .map_err(op("get", &key))?;
                    if found.kvs().is_empty() {
                        return Err(BenchError::Unexpected(format!(
                            "etcd: key {key} missing (written before the clock started)"
                        )));
                    }
                } else {
                    client
                        .put(key.as_str(), data.as_slice(), None)
                        .await
                        .map_err(op("put", &key))?;
                }
                latencies.record(started.elapsed());
            }
            Ok(latencies)
        }
    })
    .await;
    remove_prefix(&mut setup, prefix).await;
    result
}
