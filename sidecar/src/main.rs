//! `baton-sidecar`: parses flags, sets up logging and signals, and runs the sidecar.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use tokio::sync::watch;
use tracing_subscriber::EnvFilter;

use baton_sidecar::config::Config;
use baton_sidecar::pod::{KubePodLabeler, LeaseMirror, NoopPodLabeler, PodLabeler};

fn main() -> ExitCode {
    // zookeeper-client's tls feature brings rustls's aws-lc provider beside the ring one kube
    // uses; with two, a rustls config built without naming one (kube's client, the ensemble
    // TLS connector) panics. One process-wide choice: ring, as in the rest of Baton.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = Config::parse();
    if let Err(e) = config.validate() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
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
        let labeler: Arc<dyn PodLabeler> = match (&config.pod, &config.namespace) {
            (Some(pod), Some(namespace)) => {
                // Asked to label the pod and unable to reach the API at all: a deployment
                // error that retrying cannot mend, so say so and stop.
                Arc::new(
                    KubePodLabeler::from_environment(namespace.as_str(), pod)
                        .await
                        .map_err(|e| e.to_string())?,
                )
            }
            _ => Arc::new(NoopPodLabeler),
        };
        let leases = match (&config.pod, &config.namespace) {
            (Some(pod), Some(namespace)) if config.mirror_lease => {
                let client = kube::Client::try_default()
                    .await
                    .map_err(|e| format!("--mirror-lease: no Kubernetes API access: {e}"))?;
                Some(Arc::new(LeaseMirror::new(
                    client,
                    namespace.as_str(),
                    pod,
                    config.session_timeout,
                )))
            }
            _ => {
                if config.mirror_lease {
                    tracing::warn!("--mirror-lease needs --pod and --namespace: no Leases");
                }
                None
            }
        };
        baton_sidecar::sidecar::run_with_leases(config, labeler, leases, shutdown_rx)
            .await
            .map_err(|e| e.to_string())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGTERM (Kubernetes stopping the pod) or Ctrl-C.
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the sidecar");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
