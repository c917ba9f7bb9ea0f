//! Runs the reconciler under kube-runtime's `Controller`: a watch on every
//! `CoordinationEnsemble` and on the objects it owns, so a change to either (or a deleted
//! StatefulSet) triggers a reconcile.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::runtime::Controller;
use kube::runtime::watcher;

use crate::crd::CoordinationEnsemble;
use crate::ensemble::AdminConnector;
use crate::names::FIELD_MANAGER;
use crate::reconcile::{Context, error_policy, reconcile};

/// Reconciles until `shutdown` completes (or the watch streams end); each `()` from
/// `reconcile_all` (the missing-sidecar audit's findings changed) reconciles every ensemble.
pub async fn run<A: AdminConnector>(
    ctx: Arc<Context<A>>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    reconcile_all: impl futures::Stream<Item = ()> + Send + 'static,
) {
    let client = ctx.client.clone();
    // Only objects we made: the watches stay small in a busy cluster.
    let owned =
        watcher::Config::default().labels(&format!("app.kubernetes.io/managed-by={FIELD_MANAGER}"));
    Controller::new(
        Api::<CoordinationEnsemble>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(Api::<StatefulSet>::all(client.clone()), owned.clone())
    .owns(Api::<ConfigMap>::all(client.clone()), owned.clone())
    .owns(Api::<Service>::all(client.clone()), owned.clone())
    // A deleted NetworkPolicy is restored at once. Secrets are not watched: that would need
    // list and watch on every Secret in the cluster; a deleted certificate Secret comes back
    // at the next periodic reconcile.
    .owns(Api::<NetworkPolicy>::all(client.clone()), owned.clone())
    .owns(
        Api::<PodDisruptionBudget>::all(client.clone()),
        owned.clone(),
    )
    // The backup CronJob: a run's result reaches status.lastBackup and the metrics at once.
    .owns(Api::<CronJob>::all(client), owned)
    .reconcile_all_on(reconcile_all)
    .graceful_shutdown_on(shutdown)
    .run(reconcile, error_policy, ctx)
    .for_each(|result| async move {
        match result {
            Ok((object, _)) => tracing::debug!(ensemble = %object.name, "reconciled"),
            Err(e) => tracing::debug!(error = %e, "controller event"),
        }
    })
    .await;
}
