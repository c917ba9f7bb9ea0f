//! `baton-operator`: `run` reconciles CoordinationEnsembles; `crd` prints the CRD YAML.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use baton_operator::ensemble::HttpAdmin;
use baton_operator::leader_lease::{LeaderLease, LeaseConfig};
use baton_operator::metrics::Metrics;
use baton_operator::reconcile::{Context, Settings};
use baton_operator::{controller, crd, http_server};

/// Baton's Kubernetes operator: reconciles CoordinationEnsemble resources into running,
/// scalable, upgradable ensembles. Kubernetes access as kubectl finds it (in-cluster
/// service account, else KUBECONFIG / ~/.kube/config).
#[derive(Parser, Debug)]
#[command(name = "baton-operator", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Reconcile CoordinationEnsembles (leader-elected: run two replicas safely).
    Run(Box<RunArgs>),
    /// Print every CRD the operator owns as YAML (what crds/ holds).
    Crd,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Address of /metrics and /healthz.
    #[arg(long, env = "BATON_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Image for ensembles whose spec names none (the chart sets its own image).
    #[arg(
        long,
        env = "BATON_DEFAULT_IMAGE",
        default_value = "ghcr.io/baton-dev/baton:latest"
    )]
    default_image: String,
    /// Namespace of the leader-election Lease (the operator's own; POD_NAMESPACE in a pod).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "baton-operator")]
    lease_name: String,
    /// This replica's identity in the Lease (POD_NAME in a pod).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Report a membership or rollout step as stuck (Degraded) after this many seconds.
    #[arg(long, default_value_t = 600)]
    stuck_after_secs: u64,
    /// Log one JSON object per line (for log pipelines) instead of text.
    #[arg(long, env = "BATON_LOG_JSON")]
    log_json: bool,
    /// Not served yet (the injection webhook is issue 6): accepted so manifests can set it.
    #[arg(long)]
    webhook_addr: Option<SocketAddr>,
    /// Not served yet (issue 6): the MutatingWebhookConfiguration to keep the CA bundle of.
    #[arg(long)]
    webhook_config_name: Option<String>,
    /// Not served yet (issue 6): directory with tls.crt and tls.key for the webhook.
    #[arg(long)]
    webhook_cert_dir: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => {
            let yaml = crd::crd_yaml().context("serialize the CRD")?;
            std::io::stdout()
                .write_all(yaml.as_bytes())
                .context("write the CRD to stdout")?;
            Ok(())
        }
        Command::Run(args) => {
            let filter =
                EnvFilter::try_from_env("BATON_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
            let logs = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stderr);
            if args.log_json {
                logs.json().with_current_span(true).init();
            } else {
                logs.with_ansi(std::io::stderr().is_terminal()).init();
            }
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("start the async runtime")?
                .block_on(run(*args))
        }
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.webhook_addr.is_some()
        || args.webhook_config_name.is_some()
        || args.webhook_cert_dir.is_some()
    {
        tracing::warn!(
            "the sidecar injection webhook is not served yet (issue 6); webhook flags are ignored"
        );
    }
    let metrics = Arc::new(Metrics::new());
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("listen on {}", args.metrics_addr))?;
    tokio::spawn(http_server::serve(listener, metrics.clone()));

    let client = kube::Client::try_default()
        .await
        .context("no Kubernetes access (in-cluster or KUBECONFIG)")?;
    let identity = args.identity.clone().unwrap_or_else(|| {
        std::env::var("HOSTNAME")
            .unwrap_or_else(|_| format!("baton-operator-{}", std::process::id()))
    });
    let lease = LeaderLease::new(
        client.clone(),
        LeaseConfig {
            namespace: args.lease_namespace.clone(),
            name: args.lease_name.clone(),
            identity: identity.clone(),
            duration: Duration::from_secs(15),
            retry: Duration::from_secs(2),
        },
    );
    tracing::info!(%identity, lease = %args.lease_name, "waiting for the leader lease");
    tokio::select! {
        _ = lease.acquire() => {}
        _ = shutdown_signal() => return Ok(()),
    }
    metrics.set_leader(true);
    tracing::info!(%identity, "leading: reconciling CoordinationEnsembles");

    let settings = Settings {
        default_image: args.default_image,
        stuck_after: Duration::from_secs(args.stuck_after_secs),
        ..Settings::default()
    };
    let ctx = Arc::new(Context::new(
        client,
        HttpAdmin::new(Duration::from_secs(3)),
        settings,
        metrics.clone(),
    ));
    tokio::select! {
        _ = controller::run(ctx, shutdown_signal()) => {
            metrics.set_leader(false);
            if let Err(e) = lease.release().await {
                tracing::warn!(error = %e, "cannot release the leader lease; it expires by itself");
            }
            Ok(())
        }
        _ = lease.hold() => {
            metrics.set_leader(false);
            // Exit rather than keep reconciling: another replica may be leading already.
            anyhow::bail!("lost the leader lease")
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
