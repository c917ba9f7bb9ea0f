//! The `baton-operator` command line: its subcommands and flags, in the library so that the
//! docs generator can read them (`Cli::command()`) as the binary parses them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::build::ScraperPods;

/// Baton's Kubernetes operator: reconciles CoordinationEnsemble resources into running,
/// scalable, upgradable ensembles. Kubernetes access as kubectl finds it (in-cluster
/// service account, else KUBECONFIG / ~/.kube/config).
#[derive(Parser, Debug)]
// The feature levels are those of this release's baton-ensemble (`baton_machine::feature::
// SUPPORTED`), which the operator's image tag deploys.
#[command(
    name = "baton-operator",
    version = concat!(env!("CARGO_PKG_VERSION"), " (feature levels 1 to 2)"),
    about,
    long_about
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Reconcile CoordinationEnsembles (leader-elected: run two replicas safely).
    Run(Box<RunArgs>),
    /// Print every CRD the operator owns as YAML (what crds/ holds).
    Crd,
    /// Write every object the operator would apply for a CoordinationEnsemble (read from a
    /// YAML file) into a directory, one YAML file per object, without a cluster (fresh
    /// certificates included): for schema validation and for reading.
    Render(RenderArgs),
}

#[derive(clap::Args, Debug)]
pub struct RenderArgs {
    /// The CoordinationEnsemble's YAML (e.g. operator/examples/coordinationensemble.yaml).
    #[arg(long)]
    pub file: PathBuf,
    /// Namespace when the file names none.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Image when the spec names none.
    #[arg(long, default_value = "ghcr.io/baton-dev/baton:latest")]
    pub default_image: String,
    /// The operator's namespace (the NetworkPolicy's admin rule).
    #[arg(long, default_value = "baton-system")]
    pub operator_namespace: String,
    /// Labels of the operator's pods (`k=v,k=v`).
    #[arg(long, default_value = "app.kubernetes.io/name=baton-operator", value_parser = parse_labels)]
    pub operator_pod_labels: BTreeMap<String, String>,
    #[command(flatten)]
    pub scraper: ScraperArgs,
    /// Directory to write into (created if missing).
    #[arg(long)]
    pub out: PathBuf,
}

/// The monitoring stack's pods that scrape the members' `/metrics` (admin port).
#[derive(clap::Args, Debug)]
pub struct ScraperArgs {
    /// The namespace of the pods that scrape the members' /metrics: each ensemble's
    /// NetworkPolicy opens the admin port to them too. None: only the operator's pods (and the
    /// backup Jobs) reach it.
    #[arg(long, env = "BATON_METRICS_SCRAPER_NAMESPACE")]
    pub metrics_scraper_namespace: Option<String>,
    /// Labels of those pods (`k=v,k=v`); empty: every pod of that namespace.
    #[arg(long, env = "BATON_METRICS_SCRAPER_POD_LABELS", default_value = "", value_parser = parse_labels)]
    pub metrics_scraper_pod_labels: BTreeMap<String, String>,
}

