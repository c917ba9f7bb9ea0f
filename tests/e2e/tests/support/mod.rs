//! One `baton-ensemble` process started with exactly the flags a client-port test needs
//! (TLS listener, limits), with certificates from `baton_tls::local`; killed when dropped.
//! The shared `Server` harness starts members with fixed flags; these tests play with the
//! client port's own.

#![allow(dead_code)] // Each test file uses a different part.

use std::fs::OpenOptions;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// How long a member may take to become ready on a loaded machine.
const READY_DEADLINE: Duration = Duration::from_secs(60);
/// Start-up attempts when a member loses one of its ports to another process.
const START_ATTEMPTS: u32 = 3;
/// Deadline for one exchange (an answer that never comes fails the test, never hangs it).
pub const IO_DEADLINE: Duration = Duration::from_secs(10);

/// Which client listeners to open.
#[derive(Debug, Clone, Copy)]
pub struct Listeners {
    pub plain: bool,
    pub secure: bool,
}

/// A running member.
pub struct Member {
    child: Option<Child>,
    dir: TempDir,
    pub client: Option<SocketAddr>,
    pub secure: Option<SocketAddr>,
    pub admin: SocketAddr,
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

impl Member {
    /// Starts a one-member ensemble with TLS material, the listeners asked for, and `extra`
    /// flags; waits until it serves.
    pub async fn start(listeners: Listeners, extra: &[&str]) -> Result<Member> {
        Member::start_with_env(listeners, extra, &[]).await
    }

