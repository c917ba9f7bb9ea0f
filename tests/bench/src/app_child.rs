//! The simulated application of the app-crash workloads: a child process (this executable run
//! again as `baton-bench __app-child MODE ...`) that the bench kills with SIGKILL.
//!
//! It has to be a process of its own: what frees a stream hold is the kernel closing the dead
//! app's socket, and what frees a plain ZooKeeper client's lock is its session expiring once its
//! process stops pinging, neither of which a task inside the bench could show. Each mode prints
//! one line to stdout once it holds (`granted`, or `listening ADDR`), which the parent waits
//! for, then holds until it is killed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use hyper::Method;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::timeout;

use crate::error::BenchError;
use crate::fair_lock::FairLock;
use crate::http_client::HttpClient;
use crate::process::{Signal, send_signal};

/// The first argument that turns `baton-bench` into an app child.
pub const APP_CHILD_ARG: &str = "__app-child";
/// What a child prints once it holds.
const GRANTED_LINE: &str = "granted";
const LISTENING_PREFIX: &str = "listening ";
/// The grant line of a `text/event-stream` hold.
const GRANTED_EVENT: &[u8] = b"event: granted";
/// How long a child may take to hold before the round is declared stuck.
const CHILD_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// What the child does.
#[derive(Clone, Debug)]
pub enum AppMode {
    /// `POST PATH` (a `hold=stream` acquisition) on the sidecar at ADDR, holding the stream open.
    Stream { sidecar: SocketAddr, path: String },
    /// `POST /lock/NAME?wait=30s&ttl=TTL` on the sidecar at ADDR, renewed every third of the
    /// lease as a careful app would.
    Ttl {
        sidecar: SocketAddr,
        name: String,
        ttl: Duration,
    },
    /// A plain ZooKeeper client: a session on SERVER with this timeout, holding the fair lock
    /// whose contenders queue under DIR.
    ZkSession {
        server: String,
        dir: String,
        session_timeout: Duration,
        /// Over TLS, trusting this CA (PEM), as the bench's own sessions do with --tls-ca.
        tls_ca: Option<PathBuf>,
    },
    /// An app's health endpoint: answers 200 to every request on a loopback port (0: any free
    /// one), so a sidecar's `--app-health` sees it healthy until it is killed.
    Health { port: u16 },
}

impl AppMode {
    fn args(&self) -> Vec<String> {
        match self {
            AppMode::Stream { sidecar, path } => {
                vec!["stream".into(), sidecar.to_string(), path.clone()]
            }
            AppMode::Ttl { sidecar, name, ttl } => vec![
                "ttl".into(),
                sidecar.to_string(),
                name.clone(),
                ttl.as_millis().to_string(),
            ],
            AppMode::ZkSession {
                server,
                dir,
                session_timeout,
                tls_ca,
            } => {
                let mut args = vec![
                    "zk".into(),
                    server.clone(),
                    dir.clone(),
                    session_timeout.as_millis().to_string(),
                ];
                args.extend(tls_ca.iter().map(|ca| ca.display().to_string()));
                args
            }
            AppMode::Health { port } => vec!["health".into(), port.to_string()],
        }
    }

    fn parse(args: &[String]) -> Result<Self, BenchError> {
        let bad = || BenchError::InvalidOption(format!("{APP_CHILD_ARG}: bad arguments {args:?}"));
        let addr = |s: &String| s.parse::<SocketAddr>().map_err(|_| bad());
        let millis = |s: &String| {
            s.parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| bad())
        };
        match args {
            [mode, sidecar, path] if mode == "stream" => Ok(AppMode::Stream {
                sidecar: addr(sidecar)?,
                path: path.clone(),
            }),
            [mode, sidecar, name, ttl] if mode == "ttl" => Ok(AppMode::Ttl {
                sidecar: addr(sidecar)?,
                name: name.clone(),
                ttl: millis(ttl)?,
            }),
            [mode, server, dir, timeout, ca @ ..] if mode == "zk" && ca.len() <= 1 => {
                Ok(AppMode::ZkSession {
                    server: server.clone(),
                    dir: dir.clone(),
                    session_timeout: millis(timeout)?,
                    tls_ca: ca.first().map(PathBuf::from),
                })
            }
            [mode, port] if mode == "health" => Ok(AppMode::Health {
                port: port.parse().map_err(|_| bad())?,
            }),
            _ => Err(bad()),
        }
    }
}

