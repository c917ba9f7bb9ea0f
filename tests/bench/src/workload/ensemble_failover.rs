//! Ensemble failover: kill -9 the ensemble's leader, and time until a write from a client on a
//! surviving member is accepted again ("leader killed → first write accepted").
//!
//! Each round finds the leader (`srvr` says `Mode: leader`, in ZooKeeper as in Baton), opens one
//! session on every other member and proves it writes, then kills the leader's process and has
//! every one of those sessions retry a setData until it succeeds; the first success ends the
//! round. Then the killed member is started again and the next round waits until a write
//! through it succeeds (it has rejoined and caught up), so every round starts from a whole
//! ensemble. What is measured includes the client's reconnect: a ZooKeeper follower that loses
//! its leader closes its client connections, and the client (zookeeper-client, as every ZooKeeper
//! client) reconnects with a short back-off.

use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, timeout_at};
use zookeeper_client::{Acls, Client, CreateMode, SessionState};

use super::{RunConfig, make_dir, payload, remove_dir};
use crate::budget::Budget;
use crate::ensemble::Ensemble;
use crate::error::BenchError;
use crate::four_letter::{Mode, mode};
use crate::latency::LatencyRecorder;
use crate::members::MemberControl;

/// Longest acceptable outage before the run is declared stuck.
pub(super) const FAILOVER_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a restarted member may take to serve writes again (a JVM start and a snapshot).
pub(super) const REJOIN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the ensemble may take to name exactly one leader between rounds.
const LEADER_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between two failed writes while the session is connected: the server refused (no
/// leader yet) and says nothing when it has one, so trying again is the only way to know.
const RETRY_PAUSE: Duration = Duration::from_millis(5);
/// Pause between two leader look-ups or connection attempts between rounds (not measured).
const PROBE_PAUSE: Duration = Duration::from_millis(50);

/// Runs the failover rounds and records each outage.
pub(super) async fn run(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let control = config.members.as_ref().ok_or_else(|| {
        BenchError::InvalidOption(
            "ensemble-failover needs --member-pid-file and --member-start".into(),
        )
    })?;
    if ensemble.servers().len() < 3 {
        return Err(BenchError::InvalidOption(
            "ensemble-failover needs --servers with 3 or more members (a quorum must survive)"
                .into(),
        ));
    }
    let target = format!("{dir}/target");
    let data = payload(config.data_size);
    {
        let admin = ensemble.connect(0).await?;
        make_dir(&admin, dir).await?;
        let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
        admin
            .create(&target, &data, &options)
            .await
            .map_err(BenchError::op("create", &target))?;
    }
    let result = rounds(ensemble, control, config, &target, &data).await;
    // Any member that is up can clean up (after a failed round, some may not be); a leftover
    // directory never collides with a later run's.
    for member in 0..ensemble.servers().len() {
        if let Ok(admin) = ensemble.connect(member).await {
            remove_dir(&admin, dir).await;
            break;
        }
    }
    result
}

async fn rounds(
    ensemble: &Ensemble,
    control: &MemberControl,
    config: &RunConfig,
    target: &str,
    data: &[u8],
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let budget = Budget::start(config.limit);
    let started = Instant::now();
    let mut latencies = LatencyRecorder::new()?;
    while budget.claim(1) {
        let leader = find_leader(ensemble).await?;
        let leader_server = ensemble.server_for(leader).to_owned();
        let mut writers = Vec::new();
        for member in (0..ensemble.servers().len()).filter(|m| *m != leader) {
            let client = ensemble.connect(member).await?;
            // Proves the session writes before the clock starts.
            client
                .set_data(target, data, None)
                .await
                .map_err(BenchError::op("setData", target))?;
            writers.push(client);
        }
        let pid = control.pid(leader + 1, &leader_server)?;

        let killed_at = Instant::now();
        control.crash(pid)?;
        let accepted_at = first_accepted(writers, target, data, killed_at).await?;
        latencies.record(accepted_at.saturating_duration_since(killed_at));
        tracing::info!(
            member = leader + 1,
            outage = ?accepted_at.saturating_duration_since(killed_at),
            "leader killed; writes accepted again"
        );

        control.restart(leader + 1, &leader_server)?;
        let rejoined = connect_when_up(ensemble, leader, REJOIN_TIMEOUT).await?;
        let deadline = Instant::now() + REJOIN_TIMEOUT;
        write_until_accepted(&rejoined, target, data, deadline, REJOIN_TIMEOUT).await?;
    }
    Ok((latencies, started.elapsed()))
}

/// The member (index into `--servers`) that says it leads, once exactly one does.
pub(super) async fn find_leader(ensemble: &Ensemble) -> Result<usize, BenchError> {
    let deadline = Instant::now() + LEADER_TIMEOUT;
    loop {
        let mut leaders = Vec::new();
        for (member, server) in ensemble.servers().iter().enumerate() {
            if mode(server).await == Some(Mode::Leader) {
                leaders.push(member);
            }
        }
        if let [leader] = leaders[..] {
            return Ok(leader);
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: format!("exactly one member saying Mode: leader (saw {leaders:?})"),
                timeout: LEADER_TIMEOUT,
            });
        }
        sleep(PROBE_PAUSE).await;
    }
}

