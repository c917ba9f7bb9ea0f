//! The live display: one line whenever the demo election's leader or the ensemble's Raft
//! leader changes.

use std::net::SocketAddr;
use std::time::Duration;

use crate::api::{self, Leader};
use crate::console::Console;
use crate::supervisor::Supervisor;
use crate::topology::{ELECTION, Pod};

/// How long one long-poll on a sidecar waits for a change before asking again.
const LONG_POLL: Duration = Duration::from_secs(25);

/// How long to wait before asking again when no pod could answer (all down or disconnected).
const NO_POD_BACKOFF: Duration = Duration::from_millis(250);

/// How often the members' status is read for the Raft leader line.
const STATUS_INTERVAL: Duration = Duration::from_millis(500);

/// A pod and the supervisor of its sidecar.
#[derive(Debug, Clone)]
pub struct WatchedPod {
    pub pod: Pod,
    pub sidecar: Supervisor,
}

/// A member's admin address and its supervisor.
#[derive(Debug, Clone)]
pub struct WatchedMember {
    pub id: u64,
    pub admin: SocketAddr,
    pub process: Supervisor,
}

/// The line that reports the demo election's leader: `election "demo": pod-a leads (…)`.
pub fn election_line(leader: Option<&Leader>, pods: &[WatchedPod]) -> String {
    let Some(leader) = leader else {
        return format!("election \"{ELECTION}\": no leader");
    };
    let pid = pods
        .iter()
        .find(|p| p.pod.identity == leader.identity)
        .and_then(|p| p.sidecar.pid())
        .map_or_else(|| "down".to_owned(), |pid| pid.to_string());
    format!(
        "election \"{ELECTION}\": {} leads (fencing token {}, sidecar pid {pid})",
        leader.identity, leader.token
    )
}

/// The line that reports the Raft leader: `ensemble: member 2 leads (…)`.
pub fn ensemble_line(leader: Option<(u64, u64)>, members: &[WatchedMember]) -> String {
    let Some((id, term)) = leader else {
        return "ensemble: no leader (an election is under way)".to_owned();
    };
    let pid = members
        .iter()
        .find(|m| m.id == id)
        .and_then(|m| m.process.pid())
        .map_or_else(|| "down".to_owned(), |pid| pid.to_string());
    format!("ensemble: member {id} leads (term {term}, pid {pid})")
}

/// Prints a line each time the demo election's leader differs from `seen`. Never returns.
///
/// It long-polls one sidecar at a time, preferring one that does not lead: the leader's
/// sidecar is the one the user is about to kill. Only a connected sidecar's answer is taken,
/// as a disconnected one cannot know who leads.
pub async fn election(pods: Vec<WatchedPod>, mut seen: Option<Leader>, console: Console) {
    loop {
        let leader_identity = seen.as_ref().map(|l| l.identity.clone());
        let mut order: Vec<&WatchedPod> =
            pods.iter().filter(|p| p.sidecar.pid().is_some()).collect();
        order.sort_by_key(|p| Some(&p.pod.identity) == leader_identity.as_ref());
        let token = seen.as_ref().map_or(0, |l| l.token);
        let mut answered = false;
        for pod in order {
            match api::election(pod.pod.listen, Some((token, LONG_POLL))).await {
                Ok(view) if view.connected => {
                    if view.leader != seen {
                        seen = view.leader;
                        console.event(election_line(seen.as_ref(), &pods));
                    }
                    answered = true;
                    break;
                }
                Ok(_) => tracing::debug!(pod = %pod.pod.identity, "sidecar is not connected"),
                Err(e) => tracing::debug!(pod = %pod.pod.identity, error = %e, "no answer"),
            }
        }
        if !answered {
            tokio::time::sleep(NO_POD_BACKOFF).await;
        }
    }
}

/// Prints a line each time the Raft leader differs from `seen`. Never returns.
pub async fn ensemble(members: Vec<WatchedMember>, mut seen: Option<(u64, u64)>, console: Console) {
    let admins: Vec<SocketAddr> = members.iter().map(|m| m.admin).collect();
    let mut tick = tokio::time::interval(STATUS_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = api::ensemble_leader(&admins).await;
        // A new term with the same leader is not news for this display.
        if now.map(|(id, _)| id) != seen.map(|(id, _)| id) {
            console.event(ensemble_line(now, &members));
        }
        seen = now;
    }
}
