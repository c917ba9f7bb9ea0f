//! Thousands of sidecar-like sessions (`--workers`, 10,000 by default): what they cost the
//! ensemble at rest, the election hand-over at that scale, and whether every session survives
//! a kill -9 of the leader and then of a follower, and how soon it is back.
//!
//! Every session is a zookeeper-client session with the sidecar's settings (10 s session
//! timeout, the client's default connection timeout, so it pings when idle for 1.5 s) and every
//! member in its connect string, and is a candidate in one of `--workers / 10` elections: an
//! ephemeral sequential node, and an exists-watch on its predecessor. All live in this one
//! process (on 2 cores, one process per session is out of the question). With
//! `--loopback-addresses K`, session `i` reaches the members at 127.0.0.(1 + i mod K): one
//! destination address and port leaves a client about 28,000 local ports.
//!
//! The run: open every session and queue it; after a pause, each member's RSS and its CPU over
//! [`IDLE_WINDOW`] (from `/proc`, the pid files of `--member-pid-file`); pings timed on a few
//! raw sessions of its own (zookeeper-client keeps its pings to itself); [`HANDOVERS`] election
//! hand-overs (the leader's node deleted → the successor's watch fires); kill -9 of the
//! ensemble's leader, then every session's state watched for at least [`OBSERVE`] (longer than
//! the session timeout, so a session the ensemble dropped has expired within it); as many
//! hand-overs again (their watches went through the reconnect); the killed member restarted
//! and rejoined; then kill -9 of the follower holding the most connections, watched the same
//! way, and it too restarted and rejoined; every candidate's node counted. The latencies
//! reported are, per session whose connection dropped, the leader's kill → its client
//! reporting it connected again; the follower's kill has its own `follower_*` fields.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, timeout};
use zookeeper_client::{
    Acls, Client, CreateMode, Error as ZkError, EventType, OneshotWatcher, SessionState,
};

use super::ensemble_failover::{FAILOVER_TIMEOUT, find_leader};
use super::sessions_failover::{member_control, rejoin};
use super::{RunConfig, make_dir, remove_dir};
use crate::ensemble::Ensemble;
use crate::error::BenchError;
use crate::fair_lock::QueueNode;
use crate::latency::LatencyRecorder;
use crate::members::MemberControl;
use ping_probe::ping_latencies;
use usage::{footprint, idle_usage};

mod ping_probe;
mod usage;

/// How many times one request is sent again after ConnectionLoss.
const LOSS_RETRIES: usize = 5;
/// Candidates per election.
const PER_ELECTION: usize = 10;
const PREFIX: &str = "c-";
/// Sessions being opened at once: enough to keep the servers busy, few enough that their
/// accept queues never overflow.
const CONNECT_CONCURRENCY: usize = 200;
/// Requests in flight at once while setting up (each on its own session).
const REQUEST_CONCURRENCY: usize = 1_000;
/// After set-up, before the idle measurement: the last requests' work settles.
const SETTLE: Duration = Duration::from_secs(2);
/// How long each member's CPU is measured at rest.
const IDLE_WINDOW: Duration = Duration::from_secs(10);
/// Raw sessions timing pings after the idle window, each pinging every [`PROBE_EVERY`] for
/// [`PROBE_WINDOW`]: 3,000 round trips beside the sessions' own pings.
const PROBE_SESSIONS: usize = 30;
const PROBE_WINDOW: Duration = Duration::from_secs(5);
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// Hand-overs timed before the kill, and again after it.
const HANDOVERS: usize = 50;
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(10);
/// The least time every session is watched after the kill: above the 10 s session timeout.
const OBSERVE: Duration = Duration::from_secs(15);
/// How long closing every session at the end may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(120);

/// One session and its place in its election.
struct Candidate {
    client: Client,
    node: QueueNode,
    /// Fires when the predecessor's node goes; `None` for an election's leader.
    watch: Option<OneshotWatcher>,
}

