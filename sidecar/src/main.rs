//! `baton-sidecar`: not built yet (issue 4). It parses the contract's flags so `--help` is honest.

use clap::Parser;

/// Leader election and locks for one pod, over localhost HTTP (not implemented yet: see the README).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Ensemble client endpoints, HOST:PORT[,HOST:PORT...].
    #[arg(long, env = "BATON_ENSEMBLE")]
    ensemble: Option<String>,
}

fn main() {
    let _ = Args::parse();
    eprintln!("baton-sidecar is not implemented yet; only baton-ensemble runs in this release");
    std::process::exit(2);
}
