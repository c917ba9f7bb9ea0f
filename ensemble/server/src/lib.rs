//! `baton-ensemble`: the runtime around `baton-machine` — the client port, the Raft driver,
//! the disks and the admin API. The ZooKeeper semantics themselves live in `baton-machine`
//! (sans-IO); this crate only moves bytes and time to and from it.

pub mod admin_api;
pub mod backup;
pub mod certs_cmd;
pub mod cli;
pub mod config;
pub mod core;
pub mod disk_space;
#[doc(hidden)]
pub mod fuzzing;
pub mod metrics;
pub mod peer;
mod raft_logging;
pub mod server;
pub mod status;

use std::sync::Arc;

use baton_raftlog::{LogOptions, RaftLog};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

pub use config::Config;
use core::{Core, CoreConfig, CoreMsg};

/// Why the server could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("cannot use data dir {dir}: {source}")]
    DataDir { dir: String, source: std::io::Error },
    #[error("cannot open the Raft log: {0}")]
    Log(#[from] baton_raftlog::LogError),
    #[error("cannot listen on the {what} address {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(String),
    #[error("cannot start the core thread: {0}")]
    Thread(std::io::Error),
    #[error(transparent)]
    Core(#[from] core::CoreError),
    #[error("the core thread panicked")]
    CorePanicked,
}

/// Exit status of a member whose data cannot be recovered from its own directory (sysexits'
/// `EX_DATAERR`): restarting will not help; it must be reseeded (docs/src/troubleshooting.md).
pub const EXIT_UNRECOVERABLE_DATA: u8 = 65;

/// Exit status of a member whose data dir is at a feature level this build (or its
/// `--max-feature-level`) does not support (sysexits' `EX_CONFIG`): a rollback past a level
/// raise. Run a release that supports the level, or restore a backup (docs/src/tasks/upgrade.md).
pub const EXIT_FEATURE_LEVEL: u8 = 78;

impl RunError {
    /// The process exit status for this error: [`EXIT_UNRECOVERABLE_DATA`] when the member's
    /// data cannot be recovered, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Log(baton_raftlog::LogError::Unrecoverable { .. }) => EXIT_UNRECOVERABLE_DATA,
            RunError::Core(core::CoreError::FeatureLevel { .. }) => EXIT_FEATURE_LEVEL,
            _ => 1,
        }
    }
}

/// Loads the member's certificate and checks it is for this member, so a volume or a
/// certificate mounted into the wrong pod fails at start, not at the first peer handshake.
fn load_member_tls(cfg: &Config) -> Result<Option<baton_tls::MemberTls>, RunError> {
    let Some(files) = cfg.tls_files() else {
        tracing::warn!(
            "--insecure-no-tls: peer links are unauthenticated and in the clear (anyone who \
             reaches the peer port can pose as a member and rewrite the ensemble's state), and \
             the admin API is open to anyone who reaches it; never run so on a shared network"
        );
        return Ok(None);
    };
    let tls = baton_tls::MemberTls::load(files).map_err(|e| RunError::Tls(e.to_string()))?;
    let identity = tls.identity();
    if identity.role != baton_tls::Role::Member(cfg.id) {
        return Err(RunError::Tls(format!(
            "--tls-cert names {identity}, but this is member {} (--id)",
            cfg.id
        )));
    }
    if let Some(cluster) = &cfg.cluster_id
        && *cluster != identity.cluster
    {
        return Err(RunError::Tls(format!(
            "--tls-cert names {identity}, but --cluster-id is {cluster}"
        )));
    }
    Ok(Some(tls))
}

async fn bind(what: &'static str, addr: std::net::SocketAddr) -> Result<TcpListener, RunError> {
    baton_listen::bind(addr)
        .await
        .map_err(|source| RunError::Bind { what, addr, source })
}

