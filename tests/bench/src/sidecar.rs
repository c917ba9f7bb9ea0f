//! Real `baton-sidecar` processes for the sidecar workloads: started on a free loopback port,
//! stopped with SIGTERM as Kubernetes stops a pod.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use hyper::{Method, StatusCode};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, Command};
use tokio::time::{Instant, timeout_at};

use crate::error::BenchError;
use crate::http_client::HttpClient;
use crate::process::{Signal, send_signal};

/// How long a sidecar may take to listen and connect its session.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a sidecar may take to exit after SIGTERM (it resigns and releases first).
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// Pause between two `/readyz` probes while a sidecar connects its session: the API offers no
/// way to wait for that, and this only runs before the clock starts.
const READY_PROBE_PAUSE: Duration = Duration::from_millis(20);
/// The log line (and its field) that tells where the API listens (`--listen 127.0.0.1:0`).
const LISTENING_LINE: &str = "serving the HTTP API";
const ADDR_FIELD: &str = "addr=";
/// Only the sidecar's start-up line is needed; warnings and errors still reach our log.
const SIDECAR_LOG: &str = "warn,baton_sidecar::sidecar=info";

/// How to start the sidecars of one run.
#[derive(Clone, Debug)]
pub struct SidecarLauncher {
    pub binary: PathBuf,
    /// Requested session timeout (`--session-timeout`).
    pub session_timeout: Duration,
    /// The CA the sidecar trusts when it connects over TLS (`--ensemble-ca`); `None`: plain.
    pub ensemble_ca: Option<PathBuf>,
}

/// One running sidecar; killed if dropped while still running.
#[derive(Debug)]
pub struct Sidecar {
    pub identity: String,
    pub addr: SocketAddr,
    child: Child,
}

impl SidecarLauncher {
    /// The `baton-sidecar` next to this executable (`target/release/`), the usual layout.
    pub fn default_binary() -> PathBuf {
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|dir| dir.join("baton-sidecar")))
            .unwrap_or_else(|| PathBuf::from("baton-sidecar"))
    }

    /// Starts a sidecar on `ensemble` (HOST:PORT list) standing in `election`, if any, and
    /// returns once its API answers and its session is connected.
    pub async fn start(
        &self,
        ensemble: &str,
        identity: &str,
        election: Option<&str>,
    ) -> Result<Sidecar, BenchError> {
        self.start_with(ensemble, identity, election, &[]).await
    }

    /// [`SidecarLauncher::start`] with more flags (e.g. `--app-health URL`).
    pub async fn start_with(
        &self,
        ensemble: &str,
        identity: &str,
        election: Option<&str>,
        extra_args: &[String],
    ) -> Result<Sidecar, BenchError> {
        let fail = |detail: String| BenchError::Sidecar {
            identity: identity.to_owned(),
            detail,
        };
        let mut command = Command::new(&self.binary);
        command
            .arg("--ensemble")
            .arg(ensemble)
            .args(["--listen", "127.0.0.1:0", "--identity", identity])
            .arg("--session-timeout")
            .arg(format!("{}ms", self.session_timeout.as_millis()))
            .env("BATON_LOG", SIDECAR_LOG)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(election) = election {
            command.args(["--election", election]);
        }
        if let Some(ca) = &self.ensemble_ca {
            command.arg("--ensemble-ca").arg(ca);
        }
        command.args(extra_args);
        let mut child = command
            .spawn()
            .map_err(|e| fail(format!("cannot run {}: {e}", self.binary.display())))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| fail("no stderr pipe".into()))?;
        let deadline = Instant::now() + START_TIMEOUT;
        let mut lines = BufReader::new(stderr).lines();
        let addr = timeout_at(deadline, listening_addr(&mut lines))
            .await
            .map_err(|_| {
                fail(format!(
                    "no {LISTENING_LINE:?} line within {START_TIMEOUT:?}"
                ))
            })?
            .map_err(fail)?;
        forward_log(identity.to_owned(), lines);
        let sidecar = Sidecar {
            identity: identity.to_owned(),
            addr,
            child,
        };
        timeout_at(deadline, sidecar.connected())
            .await
            .map_err(|_| fail(format!("session not connected within {START_TIMEOUT:?}")))??;
        Ok(sidecar)
    }
}

/// Reads the sidecar's log until it says where it listens; the error says what it printed
/// instead (it exited, or logged in an unexpected form).
async fn listening_addr(lines: &mut Lines<BufReader<ChildStderr>>) -> Result<SocketAddr, String> {
    let mut seen = Vec::new();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => {
                if let Some(addr) = parse_listening_line(&line) {
                    return Ok(addr);
                }
                seen.push(line);
            }
            Ok(None) => {
                return Err(format!(
                    "exited before listening; its log:\n{}",
                    seen.join("\n")
                ));
            }
            Err(e) => return Err(format!("reading its log: {e}")),
        }
    }
}