/// The moment the first of `writers` had a setData accepted.
async fn first_accepted(
    writers: Vec<Client>,
    target: &str,
    data: &[u8],
    killed_at: Instant,
) -> Result<Instant, BenchError> {
    let deadline = killed_at + FAILOVER_TIMEOUT;
    let mut tasks = JoinSet::new();
    for client in writers {
        let target = target.to_owned();
        let data = data.to_vec();
        tasks.spawn(async move {
            write_until_accepted(&client, &target, &data, deadline, FAILOVER_TIMEOUT).await
        });
    }
    let mut last_error = None;
    // The first success wins; dropping the set aborts the others and closes their sessions.
    while let Some(joined) = tasks.join_next().await {
        match joined? {
            Ok(at) => return Ok(at),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or(BenchError::Timeout {
        what: "a write accepted after the leader was killed".into(),
        timeout: FAILOVER_TIMEOUT,
    }))
}

/// Retries setData on `target` until one is accepted, and returns when it was; `deadline` ends
/// the attempt (`limit` names it in the error).
///
/// While the session is disconnected the client is reconnecting and reports when it has, so
/// the next try waits for that event; while connected but refused, only trying again can tell.
pub(super) async fn write_until_accepted(
    client: &Client,
    target: &str,
    data: &[u8],
    deadline: Instant,
    limit: Duration,
) -> Result<Instant, BenchError> {
    let stuck = || BenchError::Timeout {
        what: format!("a setData of {target} accepted"),
        timeout: limit,
    };
    let mut states = client.state_watcher();
    loop {
        let error = match timeout_at(deadline, client.set_data(target, data, None)).await {
            Err(_) => return Err(stuck()),
            Ok(Ok(_)) => return Ok(Instant::now()),
            Ok(Err(error)) => error,
        };
        let state = states.state();
        if state.is_terminated() {
            return Err(BenchError::SessionEnded {
                path: format!("{target} (last error: {error})"),
                state,
            });
        }
        if state == SessionState::SyncConnected {
            timeout_at(deadline, sleep(RETRY_PAUSE))
                .await
                .map_err(|_| stuck())?;
        } else {
            timeout_at(deadline, states.changed())
                .await
                .map_err(|_| stuck())?;
        }
    }
}

/// A session on member `member`, retrying until it is up again (after a restart, the process
/// needs a moment before it takes clients); not measured.
pub(super) async fn connect_when_up(
    ensemble: &Ensemble,
    member: usize,
    limit: Duration,
) -> Result<Client, BenchError> {
    let deadline = Instant::now() + limit;
    loop {
        match ensemble.connect(member).await {
            Ok(client) => return Ok(client),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(e) => tracing::debug!(error = %e, "member not up yet"),
        }
        sleep(PROBE_PAUSE).await;
    }
}
