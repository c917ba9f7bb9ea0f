//! `baton-bench`: runs one workload against ZooKeeper-compatible servers and prints one line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use baton_bench::app_child;
use baton_bench::budget::Limit;
use baton_bench::ensemble::Ensemble;
use baton_bench::members::MemberControl;
use baton_bench::sidecar::SidecarLauncher;
use baton_bench::workload::{self, RunConfig, Workload};
use clap::Parser;

/// Runs one benchmark workload against ZooKeeper-compatible servers (Baton, Apache ZooKeeper)
/// and prints ops/s and p50/p99/p999/max latency.
#[derive(Debug, Parser)]
#[command(name = "baton-bench", version)]
struct Cli {
    /// Servers to benchmark; worker i's session goes to server i mod N.
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT..]")]
    servers: Option<String>,

    /// Connect every session over TLS (ZooKeeper's secureClientPort, Baton's
    /// --secure-client-addr), trusting the CA certificates in this PEM file; --servers then
    /// lists the TLS ports. The sidecar-* workloads pass it to each sidecar as --ensemble-ca.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,

    /// --servers are etcd endpoints (HOST:PORT of their client URLs): run the workload's etcd
    /// counterpart through etcd's v3 API (create-delete, get-data, get-data-linearizable,
    /// mixed-*, lock-* and election-failover). Needs the `etcd` cargo feature.
    #[arg(long)]
    etcd: bool,

    /// What to run.
    #[arg(long, value_enum)]
    workload: Workload,

    /// Sessions (workers, lock contenders, election candidates or watchers), or sidecar
    /// processes for the sidecar-* workloads; each workload has its own default.
    #[arg(long, value_name = "N")]
    workers: Option<usize>,

    /// Stop after this long (e.g. 10s, 500ms, 1m30s; a bare number is refused). Default 10s, except election-failover and
    /// sidecar-handover (--ops 20), ensemble-failover (--ops 5), populate (--ops 100000),
    /// fsync (--ops 1000) and loopback-rtt (--ops 10000).
    #[arg(long, value_parser = baton_duration::parse, conflicts_with = "ops")]
    duration: Option<Duration>,

    /// Stop after this many operations (hand-overs for election-failover and sidecar-handover,
    /// leader kills for ensemble-failover, notifications for watch-fanout, nodes for populate).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    ops: Option<u64>,

    /// Bytes of data per node written.
    #[arg(long, value_name = "BYTES", default_value_t = 1024)]
    data_size: usize,

    /// Name of the system under test, printed in the report.
    #[arg(long, default_value = "bench")]
    label: String,

    /// Print the report as one JSON object instead of a line.
    #[arg(long)]
    json: bool,

    /// Directory for the fsync workload's temp file (use the disk the servers write to).
    #[arg(long, value_name = "DIR", default_value = ".")]
    fsync_dir: PathBuf,

    /// The baton-sidecar executable for the sidecar-* workloads (default: the one next to
    /// this executable).
    #[arg(long, value_name = "PATH")]
    sidecar_bin: Option<PathBuf>,

    /// sessions-scale: spread its sessions over the loopback addresses 127.0.0.1 up to
    /// 127.0.0.N (session i on 127.0.0.(1 + i mod N), each --servers port the same); every
    /// --servers entry must be 127.0.0.1, and the servers must listen on all N addresses.
    #[arg(long, value_name = "N", default_value_t = 1)]
    loopback_addresses: usize,

    /// ensemble-failover: the pid file of member {id} (1-based, --servers order), holding the
    /// pid of the server process itself.
    #[arg(long, value_name = "TEMPLATE", requires = "member_start")]
    member_pid_file: Option<String>,

    /// ensemble-failover: the executable that starts member {id} again in the background
    /// (it rewrites the pid file and sends its output elsewhere).
    #[arg(long, value_name = "TEMPLATE", requires = "member_pid_file")]
    member_start: Option<String>,
}