/// Runs a member until `shutdown` becomes true or the core fails.
pub async fn run(cfg: Config, mut shutdown: watch::Receiver<bool>) -> Result<(), RunError> {
    cfg.validate().map_err(RunError::Config)?;
    #[cfg(not(feature = "k8s"))]
    if cfg.k8s_auth {
        return Err(RunError::Config(cli::K8S_UNAVAILABLE.to_owned()));
    }
    std::fs::create_dir_all(&cfg.data_dir).map_err(|source| RunError::DataDir {
        dir: cfg.data_dir.display().to_string(),
        source,
    })?;
    if cfg.unsafe_no_fsync {
        tracing::warn!(
            "--unsafe-no-fsync: acknowledged writes can be lost on a crash; never use this in production"
        );
    }
    let member_tls = load_member_tls(&cfg)?;
    // A data dir keeps the cluster id it recorded; only a fresh one takes the bootstrap id:
    // --cluster-id, else the one the CA put in our certificate, else one derived from --members.
    let cluster_id = match (
        &cfg.cluster_id,
        &member_tls,
        baton_raftlog::is_initialized(&cfg.data_dir),
    ) {
        (Some(id), _, _) => Some(id.clone()),
        (None, _, true) => None,
        (None, Some(tls), false) => Some(tls.identity().cluster.clone()),
        (None, None, false) => Some(cfg.bootstrap_cluster_id()),
    };
    let log = RaftLog::open(
        &cfg.data_dir,
        cfg.id,
        cluster_id.as_deref(),
        LogOptions {
            sync: !cfg.unsafe_no_fsync,
            ..LogOptions::default()
        },
    )?;
    let client_listener = match cfg.client_addr.addr() {
        Some(addr) => Some(bind("client", addr).await?),
        None => None,
    };
    let secure_client_listener = match cfg.secure_client_addr {
        Some(addr) => Some(bind("secure client", addr).await?),
        None => None,
    };
    let admin_listener = bind("admin", cfg.admin_addr).await?;
    let peer_listener = bind("peer", cfg.peer_addr).await?;

    if let Some(tls) = &member_tls
        && tls.identity().cluster != log.cluster_id()
    {
        return Err(RunError::Tls(format!(
            "--tls-cert names {}, but the data dir belongs to cluster {}",
            tls.identity(),
            log.cluster_id()
        )));
    }

    let (core_tx, core_rx) = mpsc::channel::<CoreMsg>(64 * 1024);
    // Clients have a queue of their own, which the core serves after ticks and peers
    // (`core::CoreInbox`); when it is full, connections stop reading their sockets.
    let (client_tx, client_rx) = mpsc::channel::<CoreMsg>(16 * 1024);
    let transport = start_transport(
        &cfg,
        log.cluster_id(),
        peer_listener,
        member_tls.as_ref(),
        core_tx.clone(),
    )?;

    let members = cfg.initial_members();
    let metrics = Arc::new(metrics::Metrics::new());
    let (status_tx, status_rx) = watch::channel(status::Status::default());
    let core_cfg = CoreConfig {
        id: cfg.id,
        min_session_timeout_ms: cfg.min_session_timeout.as_millis() as i32,
        max_session_timeout_ms: cfg.max_session_timeout.as_millis() as i32,
        snapshot_entries: cfg.snapshot_entries,
        tick: cfg.tick,
        reap_interval: cfg.housekeeping_interval,
        join: cfg.join,
        fixed_election_ticks: None,
        handshake_timeout: cfg.handshake_timeout,
        bugs: core::DeliberateBugs::NONE,
    };
    let mut core = Core::new(
        core_cfg,
        log,
        &members,
        metrics.clone(),
        status_tx,
        Some(Box::new(transport)),
        Arc::new(core::SystemClock),
    )?;
    core.set_max_feature_level(cfg.max_feature_level())?;
    core.set_max_watches_per_session(cfg.max_watches_per_session);
    core.set_max_watch_bytes_per_session(cfg.max_watch_bytes_per_session);
    core.snapshot_off_thread(true);
    core.set_tenancy(core::TenancyConfig {
        super_digest: cfg.super_digest.clone(),
    });
    core.set_initial_settings(cfg.initial_settings());
    core.set_disk_watermark(disk_space::watermark(&cfg));
    // Without the `k8s` feature there is no TokenReview client (--k8s-auth is refused above).
    #[cfg(not(feature = "k8s"))]
    let token_reviewer: Option<Arc<server::token_review::TokenReviewer>> = None;
    #[cfg(feature = "k8s")]
    let token_reviewer = if cfg.k8s_auth {
        let client = kube::Client::try_default().await.map_err(|e| {
            RunError::Config(format!(
                "--k8s-auth needs Kubernetes access as kubectl finds it (in-cluster, else KUBECONFIG): {e}"
            ))
        })?;
        let cache = match cfg.k8s_verdict_cache_entries {
            Some(n) => server::token_review::CacheSize {
                accepted: n,
                refused: n,
            },
            None => server::token_review::CacheSize::default(),
        };
        Some(Arc::new(server::token_review::TokenReviewer::new(
            client,
            metrics.clone(),
            cache,
        )))
    } else {
        None
    };
    tracing::info!(
        k8s_auth = cfg.k8s_auth,
        check_identities = cfg.check_identities,
        super_user = cfg
            .super_digest
            .as_deref()
            .and_then(|d| d.split(':').next()),
        "client identities: k8s tokens {}, namespace policy under /baton {}, owner-only deletion of ephemerals under /baton/ on",
        if cfg.k8s_auth {
            "checked with TokenReview"
        } else {
            "refused (no --k8s-auth)"
        },
        if cfg.check_identities {
            "on"
        } else {
            "off (no --check-identities)"
        },
    );

    let (core_done_tx, mut core_done) = oneshot::channel();
    let core_thread = std::thread::Builder::new()
        .name("baton-core".into())
        .spawn(move || {
            let result = core.run(core::CoreInbox {
                control: core_rx,
                clients: client_rx,
            });
            let _ = core_done_tx.send(());
            result
        })
        .map_err(RunError::Thread)?;

    let ticker = {
        let core_tx = core_tx.clone();
        let tick = cfg.tick;
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(tick);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                if core_tx.send(CoreMsg::Tick).await.is_err() {
                    return;
                }
            }
        })
    };

    let disk_watcher = tokio::spawn(disk_space::watch(
        cfg.data_dir.clone(),
        cfg.free_disk_bytes_file(),
        core_tx.clone(),
    ));

    let mut ctx = server::ClientContext::new(
        client_tx,
        status_rx.clone(),
        metrics.clone(),
        server::ClientLimits::from_config(&cfg),
    );
    if let Some(reviewer) = token_reviewer {
        ctx = ctx.with_token_reviewer(reviewer);
    }
    if let Some(listener) = client_listener {
        tokio::spawn(server::serve_clients(
            listener,
            None,
            ctx.clone(),
            shutdown.clone(),
        ));
    }
    if let Some(listener) = secure_client_listener {
        // validate() refused --secure-client-addr without certificates.
        let tls = member_tls.as_ref().ok_or_else(|| {
            RunError::Config("--secure-client-addr needs --tls-ca/--tls-cert/--tls-key".into())
        })?;
        let acceptor = tls
            .client_acceptor()
            .map_err(|e| RunError::Tls(e.to_string()))?;
        tokio::spawn(server::serve_clients(
            listener,
            Some(acceptor),
            ctx,
            shutdown.clone(),
        ));
    }
    let admin_ctx = admin_api::AdminContext {
        status: status_rx,
        metrics,
        core: core_tx.clone(),
        raw_proposals: cfg.raw_proposals(),
    };
    let admin_tls = match &member_tls {
        Some(tls) => Some(admin_api::AdminTls {
            acceptor: tls
                .admin_acceptor()
                .map_err(|e| RunError::Tls(e.to_string()))?,
            cluster: tls.identity().cluster.clone(),
        }),
        None => None,
    };
    tokio::spawn(admin_api::serve_admin(
        admin_listener,
        admin_ctx,
        admin_tls,
        shutdown.clone(),
    ));
    tracing::info!(
        id = cfg.id, client = %cfg.client_addr, secure_client = ?cfg.secure_client_addr,
        peer = %cfg.peer_addr, admin = %cfg.admin_addr,
        data_dir = %cfg.data_dir.display(), "baton-ensemble serving"
    );

    tokio::select! {
        _ = shutdown.changed() => {
            tracing::info!("shutting down");
            let _ = core_tx.send(CoreMsg::Shutdown).await;
        }
        _ = &mut core_done => {}
    }
    ticker.abort();
    disk_watcher.abort();
    drop(core_tx);
    let result = tokio::task::spawn_blocking(move || core_thread.join())
        .await
        .map_err(|_| RunError::CorePanicked)?;
    match result {
        Ok(r) => r.map_err(RunError::from),
        Err(_) => Err(RunError::CorePanicked),
    }
}

