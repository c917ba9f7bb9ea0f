//! `baton-ensemble`: parses flags, sets up logging and signals, and runs a member.

use std::io::IsTerminal;

use clap::Parser;
use tokio::sync::watch;
use tracing_subscriber::EnvFilter;

use baton_ensemble::Config;

fn main() -> std::process::ExitCode {
    // One crypto provider for the process (the workspace also builds aws-lc for other crates).
    let _ = rustls::crypto::ring::default_provider().install_default();
    // `certs` and `snapshot` are the subcommands; everything else is the server's flat flag set
    // (DESIGN.md §1), which a clap subcommand tree would break.
    if std::env::args_os().nth(1).is_some_and(|a| a == "certs") {
        let args = baton_ensemble::certs_cmd::CertsArgs::parse_from(std::env::args_os().skip(1));
        return match baton_ensemble::certs_cmd::run(args) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("baton-ensemble certs: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == "snapshot") {
        return snapshot(std::env::args_os().skip(1));
    }
    let cfg = Config::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("BATON_LOG")
                .unwrap_or_else(|_| EnvFilter::new("info,raft=warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            let _ = shutdown_tx.send(true);
        });
        baton_ensemble::run(cfg, shutdown_rx).await
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            std::process::ExitCode::from(e.exit_code())
        }
    }
}

/// `baton-ensemble snapshot save|restore` (backup and restore).
fn snapshot(args: impl Iterator<Item = std::ffi::OsString>) -> std::process::ExitCode {
    let args = baton_ensemble::backup::SnapshotArgs::parse_from(args);
    let name = args.command.name();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("BATON_LOG").unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
        .and_then(|rt| rt.block_on(baton_ensemble::backup::run(args)));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("baton-ensemble snapshot {name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
