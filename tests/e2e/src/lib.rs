//! Shared harness for end-to-end tests: real server processes on loopback, real clients.
//!
//! Every case runs against both implementations: Baton's `baton-ensemble` and Apache ZooKeeper
//! 3.8, the reference. A ZooKeeper run proves the test itself right; a Baton run proves Baton.
//!
//! ```ignore
//! async fn creates_a_node(server: &mut Server) -> anyhow::Result<()> {
//!     let client = baton_tests::connect(server).await?;
//!     client.create("/a", b"x", &baton_tests::PERSISTENT).await?;
//!     Ok(())
//! }
//! baton_tests::target_tests!(creates_a_node);
//! ```
//!
//! expands to the tests `creates_a_node::baton` and `creates_a_node::zookeeper`, each starting
//! its own server (so cases are isolated and run the same under `cargo test` and
//! `cargo nextest`). Select one side by name: `cargo test -p baton-tests -- zookeeper`.
//! Case names must therefore contain neither "baton" nor "zookeeper".

pub mod cluster;
pub mod command;
pub mod faulty_disk;
pub mod listener;
pub mod moto;
pub mod nemesis;
pub mod netns;
pub mod pki;
pub mod raw;
pub mod registers;
mod server;
pub mod tmpfs;
pub mod wire;
pub mod zk_quorum;

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
pub use server::{Server, Target, baton_binary};
use zookeeper_client as zk;

/// Upper bound for one whole case, server start included; a hang fails instead of stalling CI.
pub const CASE_DEADLINE: Duration = Duration::from_secs(120);

/// Session timeout asked for by `connect`: long enough that a slow CI machine never expires a
/// session by accident.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(20);

/// Persistent node, open ACL.
pub const PERSISTENT: zk::CreateOptions<'static> =
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
/// Ephemeral node, open ACL.
pub const EPHEMERAL: zk::CreateOptions<'static> =
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());

/// Expands each named `async fn(&mut Server) -> anyhow::Result<()>` into two tests,
/// `<name>::baton` and `<name>::zookeeper`.
#[macro_export]
macro_rules! target_tests {
    ($($case:ident),+ $(,)?) => {
        $(
            mod $case {
                #[tokio::test]
                async fn baton() {
                    $crate::run_case($crate::Target::Baton, super::$case).await;
                }

                #[tokio::test]
                async fn zookeeper() {
                    $crate::run_case($crate::Target::ZooKeeper, super::$case).await;
                }
            }
        )+
    };
}

/// Expands each named `async fn(&mut Server) -> anyhow::Result<()>` into one test,
/// `<name>::baton`, for Baton features ZooKeeper does not have (the admin API).
#[macro_export]
macro_rules! baton_only_tests {
    ($($case:ident),+ $(,)?) => {
        $(
            mod $case {
                #[tokio::test]
                async fn baton() {
                    $crate::run_case($crate::Target::Baton, super::$case).await;
                }
            }
        )+
    };
}

/// The workspace's root (tests/e2e sits two levels below it), for tests that read the
/// repository's own files (the Dockerfile, the chart).
pub fn workspace() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tests/e2e sits two levels below the workspace")
        .to_path_buf()
}

/// Starts a server for `target`, runs `case` on it within `CASE_DEADLINE`, and panics with the
/// error and the server's log tail if the case fails.
pub async fn run_case<F>(target: Target, case: F)
where
    F: AsyncFnOnce(&mut Server) -> Result<()>,
{
    run_on(target, Server::start(target).await, case).await
}

/// As `run_case`, on a server that answers only the four-letter words `words`
/// (`Server::start_allowing`).
pub async fn run_case_allowing<F>(target: Target, words: &str, case: F)
where
    F: AsyncFnOnce(&mut Server) -> Result<()>,
{
    run_on(target, Server::start_allowing(target, words).await, case).await
}

async fn run_on<F>(target: Target, started: Result<Server>, case: F)
where
    F: AsyncFnOnce(&mut Server) -> Result<()>,
{
    let mut server = match started {
        Ok(server) => server,
        Err(err) => panic!("could not start {target}: {err:#}"),
    };
    let outcome = tokio::time::timeout(CASE_DEADLINE, case(&mut server))
        .await
        .unwrap_or_else(|_| Err(anyhow!("case did not finish within {CASE_DEADLINE:?}")));
    if let Err(err) = outcome {
        server.dump_log();
        panic!("failed against {target}: {err:?}");
    }
}

/// A new session on `server` with `SESSION_TIMEOUT`.
pub async fn connect(server: &Server) -> Result<zk::Client> {
    connect_with(
        server,
        zk::Client::connector().with_session_timeout(SESSION_TIMEOUT),
    )
    .await
}

/// A session on `server` made by `connector` (to add auth, resume a session, detach...).
pub async fn connect_with(server: &Server, connector: zk::Connector) -> Result<zk::Client> {
    let addr = server.connect_string();
    tokio::time::timeout(SESSION_TIMEOUT, connector.connect(&addr))
        .await
        .map_err(|_| anyhow!("no session from {addr} within {SESSION_TIMEOUT:?}"))?
        .with_context(|| format!("connect to {} at {addr}", server.target()))
}

/// Waits for a one-shot or persistent watch event, failing after `wire::IO_DEADLINE`.
pub async fn next_event<F>(what: &str, event: F) -> Result<zk::WatchedEvent>
where
    F: std::future::Future<Output = zk::WatchedEvent>,
{
    tokio::time::timeout(wire::IO_DEADLINE, event)
        .await
        .map_err(|_| anyhow!("no watch event for {what} within {:?}", wire::IO_DEADLINE))
}

/// Polls `check`, with pauses growing to 250 ms, until it holds or `within` passes: for states
/// only a poll can see (an admin API's status), never in place of an event a client can await.
pub async fn eventually<F>(what: &str, within: Duration, mut check: F) -> Result<()>
where
    F: AsyncFnMut() -> Result<bool>,
{
    let deadline = std::time::Instant::now() + within;
    let mut pause = Duration::from_millis(20);
    loop {
        if check().await? {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            anyhow::bail!("{what}: not within {within:?}");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}