impl ScraperArgs {
    /// The scraper pods these flags name, if any.
    pub fn pods(&self) -> Option<ScraperPods> {
        let namespace = self.metrics_scraper_namespace.clone()?;
        Some(ScraperPods {
            namespace,
            labels: self.metrics_scraper_pod_labels.clone(),
        })
        .filter(|s| !s.namespace.is_empty())
    }
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Address of /metrics and /healthz.
    #[arg(long, env = "BATON_METRICS_ADDR", default_value = "[::]:8080")]
    pub metrics_addr: SocketAddr,
    /// Image for ensembles whose spec names none (the chart sets its own image).
    #[arg(
        long,
        env = "BATON_DEFAULT_IMAGE",
        default_value = "ghcr.io/baton-dev/baton:latest"
    )]
    pub default_image: String,
    /// Namespace of the leader-election Lease (the operator's own; POD_NAMESPACE in a pod).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "baton-operator")]
    pub lease_name: String,
    /// This replica's identity in the Lease (POD_NAME in a pod).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// How often to look for pods annotated baton.dev/inject that run without the sidecar (in
    /// namespaces labelled baton.dev/injection=enabled): a duration such as 1m or 30s.
    #[arg(long, env = "BATON_SIDECAR_AUDIT_INTERVAL", default_value = "1m", value_parser = at_least_a_second)]
    pub sidecar_audit_interval: Duration,
    /// Report a membership or rollout step as stuck (Degraded) after this long: a duration
    /// such as 10m or 1h30m.
    #[arg(long, default_value = "10m", value_parser = at_least_a_second)]
    pub stuck_after: Duration,
    /// Log one JSON object per line (for log pipelines) instead of text.
    #[arg(long, env = "BATON_LOG_JSON")]
    pub log_json: bool,
    /// Serve the sidecar-injection webhook (HTTPS, `POST /mutate-pods`) on this address.
    #[arg(long, env = "BATON_WEBHOOK_ADDR")]
    pub webhook_addr: Option<SocketAddr>,
    /// The MutatingWebhookConfiguration whose caBundles the operator keeps (own certificates).
    #[arg(long, default_value = "baton-sidecar-injector")]
    pub webhook_config_name: String,
    /// Directory with tls.crt and tls.key (e.g. a cert-manager Secret), reloaded when they
    /// change; without it the operator makes, stores and rotates its own certificates.
    #[arg(long)]
    pub webhook_cert_dir: Option<PathBuf>,
    /// The webhook's Service in the operator's namespace (the serving certificate's DNS names).
    #[arg(long, default_value = "baton-webhook")]
    pub webhook_service: String,
    /// The Secret in the operator's namespace keeping the operator-made CA and certificate.
    #[arg(long, default_value = "baton-webhook-tls")]
    pub webhook_secret: String,
    /// The injected sidecar's image (default: --default-image); the only place it comes from:
    /// no CoordinationEnsemble can choose what runs inside other workloads' pods.
    #[arg(long, env = "BATON_SIDECAR_IMAGE")]
    pub sidecar_image: Option<String>,
    /// Labels of the operator's own pods (`k=v,k=v`): each ensemble's NetworkPolicy opens the
    /// admin port to these pods in the operator's namespace (--lease-namespace) only. Empty:
    /// every pod of that namespace.
    #[arg(long, env = "BATON_OPERATOR_POD_LABELS", default_value = "", value_parser = parse_labels)]
    pub operator_pod_labels: BTreeMap<String, String>,
    #[command(flatten)]
    pub scraper: ScraperArgs,
}

/// A duration flag (`baton_duration`'s grammar, as every Baton flag) of at least a second.
fn at_least_a_second(s: &str) -> Result<Duration, baton_duration::DurationError> {
    baton_duration::parse_within(s, Duration::from_secs(1)..=baton_duration::MAX)
}

/// `k=v,k=v` as a label map.
fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                Ok((k.trim().to_string(), v.trim().to_string()))
            }
            _ => Err(format!("{pair:?} is not KEY=VALUE")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(extra: &[&str]) -> Result<RunArgs, String> {
        let cli = Cli::try_parse_from(["baton-operator", "run"].iter().chain(extra))
            .map_err(|e| e.to_string())?;
        match cli.command {
            Command::Run(args) => Ok(*args),
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn duration_flags_take_go_style_durations_only() {
        let defaults = run_args(&[]).expect("the defaults parse");
        assert_eq!(defaults.stuck_after, Duration::from_secs(600));
        assert_eq!(defaults.sidecar_audit_interval, Duration::from_secs(60));
        let args = run_args(&["--stuck-after=1h30m", "--sidecar-audit-interval=1.5s"])
            .expect("Go-style durations");
        assert_eq!(args.stuck_after, Duration::from_secs(5400));
        assert_eq!(args.sidecar_audit_interval, Duration::from_millis(1500));
        let err = run_args(&["--stuck-after=600"]).expect_err("a bare number");
        assert!(err.contains("write 600s"), "{err}");
        let err = run_args(&["--sidecar-audit-interval=0s"]).expect_err("zero");
        assert!(err.contains("from 1s to 720h"), "{err}");
    }
}
