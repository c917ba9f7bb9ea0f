//! `baton-operator`: not built yet (issue 5).

use clap::Parser;

/// Reconciles CoordinationEnsemble resources (not implemented yet: see the README).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {}

fn main() {
    let _ = Args::parse();
    eprintln!("baton-operator is not implemented yet; only baton-ensemble runs in this release");
    std::process::exit(2);
}
