//! One server process under test: Baton's `baton-ensemble` or Apache ZooKeeper 3.8.

use std::fmt;
use std::fs::OpenOptions;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use tempfile::TempDir;
use tokio::time::Instant;

use crate::pki::Pki;
use crate::wire;

/// How long a server may take to become ready (a JVM on a loaded 2-core machine is slow).
const READY_DEADLINE: Duration = Duration::from_secs(60);
/// How many times `start` picks fresh ports after the process died early (a port taken between
/// our probe and its bind).
const START_ATTEMPTS: usize = 3;
/// `restart` keeps the ports, so it retries an early exit (a port not yet released) a few
/// times, spaced out, rather than picking new ones.
const RESTART_ATTEMPTS: usize = 5;
const RESTART_BACKOFF: Duration = Duration::from_millis(300);
/// How long one readiness probe may take before it counts as "not ready yet".
const PROBE_DEADLINE: Duration = Duration::from_millis(500);
/// Lines of the server's log printed when a test fails.
const LOG_TAIL_LINES: usize = 80;

/// Which implementation a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Baton's `baton-ensemble`, a one-member ensemble.
    Baton,
    /// Apache ZooKeeper 3.8 standalone, the reference for behaviour.
    ZooKeeper,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Target::Baton => "baton",
            Target::ZooKeeper => "zookeeper",
        })
    }
}

/// Loopback ports a server listens on; only `client` is used by ZooKeeper.
#[derive(Debug, Clone, Copy)]
struct Ports {
    client: u16,
    peer: u16,
    admin: u16,
}

impl Ports {
    /// Ports that were free a moment ago: bound to port 0, read back, released.
    fn pick() -> Result<Ports> {
        // Hold all three at once so the same port is never handed out twice.
        let listeners = (0..3)
            .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
            .collect::<std::io::Result<Vec<_>>>()
            .context("bind probe ports")?;
        let port = |i: usize| -> Result<u16> { Ok(listeners[i].local_addr()?.port()) };
        let ports = Ports {
            client: port(0)?,
            peer: port(1)?,
            admin: port(2)?,
        };
        drop(listeners);
        Ok(ports)
    }
}

/// A running server with its own temporary data dir; killed (SIGKILL) when dropped.
///
/// When dropped during a panic, the tail of the server's log (stdout and stderr) is printed so
/// that a failing test explains itself in CI output.
pub struct Server {
    target: Target,
    ports: Ports,
    dir: TempDir,
    /// Baton's CA and certificates (`None` for ZooKeeper).
    pki: Option<Pki>,
    child: Option<Child>,
    log_dumped: bool,
    /// The four-letter words allowed (`--four-letter-words`; ZooKeeper's
    /// `4lw.commands.whitelist`); `None`: Baton's default, and every word on ZooKeeper.
    four_letter_words: Option<String>,
}

impl Server {
    /// Starts `target` on free loopback ports and waits until it serves clients.
    pub async fn start(target: Target) -> Result<Server> {
        Server::start_with_words(target, None, None).await
    }

    /// As `start`, with the first attempt on client port `client` whatever holds it: the
    /// harness's own test (`tests/harness_ports.rs`) makes with it the race `Ports::pick`
    /// cannot rule out, another process binding a picked port before our server does.
    pub async fn start_on_client_port(target: Target, client: u16) -> Result<Server> {
        Server::start_with_words(target, None, Some(client)).await
    }

    /// As `start`, answering only the four-letter words `words` (comma-separated, `*` for all):
    /// Baton's `--four-letter-words`, ZooKeeper's `4lw.commands.whitelist`.
    pub async fn start_allowing(target: Target, words: &str) -> Result<Server> {
        Server::start_with_words(target, Some(words.to_owned()), None).await
    }