/// Runs once (whatever `--ops`): one kill.
pub(super) async fn run(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
    extra: &mut Map<String, Value>,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let control = member_control(ensemble, config, "sessions-scale")?;
    let elections = config.workers.div_ceil(PER_ELECTION);
    let admin = ensemble.connect(0).await?;
    make_dir(&admin, dir).await?;
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let election_dirs: Vec<String> = (0..elections).map(|e| format!("{dir}/e-{e:03}")).collect();
    for chunk in election_dirs.chunks(REQUEST_CONCURRENCY) {
        // One session pipelines them: its requests are answered in order anyway.
        let creates = chunk.iter().map(|path| admin.create(path, &[], &options));
        for (created, path) in futures_all(creates).await.into_iter().zip(chunk) {
            created.map_err(BenchError::op("create", path))?;
        }
    }
    drop(admin);
    let mut candidates = Vec::new();
    let result = measure(
        ensemble,
        control,
        config,
        &election_dirs,
        &mut candidates,
        extra,
    )
    .await;
    close_all(candidates).await;
    for member in 0..ensemble.servers().len() {
        if let Ok(admin) = ensemble.connect(member).await {
            for election in &election_dirs {
                remove_dir(&admin, election).await;
            }
            remove_dir(&admin, dir).await;
            break;
        }
    }
    result
}

async fn measure(
    ensemble: &Ensemble,
    control: &MemberControl,
    config: &RunConfig,
    election_dirs: &[String],
    candidates: &mut Vec<Candidate>,
    extra: &mut Map<String, Value>,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let started = Instant::now();
    // ConnectionLoss answers, retried as the sidecar would: under load a client that hears
    // nothing for 4 s (its default connection timeout) gives up on its connection.
    let losses = Arc::new(AtomicUsize::new(0));
    *candidates = open_candidates(ensemble, config.workers, election_dirs, &losses).await?;
    let mut queues = queue_and_watch(candidates, election_dirs.len(), &losses).await?;
    extra.insert("setup_secs".into(), secs(started.elapsed()));
    extra.insert(
        "loopback_addresses".into(),
        ensemble.loopback_addresses().into(),
    );
    extra.insert(
        "setup_connection_losses".into(),
        losses.load(Ordering::Relaxed).into(),
    );
    sleep(SETTLE).await;

    let idle = idle_usage(ensemble, control, IDLE_WINDOW).await?;
    // Connections per member beside its memory: a member's RSS grows with the connections it
    // serves, while every member holds every session.
    let (connections, _) = footprint(ensemble, control).await;
    extra.insert("connections".into(), json!(connections));
    extra.insert("rss_kib".into(), json!(idle.rss_kib));
    extra.insert(
        "rss_total_kib".into(),
        json!(idle.rss_kib.iter().sum::<u64>()),
    );
    extra.insert("cpu_idle_pct".into(), json!(idle.cpu_pct));
    extra.insert("bench_cpu_idle_pct".into(), json!(idle.bench_cpu_pct));
    let pings = ping_latencies(
        ensemble.servers(),
        PROBE_SESSIONS,
        PROBE_WINDOW,
        PROBE_EVERY,
    )
    .await?;
    summary(extra, "ping", &pings);

    let elections: Vec<usize> = (0..election_dirs.len()).collect();
    let (before, after) = elections.split_at(HANDOVERS.min(elections.len() / 2));
    let handovers_idle = handovers(candidates, &mut queues, before, &losses).await?;
    summary(extra, "handover", &handovers_idle);

    let leader = find_leader(ensemble).await?;
    let (reconnects, outcome) =
        kill_and_watch(ensemble, control, candidates, leader, "leader").await?;
    extra.insert("reconnected".into(), outcome.reconnected.into());
    extra.insert("sessions_lost".into(), outcome.lost.into());
    extra.insert("all_back_ms".into(), json!(outcome.all_back.as_millis()));
    let (connections, rss) = footprint(ensemble, control).await;
    extra.insert("connections_after_kill".into(), json!(connections));
    extra.insert("rss_after_kill_kib".into(), json!(rss));

    let after = &after[..HANDOVERS.min(after.len())];
    let handovers_after = handovers(candidates, &mut queues, after, &losses).await?;
    summary(extra, "handover_after_kill", &handovers_after);

    rejoin(ensemble, control, leader, &election_dirs[0], &[]).await?;

    // The rejoined member holds hardly any sessions yet; the busiest follower is the one whose
    // loss moves the most of them.
    let leader = find_leader(ensemble).await?;
    let (connections, _) = footprint(ensemble, control).await;
    let follower = (0..ensemble.servers().len())
        .filter(|&m| m != leader)
        .max_by_key(|&m| connections[m].unwrap_or(0))
        .unwrap_or((leader + 1) % ensemble.servers().len());
    extra.insert(
        "connections_before_follower_kill".into(),
        json!(connections),
    );
    let (follower_reconnects, outcome) =
        kill_and_watch(ensemble, control, candidates, follower, "follower").await?;
    extra.insert("follower_reconnected".into(), outcome.reconnected.into());
    extra.insert("follower_sessions_lost".into(), outcome.lost.into());
    extra.insert(
        "follower_all_back_ms".into(),
        json!(outcome.all_back.as_millis()),
    );
    summary(extra, "follower_reconnect", &follower_reconnects);
    let (connections, _) = footprint(ensemble, control).await;
    extra.insert("connections_after_follower_kill".into(), json!(connections));
    rejoin(ensemble, control, follower, &election_dirs[0], &[]).await?;
    let expected = config.workers - before.len() - after.len();
    extra.insert(
        "connection_losses".into(),
        losses.load(Ordering::Relaxed).into(),
    );
    let admin = ensemble.connect(0).await?;
    let mut found = 0;
    for chunk in election_dirs.chunks(REQUEST_CONCURRENCY) {
        let lists = chunk.iter().map(|path| admin.list_children(path));
        for (children, path) in futures_all(lists).await.into_iter().zip(chunk) {
            found += children.map_err(BenchError::op("getChildren", path))?.len();
        }
    }
    extra.insert("nodes_expected".into(), expected.into());
    extra.insert("nodes_found".into(), found.into());
    if found != expected {
        tracing::warn!(found, expected, "candidates' nodes missing after the kill");
    }
    Ok((reconnects, started.elapsed()))
}