/// A running app child; killed if dropped.
pub struct AppChild {
    child: Child,
    /// What it printed once it held (`listening ADDR` gives the address).
    pub ready_line: String,
    _stdout: Lines<BufReader<ChildStdout>>,
}

impl AppChild {
    /// Starts `mode` and returns once the child says it holds.
    pub async fn start(mode: &AppMode) -> Result<Self, BenchError> {
        let exe = std::env::current_exe().map_err(|source| BenchError::Io {
            context: "finding this executable to run the app child".into(),
            source,
        })?;
        let mut child = Command::new(exe)
            .arg(APP_CHILD_ARG)
            .args(mode.args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| BenchError::Io {
                context: format!("starting the app child {mode:?}"),
                source,
            })?;
        let stdout = child.stdout.take().ok_or_else(|| BenchError::Sidecar {
            identity: "app child".into(),
            detail: "no stdout pipe".into(),
        })?;
        let mut lines = BufReader::new(stdout).lines();
        let line = timeout(CHILD_READY_TIMEOUT, lines.next_line())
            .await
            .map_err(|_| BenchError::Timeout {
                what: format!("the app child {mode:?} holding"),
                timeout: CHILD_READY_TIMEOUT,
            })?
            .map_err(|source| BenchError::Io {
                context: "reading the app child's output".into(),
                source,
            })?
            .ok_or_else(|| BenchError::Sidecar {
                identity: "app child".into(),
                detail: format!("{mode:?} exited before holding (see its errors above)"),
            })?;
        Ok(AppChild {
            child,
            ready_line: line,
            _stdout: lines,
        })
    }

    /// The address a `health` child listens on.
    pub fn listening(&self) -> Option<SocketAddr> {
        self.ready_line.strip_prefix(LISTENING_PREFIX)?.parse().ok()
    }

    /// SIGKILL: the crash being measured. The clock should start just before this call.
    pub fn kill(&self) -> Result<(), BenchError> {
        let pid = self.child.id().ok_or_else(|| BenchError::Sidecar {
            identity: "app child".into(),
            detail: "already exited".into(),
        })?;
        send_signal(pid, Signal::Kill)
    }

    /// Reaps the killed child.
    pub async fn reap(mut self) {
        let _ = self.child.wait().await;
    }
}

/// Runs the child side: never returns while it holds (the parent kills it).
pub async fn run_child(args: &[String]) -> Result<(), BenchError> {
    let mode = AppMode::parse(args)?;
    match mode {
        AppMode::Stream { sidecar, path } => hold_stream(sidecar, &path).await,
        AppMode::Ttl { sidecar, name, ttl } => hold_lease(sidecar, &name, ttl).await,
        AppMode::ZkSession {
            server,
            dir,
            session_timeout,
            tls_ca,
        } => hold_session(&server, &dir, session_timeout, tls_ca.as_deref()).await,
        AppMode::Health { port } => serve_health(port).await,
    }
}

fn say(line: &str) -> Result<(), BenchError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|source| BenchError::Io {
            context: "telling the parent".into(),
            source,
        })
}

/// Plain HTTP/1.1 over a socket of our own: the stream is held by keeping this socket open, so
/// nothing else (a client library's pool) may own it.
async fn hold_stream(sidecar: SocketAddr, path: &str) -> Result<(), BenchError> {
    let io = |context: &str| {
        let context = format!("{context} (stream hold at {sidecar})");
        move |source| BenchError::Io { context, source }
    };
    let mut socket = TcpStream::connect(sidecar)
        .await
        .map_err(io("connecting"))?;
    let request = format!("POST {path} HTTP/1.1\r\nHost: {sidecar}\r\nContent-Length: 0\r\n\r\n");
    socket
        .write_all(request.as_bytes())
        .await
        .map_err(io("sending"))?;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = socket.read(&mut buf).await.map_err(io("reading"))?;
        if n == 0 {
            return Err(BenchError::BadReply {
                addr: sidecar.to_string(),
                request: format!("POST {path}"),
                detail: "closed before a granted event".into(),
                body: String::from_utf8_lossy(&seen).into_owned(),
            });
        }
        seen.extend_from_slice(&buf[..n]);
        if seen
            .windows(GRANTED_EVENT.len())
            .any(|w| w == GRANTED_EVENT)
        {
            break;
        }
    }
    say(GRANTED_LINE)?;
    // Keep reading (keep-alive comments) until killed; an end means the hold ended.
    while socket.read(&mut buf).await.map_err(io("reading"))? > 0 {}
    Err(BenchError::Sidecar {
        identity: sidecar.to_string(),
        detail: "the stream hold ended before the app was killed".into(),
    })
}

