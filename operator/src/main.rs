//! `baton-operator`: `run` reconciles CoordinationEnsembles; `crd` prints the CRD YAML.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use tracing_subscriber::EnvFilter;

use baton_operator::build::OperatorPods;
use baton_operator::cli::{Cli, Command, RunArgs};
use baton_operator::ensemble::HttpAdmins;
use baton_operator::events::EventSink;
use baton_operator::leader_lease::{LeaderLease, LeaseConfig};
use baton_operator::metrics::Metrics;
use baton_operator::reconcile::{Context, Settings};
use baton_operator::sidecar_audit::{MissingSidecars, SidecarAudit};
use baton_operator::webhook::cert_store::CertStore;
use baton_operator::webhook::certs;
use baton_operator::webhook::inject::InjectSettings;
use baton_operator::webhook::lookup::KubeEnsembles;
use baton_operator::webhook::review::Injector;
use baton_operator::webhook::server::{self, ReloadableCert, certified_key_from_dir};
use baton_operator::{controller, crd, http_server};
use k8s_openapi::jiff::Timestamp;

fn main() -> anyhow::Result<()> {
    // One crypto provider for the whole process: the workspace also builds rustls's aws-lc
    // (zookeeper-client's tls feature, for the sidecar), and with two compiled in, kube's
    // client cannot pick one by itself and panics.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => {
            let yaml = crd::crd_yaml().context("serialize the CRD")?;
            std::io::stdout()
                .write_all(yaml.as_bytes())
                .context("write the CRD to stdout")?;
            Ok(())
        }
        Command::Render(args) => {
            let yaml = std::fs::read_to_string(&args.file)
                .with_context(|| format!("read {}", args.file.display()))?;
            let operator = OperatorPods {
                namespace: args.operator_namespace,
                labels: args.operator_pod_labels,
                metrics_scraper: args.scraper.pods(),
            };
            let files = baton_operator::render::render(
                &yaml,
                &args.namespace,
                &args.default_image,
                &operator,
            )
            .with_context(|| format!("render {}", args.file.display()))?;
            std::fs::create_dir_all(&args.out)
                .with_context(|| format!("create {}", args.out.display()))?;
            for (name, text) in files {
                let path = args.out.join(name);
                std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
            }
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
    let metrics = Arc::new(Metrics::new());
    let listener = baton_listen::bind(args.metrics_addr)
        .await
        .with_context(|| format!("listen on {}", args.metrics_addr))?;
    let readiness = http_server::Readiness::new(args.webhook_addr.is_some());
    tokio::spawn(http_server::serve(
        listener,
        metrics.clone(),
        readiness.clone(),
    ));

    let client = kube::Client::try_default()
        .await
        .context("no Kubernetes access (in-cluster or KUBECONFIG)")?;
    if let Some(addr) = args.webhook_addr {
        // Every replica serves the webhook, leader or not: the Service spreads reviews over them.
        let cert = start_webhook(addr, &args, client.clone(), metrics.clone()).await?;
        readiness.webhook_listening(cert);
    }
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
        stuck_after: args.stuck_after,
        operator_pods: OperatorPods {
            namespace: args.lease_namespace.clone(),
            labels: args.operator_pod_labels.clone(),
            metrics_scraper: args.scraper.pods(),
        },
        ..Settings::default()
    };
    let missing = Arc::new(MissingSidecars::default());
    let (changed, reconcile_all) = tokio::sync::mpsc::channel(1);
    let audit = SidecarAudit::new(
        client.clone(),
        KubeEnsembles::new(client.clone()),
        EventSink::new(client.clone(), Some(identity.clone())),
        metrics.clone(),
        missing.clone(),
    );
    let audit = tokio::spawn(audit.run(args.sidecar_audit_interval, changed));
    let ctx = Arc::new(
        Context::new(
            client,
            HttpAdmins::new(Duration::from_secs(3)),
            settings,
            metrics.clone(),
        )
        .with_missing_sidecars(missing),
    );
    let reconcile_all = futures::stream::unfold(reconcile_all, |mut rx| async move {
        rx.recv().await.map(|()| ((), rx))
    });
    let _audit = AbortOnDrop(audit);
    tokio::select! {
        _ = controller::run(ctx, shutdown_signal(), reconcile_all) => {
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

/// Stops a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves the webhook; returns the certificate it serves (interim until the stored one is read).
async fn start_webhook(
    addr: SocketAddr,
    args: &RunArgs,
    client: kube::Client,
    metrics: Arc<Metrics>,
) -> anyhow::Result<Arc<ReloadableCert>> {
    let settings = InjectSettings {
        image: args
            .sidecar_image
            .clone()
            .unwrap_or_else(|| args.default_image.clone()),
        native_sidecar: true,
    };
    let cert = match &args.webhook_cert_dir {
        Some(dir) => {
            let (key, seen) = certified_key_from_dir(dir)
                .with_context(|| format!("webhook certificate in {}", dir.display()))?;
            let cert = ReloadableCert::new(key);
            tokio::spawn(server::watch_cert_dir(
                dir.clone(),
                cert.clone(),
                seen,
                Duration::from_secs(60),
            ));
            cert
        }
        None => {
            let store = CertStore {
                client: client.clone(),
                namespace: args.lease_namespace.clone(),
                secret_name: args.webhook_secret.clone(),
                webhook_config: args.webhook_config_name.clone(),
                dns_names: certs::service_dns_names(&args.webhook_service, &args.lease_namespace),
            };
            // Serve at once with a throw-away certificate; the stored one replaces it as soon
            // as the Secret is read, and the API server trusts only that one's CA anyway.
            let interim = certs::new_bundle(&store.dns_names, None, Timestamp::now())
                .context("make an interim webhook certificate")?;
            let cert = ReloadableCert::interim(server::certified_key(
                interim.cert_pem.as_bytes(),
                interim.key_pem.as_bytes(),
                "interim certificate",
            )?);
            tokio::spawn(store.keep_rotated(cert.clone(), Duration::from_secs(3600)));
            cert
        }
    };
    let listener = baton_listen::bind(addr)
        .await
        .with_context(|| format!("listen on {addr}"))?;
    let tls = server::tls_config(cert.clone()).context("webhook TLS configuration")?;
    let injector =
        Arc::new(Injector::new(KubeEnsembles::new(client), settings).with_metrics(metrics));
    tracing::info!(%addr, "serving the sidecar-injection webhook");
    tokio::spawn(server::serve(listener, tls, injector, shutdown_signal()));
    Ok(cert)
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