/// `count` sessions, session `i` queued in election `i mod elections`.
async fn open_candidates(
    ensemble: &Ensemble,
    count: usize,
    election_dirs: &[String],
    losses: &Arc<AtomicUsize>,
) -> Result<Vec<Candidate>, BenchError> {
    let limit = Arc::new(Semaphore::new(CONNECT_CONCURRENCY));
    let mut tasks = JoinSet::new();
    for session in 0..count {
        let (ensemble, limit, losses) = (ensemble.clone(), limit.clone(), losses.clone());
        let election = election_dirs[session % election_dirs.len()].clone();
        tasks.spawn(async move {
            let _permit = limit.acquire_owned().await;
            // The sidecar's settings: the client's default connection timeout.
            let client = ensemble.on_loopback(session).connect_any(None).await?;
            let node = queue(&client, &election, session, &losses).await?;
            Ok::<_, BenchError>(Candidate {
                client,
                node,
                watch: None,
            })
        });
    }
    let mut candidates = Vec::with_capacity(count);
    while let Some(joined) = tasks.join_next().await {
        candidates.push(joined??);
    }
    Ok(candidates)
}

/// Queues `client` in `election` as `c-<session>-<sequence>`. A create whose connection was lost
/// may still have happened: the session's own prefix finds it (as Curator's "protected" names
/// do), so a retry never queues the session twice.
async fn queue(
    client: &Client,
    election: &str,
    session: usize,
    losses: &AtomicUsize,
) -> Result<QueueNode, BenchError> {
    let prefix = format!("{PREFIX}{session}-");
    let path = format!("{election}/{prefix}");
    let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    for _ in 0..LOSS_RETRIES {
        let name = match client.create(&path, &[], &options).await {
            Ok((_, sequence)) => format!("{prefix}{sequence}"),
            Err(ZkError::ConnectionLoss) => {
                losses.fetch_add(1, Ordering::Relaxed);
                let children = retry_lost(losses, || client.list_children(election))
                    .await
                    .map_err(BenchError::op("getChildren", election))?;
                match children.into_iter().find(|c| c.starts_with(&prefix)) {
                    Some(name) => name,
                    None => continue,
                }
            }
            Err(e) => return Err(BenchError::op("create", &path)(e)),
        };
        let sequence = name[prefix.len()..]
            .parse()
            .map_err(|_| BenchError::BadSequentialName {
                dir: election.to_owned(),
                name: name.clone(),
            })?;
        return Ok(QueueNode {
            dir: election.to_owned(),
            name,
            sequence,
        });
    }
    Err(BenchError::op("create", &path)(ZkError::ConnectionLoss))
}

/// Runs `op` again while it fails with ConnectionLoss (the client reconnects meanwhile, and
/// requests wait for it), at most [`LOSS_RETRIES`] times; every loss is counted.
async fn retry_lost<T, F, Fut>(losses: &AtomicUsize, mut op: F) -> Result<T, ZkError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ZkError>>,
{
    let mut tries = 1;
    loop {
        match op().await {
            Err(ZkError::ConnectionLoss) if tries < LOSS_RETRIES => {
                losses.fetch_add(1, Ordering::Relaxed);
                tries += 1;
            }
            other => return other,
        }
    }
}

