//! The `baton-sidecar` command line: flags, logging, signals, the Kubernetes clients, then the
//! sidecar. `main.rs` is only a call to [`main`], so the `baton-sidecar` binary and
//! `baton-playground sidecar ...` (which links this crate and re-runs itself) run the same code.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use tokio::sync::watch;
use tracing_subscriber::EnvFilter;

use crate::config::Config;
use crate::pod::{LeaseMirror, NoopPodLabeler, PodLabeler};

/// Why `--pod`/`--namespace` and `--mirror-lease` are refused in a build without `k8s`.
pub const K8S_UNAVAILABLE: &str = "--pod, --namespace and --mirror-lease are not in this build \
    of baton-sidecar (built without the `k8s` cargo feature, as inside baton-playground): use \
    the baton-sidecar of the image or of `cargo build --release -p baton-sidecar`";

/// Runs `baton-sidecar` with `args` (the first is the program name, as in `std::env::args_os`).
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    // zookeeper-client's tls feature brings rustls's aws-lc provider beside the ring one kube
    // uses; with two, a rustls config built without naming one (kube's client, the ensemble
    // TLS connector) panics. One process-wide choice: ring, as in the rest of Baton.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = Config::parse_from(args);
    if let Err(e) = config.validate() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    if !cfg!(feature = "k8s")
        && (config.pod.is_some() || config.namespace.is_some() || config.mirror_lease)
    {
        eprintln!("error: {K8S_UNAVAILABLE}");
        return ExitCode::from(2);
    }
    if !cfg!(feature = "tls") && config.ensemble_ca.is_some() {
        eprintln!("error: {}", crate::recipe::EnsembleCaError::NotBuilt);
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
        let (labeler, leases) = kubernetes_clients(&config).await?;
        crate::sidecar::run_with_leases(config, labeler, leases, shutdown_rx)
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

/// The pod labeler and the Lease mirror `config` asks for.
#[cfg(feature = "k8s")]
async fn kubernetes_clients(
    config: &Config,
) -> Result<(Arc<dyn PodLabeler>, Option<Arc<LeaseMirror>>), String> {
    use crate::pod::KubePodLabeler;
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
    Ok((labeler, leases))
}

/// Without `k8s` (refused above when asked for): no labels, no Leases.
#[cfg(not(feature = "k8s"))]
async fn kubernetes_clients(
    _config: &Config,
) -> Result<(Arc<dyn PodLabeler>, Option<Arc<LeaseMirror>>), String> {
    Ok((Arc::new(NoopPodLabeler), None))
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