    async fn start_with_words(
        target: Target,
        four_letter_words: Option<String>,
        first_client_port: Option<u16>,
    ) -> Result<Server> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("baton-tests-{target}-"))
            .tempdir()
            .context("create a temp dir for the server")?;
        let pki = match target {
            Target::Baton => Some(Pki::new("baton-tests", &[1])?),
            Target::ZooKeeper => None,
        };
        let mut ports = Ports::pick()?;
        if let Some(client) = first_client_port {
            ports.client = client;
        }
        let mut server = Server {
            target,
            ports,
            dir,
            pki,
            child: None,
            log_dumped: false,
            four_letter_words,
        };
        let mut attempt = 1;
        loop {
            match server.spawn_and_wait().await {
                Ok(()) => return Ok(server),
                Err(StartError::ExitedEarly(_)) if attempt < START_ATTEMPTS => {
                    // Start over from nothing; the log keeps every attempt.
                    attempt += 1;
                    server.ports = Ports::pick()?;
                    match std::fs::remove_dir_all(server.data_dir()) {
                        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                            return Err(err).context("clear the data dir of a failed start");
                        }
                        _ => {}
                    }
                }
                Err(StartError::ExitedEarly(err) | StartError::Failed(err)) => return Err(err),
            }
        }
    }

    /// The implementation this server runs.
    pub fn target(&self) -> Target {
        self.target
    }

    /// Address of the ZooKeeper client port.
    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.ports.client))
    }

    /// `host:port` connect string for ZooKeeper clients.
    pub fn connect_string(&self) -> String {
        self.client_addr().to_string()
    }

    /// Address of Baton's admin HTTP API; `None` for ZooKeeper (its admin server is disabled).
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        match self.target {
            Target::Baton => Some(SocketAddr::from((Ipv4Addr::LOCALHOST, self.ports.admin))),
            Target::ZooKeeper => None,
        }
    }

    /// Baton's CA and certificates (`None` for ZooKeeper).
    pub fn pki(&self) -> Option<&Pki> {
        self.pki.as_ref()
    }

    /// `GET path` on Baton's admin API with the admin certificate: status and body.
    pub async fn admin_get(&self, path: &str) -> Result<(u16, String)> {
        let (Some(admin), Some(pki)) = (self.admin_addr(), &self.pki) else {
            bail!("{} has no admin API", self.target);
        };
        let answer = pki
            .admin_client(wire::IO_DEADLINE)?
            .request(&admin.to_string(), http::Method::GET, path, None)
            .await?;
        Ok((
            answer.status.as_u16(),
            String::from_utf8_lossy(&answer.body).into_owned(),
        ))
    }

    /// Directory holding the server's durable state; it survives `kill9` and `restart`.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Kills the process with SIGKILL (no chance to flush anything) and reaps it.
    pub fn kill9(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().context("SIGKILL the server")?;
            child.wait().context("reap the server")?;
        }
        Ok(())
    }

    /// Kills the process if it runs, then starts it again on the same data dir and ports.
    pub async fn restart(&mut self) -> Result<()> {
        self.kill9()?;
        let mut attempt = 1;
        loop {
            match self.spawn_and_wait().await {
                Ok(()) => return Ok(()),
                // The old process's ports can stay busy for a moment after it died.
                Err(StartError::ExitedEarly(_)) if attempt < RESTART_ATTEMPTS => {
                    attempt += 1;
                    tokio::time::sleep(RESTART_BACKOFF).await;
                }
                Err(StartError::ExitedEarly(err) | StartError::Failed(err)) => return Err(err),
            }
        }
    }

    /// Whether the process is still running (it has not crashed).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The last `lines` lines of the server's combined stdout and stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read(self.log_path()).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Prints the log tail to stderr (the test harness shows it for failed tests), once.
    pub fn dump_log(&mut self) {
        if std::mem::replace(&mut self.log_dumped, true) {
            return;
        }
        eprintln!(
            "----- last {LOG_TAIL_LINES} log lines of {} (client port {}) -----\n{}\n----- end of log -----",
            self.target,
            self.ports.client,
            self.log_tail(LOG_TAIL_LINES)
        );
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    async fn spawn_and_wait(&mut self) -> Result<(), StartError> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .context("open the server log")
            .map_err(StartError::Failed)?;
        let mut command = self.command().map_err(StartError::Failed)?;
        command
            .stdin(Stdio::null())
            .stdout(
                log.try_clone()
                    .context("clone the log handle")
                    .map_err(StartError::Failed)?,
            )
            .stderr(log);
        let child = command
            .spawn()
            .with_context(|| format!("spawn {command:?}"))
            .map_err(StartError::Failed)?;
        self.child = Some(child);
        self.wait_ready().await
    }

    fn command(&self) -> Result<Command> {
        let data_dir = self.data_dir();
        match self.target {
            Target::Baton => {
                let mut command = Command::new(baton_binary()?);
                command
                    .arg("--id")
                    .arg("1")
                    .arg("--data-dir")
                    .arg(&data_dir)
                    .arg("--client-addr")
                    .arg(format!("127.0.0.1:{}", self.ports.client))
                    .arg("--peer-addr")
                    .arg(format!("127.0.0.1:{}", self.ports.peer))
                    .arg("--admin-addr")
                    .arg(format!("127.0.0.1:{}", self.ports.admin));
                if let Some(pki) = &self.pki {
                    command.args(pki.member_args(1));
                }
                if let Some(words) = &self.four_letter_words {
                    command.arg("--four-letter-words").arg(words);
                }
                Ok(command)
            }
            Target::ZooKeeper => {
                let mut command = Command::new(reference_script());
                command.arg(self.ports.client.to_string()).arg(&data_dir);
                if let Some(words) = &self.four_letter_words {
                    command.env("ZK_4LW_WHITELIST", words);
                }
                Ok(command)
            }
        }
    }

    /// Polls the server's readiness probe with a short backoff until it answers or dies.
    async fn wait_ready(&mut self) -> Result<(), StartError> {
        let deadline = Instant::now() + READY_DEADLINE;
        let mut backoff = Duration::from_millis(20);
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(StartError::ExitedEarly(anyhow!(
                    "{} exited during start-up with {status}; log:\n{}",
                    self.target,
                    self.log_tail(LOG_TAIL_LINES)
                )));
            }
            if self.probe_ready().await {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StartError::Failed(anyhow!(
                    "{} not ready after {READY_DEADLINE:?}; log:\n{}",
                    self.target,
                    self.log_tail(LOG_TAIL_LINES)
                )));
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(250));
        }
    }

    async fn probe_ready(&self) -> bool {
        match self.target {
            // The open probe route, over TLS without a client certificate, as kubelet calls it.
            Target::Baton => match (self.admin_addr(), &self.pki) {
                (Some(admin), Some(pki)) => match pki.anonymous_client(PROBE_DEADLINE) {
                    Ok(probe) => probe
                        .request(&admin.to_string(), http::Method::GET, "/readyz", None)
                        .await
                        .is_ok_and(|r| r.status == 200),
                    Err(_) => false,
                },
                _ => false,
            },
            // `srvr` says "not currently serving requests" until the server is up; and the
            // port must be our JVM's. Ports are picked free but released before the JVM binds
            // them, a second or more later: a server started meanwhile by a parallel test can
            // take one, our JVM then fails to bind and exits, but before it does, `srvr` is
            // answered by the other server and the case ran against it. That is how
            // `bad_input`'s opcode case once got `node already exists` on a fresh Baton: its
            // ZooKeeper twin, whose JVM had lost its port to that Baton, had created the same
            // `/survived-opcode` there first. (Baton's probe cannot be fooled: it asks the admin
            // port over TLS with this server's own CA, and Baton binds its client port first.)
            Target::ZooKeeper => {
                let serving =
                    wire::four_letter_word_within(self.client_addr(), "srvr", PROBE_DEADLINE)
                        .await
                        .is_ok_and(|answer| answer.contains("Mode:"));
                serving
                    && self.child.as_ref().is_some_and(|child| {
                        crate::listener::is_listening_on(child.id(), self.ports.client)
                    })
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dump_log();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

enum StartError {
    /// The process died before it was ready: possibly a port race, worth a retry.
    ExitedEarly(anyhow::Error),
    /// Anything else: retrying will not help.
    Failed(anyhow::Error),
}

/// `baton-ensemble` next to the test executable (`target/<profile>/deps/<test>-<hash>` →
/// `target/<profile>/baton-ensemble`), or `$BATON_ENSEMBLE_BIN`.
/// The `baton-ensemble` binary: `$BATON_ENSEMBLE_BIN`, or the one beside this test executable.
pub fn baton_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("BATON_ENSEMBLE_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().context("locate the test executable")?;
    let profile_dir = exe.parent().and_then(Path::parent).ok_or_else(|| {
        anyhow!(
            "test executable {} has no target/<profile> dir",
            exe.display()
        )
    })?;
    let binary = profile_dir.join("baton-ensemble");
    if !binary.is_file() {
        bail!(
            "{} is missing: run `cargo build --workspace --bins` first (or set BATON_ENSEMBLE_BIN); \
             to run only the ZooKeeper half of the suite: `cargo test -p baton-tests -- zookeeper`",
            binary.display()
        );
    }
    Ok(binary)
}

/// `tests/scripts/reference-zookeeper.sh` of this repository.
fn reference_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/reference-zookeeper.sh")
}