/// Per election, its candidates (indices into `candidates`) in queue order; every one but the
/// first watches the one before it.
async fn queue_and_watch(
    candidates: &mut [Candidate],
    elections: usize,
    losses: &AtomicUsize,
) -> Result<Vec<Vec<usize>>, BenchError> {
    let mut queues: Vec<Vec<usize>> = vec![Vec::new(); elections];
    for (index, candidate) in candidates.iter().enumerate() {
        let election = candidate.node.dir.rsplit_once("/e-").map(|(_, e)| e);
        let election: usize = election.and_then(|e| e.parse().ok()).unwrap_or(0);
        queues[election].push(index);
    }
    let mut watches = Vec::new();
    for queue in &mut queues {
        queue.sort_by_key(|&c| candidates[c].node.sequence);
        for pair in queue.windows(2) {
            watches.push((pair[1], candidates[pair[0]].node.path()));
        }
    }
    for chunk in watches.chunks(REQUEST_CONCURRENCY) {
        let requests = chunk
            .iter()
            .map(|(watcher, path)| candidates[*watcher].client.check_and_watch_stat(path));
        let results = futures_all(requests).await;
        for (result, (watcher, path)) in results.into_iter().zip(chunk) {
            let client = &candidates[*watcher].client;
            let result = match result {
                Err(ZkError::ConnectionLoss) => {
                    losses.fetch_add(1, Ordering::Relaxed);
                    retry_lost(losses, || client.check_and_watch_stat(path)).await
                }
                other => other,
            };
            let (stat, watch) = result.map_err(BenchError::op("exists", path))?;
            if stat.is_none() {
                return Err(BenchError::OwnNodeMissing { path: path.clone() });
            }
            candidates[*watcher].watch = Some(watch);
        }
    }
    Ok(queues)
}

