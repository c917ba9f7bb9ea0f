//! The sidecar process: one session, the configured elections, the HTTP locks, the API, the
//! pod view and the metrics, started together and shut down in the order SIGTERM needs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::{Candidacy, Config};
use crate::events::EventHub;
use crate::handoff::HandOff;
use crate::http::{ApiState, Campaigns, Exposure, serve};
use crate::leases::LockTable;
use crate::metrics::{ElectionLabels, Metrics};
use crate::pod::{LeaseMirror, PodLabeler, run_lease_mirror, run_pod_view};
use crate::recipe::{
    Access, Candidate, ElectionRecipe, SessionHandle, SessionOptions, start_session_as,
};

/// Why the sidecar could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    EnsembleCa(#[from] crate::recipe::EnsembleCaError),
    #[error(transparent)]
    TokenFile(#[from] crate::recipe::TokenFileError),
}

/// How long the pod view may take to write the final labels at shutdown.
const LABEL_FLUSH_BOUND: Duration = Duration::from_secs(5);

/// Runs until `shutdown` is set, then resigns every election and releases every lock at once,
/// relabels the pod, closes the session and returns.
pub async fn run(
    config: Config,
    labeler: Arc<dyn PodLabeler>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), RunError> {
    run_with_leases(config, labeler, None, shutdown).await
}

