//! `/leader` hand-over on SIGTERM through real sidecars: how long from Kubernetes stopping the
//! leader's pod until another pod's sidecar names the new leader.
//!
//! `--workers` sidecars stand in one election. Each round reads the queue from the ensemble
//! (who leads, who is next), has every other sidecar long-poll `GET /leader?wait=30s&token=T`
//! (T: the leader's fencing token), sends SIGTERM to the leader's sidecar and times until the
//! first long-poll answers with a new leader, which must be the one that was next in line. The
//! terminated sidecar must exit cleanly; it is started again (same identity, back of the queue)
//! and the next round begins once the ensemble shows it queued.

use std::time::Duration;

use hyper::Method;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout, timeout_at};
use zookeeper_client::Client;

use super::sidecars::{Sidecars, resource_name};
use super::{RunConfig, make_dir, remove_dir};
use crate::budget::Budget;
use crate::ensemble::Ensemble;
use crate::error::BenchError;
use crate::http_client::HttpClient;
use crate::latency::LatencyRecorder;

/// Where the sidecar keeps its elections (DESIGN.md §2).
/// (The sidecars run without --namespace, so in the namespace `default`.)
const ELECTIONS_ROOT: &str = "/baton/default/elections";
/// The candidates' node names: `candidate-<sequence>`.
const CANDIDATE_PREFIX: &str = "candidate-";
/// Longest acceptable hand-over before the run is declared stuck.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a restarted sidecar may take to queue again.
const REJOIN_TIMEOUT: Duration = Duration::from_secs(30);
/// The long-poll's own bound; a poll that ends unchanged is simply asked again.
const LONG_POLL_WAIT: &str = "30s";

/// What a long-poll reported: the new leader's identity and when its answer arrived.
pub(super) type Named = Result<(String, Instant), BenchError>;

/// Runs the hand-over rounds and records each one.
pub(super) async fn run(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    if config.workers < 2 {
        return Err(BenchError::InvalidOption(
            "sidecar-handover needs --workers 2 or more (sidecars)".into(),
        ));
    }
    let election = resource_name(dir);
    let folder = format!("{ELECTIONS_ROOT}/{election}");
    let admin = ensemble.connect(0).await?;
    // Made here so the queue can be watched before the first candidate has joined.
    make_dir(&admin, &folder).await?;
    let mut sidecars = Sidecars::start(ensemble, config, Some(&election)).await?;
    let result = rounds(&admin, &mut sidecars, config, &folder).await;
    let stopped = sidecars.stop().await;
    remove_dir(&admin, &folder).await;
    let result = result?;
    stopped?;
    Ok(result)
}

async fn rounds(
    admin: &Client,
    sidecars: &mut Sidecars,
    config: &RunConfig,
    folder: &str,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let budget = Budget::start(config.limit);
    let started = Instant::now();
    let mut latencies = LatencyRecorder::new()?;
    while budget.claim(1) {
        let line = queued(admin, folder, config.workers).await?;
        let (old, next) = (line[0].clone(), line[1].clone());
        let leader = sidecars
            .worker_of(&old)
            .ok_or_else(|| BenchError::WrongLeader {
                expected: "one of this run's sidecars".into(),
                observed: old.clone(),
            })?;

        let (named_tx, mut named_rx) = mpsc::unbounded_channel();
        // Dropped at the end of the round: aborts the long-polls still waiting.
        let mut polls = JoinSet::new();
        let mut token = None;
        for sidecar in sidecars.running().filter(|s| s.identity != old) {
            let mut http = HttpClient::connect(sidecar.addr).await?;
            // Every sidecar is asked once up front, so it is known to agree on who leads.
            let view = http.call_ok(Method::GET, "/leader").await?;
            let (identity, their_token) = leader_of(&view);
            if identity.as_deref() != Some(old.as_str()) {
                return Err(BenchError::WrongLeader {
                    expected: old,
                    observed: format!("{identity:?} (as {} sees it)", sidecar.identity),
                });
            }
            token = Some(their_token);
            polls.spawn(until_new_leader(
                http,
                old.clone(),
                their_token,
                named_tx.clone(),
            ));
        }
        drop(named_tx);
        let Some(token) = token else {
            return Err(BenchError::InvalidOption("no sidecar to observe".into()));
        };

        let Some(mut terminated) = sidecars.take(leader) else {
            return Err(BenchError::WrongLeader {
                expected: "a running sidecar".into(),
                observed: old,
            });
        };
        let signalled_at = Instant::now();
        terminated.terminate()?;
        let stuck = || BenchError::Timeout {
            what: format!("a sidecar naming the leader after {old} (token {token})"),
            timeout: HANDOVER_TIMEOUT,
        };
        let (new, at) = timeout(HANDOVER_TIMEOUT, named_rx.recv())
            .await
            .map_err(|_| stuck())?
            .ok_or_else(stuck)??;
        latencies.record(at.saturating_duration_since(signalled_at));
        if new != next {
            return Err(BenchError::WrongLeader {
                expected: next,
                observed: new,
            });
        }
        drop(polls);
        terminated.wait_exit().await?;
        sidecars.restart(leader).await?;
    }
    Ok((latencies, started.elapsed()))
}

