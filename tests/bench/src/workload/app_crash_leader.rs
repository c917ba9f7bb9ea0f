//! App crash → new leader: the app behind the leading sidecar dies (SIGKILL) while its sidecar
//! lives on, as a crash-looping app container beside a native sidecar does. How long until
//! another pod's sidecar names a new leader?
//!
//! - `health`: every sidecar runs with `--app-health` on its app's health port (interval and
//!   failures at [`HEALTH_INTERVAL`] × [`HEALTH_FAILURES`]); the leader's sidecar stands aside
//!   once the checks fail.
//! - `none` (today, without app health): the leader never changes while its sidecar lives. A
//!   round waits [`NEVER_BOUND`] for a hand-over that must not come and records nothing, so
//!   the report's `ops=0` reads "never (within the bound)".
//!
//! Each pod is an app child serving `GET /healthz` ([`AppMode::Health`]) and its sidecar, all
//! in one election. A round reads the queue from the ensemble, has every other sidecar
//! long-poll `GET /leader?wait=30s&token=T`, kills the leader's app and times until the first
//! poll names a new leader (which must be the one next in line). The app is started again on
//! the same port, and the next round starts once its sidecar has queued again.

use std::net::SocketAddr;
use std::time::Duration;

use hyper::Method;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout};
use zookeeper_client::Client;

use super::sidecar_handover::{leader_of, queued, until_new_leader};
use super::sidecars::{identity, resource_name};
use super::{RunConfig, make_dir, remove_dir};
use crate::app_child::{AppChild, AppMode};
use crate::budget::Budget;
use crate::ensemble::Ensemble;
use crate::error::BenchError;
use crate::http_client::HttpClient;
use crate::latency::LatencyRecorder;
use crate::sidecar::{Sidecar, SidecarLauncher, check_binary};

/// Where the sidecar keeps its elections (DESIGN.md §2; namespace `default`).
const ELECTIONS_ROOT: &str = "/baton/default/elections";
/// The smallest `--app-health-interval` the sidecar accepts.
pub const HEALTH_INTERVAL: &str = "100ms";
/// Failed checks in a row before standing aside: two, so one slow answer is not a crash.
pub const HEALTH_FAILURES: &str = "2";
/// How long the `none` way waits for a hand-over that never comes.
pub const NEVER_BOUND: Duration = Duration::from_secs(5);
/// Longest acceptable hand-over with app health before the run is declared stuck.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// The sidecars' session timeout (the sidecar's default).
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// One pod: its app and its sidecar.
struct Pod {
    app: Option<AppChild>,
    app_addr: SocketAddr,
    sidecar: Sidecar,
}

/// Runs the rounds; `health`: the sidecars check their apps.
pub(super) async fn run(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
    health: bool,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    if config.workers < 2 {
        return Err(BenchError::InvalidOption(
            "app-crash-new-leader needs --workers 2 or more (pods)".into(),
        ));
    }
    check_binary(&config.sidecar_bin)?;
    let election = resource_name(dir);
    let folder = format!("{ELECTIONS_ROOT}/{election}");
    let admin = ensemble.connect(0).await?;
    make_dir(&admin, &folder).await?;
    let launcher = SidecarLauncher {
        binary: config.sidecar_bin.clone(),
        session_timeout: SESSION_TIMEOUT,
        ensemble_ca: ensemble.tls_ca().map(ToOwned::to_owned),
    };
    let mut pods = Vec::new();
    let started = start_pods(ensemble, config, &launcher, &election, health, &mut pods).await;
    let result = match started {
        Ok(()) => rounds(&admin, &mut pods, config, &folder, health).await,
        Err(e) => Err(e),
    };
    let mut stopped = Ok(());
    for pod in pods {
        if let Err(e) = pod.sidecar.stop().await {
            stopped = stopped.and(Err(e));
        }
    }
    remove_dir(&admin, &folder).await;
    let result = result?;
    stopped?;
    Ok(result)
}

