//! Election failover: how long from the leader's session closing until the next candidate knows
//! it leads.
//!
//! Candidates queue with ephemeral sequential nodes (the fair-lock recipe: lowest leads, each
//! watches its predecessor). Each round closes the leader's session, times the hand-over to the
//! candidate that was next in line, and queues the old leader again at the back with a new
//! session, so the number of candidates stays constant.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout};
use zookeeper_client::Client;

use super::{RunConfig, make_dir, remove_dir};
use crate::budget::Budget;
use crate::ensemble::Ensemble;
use crate::error::BenchError;
use crate::fair_lock::{QueueNode, join, wait_until_first};
use crate::latency::LatencyRecorder;

const PREFIX: &str = "candidate-";
/// Longest acceptable hand-over before the run is declared stuck.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// Candidates wait as long as it takes; each hand-over is bounded by the coordinator instead.
const CANDIDATE_PATIENCE: Duration = Duration::from_secs(24 * 3600);

/// A candidate that has seen itself first in line, with the moment it saw it.
struct Elected {
    worker: usize,
    node: QueueNode,
    client: Client,
    at: Instant,
}

/// Runs the failover rounds and records each hand-over time.
pub(super) async fn failover(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    if config.workers < 2 {
        return Err(BenchError::InvalidOption(
            "election-failover needs --workers 2 or more (candidates)".into(),
        ));
    }
    let admin = ensemble.connect(0).await?;
    make_dir(&admin, dir).await?;
    let result = rounds(ensemble, config, dir).await;
    remove_dir(&admin, dir).await;
    result
}

async fn rounds(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let (elected_tx, mut elected_rx) = mpsc::unbounded_channel();
    // Dropping the set when this function returns aborts every campaign, closing its session.
    let mut campaigns = JoinSet::new();
    // Node paths in sequence order: who must lead next.
    let mut line = VecDeque::new();
    for (worker, client) in ensemble
        .connect_all(config.workers)
        .await?
        .into_iter()
        .enumerate()
    {
        let node = join(&client, dir, PREFIX, &[]).await?;
        line.push_back(node.path());
        campaigns.spawn(campaign(worker, client, node, elected_tx.clone()));
    }
    let mut leader = next_leader(&mut elected_rx, &line).await?;

    let budget = Budget::start(config.limit);
    let started = Instant::now();
    let mut latencies = LatencyRecorder::new()?;
    while budget.claim(1) {
        let Elected { worker, client, .. } = leader;
        line.pop_front();
        let closed_at = Instant::now();
        // The leader's last handle: dropping it makes the client send closeSession.
        drop(client);
        leader = next_leader(&mut elected_rx, &line).await?;
        latencies.record(leader.at.saturating_duration_since(closed_at));

        let client = ensemble.connect(worker).await?;
        let node = join(&client, dir, PREFIX, &[]).await?;
        line.push_back(node.path());
        campaigns.spawn(campaign(worker, client, node, elected_tx.clone()));
    }
    Ok((latencies, started.elapsed()))
}

/// Waits to lead, then hands the session to the coordinator (which will close it).
async fn campaign(
    worker: usize,
    client: Client,
    node: QueueNode,
    elected: mpsc::UnboundedSender<Result<Elected, BenchError>>,
) {
    let outcome = wait_until_first(&client, &node, PREFIX, CANDIDATE_PATIENCE)
        .await
        .map(|()| Instant::now());
    let report = outcome.map(|at| Elected {
        worker,
        node,
        client,
        at,
    });
    // The coordinator is gone only when the run is over; nobody is left to tell.
    let _ = elected.send(report);
}

/// The next candidate to report that it leads; it must be the one at the head of `line`.
async fn next_leader(
    elected: &mut mpsc::UnboundedReceiver<Result<Elected, BenchError>>,
    line: &VecDeque<String>,
) -> Result<Elected, BenchError> {
    let stuck = || BenchError::Timeout {
        what: "the next candidate taking over".into(),
        timeout: HANDOVER_TIMEOUT,
    };
    let leader = timeout(HANDOVER_TIMEOUT, elected.recv())
        .await
        .map_err(|_| stuck())?
        .ok_or_else(stuck)??;
    let expected = line.front().cloned().unwrap_or_default();
    if leader.node.path() != expected {
        return Err(BenchError::WrongLeader {
            expected,
            observed: leader.node.path(),
        });
    }
    Ok(leader)
}
