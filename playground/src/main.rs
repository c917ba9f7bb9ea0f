//! `baton-playground`: Baton on one machine, without Kubernetes. Starts a Raft ensemble and
//! a few sidecar "pods" on loopback, prints who leads and what to try, then shows every
//! hand-over live while the user kills processes, and restarts what was killed.

mod api;
mod banner;
mod binaries;
mod console;
mod ports;
mod startup;
mod stream_hold;
mod supervisor;
mod topology;
mod watch;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::banner::BannerFacts;
use crate::console::Console;
use crate::supervisor::Fleet;
use crate::topology::Topology;

/// How long a killed process stays down before it is started again.
const RESTART_AFTER: Duration = Duration::from_secs(3);

/// Leader election and locks on your machine: a local Baton ensemble and sidecar "pods".
///
/// Starts a Raft ensemble (baton-ensemble) and one baton-sidecar per pod on 127.0.0.1, all
/// standing in the election "demo"; prints who leads and curl lines to try; shows once that a
/// lock held with hold=stream passes to a waiting pod within milliseconds of its app crashing;
/// then prints a line whenever the election's leader or the ensemble's Raft leader changes. Kill any
/// process to watch the hand-over; it is restarted a few seconds later. Ctrl-C stops all.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Ensemble members (Raft voters)
    #[arg(long, default_value_t = 3, value_parser = parse_members)]
    members: u64,

    /// Pods, each a sidecar named pod-a, pod-b, …
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=26))]
    pods: u8,

    /// Leave killed processes down instead of restarting them
    #[arg(long)]
    no_restart: bool,

    /// Keep data and logs in this directory (created; kept on exit) instead of a temporary one
    #[arg(long)]
    data_dir: Option<PathBuf>,

    /// Use any free ports rather than the familiar ones (2181…, 4041…, 8081…)
    #[arg(long)]
    any_port: bool,
}

fn parse_members(raw: &str) -> Result<u64, String> {
    match raw {
        "3" => Ok(3),
        "5" => Ok(5),
        _ => Err("3 or 5 (a hand-over needs a majority left after one member dies)".to_owned()),
    }
}

fn main() -> ExitCode {
    // `baton-playground ensemble ...` / `sidecar ...`: the children the demo starts (binaries.rs).
    if let Some(code) = binaries::multi_call() {
        return code;
    }
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("BATON_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<()> {
    let binaries = binaries::Binaries::locate()?;
    // The temporary directory is removed when `_temporary` drops, after the children are dead.
    let (data, _temporary) = match &args.data_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
            (dir.clone(), None)
        }
        None => {
            let temporary = tempfile::Builder::new()
                .prefix("baton-playground-")
                .tempdir()
                .context("create a temporary data directory")?;
            (temporary.path().to_path_buf(), Some(temporary))
        }
    };
    let topology = Topology::new(args.members, args.pods, args.any_port, &data).await?;
    api::use_certificates(&topology.certs)?;
    // Listening before the first child starts, so no stop request can slip past the fleet.
    let mut signals = StopSignals::new()?;
    let console = Console::new();
    let restart_after = (!args.no_restart).then_some(RESTART_AFTER);
    let mut fleet = Fleet::new(restart_after, console);
    console.line(format!(
        "Starting {} ensemble members and {} pods…",
        topology.members.len(),
        topology.pods.len()
    ));

    let outcome = tokio::select! {
        outcome = demo(&topology, &binaries, &mut fleet, console, &data, args.data_dir.is_none(), restart_after) => outcome,
        name = signals.recv() => {
            console.line(format!("\n{name}: stopping every process"));
            Ok(())
        }
    };
    fleet.stop().await;
    console.line("Stopped.");
    outcome
}

/// Starts everything, prints the banner and watches; returns only on a failed start.
async fn demo(
    topology: &Topology,
    binaries: &binaries::Binaries,
    fleet: &mut Fleet,
    console: Console,
    data: &std::path::Path,
    data_is_temporary: bool,
    restart_after: Option<Duration>,
) -> Result<()> {
    let started = startup::bring_up(topology, binaries, fleet).await?;
    let facts = BannerFacts {
        topology,
        members: &started.members,
        pods: &started.pods,
        demo_leader: Some(&started.demo_leader),
        raft_leader: Some(started.raft_leader),
        data,
        data_is_temporary,
        restart_after,
    };
    for line in banner::lines(&facts) {
        console.line(line);
    }
    tokio::join!(
        watch::election(
            started.pods.clone(),
            Some(started.demo_leader.clone()),
            console
        ),
        watch::ensemble(started.members.clone(), Some(started.raft_leader), console),
        stream_hold::demonstrate(&started.pods, console),
    );
    Ok(())
}

/// Ctrl-C, SIGTERM and SIGHUP (a closed terminal): each must stop the children, which sit in
/// their own process groups and so do not receive it themselves.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn new() -> Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt()).context("listen for SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("listen for SIGTERM")?,
            hangup: signal(SignalKind::hangup()).context("listen for SIGHUP")?,
        })
    }

    /// Resolves with the name of the first stop signal to arrive.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "Ctrl-C",
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.hangup.recv() => "SIGHUP",
        }
    }
}
