//! One ZooKeeper session per process, kept alive across disconnections and replaced when lost.
//!
//! The supervisor owns the `zookeeper_client::Client` and publishes a [`SessionSnapshot`] on a
//! watch channel; recipes read the connection state from it and take the client from it, so a
//! recipe always knows which session (generation) its ephemeral nodes belong to.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use zookeeper_client as zk;

use super::RecipeError;
use super::access::{Access, K8S_SCHEME, NodeAcls, read_token};
use super::liveness::{Liveness, probe};
use super::names::Namespace;
use super::trust::IgnoredNodes;

/// How often the token file is checked for a rotated token while a session runs (the kubelet
/// rotates a projected token at 80% of its lifetime, at least ten minutes).
const TOKEN_CHECK_EVERY: Duration = Duration::from_secs(5);
/// Longest wait between session attempts after the ensemble refused our credentials.
const MAX_AUTH_BACKOFF: Duration = Duration::from_secs(30);

/// The session's state as recipes and the HTTP API report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ConnectionState {
    /// Connected: leadership and locks are what the recipes say.
    Connected,
    /// Disconnected while the session may still be alive: leadership and locks are uncertain,
    /// so nothing is reported as held; ephemeral nodes survive if the client reconnects in time.
    Suspended,
    /// No live session (expired, closed, or not established yet): nothing is held.
    Lost,
}

impl ConnectionState {
    /// The name used in JSON answers and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionState::Connected => "CONNECTED",
            ConnectionState::Suspended => "SUSPENDED",
            ConnectionState::Lost => "LOST",
        }
    }
}

/// What the supervisor publishes: the state, and the client while a session exists.
#[derive(Clone, Debug)]
pub struct SessionSnapshot {
    pub state: ConnectionState,
    /// Present while the session is CONNECTED or SUSPENDED.
    pub client: Option<zk::Client>,
    /// Counts sessions: a new generation means every ephemeral node of the old one is gone.
    pub generation: u64,
    /// Set once the supervisor was told to stop; no new session will follow.
    pub closed: bool,
}

/// A connected session's client, tagged with its generation.
#[derive(Clone, Debug)]
pub struct Connection {
    pub client: zk::Client,
    pub generation: u64,
}

/// How to reach the ensemble.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// `HOST:PORT[,HOST:PORT...]`.
    pub ensemble: String,
    /// Requested session timeout; the server may negotiate it within its bounds.
    pub session_timeout: Duration,
    /// Connect over TLS with these settings (`ensemble_tls`); `None`: plain TCP.
    pub tls: Option<TlsOptions>,
}

/// Why the ensemble's CA cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EnsembleCaError {
    #[error("cannot read the ensemble CA {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("the ensemble CA {path} is not a usable PEM certificate: {reason}")]
    Parse {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error(
        "--ensemble-ca: TLS to the ensemble is not in this build of baton-sidecar (built without \
         the `tls` cargo feature, as inside baton-playground); use the baton-sidecar of the image \
         or of `cargo build --release -p baton-sidecar`"
    )]
    NotBuilt,
}

/// The client's TLS settings (`--ensemble-ca`).
#[cfg(feature = "tls")]
pub type TlsOptions = zk::TlsOptions;

/// No TLS in a build without the `tls` feature (baton-playground's): there is no value of this
/// type, so every session is plain TCP.
#[cfg(not(feature = "tls"))]
#[derive(Debug, Clone)]
pub enum TlsOptions {}

/// Refuses `--ensemble-ca` in a build without the `tls` feature.
#[cfg(not(feature = "tls"))]
pub fn ensemble_tls(_ca: &std::path::Path) -> Result<TlsOptions, EnsembleCaError> {
    Err(EnsembleCaError::NotBuilt)
}