async fn hold_lease(sidecar: SocketAddr, name: &str, ttl: Duration) -> Result<(), BenchError> {
    let mut http = HttpClient::connect(sidecar).await?;
    let ttl_ms = ttl.as_millis();
    let grant = http
        .call_ok(
            Method::POST,
            &format!("/lock/{name}?wait=30s&ttl={ttl_ms}ms"),
        )
        .await?;
    let token = grant["token"].as_i64().unwrap_or_default();
    say(GRANTED_LINE)?;
    loop {
        tokio::time::sleep(ttl / 3).await;
        http.call_ok(
            Method::POST,
            &format!("/lock/{name}/renew?token={token}&ttl={ttl_ms}ms"),
        )
        .await?;
    }
}

async fn hold_session(
    server: &str,
    dir: &str,
    session_timeout: Duration,
    tls_ca: Option<&Path>,
) -> Result<(), BenchError> {
    let connector = zookeeper_client::Client::connector().with_session_timeout(session_timeout);
    let connected = match tls_ca {
        Some(ca) => {
            let pem = std::fs::read_to_string(ca).map_err(|source| BenchError::Io {
                context: format!("reading {}", ca.display()),
                source,
            })?;
            let tls = zookeeper_client::TlsOptions::new()
                .with_pem_ca(&pem)
                .map_err(|e| BenchError::InvalidOption(format!("{}: {e}", ca.display())))?;
            connector.with_tls(tls).secure_connect(server).await
        }
        None => connector.connect(server).await,
    };
    let client = connected.map_err(|source| BenchError::Connect {
        worker: 0,
        server: server.to_owned(),
        source,
    })?;
    let _node = FairLock::new(dir)
        .acquire(&client, CHILD_READY_TIMEOUT)
        .await?;
    say(GRANTED_LINE)?;
    std::future::pending::<()>().await;
    Ok(())
}

async fn serve_health(port: u16) -> Result<(), BenchError> {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|source| BenchError::Io {
            context: format!("binding the app's health port 127.0.0.1:{port}"),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| BenchError::Io {
        context: "reading the health port".into(),
        source,
    })?;
    say(&format!("{LISTENING_PREFIX}{addr}"))?;
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            // One request per connection: the sidecar's checks are tiny GETs.
            if matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {
                let _ = socket
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_round_trips_through_its_arguments() {
        let modes = [
            AppMode::Stream {
                sidecar: "127.0.0.1:4040".parse().expect("addr"),
                path: "/lock/a?hold=stream".into(),
            },
            AppMode::Ttl {
                sidecar: "127.0.0.1:4040".parse().expect("addr"),
                name: "a".into(),
                ttl: Duration::from_secs(2),
            },
            AppMode::ZkSession {
                server: "127.0.0.1:2181".into(),
                dir: "/d".into(),
                session_timeout: Duration::from_secs(4),
                tls_ca: None,
            },
            AppMode::ZkSession {
                server: "127.0.0.1:2281".into(),
                dir: "/d".into(),
                session_timeout: Duration::from_secs(4),
                tls_ca: Some("/certs/ca.crt".into()),
            },
            AppMode::Health { port: 0 },
        ];
        for mode in modes {
            let parsed = AppMode::parse(&mode.args()).expect("parses");
            assert_eq!(format!("{parsed:?}"), format!("{mode:?}"));
        }
        assert!(AppMode::parse(&["stream".into()]).is_err());
    }
}
