//! The same rows against etcd (`--etcd`): its v3 API over gRPC through `etcd-client`, so etcd
//! can stand beside Baton and ZooKeeper in one table.
//!
//! Only rows whose meaning carries over run here: a put and its delete (create-delete), reads
//! (serializable for get-data and the mixes, the counterpart of ZooKeeper's member-local reads;
//! linearizable for get-data-linearizable, the counterpart of sync + getData), puts (the mixes'
//! setData), etcd's lock service (lock-*) and its election service (election-failover). Worker
//! `i` has its own client (its own HTTP/2 connection) to endpoint `i mod N`, as ZooKeeper's
//! session `i` goes to server `i mod N`; whatever needs a session (lock owners, candidates) gets
//! a lease kept alive on that client, as a ZooKeeper session pings.

mod kv;
mod recipes;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, DeleteOptions, GetOptions};
use tokio::task::{JoinHandle, JoinSet};

use crate::budget::{Budget, Limit};
use crate::error::BenchError;
use crate::latency::LatencyRecorder;
use crate::report::RunReport;
use crate::workload::{RunConfig, Workload, run_dir};

/// How long a lease outlives a bench process that died without revoking it; kept alive every
/// third of it, like a ZooKeeper session of the same timeout.
const LEASE_TTL_SECS: i64 = 10;

/// Runs `workload` against the etcd endpoints in --servers.
pub async fn run(workload: Workload, config: &RunConfig) -> Result<RunReport, BenchError> {
    let ensemble = config.ensemble.as_ref().ok_or_else(|| {
        BenchError::InvalidOption(format!("--servers is required for {}", workload.name()))
    })?;
    if ensemble.tls_ca().is_some() {
        return Err(BenchError::InvalidOption(
            "--etcd runs over plain gRPC; --tls-ca is not supported".into(),
        ));
    }
    let endpoints = ensemble.servers().to_vec();
    let prefix = format!("{}/", run_dir(workload));
    let (latencies, elapsed) = match workload {
        Workload::CreateDelete => kv::create_delete(&endpoints, config, &prefix).await?,
        Workload::GetData => kv::mixed(&endpoints, config, &prefix, 100, false).await?,
        Workload::GetDataLinearizable => kv::mixed(&endpoints, config, &prefix, 100, true).await?,
        Workload::Mixed90_10 => kv::mixed(&endpoints, config, &prefix, 90, false).await?,
        Workload::Mixed50_50 => kv::mixed(&endpoints, config, &prefix, 50, false).await?,
        Workload::LockContended => recipes::lock(&endpoints, config, &prefix, true).await?,
        Workload::LockUncontended => recipes::lock(&endpoints, config, &prefix, false).await?,
        Workload::ElectionFailover => recipes::election(&endpoints, config, &prefix).await?,
        other => {
            return Err(BenchError::InvalidOption(format!(
                "{} has no etcd counterpart (etcd runs create-delete, get-data, \
                 get-data-linearizable, mixed-*, lock-* and election-failover)",
                other.name()
            )));
        }
    };
    Ok(RunReport::new(
        &config.label,
        workload.name(),
        config.workers,
        &latencies,
        elapsed,
    ))
}

/// Wraps an etcd error with what was being done.
fn op(what: &'static str, key: impl Into<String>) -> impl FnOnce(etcd_client::Error) -> BenchError {
    let key = key.into();
    move |source| BenchError::Etcd {
        op: what,
        key,
        source,
    }
}

/// A client of its own for `worker`, on endpoint `worker mod N`.
async fn connect(endpoints: &[String], worker: usize) -> Result<Client, BenchError> {
    let server = &endpoints[worker % endpoints.len()];
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5));
    Client::connect([format!("http://{server}")], Some(options))
        .await
        .map_err(op("connect", server.clone()))
}

/// One client per worker, each having made a linearizable read (the counterpart of the
/// ZooKeeper rows' `sync`): connected, and its member caught up with the set-up writes.
async fn connect_all(endpoints: &[String], workers: usize) -> Result<Vec<Client>, BenchError> {
    let mut clients = Vec::with_capacity(workers);
    for worker in 0..workers {
        let mut client = connect(endpoints, worker).await?;
        client
            .get("/", Some(GetOptions::new().with_count_only()))
            .await
            .map_err(op("get", "/"))?;
        clients.push(client);
    }
    Ok(clients)
}

/// Deletes every key of the run, best effort: a leftover never fails a finished run.
async fn remove_prefix(client: &mut Client, prefix: &str) {
    let _ = client
        .delete(prefix, Some(DeleteOptions::new().with_prefix()))
        .await;
}

/// A lease kept alive in the background until it is revoked (or dropped, which only stops
/// the keep-alives: the lease then expires on its own).
struct Lease {
    id: i64,
    keeper: JoinHandle<()>,
}

impl Lease {
    async fn grant(client: &mut Client) -> Result<Self, BenchError> {
        let id = client
            .lease_grant(LEASE_TTL_SECS, None)
            .await
            .map_err(op("lease grant", ""))?
            .id();
        let (mut keeper, mut stream) = client
            .lease_keep_alive(id)
            .await
            .map_err(op("lease keep-alive", id.to_string()))?;
        let period = Duration::from_secs((LEASE_TTL_SECS / 3) as u64);
        let keeper = tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                if keeper.keep_alive().await.is_err()
                    || !matches!(stream.message().await, Ok(Some(_)))
                {
                    return;
                }
            }
        });
        Ok(Lease { id, keeper })
    }

    async fn revoke(self, client: &mut Client) {
        self.keeper.abort();
        let _ = client.lease_revoke(self.id).await;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

/// Runs one task per client until `limit` is spent and merges their latencies; the first
/// failing worker fails the run (dropping the set aborts the others).
async fn closed_loop<T, F, Fut>(
    clients: Vec<T>,
    limit: Limit,
    worker: F,
) -> Result<(LatencyRecorder, Duration), BenchError>
where
    F: Fn(usize, T, Arc<Budget>) -> Fut,
    Fut: Future<Output = Result<LatencyRecorder, BenchError>> + Send + 'static,
{
    let budget = Arc::new(Budget::start(limit));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for (index, client) in clients.into_iter().enumerate() {
        tasks.spawn(worker(index, client, Arc::clone(&budget)));
    }
    let mut total = LatencyRecorder::new()?;
    while let Some(joined) = tasks.join_next().await {
        total.merge(&joined??)?;
    }
    Ok((total, started.elapsed()))
}
