//! The operator's Prometheus metrics (served on `/metrics`).

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use baton_metrics::{Catalog, FamilyInfo};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use crate::crd::{BackupResult, CoordinationEnsembleStatus, LastBackup};

type Labels = Vec<(String, String)>;

/// Reconcile counts and durations, per-ensemble readiness, and leadership of this replica.
pub struct Metrics {
    registry: Registry,
    families: Vec<FamilyInfo>,
    reconciles: Family<Labels, Counter>,
    duration: Histogram,
    ready_members: Family<Labels, Gauge>,
    voters: Family<Labels, Gauge>,
    has_leader: Family<Labels, Gauge>,
    is_leader: Gauge<i64, AtomicI64>,
    webhook_reviews: Family<Labels, Counter>,
    backup_last_success: Family<Labels, Gauge>,
    backup_last_failed: Family<Labels, Gauge>,
    pods_missing_sidecar: Family<Labels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric under the `baton_operator` prefix.
    pub fn new() -> Metrics {
        let mut registry = Catalog::with_prefix("baton_operator");
        let reconciles = Family::<Labels, Counter>::default();
        registry.register(
            "reconciles",
            "Reconciles, by result (ok or the error kind)",
            reconciles.clone(),
        );
        let duration = Histogram::new(exponential_buckets(0.01, 2.0, 12));
        registry.register(
            "reconcile_duration_seconds",
            "Time one reconcile took",
            duration.clone(),
        );
        let ready_members = Family::<Labels, Gauge>::default();
        registry.register(
            "ensemble_ready_members",
            "Ready voters of each ensemble at its last reconcile",
            ready_members.clone(),
        );
        let voters = Family::<Labels, Gauge>::default();
        registry.register(
            "ensemble_voters",
            "Voters in each ensemble's Raft configuration at its last reconcile",
            voters.clone(),
        );
        let has_leader = Family::<Labels, Gauge>::default();
        registry.register(
            "ensemble_has_leader",
            "1 if the ensemble reported a leader at its last reconcile",
            has_leader.clone(),
        );
        let is_leader = Gauge::default();
        registry.register(
            "is_leader",
            "1 while this operator replica holds the leader Lease",
            is_leader.clone(),
        );
        let webhook_reviews = Family::<Labels, Counter>::default();
        registry.register(
            "webhook_reviews",
            "AdmissionReviews the injection webhook answered, by outcome (injected, skipped, \
             denied, unreadable)",
            webhook_reviews.clone(),
        );
        let backup_last_success = Family::<Labels, Gauge>::default();
        registry.register(
            "backup_last_success_timestamp_seconds",
            "When the last successful backup of each ensemble with spec.backup completed \
             (Unix time; no series before the first, nor while backups are suspended)",
            backup_last_success.clone(),
        );
        let backup_last_failed = Family::<Labels, Gauge>::default();
        registry.register(
            "backup_last_run_failed",
            "1 if the last backup run of the ensemble failed (0 while it runs or after a success)",
            backup_last_failed.clone(),
        );
        let pods_missing_sidecar = Family::<Labels, Gauge>::default();
        registry.register(
            "pods_missing_sidecar",
            "Pods annotated baton.dev/inject: \"true\" in namespaces labelled \
             baton.dev/injection=enabled that run without the baton-sidecar container, by the \
             ensemble they name (unresolved: none, or several, answer)",
            pods_missing_sidecar.clone(),
        );
        let (registry, families) = registry.finish();
        Metrics {
            registry,
            families,
            pods_missing_sidecar,
            backup_last_success,
            backup_last_failed,
            reconciles,
            duration,
            ready_members,
            voters,
            has_leader,
            is_leader,
            webhook_reviews,
        }
    }

    /// Starts timing a reconcile.
    pub fn start_reconcile(self: &Arc<Self>) -> ReconcileTimer {
        ReconcileTimer {
            metrics: self.clone(),
            started: Instant::now(),
        }
    }

    /// Records an ensemble's readiness from the status just written.
    pub fn observe_ensemble(&self, key: &str, status: &CoordinationEnsembleStatus) {
        let labels = vec![("ensemble".to_string(), key.to_string())];
        self.ready_members
            .get_or_create(&labels)
            .set(i64::from(status.ready_replicas));
        self.voters
            .get_or_create(&labels)
            .set(status.members.len() as i64);
        self.has_leader
            .get_or_create(&labels)
            .set(i64::from(status.leader.is_some()));
    }

    /// Records an ensemble's backups: `None` when it has none (or they are suspended), which
    /// drops its series; otherwise its CronJob's last run, if it ran yet.
    pub fn observe_backup(&self, key: &str, backup: Option<Option<&LastBackup>>) {
        let labels = vec![("ensemble".to_string(), key.to_string())];
        let Some(last) = backup else {
            self.backup_last_success.remove(&labels);
            self.backup_last_failed.remove(&labels);
            return;
        };
        let success = last
            .and_then(|l| l.last_success_time.as_deref())
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
        match success {
            Some(t) => {
                self.backup_last_success
                    .get_or_create(&labels)
                    .set(t.as_second());
            }
            None => {
                self.backup_last_success.remove(&labels);
            }
        }
        let failed = last.is_some_and(|l| l.result == BackupResult::Failed);
        self.backup_last_failed
            .get_or_create(&labels)
            .set(i64::from(failed));
    }

    /// Records the pods missing their sidecar per ensemble (`NAMESPACE/NAME`): series of
    /// ensembles no longer listed are dropped.
    pub fn observe_missing_sidecars(&self, counts: &std::collections::BTreeMap<String, usize>) {
        self.pods_missing_sidecar.clear();
        for (ensemble, count) in counts {
            self.pods_missing_sidecar
                .get_or_create(&vec![("ensemble".to_string(), ensemble.clone())])
                .set(*count as i64);
        }
    }

    /// Counts one AdmissionReview by what the webhook answered.
    pub fn record_review(&self, outcome: &str) {
        self.webhook_reviews
            .get_or_create(&vec![("outcome".to_string(), outcome.to_string())])
            .inc();
    }

    /// Records whether this replica leads.
    pub fn set_leader(&self, leading: bool) {
        self.is_leader.set(i64::from(leading));
    }

    /// Every family registered, with its help and type, including labelled ones that have no
    /// series yet (the metrics reference is made from this).
    pub fn families(&self) -> &[FamilyInfo] {
        &self.families
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        out
    }
}

/// Times one reconcile; `finish` records it.
pub struct ReconcileTimer {
    metrics: Arc<Metrics>,
    started: Instant,
}

impl ReconcileTimer {
    /// Records the duration and the result (`None` = success, else the error kind).
    pub fn finish(self, error: Option<&str>) {
        self.metrics
            .duration
            .observe(self.started.elapsed().as_secs_f64());
        let result = error.unwrap_or("ok").to_string();
        self.metrics
            .reconciles
            .get_or_create(&vec![("result".to_string(), result)])
            .inc();
    }
}