/// TLS settings that trust only the ensemble's CA (`--ensemble-ca`).
///
/// Host names are not checked: the CA is the ensemble's own and signs only its members (and
/// its operator's admin identity), which is the check every Baton port makes (see
/// `baton_tls::configs`); a client endpoint's name (a Service, a pod IP) need not be in a
/// member's certificate.
#[cfg(feature = "tls")]
pub fn ensemble_tls(ca: &std::path::Path) -> Result<TlsOptions, EnsembleCaError> {
    let pem = std::fs::read_to_string(ca).map_err(|source| EnsembleCaError::Read {
        path: ca.to_owned(),
        source,
    })?;
    let options = zk::TlsOptions::new()
        .with_pem_ca(&pem)
        .map_err(|e| EnsembleCaError::Parse {
            path: ca.to_owned(),
            reason: e.to_string(),
        })?;
    // SAFETY: not a memory-safety matter; zookeeper-client marks turning host-name checks
    // off `unsafe` as a warning. The chain is still verified against the ensemble's CA.
    Ok(unsafe { options.with_no_hostname_verification() })
}

/// What every recipe on one session shares: where its nodes live, their ACLs, and the
/// report of planted nodes it skipped.
#[derive(Debug)]
struct Tenancy {
    namespace: Namespace,
    acls: Arc<NodeAcls>,
    ignored: IgnoredNodes,
}

/// A cheap, cloneable view of the supervised session, handed to every recipe.
#[derive(Clone, Debug)]
pub struct SessionHandle {
    rx: watch::Receiver<SessionSnapshot>,
    owners: Arc<AtomicU64>,
    session_timeout: Duration,
    tenancy: Arc<Tenancy>,
    liveness: Arc<Liveness>,
}

impl SessionHandle {
    /// The latest snapshot.
    pub fn snapshot(&self) -> SessionSnapshot {
        self.rx.borrow().clone()
    }

    /// The latest connection state.
    pub fn state(&self) -> ConnectionState {
        self.rx.borrow().state
    }

    /// The current session generation (0 before the first session).
    pub fn generation(&self) -> u64 {
        self.rx.borrow().generation
    }

    /// The requested session timeout.
    pub fn session_timeout(&self) -> Duration {
        self.session_timeout
    }

    /// Until when what session `generation` holds (leadership, locks) certainly stands without
    /// hearing from the ensemble again: the send time of the newest request the ensemble
    /// answered on it, plus 2/3 of the negotiated timeout (`liveness::SAFE_FRACTION` says why), as
    /// wall-clock time (now plus what remains on the monotonic clock; in the past once it ran
    /// out). `None` when nothing was heard on that session.
    pub fn valid_until(&self, generation: u64) -> Option<SystemTime> {
        self.liveness.valid_until(generation)
    }

    /// The namespace every recipe on this session works in (`/baton/<namespace>`).
    pub fn namespace(&self) -> &Namespace {
        &self.tenancy.namespace
    }

    /// The ACLs the recipes create nodes with.
    pub fn acls(&self) -> Arc<NodeAcls> {
        self.tenancy.acls.clone()
    }

    /// The planted (persistent) queue nodes this session's recipes skipped.
    pub fn ignored_nodes(&self) -> &IgnoredNodes {
        &self.tenancy.ignored
    }

    /// A receiver that sees every published snapshot.
    pub fn subscribe(&self) -> watch::Receiver<SessionSnapshot> {
        self.rx.clone()
    }

    /// The client, if the session is CONNECTED right now.
    pub fn connected_now(&self) -> Option<Connection> {
        let snap = self.rx.borrow();
        match (&snap.client, snap.state) {
            (Some(client), ConnectionState::Connected) => Some(Connection {
                client: client.clone(),
                generation: snap.generation,
            }),
            _ => None,
        }
    }

    /// Waits until a session of generation `min_generation` or later is CONNECTED; fails only
    /// when the supervisor is closed.
    pub async fn connected(&self, min_generation: u64) -> Result<Connection, RecipeError> {
        let mut rx = self.rx.clone();
        loop {
            {
                let snap = rx.borrow_and_update();
                if snap.closed {
                    return Err(RecipeError::ShuttingDown);
                }
                if let (Some(client), ConnectionState::Connected) = (&snap.client, snap.state)
                    && snap.generation >= min_generation
                {
                    return Ok(Connection {
                        client: client.clone(),
                        generation: snap.generation,
                    });
                }
            }
            if rx.changed().await.is_err() {
                return Err(RecipeError::ShuttingDown);
            }
        }
    }

