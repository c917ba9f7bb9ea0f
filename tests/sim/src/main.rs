//! `baton-sim`: runs seeds of the deterministic simulation; see `tests/sim/README.md`.

use std::process::ExitCode;
use std::time::Instant;

use baton_sim::{Bug, SimConfig, run};
use clap::Parser;

/// Runs the deterministic simulation of a Baton ensemble (partitions, crashes, loss, slow
/// disks) for a range of seeds and checks every run's history. Any failure prints its seed,
/// its fault schedule and the command that replays it.
#[derive(Debug, Parser)]
#[command(name = "baton-sim", version)]
struct Args {
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// How many consecutive seeds to run.
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// Members per ensemble: 3 or 5. Default: by seed (every third seed runs 5).
    #[arg(long)]
    members: Option<u64>,
    /// Virtual seconds of faults per run (a further 10 s settle after them).
    #[arg(long, default_value_t = 20)]
    fault_seconds: u64,
    /// Switch on a deliberate bug, to watch the checkers catch it: `stale-sync` (sync skips
    /// the leader's ReadIndex), `no-fsync` (the log acknowledges before it is durable),
    /// `short-barrier` (barrier clients pass with one party fewer than asked for),
    /// `local-alarm` (members with an even id ignore alarm entries), `early-feature` (members
    /// with an even id keep null data before the level entry allows it) or `local-policy`
    /// (members with an even id apply writes with the tenancy policy off).
    #[arg(long)]
    bug: Option<String>,
    /// Log the run (faults, elections, member decisions) to stderr.
    #[arg(long)]
    verbose: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.verbose {
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
                    .unwrap_or_else(|_| "info,raft=warn".into()),
            )
            .with_writer(std::io::stderr)
            .init();
    }
    let bug = match args.bug.as_deref() {
        None => None,
        Some(name) => match Bug::ALL.into_iter().find(|b| b.name() == name) {
            Some(bug) => Some(bug),
            None => {
                let known: Vec<&str> = Bug::ALL.iter().map(|b| b.name()).collect();
                eprintln!("unknown --bug {name:?}; known: {}", known.join(", "));
                return ExitCode::from(2);
            }
        },
    };
    let (mut clean, mut failed) = (0u64, 0u64);
    let started = Instant::now();
    for seed in args.seed..args.seed.saturating_add(args.count) {
        let mut cfg = SimConfig::for_seed(seed);
        cfg.members = args.members.unwrap_or(cfg.members);
        cfg.faults_for = args.fault_seconds * baton_sim::SECOND;
        cfg.bug = bug;
        match run(&cfg) {
            Ok(r) => {
                clean += 1;
                println!(
                    "seed {seed}: ok ({} members, {} operations, {} lock grants ({} of permits), {} barrier passes ({} releases checked), {} holder changes, {} planted nodes, {} disk alarms, {} policy changes, {} members upgraded, level raised at {} ms, {} faults, {} events, trace {:016x})",
                    r.members,
                    r.operations,
                    r.grants,
                    r.permit_grants,
                    r.barrier_passes,
                    r.barrier_releases,
                    r.holder_changes,
                    r.planted,
                    r.alarms,
                    r.policy_changes,
                    r.upgraded,
                    r.level_raised_at
                        .map_or(-1, |at| (at / baton_sim::MS) as i64),
                    r.faults.len(),
                    r.events,
                    r.trace
                );
            }
            Err(f) => {
                failed += 1;
                println!("FAILED {f}");
            }
        }
    }
    println!(
        "{clean} clean, {failed} failed, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