/// The leader's identity and token in a `GET /leader` body (token 0 when there is none).
pub(super) fn leader_of(view: &serde_json::Value) -> (Option<String>, i64) {
    let leader = &view["leader"];
    (
        leader["identity"].as_str().map(str::to_owned),
        leader["token"].as_i64().unwrap_or(0),
    )
}

/// Long-polls one sidecar until it names a leader other than `old`, and reports when.
///
/// A poll also returns when the leader is briefly unknown (the old one gone, the new one not yet
/// seen: token 0); it is asked again from there.
pub(super) async fn until_new_leader(
    mut http: HttpClient,
    old: String,
    mut token: i64,
    named: mpsc::UnboundedSender<Named>,
) {
    let outcome = async {
        loop {
            let path = format!("/leader?wait={LONG_POLL_WAIT}&token={token}");
            let view = http.call_ok(Method::GET, &path).await?;
            let at = Instant::now();
            match leader_of(&view) {
                (Some(identity), _) if identity != old => return Ok((identity, at)),
                (_, seen) => token = seen,
            }
        }
    };
    // The receiver is gone only once the round has its answer.
    let _ = named.send(outcome.await);
}

/// The identities in the election's queue, leader first, once exactly `count` have queued.
pub(super) async fn queued(
    admin: &Client,
    folder: &str,
    count: usize,
) -> Result<Vec<String>, BenchError> {
    let deadline = Instant::now() + REJOIN_TIMEOUT;
    loop {
        let (children, _, watcher) = admin
            .get_and_watch_children(folder)
            .await
            .map_err(BenchError::op("getChildren", folder))?;
        let mut candidates: Vec<(i64, String)> = children
            .iter()
            .filter_map(|name| {
                let sequence = name.strip_prefix(CANDIDATE_PREFIX)?.parse().ok()?;
                Some((sequence, name.clone()))
            })
            .collect();
        if candidates.len() == count {
            candidates.sort();
            let mut line = Vec::with_capacity(count);
            for (_, name) in candidates {
                line.push(candidate_identity(admin, &format!("{folder}/{name}")).await?);
            }
            return Ok(line);
        }
        timeout_at(deadline, watcher.changed())
            .await
            .map_err(|_| BenchError::Timeout {
                what: format!("{count} candidates queued under {folder}"),
                timeout: REJOIN_TIMEOUT,
            })?;
    }
}

/// The `identity` in a candidate node's JSON data.
async fn candidate_identity(admin: &Client, path: &str) -> Result<String, BenchError> {
    let (data, _) = admin
        .get_data(path)
        .await
        .map_err(BenchError::op("getData", path))?;
    let value: serde_json::Value = serde_json::from_slice(&data).unwrap_or_default();
    value["identity"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| BenchError::BadSequentialName {
            dir: path.to_owned(),
            name: format!(
                "data without an identity: {}",
                String::from_utf8_lossy(&data)
            ),
        })
}
