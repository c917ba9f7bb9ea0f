//! One `baton-ensemble` process of a multi-member cluster: its ports, data dir, flags and log.

use std::fs::OpenOptions;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use tempfile::TempDir;

use super::admin::{self, Method, Reply, Status};

/// How long one admin probe may take before it counts as "no answer".
pub(super) const PROBE_DEADLINE: Duration = Duration::from_secs(2);
/// Lines of each member's log printed when a test fails.
pub(super) const LOG_TAIL_LINES: usize = 60;

/// Ports of one member (on loopback, or on its own address in a test network).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ports {
    pub client: u16,
    pub peer: u16,
    pub admin: u16,
}

/// A member process with its own temporary data dir; killed (SIGKILL) when dropped.
pub struct Member {
    id: u64,
    ports: Ports,
    dir: TempDir,
    /// `--members` as given at first start; `restart` reuses it unchanged.
    members_flag: String,
    /// Only for members added at run time: the ensemble's cluster id. Such a member starts
    /// with `--join` (no configuration of its own; the leader's membership change adds it).
    cluster_id: Option<String>,
    /// `--tls-*` flags (its certificate from the cluster's CA) and any a test added.
    tls_args: Vec<std::ffi::OsString>,
    /// Calls its admin API with the admin certificate.
    admin_client: baton_tls::HttpClient,
    child: Option<Child>,
    log_dumped: bool,
    /// The address its ports listen on: loopback, or its own on a test network.
    host: Ipv4Addr,
    /// The network namespace it runs in (`netns::Network`), if any.
    netns: Option<String>,
}