impl Cli {
    fn into_config(self) -> anyhow::Result<(Workload, RunConfig, bool, bool)> {
        let workload = self.workload;
        anyhow::ensure!(
            !(self.tls_ca.is_some()
                && matches!(
                    workload,
                    Workload::EnsembleFailover
                        | Workload::SessionsFailover
                        | Workload::SessionsScale
                )),
            "--tls-ca: {} asks members `srvr` over plain TCP; run it without TLS",
            workload.name()
        );
        let ensemble = match &self.servers {
            Some(list) => {
                let ensemble =
                    Ensemble::parse(list)?.with_loopback_addresses(self.loopback_addresses)?;
                Some(match &self.tls_ca {
                    Some(ca) => ensemble.with_tls_ca(ca)?,
                    None => ensemble,
                })
            }
            None if workload.needs_servers() => {
                anyhow::bail!("--servers is required for --workload {}", workload.name())
            }
            None => None,
        };
        let workers = self.workers.unwrap_or(workload.default_workers());
        anyhow::ensure!(workers >= 1, "--workers must be at least 1");
        let limit = match (self.duration, self.ops) {
            (Some(d), _) => Limit::Duration(d),
            (None, Some(n)) => Limit::Ops(n),
            (None, None) => workload.default_limit(),
        };
        let members = match (&self.member_pid_file, &self.member_start) {
            (Some(pid_file), Some(start)) => Some(MemberControl::new(pid_file, start)?),
            _ => None,
        };
        let config = RunConfig {
            ensemble,
            workers,
            limit,
            data_size: self.data_size,
            label: self.label,
            fsync_dir: self.fsync_dir,
            sidecar_bin: self
                .sidecar_bin
                .unwrap_or_else(SidecarLauncher::default_binary),
            members,
        };
        Ok((workload, config, self.json, self.etcd))
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    // zookeeper-client's tls feature brings rustls's aws-lc provider beside the ring one the
    // rest of the workspace uses; with both built in, a rustls config that names no provider
    // (zookeeper-client's) panics unless one is the process default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            // The client warns on every reconnect attempt, including the benign race of a
            // session the election workload closes on purpose; our own errors say enough.
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("warn,zookeeper_client=error")
            }),
        )
        .init();
    // The app-crash workloads run this executable again as the app they kill.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(app_child::APP_CHILD_ARG) {
        return match app_child::run_child(&args[2..]).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("baton-bench app child: {err}");
                ExitCode::FAILURE
            }
        };
    }
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("baton-bench: {err:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "etcd")]
async fn run_etcd(
    workload: Workload,
    config: &RunConfig,
) -> anyhow::Result<baton_bench::report::RunReport> {
    Ok(baton_bench::etcd::run(workload, config).await?)
}

#[cfg(not(feature = "etcd"))]
async fn run_etcd(_: Workload, _: &RunConfig) -> anyhow::Result<baton_bench::report::RunReport> {
    anyhow::bail!(
        "--etcd: this baton-bench was built without the `etcd` feature (cargo build -p baton-bench --features etcd)"
    )
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let (workload, config, json, etcd) = cli.into_config()?;
    let report = if etcd {
        run_etcd(workload, &config).await
    } else {
        workload::run(workload, &config).await.map_err(Into::into)
    }
    .with_context(|| format!("workload {} ({})", workload.name(), config.label))?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{report}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_takes_go_style_durations_only() {
        let parse = |value: &str| {
            Cli::try_parse_from([
                "baton-bench",
                "--workload",
                "create-delete",
                "--duration",
                value,
            ])
            .map(|cli| cli.duration)
            .map_err(|e| e.to_string())
        };
        assert_eq!(parse("1m30s"), Ok(Some(Duration::from_secs(90))));
        assert_eq!(parse("1.5s"), Ok(Some(Duration::from_millis(1500))));
        let err = parse("10").expect_err("a bare number");
        assert!(err.contains("write 10s"), "{err}");
    }
}