    /// The client once CONNECTED, waiting until `deadline` at most (a disconnected session is
    /// waited for as a holder would be): `Suspended` if it is still reconnecting then,
    /// `SessionLost` otherwise.
    pub async fn connected_by(&self, deadline: Instant) -> Result<Connection, RecipeError> {
        if let Some(conn) = self.connected_now() {
            return Ok(conn);
        }
        match tokio::time::timeout_at(deadline, self.connected(0)).await {
            Ok(connected) => connected,
            Err(_) if self.state() == ConnectionState::Suspended => Err(RecipeError::Suspended),
            Err(_) => Err(RecipeError::SessionLost),
        }
    }

    /// Resolves once session `generation` is no longer CONNECTED (suspended, lost or closed).
    pub async fn left_connected(&self, generation: u64) {
        let mut rx = self.rx.clone();
        loop {
            {
                let snap = rx.borrow_and_update();
                if snap.closed
                    || snap.generation != generation
                    || snap.state != ConnectionState::Connected
                {
                    return;
                }
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// A fresh owner id for a node created on `conn`: unique across the ensemble because it
    /// names the session, and across this process because of the counter.
    pub(crate) fn next_owner_id(&self, identity: &str, conn: &Connection) -> String {
        let n = self.owners.fetch_add(1, Ordering::Relaxed);
        format!("{identity}/{:x}/{n}", conn.client.session_id().0)
    }
}

/// Owns the supervisor task; [`SessionControl::close`] ends the session cleanly. Dropping it
/// ends the session too (without waiting), so keep it for as long as the recipes run.
pub struct SessionControl {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl SessionControl {
    /// Stops reconnecting, drops the supervisor's client and waits (at most `bound`) for the
    /// client library to send closeSession, which it does once every `Client` clone is gone:
    /// release recipe resources first.
    pub async fn close(self, bound: Duration) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(bound, self.task).await.is_err() {
            tracing::warn!("the session did not close in time; the ensemble will expire it");
        }
    }
}

/// Starts the supervisor: connects (retrying forever), reports state changes, and replaces a
/// lost session with a new one. Unauthenticated, in namespace `default`.
pub fn start_session(options: SessionOptions) -> (SessionHandle, SessionControl) {
    start_session_as(options, Access::default())
}

/// [`start_session`] with credentials and a namespace: every connection sends `access`'s
/// auth (the token file read afresh each time), and the recipes live in its namespace.
pub fn start_session_as(
    options: SessionOptions,
    access: Access,
) -> (SessionHandle, SessionControl) {
    let (tx, rx) = watch::channel(SessionSnapshot {
        state: ConnectionState::Lost,
        client: None,
        generation: 0,
        closed: false,
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let handle = SessionHandle {
        rx,
        owners: Arc::new(AtomicU64::new(1)),
        session_timeout: options.session_timeout,
        tenancy: Arc::new(Tenancy {
            namespace: access.namespace.clone(),
            acls: Arc::new(NodeAcls::for_access(&access)),
            ignored: IgnoredNodes::default(),
        }),
        liveness: Arc::default(),
    };
    let task = tokio::spawn(supervise(
        options,
        access,
        tx,
        stop_rx,
        handle.liveness.clone(),
    ));
    (
        handle,
        SessionControl {
            stop: stop_tx,
            task,
        },
    )
}

fn map_state(state: zk::SessionState) -> ConnectionState {
    match state {
        zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
            ConnectionState::Connected
        }
        zk::SessionState::Disconnected => ConnectionState::Suspended,
        _ => ConnectionState::Lost,
    }
}

async fn supervise(
    options: SessionOptions,
    access: Access,
    tx: watch::Sender<SessionSnapshot>,
    mut stop: watch::Receiver<bool>,
    liveness: Arc<Liveness>,
) {
    let mut generation = 0u64;
    // Sessions in a row that ended because the ensemble refused our credentials.
    let mut auth_failures = 0u32;
    'sessions: loop {
        if auth_failures > 0 {
            let pause = auth_backoff(auth_failures);
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stopped(&mut stop) => break 'sessions,
            }
        }
        let (client, mut sent_token, attempted) = tokio::select! {
            connected = connect_with_retry(&options, &access) => connected,
            _ = stopped(&mut stop) => break 'sessions,
        };
        generation += 1;
        // The server made the session after this attempt began: a safe "last heard".
        liveness.heard(generation, attempted, client.session_timeout());
        // Aborted when this session ends (it holds a client clone, which would keep the
        // library from closing the session).
        let probe = AbortOnDrop(tokio::spawn(probe(
            client.clone(),
            generation,
            liveness.clone(),
        )));
        let mut watcher = client.state_watcher();
        let mut state = map_state(client.state());
        tx.send_replace(SessionSnapshot {
            state,
            client: Some(client.clone()),
            generation,
            closed: false,
        });
        // Logged after publishing, so whoever reads the log can rely on the state it names.
        tracing::info!(session = %client.session_id(), generation,
            timeout_ms = client.session_timeout().as_millis() as u64, "session established");
        loop {
            let next = tokio::select! {
                s = watcher.changed() => s,
                _ = stopped(&mut stop) => {
                    drop(probe);
                    close(&tx, generation, client, watcher).await;
                    return;
                }
                _ = tokio::time::sleep(TOKEN_CHECK_EVERY), if access.token_file.is_some() => {
                    resend_rotated_token(&client, &access, &mut sent_token);
                    continue;
                }
            };
            if next == zk::SessionState::SyncConnected {
                auth_failures = 0;
            }
            if next == zk::SessionState::AuthFailed {
                auth_failures += 1;
                tracing::error!(session = %client.session_id(), hint = %auth_hint(&access),
                    retry_in_ms = auth_backoff(auth_failures).as_millis() as u64,
                    "the ensemble refused this session's credentials (AuthFailed); the session is closed");
            }
            let mapped = map_state(next);
            if mapped != state {
                state = mapped;
                tracing::warn!(session = %client.session_id(), state = state.as_str(),
                    cause = %next, "session state changed");
                tx.send_modify(|snap| snap.state = state);
            }
            if state == ConnectionState::Lost {
                tx.send_modify(|snap| snap.client = None);
                tracing::warn!(
                    "session lost: its ephemeral nodes are gone; starting a new session"
                );
                continue 'sessions;
            }
        }
    }
    tx.send_modify(|snap| {
        snap.closed = true;
        snap.client = None;
        snap.state = ConnectionState::Lost;
    });
}

/// Publishes the end, drops our client and waits for the library to report the session closed
/// (it sends closeSession when the last clone is dropped).
async fn close(
    tx: &watch::Sender<SessionSnapshot>,
    generation: u64,
    client: zk::Client,
    mut watcher: zk::StateWatcher,
) {
    tx.send_replace(SessionSnapshot {
        state: ConnectionState::Lost,
        client: None,
        generation,
        closed: true,
    });
    let id = client.session_id();
    drop(client);
    while !watcher.peek_state().is_terminated() {
        watcher.changed().await;
    }
    tracing::info!(session = %id, "session closed");
}

/// Aborts a task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Resolves when told to stop (or when the control was dropped, which also means stop).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    // Either outcome means stop; the guard it returns must not live across an await.
    let _ = stop.wait_for(|s| *s).await.is_ok();
}

/// How long to wait before the next session after `failures` refusals of our credentials.
fn auth_backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(8);
    (Duration::from_millis(500) * 2u32.pow(doublings)).min(MAX_AUTH_BACKOFF)
}