/// One hand-over in each of `elections`, one after the other: the leader's node is deleted
/// (by its own session), timed until the successor's watch fires.
async fn handovers(
    candidates: &mut [Candidate],
    queues: &mut [Vec<usize>],
    elections: &[usize],
    losses: &AtomicUsize,
) -> Result<LatencyRecorder, BenchError> {
    let mut latencies = LatencyRecorder::new()?;
    for &election in elections {
        let queue = &mut queues[election];
        if queue.len() < 2 {
            continue;
        }
        let (leader, next) = (queue[0], queue[1]);
        let path = candidates[leader].node.path();
        let watch = candidates[next]
            .watch
            .take()
            .ok_or_else(|| BenchError::OwnNodeMissing { path: path.clone() })?;
        let started = Instant::now();
        let client = &candidates[leader].client;
        let mut tries = 0;
        loop {
            tries += 1;
            match client.delete(&path, None).await {
                Ok(()) => break,
                // The lost attempt went through.
                Err(ZkError::NoNode) if tries > 1 => break,
                Err(ZkError::ConnectionLoss) if tries < LOSS_RETRIES => {
                    losses.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(BenchError::op("delete", &path)(e)),
            }
        }
        let event = timeout(HANDOVER_TIMEOUT, watch.changed())
            .await
            .map_err(|_| BenchError::Timeout {
                what: format!("the watch on {path} firing after its delete"),
                timeout: HANDOVER_TIMEOUT,
            })?;
        if event.event_type != EventType::NodeDeleted {
            return Err(BenchError::SessionEnded {
                path,
                state: event.session_state,
            });
        }
        latencies.record(started.elapsed());
        queue.remove(0);
    }
    Ok(latencies)
}

/// What the sessions went through after the kill.
struct Outcome {
    reconnected: usize,
    lost: usize,
    all_back: Duration,
}

/// What one session's state watcher reported after the kill.
enum Seen {
    Down,
    Up(Instant),
    Ended(SessionState),
}

/// kill -9 of member `victim` (the ensemble's `role`); every session's state watched until all
/// are connected again and at least [`OBSERVE`] has passed. Returns each reconnect's time from
/// the kill.
async fn kill_and_watch(
    ensemble: &Ensemble,
    control: &MemberControl,
    candidates: &[Candidate],
    victim: usize,
    role: &str,
) -> Result<(LatencyRecorder, Outcome), BenchError> {
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let (stop_tx, stop) = watch::channel(false);
    let mut monitors = JoinSet::new();
    for (index, candidate) in candidates.iter().enumerate() {
        let mut states = candidate.client.state_watcher();
        states.state();
        let (events_tx, mut stop) = (events_tx.clone(), stop.clone());
        monitors.spawn(async move {
            loop {
                let state = tokio::select! {
                    state = states.changed() => state,
                    _ = stop.changed() => return,
                };
                // The state channel keeps only the latest state: any change reported means the
                // connection went through a reconnect, even if only its end is seen.
                let seen = match state {
                    SessionState::SyncConnected => Seen::Up(Instant::now()),
                    s if s.is_terminated() => Seen::Ended(s),
                    _ => Seen::Down,
                };
                let ended = matches!(seen, Seen::Ended(_));
                if events_tx.send((index, seen)).is_err() || ended {
                    return;
                }
            }
        });
    }
    drop(events_tx);
    let pid = control.pid(victim + 1, ensemble.server_for(victim))?;
    let killed_at = Instant::now();
    control.crash(pid)?;

    let mut down = vec![false; candidates.len()];
    let mut back: Vec<Option<Instant>> = vec![None; candidates.len()];
    let (mut still_down, mut lost) = (0usize, 0usize);
    let deadline = killed_at + FAILOVER_TIMEOUT.max(OBSERVE);
    loop {
        let now = Instant::now();
        if now >= deadline || (still_down == 0 && now >= killed_at + OBSERVE) {
            break;
        }
        let wake = if still_down == 0 {
            killed_at + OBSERVE
        } else {
            deadline
        };
        let Ok(Some((index, seen))) = tokio::time::timeout_at(wake, events.recv()).await else {
            continue;
        };
        match seen {
            Seen::Down if !down[index] => {
                down[index] = true;
                still_down += 1;
            }
            Seen::Down => {}
            Seen::Up(at) => {
                if down[index] {
                    down[index] = false;
                    still_down -= 1;
                }
                back[index] = Some(at);
            }
            Seen::Ended(state) => {
                tracing::warn!(session = %candidates[index].client.session_id(), ?state, "session lost");
                if down[index] {
                    down[index] = false;
                    still_down -= 1;
                }
                lost += 1;
            }
        }
    }
    let _ = stop_tx.send(true);
    while monitors.join_next().await.is_some() {}
    if still_down > 0 {
        return Err(BenchError::Timeout {
            what: format!("{still_down} sessions reconnecting after the {role}'s kill"),
            timeout: deadline - killed_at,
        });
    }
    let mut latencies = LatencyRecorder::new()?;
    let mut all_back = Duration::ZERO;
    for at in back.iter().flatten() {
        let outage = at.saturating_duration_since(killed_at);
        all_back = all_back.max(outage);
        latencies.record(outage);
    }
    let outcome = Outcome {
        reconnected: back.iter().flatten().count(),
        lost,
        all_back,
    };
    Ok((latencies, outcome))
}

fn summary(extra: &mut Map<String, Value>, name: &str, latencies: &LatencyRecorder) {
    let s = latencies.summary();
    extra.insert(format!("{name}_count"), latencies.count().into());
    extra.insert(format!("{name}_p50_us"), json!(s.p50.0));
    extra.insert(format!("{name}_p99_us"), json!(s.p99.0));
    extra.insert(format!("{name}_max_us"), json!(s.max.0));
}

fn secs(d: Duration) -> Value {
    json!((d.as_secs_f64() * 1000.0).round() / 1000.0)
}

/// Awaits every future, in order. zookeeper-client sends a request when its method is called,
/// not when the future is first polled, so collecting them first puts them all in flight.
async fn futures_all<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let futures: Vec<F> = futures.collect();
    let mut outputs = Vec::with_capacity(futures.len());
    for future in futures {
        outputs.push(future.await);
    }
    outputs
}

/// Closes every session (their nodes go with them) and waits for it.
async fn close_all(candidates: Vec<Candidate>) {
    let mut watchers: Vec<_> = candidates
        .iter()
        .map(|c| c.client.state_watcher())
        .collect();
    drop(candidates);
    let all = async {
        for watcher in &mut watchers {
            while !watcher.state().is_terminated() {
                watcher.changed().await;
            }
        }
    };
    if timeout(CLOSE_TIMEOUT, all).await.is_err() {
        tracing::warn!("sessions still open after {CLOSE_TIMEOUT:?}; the ensemble expires them");
    }
}
