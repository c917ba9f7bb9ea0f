//! The `baton-ensemble` command line: flags, logging, signals, then a member or a subcommand.
//! `main.rs` is only a call to [`main`], so the `baton-ensemble` binary and
//! `baton-playground ensemble ...` (which links this crate and re-runs itself) run the same code.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tokio::sync::watch;
use tracing_subscriber::EnvFilter;

use crate::Config;

/// Why `--s3-url` and `s3://` are refused in a build without the `s3` feature.
pub const S3_UNAVAILABLE: &str = "S3 backups are not in this build of baton-ensemble (built \
    without the `s3` cargo feature, as inside baton-playground): use --out FILE / --from FILE, \
    or the baton-ensemble of the image or of `cargo build --release -p baton-ensemble`";

/// Why `--k8s-auth` is refused in a build without the `k8s` feature.
pub const K8S_UNAVAILABLE: &str = "--k8s-auth is not in this build of baton-ensemble (built \
    without the `k8s` cargo feature, as inside baton-playground): use the baton-ensemble of the \
    image or of `cargo build --release -p baton-ensemble`";

/// Runs `baton-ensemble` with `args` (the first is the program name, as in `std::env::args_os`).
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let args: Vec<OsString> = args.into_iter().collect();
    // One crypto provider for the process (the workspace also builds aws-lc for other crates).
    let _ = rustls::crypto::ring::default_provider().install_default();
    // `certs` and `snapshot` are the subcommands; everything else is the server's flat flag set
    // (DESIGN.md §1), which a clap subcommand tree would break.
    if args.get(1).is_some_and(|a| a == "certs") {
        let args = crate::certs_cmd::CertsArgs::parse_from(args.into_iter().skip(1));
        return match crate::certs_cmd::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("baton-ensemble certs: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.get(1).is_some_and(|a| a == "snapshot") {
        return snapshot(args.into_iter().skip(1));
    }
    let cfg = Config::parse_from(args);
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
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            let _ = shutdown_tx.send(true);
        });
        crate::run(cfg, shutdown_rx).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `baton-ensemble snapshot save|restore` (backup and restore).
fn snapshot(args: impl Iterator<Item = OsString>) -> ExitCode {
    let args = crate::backup::SnapshotArgs::parse_from(args);
    let name = args.command.name();
    // Refused before anything is fetched or written, rather than after a download.
    if !cfg!(feature = "s3") && uses_s3(&args) {
        eprintln!("baton-ensemble snapshot {name}: {S3_UNAVAILABLE}");
        return ExitCode::FAILURE;
    }
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
        .and_then(|rt| rt.block_on(crate::backup::run(args)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("baton-ensemble snapshot {name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Whether a `snapshot` command names an S3 location.
fn uses_s3(args: &crate::backup::SnapshotArgs) -> bool {
    use crate::backup::cmd::SnapshotCommand;
    match &args.command {
        SnapshotCommand::Save(save) => save.s3_url.is_some(),
        SnapshotCommand::Restore(restore) => restore.from.starts_with("s3://"),
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
