//! Sessions failover: many sessions on the ensemble's leader, each writing in a closed loop;
//! kill -9 the leader; per session, the time from the kill to its first write accepted after
//! it ("a client whose session was on it writes again").
//!
//! Unlike ensemble-failover, which times the first write through a survivor, this is the
//! outage every application on the dead member sees: its client notices the dropped
//! connection, reconnects to a survivor (the client's own choice and back-off, as in
//! production), the survivor takes the session over, and the write goes through once there is
//! a new leader. Every session must survive: one that expires is counted as lost.
//!
//! The sessions are opened with every member in their connect string, so their client can move
//! on; zookeeper-client shuffles that list, so a session is kept only if the leader made it
//! (both servers put the id of the member that made a session in its id's top byte, and a new
//! session is made by the member its client connected to) and the others are closed.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, timeout};
use zookeeper_client::{Acls, Client, CreateMode, SessionState};

use super::ensemble_failover::{
    FAILOVER_TIMEOUT, REJOIN_TIMEOUT, connect_when_up, find_leader, write_until_accepted,
};
use super::{RunConfig, make_dir, payload, remove_dir};
use crate::budget::Budget;
use crate::ensemble::Ensemble;
use crate::error::BenchError;
use crate::latency::LatencyRecorder;
use crate::members::MemberControl;

/// The client's connection timeout for these sessions. zookeeper-client gives up on a server
/// that accepted the connection but does not answer within it (default 2/5 of the 10 s session
/// timeout, 4 s); at 2 s a survivor that holds a reconnect costs at most 2 s before the client
/// tries the next one, so what is timed is the server, not the client's patience. It also makes
/// an idle session ping every 750 ms. Not less: on this shared 2-core machine 1 s of silence
/// from a loaded JVM happens, and a connection dropped for it would be timed as an outage. The
/// same for both servers.
pub(super) const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);
/// How many times a batch of sessions is opened before giving up on placing them on the leader
/// (each lands there with probability 1/members).
const PLACEMENT_ATTEMPTS: usize = 30;
/// Pause before writing again after a refused write, before the kill.
const RETRY_PAUSE: Duration = Duration::from_millis(5);
/// How long every session writes before the kill, so the kill meets them mid-loop.
const WRITING_BEFORE_KILL: Duration = Duration::from_millis(200);

/// Runs `--ops` rounds (default 3) of `--workers` sessions (default 20) on the leader.
pub(super) async fn run(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let control = member_control(ensemble, config, "sessions-failover")?;
    let data = payload(config.data_size);
    let admin = ensemble.connect(0).await?;
    make_dir(&admin, dir).await?;
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let mut targets = Vec::new();
    for session in 0..config.workers {
        let target = format!("{dir}/s-{session}");
        admin
            .create(&target, &data, &options)
            .await
            .map_err(BenchError::op("create", &target))?;
        targets.push(target);
    }
    drop(admin);
    let mut lost = 0;
    let result = rounds(ensemble, control, config, &targets, &data, &mut lost).await;
    extra.insert("sessions_lost".into(), lost.into());
    for member in 0..ensemble.servers().len() {
        if let Ok(admin) = ensemble.connect(member).await {
            remove_dir(&admin, dir).await;
            break;
        }
    }
    result
}

/// The `--member-*` options, checked to be there, with an ensemble that survives a kill.
pub(super) fn member_control<'a>(
    ensemble: &Ensemble,
    config: &'a RunConfig,
    workload: &str,
) -> Result<&'a MemberControl, BenchError> {
    let control = config.members.as_ref().ok_or_else(|| {
        BenchError::InvalidOption(format!(
            "{workload} needs --member-pid-file and --member-start"
        ))
    })?;
    if ensemble.servers().len() < 3 {
        return Err(BenchError::InvalidOption(format!(
            "{workload} needs --servers with 3 or more members (a quorum must survive)"
        )));
    }
    Ok(control)
}

async fn rounds(
    ensemble: &Ensemble,
    control: &MemberControl,
    config: &RunConfig,
    targets: &[String],
    data: &[u8],
    lost: &mut usize,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let budget = Budget::start(config.limit);
    let started = Instant::now();
    let mut latencies = LatencyRecorder::new()?;
    while budget.claim(1) {
        let leader = find_leader(ensemble).await?;
        let leader_server = ensemble.server_for(leader).to_owned();
        let sessions = sessions_on(ensemble, leader, targets.len()).await?;
        let (kill_tx, kill_rx) = watch::channel(None);
        let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(targets.len());
        let mut writers = JoinSet::new();
        for (client, target) in sessions.into_iter().zip(targets) {
            let (target, data) = (target.clone(), data.to_vec());
            let (kill_rx, ready_tx) = (kill_rx.clone(), ready_tx.clone());
            writers.spawn(async move { writer(client, target, data, kill_rx, ready_tx).await });
        }
        drop(ready_tx);
        for _ in targets {
            if ready_rx.recv().await.is_none() {
                // A writer ended before its first write: its error is in the join below.
                break;
            }
        }
        sleep(WRITING_BEFORE_KILL).await;
        let pid = control.pid(leader + 1, &leader_server)?;

        let killed_at = Instant::now();
        control.crash(pid)?;
        // Sent once kill(2) has returned: a write the writers send from now on cannot be
        // answered by the old leader.
        let _ = kill_tx.send(Some(killed_at));
        let mut round_lost = 0;
        let mut slowest = Duration::ZERO;
        while let Some(joined) = writers.join_next().await {
            match joined? {
                Ok(outage) => {
                    slowest = slowest.max(outage);
                    latencies.record(outage);
                }
                Err(BenchError::SessionEnded {
                    state: SessionState::Expired,
                    path,
                }) => {
                    tracing::warn!(path, "session lost across the leader's kill");
                    round_lost += 1;
                }
                Err(e) => return Err(e),
            }
        }
        *lost += round_lost;
        tracing::info!(
            member = leader + 1,
            ?slowest,
            lost = round_lost,
            "leader killed; every session wrote again"
        );
        rejoin(ensemble, control, leader, &targets[0], data).await?;
    }
    Ok((latencies, started.elapsed()))
}