impl Member {
    pub(super) fn new(
        id: u64,
        ports: Ports,
        members_flag: String,
        cluster_id: Option<String>,
        pki: &crate::pki::Pki,
    ) -> Result<Member> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("baton-tests-member-{id}-"))
            .tempdir()
            .with_context(|| format!("create a temp dir for member {id}"))?;
        Ok(Member {
            id,
            ports,
            dir,
            members_flag,
            cluster_id,
            tls_args: pki.member_args(id),
            admin_client: pki.admin_client(PROBE_DEADLINE)?,
            child: None,
            log_dumped: false,
            host: Ipv4Addr::LOCALHOST,
            netns: None,
        })
    }

    /// Runs it (from its next start on) in network namespace `netns`, listening on `host`.
    pub(super) fn place(&mut self, netns: String, host: Ipv4Addr) {
        self.netns = Some(netns);
        self.host = host;
    }

    /// Adds flags to its command line (from its next start on).
    pub(super) fn add_flags(&mut self, flags: &[&str]) {
        self.tls_args.extend(flags.iter().map(Into::into));
    }

    /// Removes `flag` and the value that follows it from its command line (from its next
    /// start on): an upgrade test restarts a member without `--max-feature-level`.
    pub(super) fn remove_flag_with_value(&mut self, flag: &str) {
        let mut args = std::mem::take(&mut self.tls_args).into_iter();
        while let Some(arg) = args.next() {
            if arg == flag {
                args.next();
            } else {
                self.tls_args.push(arg);
            }
        }
    }

    /// This member's Raft id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Address of its ZooKeeper client port.
    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::from((self.host, self.ports.client))
    }

    /// Address of its admin HTTP API.
    pub fn admin_addr(&self) -> SocketAddr {
        SocketAddr::from((self.host, self.ports.admin))
    }

    /// Address other members reach it on (its `--peer-addr`).
    pub fn peer_addr(&self) -> SocketAddr {
        SocketAddr::from((self.host, self.ports.peer))
    }

    /// `--members` as it is started with: `ID=127.0.0.1:PEER_PORT,...`.
    pub fn members_flag(&self) -> &str {
        &self.members_flag
    }

    /// Directory holding its durable state; it survives `kill9` and restarts.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("member.log")
    }

    /// Starts the process (it must not be running); returns without waiting for readiness.
    pub(super) fn spawn(&mut self, binary: &std::path::Path) -> Result<()> {
        if self.child.is_some() {
            return Err(anyhow!("member {} is already running", self.id));
        }
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .with_context(|| format!("open the log of member {}", self.id))?;
        // Marks each start, so a log tail shows which incarnation said what.
        writeln!(log, "===== baton-tests: starting member {} =====", self.id)
            .context("write the start marker")?;
        // `ip netns exec` enters the namespace and execs the binary: the same process id.
        let mut command = match &self.netns {
            Some(netns) => {
                let mut command = Command::new("ip");
                command.arg("netns").arg("exec").arg(netns).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        command
            .arg("--id")
            .arg(self.id.to_string())
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--client-addr")
            .arg(self.client_addr().to_string())
            .arg("--peer-addr")
            .arg(self.peer_addr().to_string())
            .arg("--admin-addr")
            .arg(self.admin_addr().to_string())
            .arg("--members")
            .arg(&self.members_flag)
            .args(&self.tls_args);
        if let Some(cluster_id) = &self.cluster_id {
            command.arg("--join").arg("--cluster-id").arg(cluster_id);
        }
        command
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("clone the log handle")?)
            .stderr(log);
        let child = command
            .spawn()
            .with_context(|| format!("spawn {command:?}"))?;
        self.child = Some(child);
        Ok(())
    }

    /// Kills the process with SIGKILL (nothing flushed, nothing said to peers) and reaps it.
    pub(super) fn kill9(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child
                .kill()
                .with_context(|| format!("SIGKILL member {}", self.id))?;
            child
                .wait()
                .with_context(|| format!("reap member {}", self.id))?;
        }
        Ok(())
    }

    /// Its process id while the harness runs it (for tests that read `/proc`).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`) to the process, if it runs.
    pub(super) fn signal(&self, signal: &str) -> Result<()> {
        let pid = self
            .pid()
            .with_context(|| format!("member {} is not running", self.id))?;
        crate::netns::run("kill", &[&format!("-{signal}"), &pid.to_string()])
            .with_context(|| format!("SIG{signal} member {}", self.id))
    }

    /// Whether the harness started it and has not stopped it (it may have crashed since).
    pub fn is_started(&self) -> bool {
        self.child.is_some()
    }

    /// `Err` with the exit status and log tail if the process died without the harness
    /// killing it: a crash is always a finding, never something to wait out.
    pub(super) fn check_alive(&mut self) -> Result<()> {
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        match child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                self.child = None;
                Err(anyhow!(
                    "member {} exited by itself with {status}; log:\n{}",
                    self.id,
                    self.log_tail(LOG_TAIL_LINES)
                ))
            }
            Err(err) => Err(err).with_context(|| format!("poll member {}", self.id)),
        }
    }

    /// One admin API request to this member.
    pub async fn admin(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Reply> {
        admin::request(&self.admin_client, self.admin_addr(), method, path, body)
            .await
            .with_context(|| format!("admin API of member {}", self.id))
    }

    /// Its `/v1/status`.
    pub async fn status(&self) -> Result<Status> {
        let reply = self.admin(Method::Get, "/v1/status", None).await?;
        if reply.status != 200 {
            return Err(anyhow!(
                "member {} answered /v1/status with {reply}",
                self.id
            ));
        }
        Status::from_json(&reply.body)
    }

    /// The last `lines` lines of its combined stdout and stderr, across restarts.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read(self.log_path()).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Lines of its whole log that contain `needle` (for tests that look for a specific event).
    pub fn log_lines_containing(&self, needle: &str) -> Vec<String> {
        let text = std::fs::read(self.log_path()).unwrap_or_default();
        String::from_utf8_lossy(&text)
            .lines()
            .filter(|line| line.contains(needle))
            .map(str::to_owned)
            .collect()
    }

    /// Prints the log tail to stderr, once.
    pub fn dump_log(&mut self) {
        if std::mem::replace(&mut self.log_dumped, true) {
            return;
        }
        eprintln!(
            "----- last {LOG_TAIL_LINES} log lines of member {} (client {}, admin {}) -----\n{}\n\
             ----- end of member {} log -----",
            self.id,
            self.ports.client,
            self.ports.admin,
            self.log_tail(LOG_TAIL_LINES),
            self.id
        );
    }
}

impl Drop for Member {
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
