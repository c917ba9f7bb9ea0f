//! The workloads, the knobs they share, and the closed-loop harness most of them run in.

mod app_crash;
mod app_crash_leader;
mod crud;
mod election;
mod ensemble_failover;
mod fanout;
mod fsync;
mod lock;
mod loopback;
mod semaphore;
mod sessions_failover;
mod sessions_scale;
mod sidecar_handover;
mod sidecar_lock;
mod sidecars;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use zookeeper_client::{Acls, Client, CreateMode};

#[cfg(feature = "etcd")]
pub(crate) use crud::SplitMix64;

use crate::budget::{Budget, Limit};
use crate::ensemble::Ensemble;
use crate::error::BenchError;
use crate::latency::LatencyRecorder;
use crate::members::MemberControl;
use crate::report::RunReport;

/// Where every workload keeps its nodes; each run gets a fresh directory below it.
const ROOT: &str = "/baton-bench";

/// How long a finished run waits for its sessions to close.
const SESSION_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// One benchmark workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// Each worker creates a node with --data-size bytes and deletes it (the ZooKeeper paper's
    /// workload); the create and the delete are each one operation.
    CreateDelete,
    /// getData on a set of 100 nodes of --data-size bytes.
    GetData,
    /// sync, then getData, on a set of 100 nodes: a read that sees every write acknowledged
    /// before it (with --etcd: a linearizable get; get-data is then a serializable one).
    GetDataLinearizable,
    /// 90% getData, 10% setData on a set of 100 nodes.
    #[value(name = "mixed-90-10")]
    Mixed90_10,
    /// 50% getData, 50% setData on a set of 100 nodes.
    #[value(name = "mixed-50-50")]
    Mixed50_50,
    /// All workers take and release one fair lock; latency is the wait for each grant.
    LockContended,
    /// Each worker takes and releases its own fair lock.
    LockUncontended,
    /// --workers candidates; the leader's session closes; latency is until the next one leads.
    ElectionFailover,
    /// One writer, --workers watchers of one node; latency is from write to each notification.
    WatchFanout,
    /// Creates --ops nodes of --data-size bytes and leaves them (for memory measurements).
    Populate,
    /// No server: --workers writers (default 1), each appending 1 KiB and fdatasyncing its own
    /// temp file under --fsync-dir, as that many members sharing the disk would.
    Fsync,
    /// No server: a 64-byte echo over loopback TCP, one connection per worker.
    LoopbackRtt,
    /// One baton-sidecar per worker, each locking its own lock over HTTP (POST, then DELETE).
    SidecarLockUncontended,
    /// --workers baton-sidecars taking turns on one lock over HTTP.
    SidecarLockContended,
    /// --workers baton-sidecars in one election; SIGTERM the leader's, time until another's
    /// GET /leader long-poll names the next leader.
    SidecarHandover,
    /// kill -9 the ensemble's leader; time until a write through a surviving member succeeds.
    EnsembleFailover,
    /// --workers sessions on the leader, each writing; kill -9 the leader; per session, time
    /// until its first write after the kill is accepted.
    SessionsFailover,
    /// --workers (default 10,000) sidecar-like sessions, candidates in --workers/10 elections:
    /// memory, idle CPU, election hand-over, and every session back after a kill -9 of the
    /// leader and then of a follower.
    #[value(name = "sessions-scale", alias = "sessions-10k")]
    SessionsScale,
    /// An app holding a lock with hold=stream through its sidecar is killed (SIGKILL); time
    /// until a waiting pod's sidecar grants it.
    AppCrashLockFreeStream,
    /// The same with a lease (ttl=2s, renewed every third): the lock frees when it runs out.
    AppCrashLockFreeTtl,
    /// The same with a plain ZooKeeper client (4 s session): the lock frees on session expiry.
    AppCrashLockFreeZkSession,
    /// --workers pods (app + sidecar with --app-health) in one election; the leader's app is
    /// killed; time until another sidecar names a new leader.
    AppCrashNewLeaderHealth,
    /// The same without --app-health (today): the leader never changes; each round waits 5 s
    /// for a hand-over that must not come and records nothing (ops=0).
    AppCrashNewLeaderNone,
    /// One baton-sidecar per worker, each taking and releasing a permit of its own 2-permit
    /// semaphore over HTTP.
    SemaphoreUncontended,
    /// --workers baton-sidecars on one 2-permit semaphore; never more than 2 hold at once.
    SemaphoreContended,
}