/// Starts member `member` (an index into `--servers`) again and waits until a write through it
/// is accepted: it has rejoined and caught up, so the next round has a whole ensemble.
pub(super) async fn rejoin(
    ensemble: &Ensemble,
    control: &MemberControl,
    member: usize,
    target: &str,
    data: &[u8],
) -> Result<(), BenchError> {
    control.restart(member + 1, ensemble.server_for(member))?;
    let rejoined = connect_when_up(ensemble, member, REJOIN_TIMEOUT).await?;
    let deadline = Instant::now() + REJOIN_TIMEOUT;
    write_until_accepted(&rejoined, target, data, deadline, REJOIN_TIMEOUT).await?;
    Ok(())
}

/// `count` sessions whose connection is on member `member`, each free to fail over to any.
async fn sessions_on(
    ensemble: &Ensemble,
    member: usize,
    count: usize,
) -> Result<Vec<Client>, BenchError> {
    let server = ensemble.server_for(member).to_owned();
    let mut kept = Vec::with_capacity(count);
    for _ in 0..PLACEMENT_ATTEMPTS {
        let missing = count - kept.len();
        if missing == 0 {
            break;
        }
        // Enough that, on average, the batch lands `missing` sessions on the member.
        let batch = missing * ensemble.servers().len();
        let mut tasks = JoinSet::new();
        for _ in 0..batch {
            let ensemble = ensemble.clone();
            tasks.spawn(async move { ensemble.connect_any(Some(CONNECTION_TIMEOUT)).await });
        }
        let mut opened = Vec::with_capacity(batch);
        while let Some(joined) = tasks.join_next().await {
            opened.push(joined??);
        }
        let mut elsewhere = Vec::new();
        for client in opened {
            if kept.len() < count && made_by(client.session_id().0) == member as u64 + 1 {
                kept.push(client);
            } else {
                elsewhere.push(client.state_watcher());
            }
        }
        // Closed before the round, so their closeSession writes are not part of the outage.
        let closing = async {
            for mut watcher in elsewhere {
                while !watcher.state().is_terminated() {
                    watcher.changed().await;
                }
            }
        };
        let _ = timeout(Duration::from_secs(10), closing).await;
    }
    if kept.len() < count {
        return Err(BenchError::InvalidOption(format!(
            "only {} of {count} sessions landed on {server} in {PLACEMENT_ATTEMPTS} attempts",
            kept.len()
        )));
    }
    Ok(kept)
}

/// The id of the member that made session `id` (member ids are `--servers` indexes plus one):
/// ZooKeeper and Baton both put it in the top byte. Not from a four-letter word: neither names
/// sessions to anonymous callers by default.
fn made_by(id: i64) -> u64 {
    (id as u64) >> 56
}

/// One session's closed loop of setData on its own node; once told of the kill, the time from
/// the kill to its first write accepted after it.
async fn writer(
    client: Client,
    target: String,
    data: Vec<u8>,
    mut kill: watch::Receiver<Option<Instant>>,
    ready: tokio::sync::mpsc::Sender<()>,
) -> Result<Duration, BenchError> {
    let mut ready = Some(ready);
    let killed_at = loop {
        tokio::select! {
            written = client.set_data(&target, &data, None) => match written {
                Ok(_) => {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(()).await;
                    }
                }
                // Nothing is timed before the kill: on a loaded machine a connection may drop
                // (the client hears nothing for its connection timeout) and is made again.
                Err(error) if !client.state().is_terminated() => {
                    tracing::debug!(%error, target, "write before the kill failed; again");
                    sleep(RETRY_PAUSE).await;
                }
                Err(error) => return Err(BenchError::op("setData", &target)(error)),
            },
            // A write in flight at the kill is abandoned (its answer, if any, is ignored):
            // only writes sent after the kill count.
            changed = kill.changed() => {
                if changed.is_err() {
                    return Err(BenchError::InvalidOption("the round ended before the kill".into()));
                }
                if let Some(at) = *kill.borrow_and_update() {
                    break at;
                }
            }
        }
    };
    let deadline = killed_at + FAILOVER_TIMEOUT;
    let accepted_at =
        write_until_accepted(&client, &target, &data, deadline, FAILOVER_TIMEOUT).await?;
    Ok(accepted_at.saturating_duration_since(killed_at))
}