/// Starts the peer transport (mutual TLS unless opted out); what it receives (messages, link
/// events) flows into the core.
fn start_transport(
    cfg: &Config,
    cluster_id: String,
    listener: TcpListener,
    tls: Option<&baton_tls::MemberTls>,
    core_tx: mpsc::Sender<CoreMsg>,
) -> Result<peer::PeerTransport, RunError> {
    let (peer_tx, mut peer_rx) = mpsc::channel::<peer::PeerInbound>(16 * 1024);
    let started = match tls {
        Some(tls) => {
            let (listener, connector) =
                peer::peer_tls(tls, listener).map_err(|e| RunError::Tls(e.to_string()))?;
            let mut config =
                peer::PeerConfig::new(cfg.id, cluster_id, listener, Default::default());
            config.max_feature_level = cfg.max_feature_level();
            peer::PeerTransport::start_with(config, connector, peer_tx)
        }
        None => {
            let mut config =
                peer::PeerConfig::new(cfg.id, cluster_id, listener, Default::default());
            config.max_feature_level = cfg.max_feature_level();
            peer::PeerTransport::start(config, peer_tx)
        }
    };
    let mut transport = started.map_err(|e| RunError::Config(e.to_string()))?;
    let mut events = transport.take_events();
    tokio::spawn(async move {
        loop {
            let msg = tokio::select! {
                Some(inbound) = peer_rx.recv() => CoreMsg::Peer(inbound),
                Some(event) = async { events.as_mut()?.recv().await } => CoreMsg::PeerEvent(event),
                else => return,
            };
            if core_tx.send(msg).await.is_err() {
                return;
            }
        }
    });
    Ok(transport)
}