/// [`run`], also mirroring the elections this pod leads into Leases when `leases` is given
/// (`--mirror-lease`).
pub async fn run_with_leases(
    config: Config,
    labeler: Arc<dyn PodLabeler>,
    leases: Option<Arc<LeaseMirror>>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), RunError> {
    // A token that cannot be read now is a deployment error (no projected volume): say so at
    // once rather than retry a session that could never authenticate.
    if let Some(path) = &config.token_file {
        crate::recipe::access::read_token(path)?;
    }
    let listener = baton_listen::bind(config.listen)
        .await
        .map_err(|source| RunError::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| RunError::Bind {
        addr: config.listen,
        source,
    })?;
    tracing::info!(%addr, identity = %config.identity, "serving the HTTP API");
    let probe_listener = match config.probe_listen {
        Some(probe_addr) => {
            let listener =
                baton_listen::bind(probe_addr)
                    .await
                    .map_err(|source| RunError::Bind {
                        addr: probe_addr,
                        source,
                    })?;
            if let Ok(bound) = listener.local_addr() {
                tracing::info!(addr = %bound, "serving the read-only probe API");
            }
            Some(listener)
        }
        None => None,
    };

    let tls = match &config.ensemble_ca {
        Some(ca) => Some(crate::recipe::ensemble_tls(ca)?),
        None => None,
    };
    let access = Access {
        namespace: config.recipe_namespace(),
        token_file: config.token_file.clone(),
        digest: config.zk_digest.clone(),
    };
    tracing::info!(namespace = %access.namespace, k8s_token = access.token_file.is_some(),
        digest_user = access.digest.as_ref().map(|d| d.user()), "recipes live in /baton/<namespace>");
    let (session, session_control) = start_session_as(
        SessionOptions {
            ensemble: config.ensemble.clone(),
            session_timeout: config.session_timeout,
            tls,
        },
        access,
    );
    let candidate = Candidate {
        identity: config.identity.clone(),
        address: config.address.clone(),
        pod: config.pod.clone(),
    };
    let elections: Vec<_> = config
        .elections
        .iter()
        .map(|name| {
            ElectionRecipe::start_as(
                session.clone(),
                name.clone(),
                candidate.clone(),
                config.candidacy == Candidacy::Always,
            )
        })
        .collect();
    if config.candidacy == Candidacy::App {
        tracing::info!(
            "--candidacy app: standing in an election only while the app holds GET /leader/NAME/campaign open"
        );
    }
    let handoff = HandOff::new(config.release_grace);
    let metrics = Arc::new(Metrics::with_ignored_nodes(
        session.ignored_nodes().family(),
    ));
    let events = EventHub::new();
    let locks = LockTable::with_events(
        session.clone(),
        config.identity.clone(),
        metrics.clone(),
        events.clone(),
    );
    let (draining_tx, draining) = watch::channel(false);
    let (stop_tx, stop) = watch::channel(false);
    let state = Arc::new(ApiState {
        identity: config.identity.clone(),
        session: session.clone(),
        elections: elections.clone(),
        locks: locks.clone(),
        metrics: metrics.clone(),
        draining,
        candidacy: config.candidacy,
        handoff: handoff.clone(),
        campaigns: Campaigns::default(),
    });
    let probes = probe_listener
        .map(|l| tokio::spawn(serve(l, state.clone(), Exposure::ProbesOnly, stop.clone())));
    let http = tokio::spawn(serve(listener, state, Exposure::Full, stop.clone()));
    let pod_view = tokio::spawn(run_pod_view(elections.clone(), labeler, stop.clone()));
    let lease_mirror =
        leases.map(|m| tokio::spawn(run_lease_mirror(elections.clone(), m, stop.clone())));
    let publisher = tokio::spawn(crate::events::publish_changes(
        events.clone(),
        session.clone(),
        elections.clone(),
        config.identity.clone(),
        stop.clone(),
    ));
    let app_health = config.app_health.clone().map(|url| {
        tokio::spawn(crate::app_health::watch_app(
            crate::app_health::AppHealth {
                url,
                interval: config.app_health_interval,
                threshold: config.app_health_failures,
            },
            elections.clone(),
            locks.clone(),
            metrics.clone(),
            stop.clone(),
        ))
    });
    let observer = tokio::spawn(observe(
        session.clone(),
        elections.clone(),
        metrics,
        stop.clone(),
    ));

    // The guard `wait_for` returns must not live across an await.
    let _ = shutdown.wait_for(|s| *s).await.is_ok();
    tracing::info!(
        "shutting down: releasing every lock, resigning every election (after the app's release where it follows one this pod leads)"
    );
    handoff.begin();
    let bound = config.session_timeout;
    let mut handover = JoinSet::new();
    let release_all = {
        let locks = locks.clone();
        async move { locks.release_all(bound).await }
    };
    handover.spawn(release_all);
    // Bounded by the grace (each election's wait) plus the time a resignation may take.
    let step_down_bound = config.release_grace + bound;
    handover.spawn(async move {
        if tokio::time::timeout(step_down_bound, handoff.step_down(elections, &events))
            .await
            .is_err()
        {
            tracing::warn!("resigning did not finish in time; the session close ends it");
        }
    });
    if tokio::time::timeout(step_down_bound, handover.join_all())
        .await
        .is_err()
    {
        tracing::warn!("resign/release did not finish in time; the session close ends them");
    }
    // Only now do streams end: a following app heard `stepping-down` on them.
    let _ = draining_tx.send(true);
    let _ = stop_tx.send(true);
    if tokio::time::timeout(LABEL_FLUSH_BOUND, pod_view)
        .await
        .is_err()
    {
        tracing::warn!("pod labels not updated before exit");
    }
    if let Some(mirror) = lease_mirror
        && tokio::time::timeout(LABEL_FLUSH_BOUND, mirror)
            .await
            .is_err()
    {
        tracing::warn!("Leases not released before exit; they expire by their renewTime");
    }
    let _ = http.await;
    if let Some(probes) = probes {
        let _ = probes.await;
    }
    let _ = observer.await;
    let _ = publisher.await;
    if let Some(app_health) = app_health {
        let _ = app_health.await;
    }
    session_control.close(bound).await;
    tracing::info!("stopped");
    Ok(())
}

/// Counts session and leadership events until `stop` is set (the gauges are set at scrape
/// time by the `/metrics` handler).
async fn observe(
    session: SessionHandle,
    elections: Vec<ElectionRecipe>,
    metrics: Arc<Metrics>,
    stop: watch::Receiver<bool>,
) {
    let mut tasks = JoinSet::new();
    for election in elections {
        let metrics = metrics.clone();
        let mut views = election.subscribe();
        let mut stop = stop.clone();
        tasks.spawn(async move {
            let labels = ElectionLabels {
                election: election.name().to_string(),
            };
            let mut led = false;
            loop {
                let leads = views.borrow_and_update().is_leader;
                if leads && !led {
                    metrics.leader_terms.get_or_create(&labels).inc();
                }
                led = leads;
                tokio::select! {
                    changed = views.changed() => if changed.is_err() { break },
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
        });
    }
    let mut snapshots = session.subscribe();
    let mut stop = stop;
    let mut generation = 0;
    loop {
        let current = snapshots.borrow_and_update().generation;
        if current > generation {
            metrics.sessions_established.inc_by(current - generation);
            generation = current;
        }
        tokio::select! {
            changed = snapshots.changed() => if changed.is_err() { break },
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    tasks.join_all().await;
}