/// What to check when the ensemble refuses our credentials.
fn auth_hint(access: &Access) -> String {
    let mut hints = Vec::new();
    if let Some(path) = &access.token_file {
        hints.push(format!(
            "the ServiceAccount token in {} was rejected: check that the projected token's \
             audience is 'baton', that this pod still exists (a deleted pod's token is \
             refused), and that the ensemble may create TokenReviews (its RBAC); on Apache \
             ZooKeeper, which knows no 'k8s' scheme, use --zk-digest instead",
            path.display()
        ));
    }
    if access.digest.is_some() {
        hints.push("check the --zk-digest user and password".to_owned());
    }
    if hints.is_empty() {
        hints.push("this session sent no credentials".to_owned());
    }
    hints.join("; ")
}

/// The credentials of one connection attempt: the token as the file holds it now.
fn connector_for(
    options: &SessionOptions,
    access: &Access,
) -> Result<(zk::Connector, Option<Vec<u8>>), super::access::TokenFileError> {
    let mut connector = zk::Client::connector().with_session_timeout(options.session_timeout);
    let mut token = None;
    if let Some(path) = &access.token_file {
        let current = read_token(path)?;
        connector = connector.with_auth(K8S_SCHEME, &current);
        token = Some(current);
    }
    if let Some(digest) = &access.digest {
        connector = connector.with_auth("digest", &digest.auth_bytes());
    }
    Ok((connector, token))
}