    /// As `start`, with environment variables for the member (KUBECONFIG for `--k8s-auth`).
    /// A member that could not bind one of its ports starts again on fresh ones: a port picked
    /// free can be taken before the member binds it (the picks come from the ephemeral range,
    /// which every process's outgoing connections draw from too).
    pub async fn start_with_env(
        listeners: Listeners,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Member> {
        Member::start_listening_on(listeners, extra, env, None).await
    }

    /// As `start_with_env`, the member's client and peer listeners told `host` (e.g. `[::]`)
    /// rather than 127.0.0.1, on the same ports; the admin port (readiness) stays on 127.0.0.1,
    /// and so do the addresses kept here.
    pub async fn start_listening_on(
        listeners: Listeners,
        extra: &[&str],
        env: &[(&str, &str)],
        host: Option<&str>,
    ) -> Result<Member> {
        let mut attempt = 1;
        loop {
            match Member::start_once(listeners, extra, env, host).await {
                Err(e)
                    if attempt < START_ATTEMPTS && format!("{e:#}").contains("cannot listen") =>
                {
                    eprintln!("start attempt {attempt} lost a port; new ports: {e:#}");
                    attempt += 1;
                }
                started => return started,
            }
        }
    }

    async fn start_once(
        listeners: Listeners,
        extra: &[&str],
        env: &[(&str, &str)],
        host: Option<&str>,
    ) -> Result<Member> {
        // rustls needs one process-wide provider once aws-lc sits beside ring (see Cargo.toml).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::Builder::new()
            .prefix("baton-client-port-")
            .tempdir()?;
        let certs = dir.path().join("certs");
        baton_tls::local::write_dir(
            &certs,
            "client-port-tests",
            &[1],
            &baton_tls::HostNames::loopback(),
        )
        .context("write certificates")?;
        // Held together so no two are the same; released just before the member binds them.
        let ports: Vec<TcpListener> = (0..4)
            .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
            .collect::<std::io::Result<_>>()?;
        let port = |i: usize| -> Result<SocketAddr> { Ok(ports[i].local_addr()?) };
        let (client, peer, admin, secure) = (port(0)?, port(1)?, port(2)?, port(3)?);
        drop(ports);
        let client = listeners.plain.then_some(client);
        let secure = listeners.secure.then_some(secure);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("member.log"))?;
        let on = |a: SocketAddr| match host {
            Some(host) => format!("{host}:{}", a.port()),
            None => a.to_string(),
        };
        let mut command = Command::new(baton_tests::baton_binary()?);
        command
            .args(["--id", "1", "--data-dir"])
            .arg(dir.path().join("data"))
            .arg("--client-addr")
            .arg(client.map_or("off".to_string(), on))
            .arg("--peer-addr")
            .arg(on(peer))
            .arg("--admin-addr")
            .arg(admin.to_string())
            .arg("--tls-ca")
            .arg(certs.join("ca.crt"))
            .arg("--tls-cert")
            .arg(certs.join("member-1.crt"))
            .arg("--tls-key")
            .arg(certs.join("member-1.key"))
            .args(extra)
            .envs(env.iter().copied())
            .env("BATON_LOG", "info,raft=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(secure) = secure {
            command.arg("--secure-client-addr").arg(on(secure));
        }
        let child = command
            .spawn()
            .with_context(|| format!("spawn {command:?}"))?;
        let mut member = Member {
            child: Some(child),
            dir,
            client,
            secure,
            admin,
        };
        member.wait_ready().await?;
        Ok(member)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + READY_DEADLINE;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!(
                    "member exited during start-up with {status}:\n{}",
                    self.log()
                );
            }
            if let Ok(r) = self.admin_get("/readyz").await
                && r.status == 200
            {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("member not ready after {READY_DEADLINE:?}:\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The ensemble CA's certificate file.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("certs/ca.crt")
    }

    /// The ensemble CA's certificate (PEM).
    pub fn ca_pem(&self) -> Result<String> {
        Ok(std::fs::read_to_string(self.ca())?)
    }

    /// A rustls client config trusting the ensemble CA.
    pub fn tls_client(&self) -> Result<Arc<rustls::ClientConfig>> {
        Ok(baton_tls::client_config(&self.ca(), None)?)
    }

    pub fn pid(&self) -> Result<u32> {
        Ok(self
            .child
            .as_ref()
            .ok_or_else(|| anyhow!("not running"))?
            .id())
    }

    /// A line of `/proc/PID/status` in bytes (`VmRSS`, `VmHWM`: kB in the file).
    pub fn proc_status_bytes(&self, field: &str) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?))?;
        let line = status
            .lines()
            .find(|l| l.starts_with(&format!("{field}:")))
            .ok_or_else(|| anyhow!("no {field} in /proc status"))?;
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .ok_or_else(|| anyhow!("bad line {line:?}"))?
            .parse()?;
        Ok(kib * 1024)
    }

    async fn admin_get(&self, path: &str) -> Result<baton_tls::Response> {
        let client = baton_tls::HttpClient::tls(self.tls_client()?, Duration::from_secs(2));
        Ok(client
            .request(&self.admin.to_string(), http::Method::GET, path, None)
            .await?)
    }

    /// The value of one metric line (`name` with its labels, as printed).
    pub async fn metric(&self, name: &str) -> Result<f64> {
        let text = self.admin_get("/metrics").await?.body;
        let text = String::from_utf8_lossy(&text);
        Ok(text
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0))
    }

    /// Waits until `cond` holds for metric `name` (the event these tests wait for: never a sleep
    /// standing in for one).
    pub async fn wait_metric(&self, name: &str, cond: impl Fn(f64) -> bool) -> Result<f64> {
        let deadline = tokio::time::Instant::now() + IO_DEADLINE * 3;
        loop {
            let v = self.metric(name).await?;
            if cond(v) {
                return Ok(v);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("metric {name} stayed at {v}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The member's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("member.log")).unwrap_or_default()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("--- member log (last lines) ---");
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A TCP connection to `to` from source address `from` (any of 127/8 is loopback).
pub async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    Ok(tokio::time::timeout(IO_DEADLINE, socket.connect(to))
        .await
        .map_err(|_| anyhow!("connect to {to} timed out"))??)
}

/// Waits until the server closes `stream` (EOF or reset), discarding what it sends.
pub async fn closed_by_server(stream: &mut TcpStream, within: Duration) -> Result<()> {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .map_err(|_| anyhow!("the server did not close the connection within {within:?}"))
}

/// A ConnectRequest frame for a new session (30 s timeout).
pub fn connect_request() -> Vec<u8> {
    frame(&baton_tests::raw::connect_request_body(
        0, &[0; 16], 0, 30_000,
    ))
}

/// `payload` with its length prefix.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

/// Opens a session on `stream` by hand; returns the session id.
pub async fn open_session(stream: &mut TcpStream) -> Result<i64> {
    stream.write_all(&connect_request()).await?;
    let payload = read_frame(stream).await?;
    if payload.len() < 16 {
        bail!("short ConnectResponse: {payload:02x?}");
    }
    Ok(i64::from_be_bytes(payload[8..16].try_into()?))
}

/// Reads one length-prefixed frame (the payload).
pub async fn read_frame(stream: &mut TcpStream) -> Result<Vec<u8>> {
    tokio::time::timeout(IO_DEADLINE, async {
        let len = stream.read_i32().await?;
        let len = usize::try_from(len).context("negative frame length")?;
        let mut payload = vec![0; len];
        stream.read_exact(&mut payload).await?;
        Ok(payload)
    })
    .await
    .map_err(|_| anyhow!("no frame within {IO_DEADLINE:?}"))?
}
