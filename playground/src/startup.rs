//! Bringing the playground up in order: the ensemble until it serves, then the first pod until
//! it leads (so a fresh playground always starts with pod-a in office), then the others.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};
use tokio::time::Instant;

use crate::api::{self, Leader};
use crate::binaries::Binaries;
use crate::supervisor::{Fleet, Supervisor};
use crate::topology::Topology;
use crate::watch::{WatchedMember, WatchedPod};

/// How long any one step of the start may take. Generous: a busy two-core laptop fsyncs
/// slowly, and a first start creates every data dir.
const STEP_BOUND: Duration = Duration::from_secs(60);

/// How often a step's condition is checked while starting.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// Lines of a child's log shown when it dies during the start.
const LOG_TAIL_LINES: usize = 15;

/// Everything running, and who led when the start finished.
pub struct Started {
    pub members: Vec<WatchedMember>,
    pub pods: Vec<WatchedPod>,
    pub demo_leader: Leader,
    pub raft_leader: (u64, u64),
}

/// Starts every member and pod under `fleet` and waits until each serves.
pub async fn bring_up(
    topology: &Topology,
    binaries: &Binaries,
    fleet: &mut Fleet,
) -> Result<Started> {
    let mut members = Vec::new();
    for member in &topology.members {
        let spec = topology.member_spec(member, binaries);
        let log = spec.log.clone();
        members.push((
            WatchedMember {
                id: member.id,
                admin: member.admin,
                process: fleet.start(spec)?,
            },
            log,
        ));
    }
    for (member, log) in &members {
        let what = format!("member {} to be ready", member.id);
        let admin = member.admin;
        wait_for(&what, &member.process, log, || async move {
            api::ready(admin).await.then_some(())
        })
        .await?;
    }
    let members: Vec<WatchedMember> = members.into_iter().map(|(m, _)| m).collect();

    let mut pods = Vec::new();
    let mut demo_leader = None;
    for pod in &topology.pods {
        let spec = topology.pod_spec(pod, binaries);
        let log = spec.log.clone();
        let sidecar = fleet.start(spec)?;
        let listen = pod.listen;
        // The first pod must lead before the next one queues; every later pod only has to
        // see that leader, which proves its candidacy is registered behind it.
        let what = format!("{} to join the election", pod.identity);
        let leader = wait_for(&what, &sidecar, &log, || async move {
            match api::election(listen, None).await {
                Ok(view) if view.connected => view.leader,
                _ => None,
            }
        })
        .await?;
        demo_leader.get_or_insert(leader);
        pods.push(WatchedPod {
            pod: pod.clone(),
            sidecar,
        });
    }
    let Some(demo_leader) = demo_leader else {
        bail!("the playground needs at least one pod");
    };

    let admins: Vec<_> = members.iter().map(|m| m.admin).collect();
    let Some(first) = members.first() else {
        bail!("the playground needs at least one member");
    };
    let log = topology.logs.join(format!("member-{}.log", first.id));
    let raft_leader = wait_for(
        "the ensemble to report its leader",
        &first.process,
        &log,
        || {
            let admins = admins.clone();
            async move { api::ensemble_leader(&admins).await }
        },
    )
    .await?;
    Ok(Started {
        members,
        pods,
        demo_leader,
        raft_leader,
    })
}

/// Probes until `probe` yields a value, failing if `child` dies or `STEP_BOUND` passes.
async fn wait_for<T, F, Fut>(what: &str, child: &Supervisor, log: &Path, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + STEP_BOUND;
    loop {
        if child.pid().is_none() {
            bail!(
                "waiting for {what}: {} exited; the end of its log {}:\n{}",
                child.label(),
                log.display(),
                tail(log)
            );
        }
        if let Some(value) = probe().await {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            bail!(
                "waiting for {what}: still not there after {}s; the end of {}:\n{}",
                STEP_BOUND.as_secs(),
                log.display(),
                tail(log)
            );
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

/// The last lines of a log file, or why it cannot be read.
fn tail(log: &Path) -> String {
    match std::fs::read_to_string(log) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(e) => format!("(cannot read it: {e})"),
    }
}