/// Sends the token again if the kubelet rotated the file since `sent`, on a live session.
///
/// zookeeper-client re-sends every auth packet a session ever had accepted, oldest first, on
/// each reconnection; the ensemble must accept a rotated-out token there for the session to
/// survive a reconnection after the old token expires (see the README).
fn resend_rotated_token(client: &zk::Client, access: &Access, sent: &mut Option<Vec<u8>>) {
    let Some(path) = &access.token_file else {
        return;
    };
    let current = match read_token(path) {
        Ok(current) => current,
        Err(e) => {
            tracing::warn!(error = %e, "cannot re-read the ServiceAccount token; the session keeps the one it sent");
            return;
        }
    };
    if sent.as_deref() == Some(current.as_slice()) {
        return;
    }
    tracing::info!(session = %client.session_id(), file = %path.display(),
        "the ServiceAccount token was rotated; sending it on the session");
    *sent = Some(current.clone());
    let client = client.clone();
    let hint = auth_hint(access);
    tokio::spawn(async move {
        match client.auth(K8S_SCHEME, &current).await {
            Ok(()) => {
                tracing::info!(session = %client.session_id(), "the rotated token was accepted")
            }
            Err(e) => tracing::error!(error = %e, %hint, "the rotated token was not accepted"),
        }
    });
}

/// A new session's client, the token it sent, and when the successful attempt began.
async fn connect_with_retry(
    options: &SessionOptions,
    access: &Access,
) -> (zk::Client, Option<Vec<u8>>, Instant) {
    let mut backoff = Duration::from_millis(200);
    let mut auth_failures = 0u32;
    loop {
        let (connector, token) = match connector_for(options, access) {
            Ok(prepared) => prepared,
            Err(e) => {
                tracing::error!(error = %e, retry_in_ms = backoff.as_millis() as u64,
                    "cannot read this pod's credentials; no session until it can");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        let attempted = Instant::now();
        let attempt = match &options.tls {
            #[cfg(feature = "tls")]
            Some(tls) => {
                connector
                    .with_tls(tls.clone())
                    .secure_connect(&options.ensemble)
                    .await
            }
            #[cfg(not(feature = "tls"))]
            Some(tls) => match *tls {},
            None => connector.connect(&options.ensemble).await,
        };
        match attempt {
            Ok(client) => return (client, token, attempted),
            Err(zk::Error::AuthFailed) => {
                auth_failures += 1;
                let pause = auth_backoff(auth_failures);
                tracing::error!(ensemble = %options.ensemble, hint = %auth_hint(access),
                    retry_in_ms = pause.as_millis() as u64,
                    "the ensemble refused this pod's credentials (AuthFailed)");
                tokio::time::sleep(pause).await;
            }
            Err(e) => {
                tracing::warn!(ensemble = %options.ensemble, error = %e,
                    retry_in_ms = backoff.as_millis() as u64, "cannot establish a session");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}
