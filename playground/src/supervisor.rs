//! Keeps one child process running: restarts it a few seconds after it dies (so the demo can
//! go on after the user kills it), and kills it on shutdown.
//!
//! No child may outlive the playground. Each child gets its own process group, so a Ctrl-C
//! in the terminal reaches only the playground, which then kills and reaps every child
//! itself ([`Fleet::stop`]); `kill_on_drop` covers the paths that never get that far
//! (an error, a panic unwinding through the runtime). Only a SIGKILL of the playground itself
//! leaves children behind, which nothing in-process can prevent.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::console::Console;

/// How to start one child.
#[derive(Debug, Clone)]
pub struct Spec {
    /// How the console names it: "member 1", "pod-a's sidecar".
    pub label: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Where its stdout and stderr go (appended across restarts).
    pub log: PathBuf,
}

/// Where a supervised child is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Running as this process id.
    Running(u32),
    /// Dead, and waiting to be restarted (or not restarted, with `--no-restart`).
    Down,
    /// Stopped for good: shut down, or it could not be started at all.
    Stopped,
}

/// A handle on one supervised child: its label and state.
#[derive(Debug, Clone)]
pub struct Supervisor {
    label: String,
    state: watch::Receiver<State>,
}

impl Supervisor {
    /// How the console names the child.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The child's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        match *self.state.borrow() {
            State::Running(pid) => Some(pid),
            State::Down | State::Stopped => None,
        }
    }
}

/// Every supervised child, and the switch that stops them all.
#[derive(Debug)]
pub struct Fleet {
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    restart_after: Option<Duration>,
    console: Console,
}

impl Fleet {
    /// An empty fleet; a child that dies is started again `restart_after` later, if given.
    pub fn new(restart_after: Option<Duration>, console: Console) -> Self {
        Self {
            shutdown: watch::channel(false).0,
            tasks: Vec::new(),
            restart_after,
            console,
        }
    }

    /// Starts `spec` now (an error if it cannot be started) and keeps it running.
    pub fn start(&mut self, spec: Spec) -> Result<Supervisor> {
        let child = spawn(&spec)?;
        let pid = child.id().unwrap_or_default();
        let (state_tx, state) = watch::channel(State::Running(pid));
        let supervisor = Supervisor {
            label: spec.label.clone(),
            state,
        };
        self.tasks.push(tokio::spawn(supervise(
            spec,
            child,
            self.restart_after,
            self.shutdown.subscribe(),
            state_tx,
            self.console,
        )));
        Ok(supervisor)
    }

    /// Kills every child and waits until each is reaped.
    pub async fn stop(self) {
        self.shutdown.send_replace(true);
        for task in self.tasks {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "a supervisor task failed");
            }
        }
    }
}

async fn supervise(
    spec: Spec,
    mut child: Child,
    restart_after: Option<Duration>,
    mut shutdown: watch::Receiver<bool>,
    state: watch::Sender<State>,
    console: Console,
) {
    loop {
        let pid = child.id().unwrap_or_default();
        let status = tokio::select! {
            status = child.wait() => status,
            _ = stopping(&mut shutdown) => {
                kill(&mut child, &spec.label).await;
                state.send_replace(State::Stopped);
                return;
            }
        };
        state.send_replace(State::Down);
        let how = match status {
            Ok(status) => describe(status),
            Err(e) => format!("could not be waited for ({e})"),
        };
        let Some(delay) = restart_after else {
            console.event(format!(
                "{} (pid {pid}) {how}; it stays down (--no-restart)",
                spec.label
            ));
            return;
        };
        console.event(format!(
            "{} (pid {pid}) {how}; restarting it in {}s",
            spec.label,
            delay.as_secs()
        ));
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stopping(&mut shutdown) => {
                state.send_replace(State::Stopped);
                return;
            }
        }
        child = match spawn(&spec) {
            Ok(child) => child,
            Err(e) => {
                console.event(format!("{} could not be restarted: {e:#}", spec.label));
                state.send_replace(State::Stopped);
                return;
            }
        };
        let pid = child.id().unwrap_or_default();
        state.send_replace(State::Running(pid));
        console.event(format!("{} restarted: pid {pid}", spec.label));
    }
}

/// Resolves once shutdown is asked for, or the fleet is gone without asking.
async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns must not live across an await.
    let _ = shutdown.wait_for(|stop| *stop).await.is_ok();
}

fn spawn(spec: &Spec) -> Result<Child> {
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log)
        .with_context(|| format!("open {}", spec.log.display()))?;
    // A marker between runs, so the log of a restarted child reads in order.
    let _ = writeln!(
        log,
        "--- baton-playground starts: {} {}",
        spec.program.display(),
        spec.args.join(" ")
    );
    let stderr = log
        .try_clone()
        .with_context(|| format!("reopen {}", spec.log.display()))?;
    Command::new(&spec.program)
        .args(&spec.args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(stderr)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("start {}", spec.program.display()))
}

/// SIGKILL and reap. Surviving a SIGKILL with every acknowledged write intact is the
/// ensemble's job, and the sidecars' sessions end with the ensemble, so a graceful stop would
/// save nothing and only slow Ctrl-C down.
async fn kill(child: &mut Child, label: &str) {
    if let Err(e) = child.start_kill() {
        tracing::warn!(%label, error = %e, "could not kill the child");
    }
    if let Err(e) = child.wait().await {
        tracing::warn!(%label, error = %e, "could not reap the child");
    }
}

/// "was killed by SIGTERM", "exited with status 1".
fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    match status.signal() {
        Some(signal) => {
            let name = match signal {
                1 => " (SIGHUP)",
                2 => " (SIGINT)",
                6 => " (SIGABRT)",
                9 => " (SIGKILL)",
                15 => " (SIGTERM)",
                _ => "",
            };
            format!("was killed by signal {signal}{name}")
        }
        None => format!("ended ({status})"),
    }
}