impl Workload {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Workload::CreateDelete => "create-delete",
            Workload::GetData => "get-data",
            Workload::GetDataLinearizable => "get-data-linearizable",
            Workload::Mixed90_10 => "mixed-90-10",
            Workload::Mixed50_50 => "mixed-50-50",
            Workload::LockContended => "lock-contended",
            Workload::LockUncontended => "lock-uncontended",
            Workload::ElectionFailover => "election-failover",
            Workload::WatchFanout => "watch-fanout",
            Workload::Populate => "populate",
            Workload::Fsync => "fsync",
            Workload::LoopbackRtt => "loopback-rtt",
            Workload::SidecarLockUncontended => "sidecar-lock-uncontended",
            Workload::SidecarLockContended => "sidecar-lock-contended",
            Workload::SidecarHandover => "sidecar-handover",
            Workload::EnsembleFailover => "ensemble-failover",
            Workload::SessionsFailover => "sessions-failover",
            Workload::SessionsScale => "sessions-scale",
            Workload::AppCrashLockFreeStream => "app-crash-lock-free-stream",
            Workload::AppCrashLockFreeTtl => "app-crash-lock-free-ttl",
            Workload::AppCrashLockFreeZkSession => "app-crash-lock-free-zk-session",
            Workload::AppCrashNewLeaderHealth => "app-crash-new-leader-health",
            Workload::AppCrashNewLeaderNone => "app-crash-new-leader-none",
            Workload::SemaphoreUncontended => "semaphore-uncontended",
            Workload::SemaphoreContended => "semaphore-contended",
        }
    }

    /// Workers (sessions, candidates or watchers) when --workers is not given.
    pub fn default_workers(self) -> usize {
        match self {
            Workload::CreateDelete
            | Workload::LockUncontended
            | Workload::Fsync
            | Workload::LoopbackRtt
            | Workload::SidecarLockUncontended
            | Workload::SemaphoreUncontended
            | Workload::EnsembleFailover => 1,
            Workload::AppCrashLockFreeStream
            | Workload::AppCrashLockFreeTtl
            | Workload::AppCrashLockFreeZkSession => 2,
            Workload::AppCrashNewLeaderHealth | Workload::AppCrashNewLeaderNone => 3,
            Workload::SidecarLockContended | Workload::SemaphoreContended => 5,
            Workload::SidecarHandover => 3,
            Workload::GetData
            | Workload::GetDataLinearizable
            | Workload::Mixed90_10
            | Workload::Mixed50_50
            | Workload::LockContended => 10,
            Workload::ElectionFailover => 5,
            Workload::WatchFanout => 100,
            Workload::SessionsFailover => 20,
            Workload::SessionsScale => 10_000,
            Workload::Populate => 32,
        }
    }

    /// The bound when neither --duration nor --ops is given.
    pub fn default_limit(self) -> Limit {
        match self {
            Workload::ElectionFailover | Workload::SidecarHandover => Limit::Ops(20),
            Workload::EnsembleFailover => Limit::Ops(5),
            Workload::SessionsFailover => Limit::Ops(3),
            Workload::SessionsScale => Limit::Ops(1),
            Workload::AppCrashLockFreeStream | Workload::AppCrashNewLeaderHealth => Limit::Ops(20),
            Workload::AppCrashLockFreeTtl => Limit::Ops(10),
            Workload::AppCrashLockFreeZkSession => Limit::Ops(5),
            Workload::AppCrashNewLeaderNone => Limit::Ops(1),
            Workload::Populate => Limit::Ops(100_000),
            Workload::Fsync => Limit::Ops(1_000),
            Workload::LoopbackRtt => Limit::Ops(10_000),
            _ => Limit::Duration(Duration::from_secs(10)),
        }
    }

    /// Whether the workload talks to servers at all.
    pub fn needs_servers(self) -> bool {
        !matches!(self, Workload::Fsync | Workload::LoopbackRtt)
    }
}

/// Everything a run needs besides the workload itself.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub ensemble: Option<Ensemble>,
    pub workers: usize,
    pub limit: Limit,
    pub data_size: usize,
    pub label: String,
    pub fsync_dir: PathBuf,
    /// The `baton-sidecar` executable of the sidecar workloads.
    pub sidecar_bin: PathBuf,
    /// How ensemble-failover kills and restarts members.
    pub members: Option<MemberControl>,
}