/// The address in a `serving the HTTP API addr=IP:PORT ...` line.
fn parse_listening_line(line: &str) -> Option<SocketAddr> {
    if !line.contains(LISTENING_LINE) {
        return None;
    }
    let start = line.find(ADDR_FIELD)? + ADDR_FIELD.len();
    line[start..].split_whitespace().next()?.parse().ok()
}

/// Keeps reading the sidecar's log so a full pipe never blocks it, passing its warnings and
/// errors on to our log (its start and stop lines only at debug: one pair per restart).
fn forward_log(identity: String, mut lines: Lines<BufReader<ChildStderr>>) {
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if is_problem(&line) {
                tracing::warn!(sidecar = %identity, "{line}");
            } else {
                tracing::debug!(sidecar = %identity, "{line}");
            }
        }
    });
}

/// Whether a sidecar log line (`<time>  <LEVEL> <target>: ...`) is a warning or an error.
fn is_problem(line: &str) -> bool {
    matches!(line.split_whitespace().nth(1), Some("WARN" | "ERROR"))
}

impl Sidecar {
    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Returns once `/readyz` says the session is connected.
    async fn connected(&self) -> Result<(), BenchError> {
        let mut http = HttpClient::connect(self.addr).await?;
        loop {
            if http.call(Method::GET, "/readyz").await?.status == StatusCode::OK {
                return Ok(());
            }
            tokio::time::sleep(READY_PROBE_PAUSE).await;
        }
    }

    /// Sends SIGTERM: the sidecar resigns, releases its locks and exits.
    pub fn terminate(&self) -> Result<(), BenchError> {
        let pid = self.pid().ok_or_else(|| BenchError::Sidecar {
            identity: self.identity.clone(),
            detail: "already exited".into(),
        })?;
        send_signal(pid, Signal::Term)
    }

    /// Waits for the process to exit after [`Sidecar::terminate`]; a sidecar that does not
    /// exit cleanly in time is an error (and is killed when dropped).
    pub async fn wait_exit(&mut self) -> Result<ExitStatus, BenchError> {
        let identity = self.identity.clone();
        let fail = |detail: String| BenchError::Sidecar {
            identity: identity.clone(),
            detail,
        };
        let status = tokio::time::timeout(STOP_TIMEOUT, self.child.wait())
            .await
            .map_err(|_| fail(format!("still running {STOP_TIMEOUT:?} after SIGTERM")))?
            .map_err(|e| fail(format!("waiting for it to exit: {e}")))?;
        if !status.success() {
            return Err(fail(format!("exited with {status} after SIGTERM")));
        }
        Ok(status)
    }

    /// Stops it gracefully (so its session closes rather than expiring during the next run).
    pub async fn stop(mut self) -> Result<(), BenchError> {
        self.terminate()?;
        self.wait_exit().await.map(|_| ())
    }
}

/// Checks that `binary` exists before any server state is created.
pub fn check_binary(binary: &Path) -> Result<(), BenchError> {
    if binary.is_file() {
        return Ok(());
    }
    Err(BenchError::InvalidOption(format!(
        "no sidecar binary at {} (build it: cargo build --release -p baton-sidecar, or pass \
         --sidecar-bin)",
        binary.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_address_in_the_start_up_line() {
        let line = "2026-11-23T13:14:40.123456Z  INFO baton_sidecar::sidecar: serving the HTTP \
                    API addr=127.0.0.1:40123 identity=bench-0";
        assert_eq!(
            parse_listening_line(line),
            Some("127.0.0.1:40123".parse().expect("valid"))
        );
        assert_eq!(parse_listening_line("serving the HTTP API"), None);
        assert_eq!(parse_listening_line("other addr=127.0.0.1:1"), None);
        assert_eq!(parse_listening_line("serving the HTTP API addr=x"), None);
    }

    #[test]
    fn only_warnings_and_errors_are_problems() {
        assert!(is_problem(
            "2026-11-23T13:39:03Z  WARN baton_sidecar::recipe: lost"
        ));
        assert!(is_problem("2026-11-23T13:39:03Z ERROR baton_sidecar: bad"));
        assert!(!is_problem(
            "2026-11-23T13:39:03Z  INFO baton_sidecar::sidecar: stopped"
        ));
        assert!(!is_problem("WARN"));
    }
}