async fn start_pods(
    ensemble: &Ensemble,
    config: &RunConfig,
    launcher: &SidecarLauncher,
    election: &str,
    health: bool,
    pods: &mut Vec<Pod>,
) -> Result<(), BenchError> {
    for worker in 0..config.workers {
        let app = AppChild::start(&AppMode::Health { port: 0 }).await?;
        let app_addr = app.listening().ok_or_else(|| BenchError::Sidecar {
            identity: identity(worker),
            detail: format!("app child said {:?}", app.ready_line),
        })?;
        let flags: Vec<String> = if health {
            vec![
                "--app-health".into(),
                format!("http://{app_addr}/healthz"),
                "--app-health-interval".into(),
                HEALTH_INTERVAL.into(),
                "--app-health-failures".into(),
                HEALTH_FAILURES.into(),
            ]
        } else {
            Vec::new()
        };
        let sidecar = launcher
            .start_with(
                ensemble.server_for(worker),
                &identity(worker),
                Some(election),
                &flags,
            )
            .await?;
        pods.push(Pod {
            app: Some(app),
            app_addr,
            sidecar,
        });
    }
    Ok(())
}

async fn rounds(
    admin: &Client,
    pods: &mut [Pod],
    config: &RunConfig,
    folder: &str,
    health: bool,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let budget = Budget::start(config.limit);
    let started = Instant::now();
    let mut latencies = LatencyRecorder::new()?;
    while budget.claim(1) {
        let line = queued(admin, folder, pods.len()).await?;
        let (old, next) = (line[0].clone(), line[1].clone());
        let leader = pods
            .iter()
            .position(|p| p.sidecar.identity == old)
            .ok_or_else(|| BenchError::WrongLeader {
                expected: "one of this run's sidecars".into(),
                observed: old.clone(),
            })?;
        let (named_tx, mut named_rx) = mpsc::unbounded_channel();
        // Dropped at the end of the round: aborts the long-polls still waiting.
        let mut polls = JoinSet::new();
        for pod in pods.iter().filter(|p| p.sidecar.identity != old) {
            let mut http = HttpClient::connect(pod.sidecar.addr).await?;
            let view = http.call_ok(Method::GET, "/leader").await?;
            let (identity, token) = leader_of(&view);
            if identity.as_deref() != Some(old.as_str()) {
                return Err(BenchError::WrongLeader {
                    expected: old,
                    observed: format!("{identity:?} (as {} sees it)", pod.sidecar.identity),
                });
            }
            polls.spawn(until_new_leader(http, old.clone(), token, named_tx.clone()));
        }
        drop(named_tx);

        let app = pods[leader].app.take().ok_or_else(|| BenchError::Sidecar {
            identity: old.clone(),
            detail: "its app is not running".into(),
        })?;
        let killed_at = Instant::now();
        app.kill()?;
        app.reap().await;
        if health {
            let stuck = || BenchError::Timeout {
                what: format!("a sidecar naming the leader after {old}'s app crashed"),
                timeout: HANDOVER_TIMEOUT,
            };
            let (new, at) = timeout(HANDOVER_TIMEOUT, named_rx.recv())
                .await
                .map_err(|_| stuck())?
                .ok_or_else(stuck)??;
            latencies.record(at.saturating_duration_since(killed_at));
            if new != next {
                return Err(BenchError::WrongLeader {
                    expected: next,
                    observed: new,
                });
            }
        } else if let Ok(Some(named)) = timeout(NEVER_BOUND, named_rx.recv()).await {
            // Without app health the sidecar has no way to know: a change here is not ours.
            return Err(BenchError::WrongLeader {
                expected: format!("{old} to stay leader without --app-health"),
                observed: format!("{named:?}"),
            });
        }
        drop(polls);
        let port = pods[leader].app_addr.port();
        pods[leader].app = Some(AppChild::start(&AppMode::Health { port }).await?);
    }
    Ok((latencies, started.elapsed()))
}