/// Runs `workload` once and reports what it measured.
pub async fn run(workload: Workload, config: &RunConfig) -> Result<RunReport, BenchError> {
    let servers = || {
        config.ensemble.as_ref().ok_or_else(|| {
            BenchError::InvalidOption(format!("--servers is required for {}", workload.name()))
        })
    };
    let dir = run_dir(workload);
    // Measurements a workload reports besides its latencies.
    let mut extra = serde_json::Map::new();
    let (latencies, elapsed) = match workload {
        Workload::Fsync => fsync::run(config).await?,
        Workload::LoopbackRtt => loopback::run(config).await?,
        Workload::CreateDelete => crud::create_delete(servers()?, config, &dir).await?,
        Workload::GetData => crud::mixed(servers()?, config, &dir, 100, false).await?,
        Workload::GetDataLinearizable => crud::mixed(servers()?, config, &dir, 100, true).await?,
        Workload::Mixed90_10 => crud::mixed(servers()?, config, &dir, 90, false).await?,
        Workload::Mixed50_50 => crud::mixed(servers()?, config, &dir, 50, false).await?,
        Workload::Populate => crud::populate(servers()?, config, &dir).await?,
        Workload::LockContended => lock::contended(servers()?, config, &dir).await?,
        Workload::LockUncontended => lock::uncontended(servers()?, config, &dir).await?,
        Workload::ElectionFailover => election::failover(servers()?, config, &dir).await?,
        Workload::WatchFanout => fanout::run(servers()?, config, &dir).await?,
        Workload::SidecarLockUncontended => {
            sidecar_lock::run(servers()?, config, &dir, false).await?
        }
        Workload::SidecarLockContended => sidecar_lock::run(servers()?, config, &dir, true).await?,
        Workload::SidecarHandover => sidecar_handover::run(servers()?, config, &dir).await?,
        Workload::EnsembleFailover => ensemble_failover::run(servers()?, config, &dir).await?,
        Workload::SessionsFailover => {
            sessions_failover::run(servers()?, config, &dir, &mut extra).await?
        }
        Workload::SessionsScale => {
            sessions_scale::run(servers()?, config, &dir, &mut extra).await?
        }
        Workload::AppCrashLockFreeStream => {
            app_crash::run(servers()?, config, &dir, app_crash::Way::Stream).await?
        }
        Workload::AppCrashLockFreeTtl => {
            app_crash::run(servers()?, config, &dir, app_crash::Way::Ttl).await?
        }
        Workload::AppCrashLockFreeZkSession => {
            app_crash::run(servers()?, config, &dir, app_crash::Way::ZkSession).await?
        }
        Workload::AppCrashNewLeaderHealth => {
            app_crash_leader::run(servers()?, config, &dir, true).await?
        }
        Workload::AppCrashNewLeaderNone => {
            app_crash_leader::run(servers()?, config, &dir, false).await?
        }
        Workload::SemaphoreUncontended => semaphore::run(servers()?, config, &dir, false).await?,
        Workload::SemaphoreContended => semaphore::run(servers()?, config, &dir, true).await?,
    };
    if let Some(ensemble) = &config.ensemble {
        let open = ensemble.wait_all_closed(SESSION_CLOSE_TIMEOUT).await;
        if open > 0 {
            tracing::warn!(
                open,
                "sessions still open after the run; the server will expire them"
            );
        }
    }
    // ensemble-failover has no workers of its own; its rows are told apart by ensemble size.
    let workers = match (workload, &config.ensemble) {
        (Workload::EnsembleFailover, Some(ensemble)) => ensemble.servers().len(),
        _ => config.workers,
    };
    Ok(
        RunReport::new(&config.label, workload.name(), workers, &latencies, elapsed)
            .with_extra(extra),
    )
}

/// A directory no earlier run used, so leftovers of an interrupted run never collide.
pub(crate) fn run_dir(workload: Workload) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{ROOT}/{}/{}-{nanos:x}",
        workload.name(),
        std::process::id()
    )
}

/// Creates `dir` and its missing ancestors as persistent nodes.
async fn make_dir(client: &Client, dir: &str) -> Result<(), BenchError> {
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client
        .mkdir(dir, &options)
        .await
        .map_err(BenchError::op("mkdir", dir))
}

/// Deletes `dir` and its children, best effort: a leftover never fails a finished run.
async fn remove_dir(client: &Client, dir: &str) {
    if let Ok(children) = client.list_children(dir).await {
        for child in children {
            let _ = client.delete(&format!("{dir}/{child}"), None).await;
        }
    }
    let _ = client.delete(dir, None).await;
}

/// Runs one task per client until `limit` is spent and merges their latencies.
///
/// The clock starts once every session is connected and has caught up with the set-up writes
/// (`sync`: on a multi-member ensemble a session on another member than the one that wrote
/// them may otherwise not see them yet, in ZooKeeper as in Baton), so set-up is never measured;
/// the first failing worker fails the run (and the others are aborted with it).
async fn closed_loop<F, Fut>(
    clients: Vec<Client>,
    limit: Limit,
    worker: F,
) -> Result<(LatencyRecorder, Duration), BenchError>
where
    F: Fn(usize, Client, Arc<Budget>) -> Fut,
    Fut: Future<Output = Result<LatencyRecorder, BenchError>> + Send + 'static,
{
    for client in &clients {
        client
            .sync("/")
            .await
            .map_err(BenchError::op("sync", "/"))?;
    }
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

/// The payload written by every workload: `size` bytes of a fixed pattern.
pub(crate) fn payload(size: usize) -> Vec<u8> {
    (0..size).map(|i| b'a' + (i % 26) as u8).collect()
}
