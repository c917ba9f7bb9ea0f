//! The reconciler: dereference → validate → plan → build → apply → act → update status. Only
//! `dereference`, `apply`, the ensemble step and `status` (the operation record and the final
//! status) do I/O; the rest is pure.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action as Requeue;

use crate::apply::{self, WriteError};
use crate::build::{self, BuildError};
use crate::build::{OperatorPods, SuperCredentials};
use crate::crd::{CoordinationEnsemble, MembershipOperation, OperationKind};
use crate::dereference::{self, ReadError};
use crate::ensemble::{
    AdminConnector, AdminError, EnsembleSettings, EnsembleView, Roster, SettingsValues, StepError,
    run_action, settings, wait_until,
};
use crate::events::EventSink;
use crate::finalizer;
use crate::metrics::Metrics;
use crate::names::EnsembleNames;
use crate::operation::{self, Decision};
use crate::pki::{self, PkiError};
use crate::plan::{self, Action, Phase};
use crate::reseed;
use crate::sidecar_audit::MissingSidecars;
use crate::status::{self, OperationRecord, StatusInputs};
use crate::validate::validate;

/// Operator settings the reconciler needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Image for ensembles whose spec names none.
    pub default_image: String,
    /// How long a membership step may take to show its effect within one reconcile.
    pub settle_timeout: Duration,
    /// A step in progress for longer than this makes the ensemble Degraded.
    pub stuck_after: Duration,
    /// Requeue interval while a step is in progress.
    pub step_requeue: Duration,
    /// Requeue interval of a stable ensemble (status refresh).
    pub stable_requeue: Duration,
    /// The operator's own pods: the only ones the NetworkPolicy lets reach the admin port.
    pub operator_pods: OperatorPods,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            default_image: String::new(),
            settle_timeout: Duration::from_secs(20),
            stuck_after: Duration::from_secs(600),
            step_requeue: Duration::from_secs(5),
            stable_requeue: Duration::from_secs(300),
            operator_pods: OperatorPods::default(),
        }
    }
}

/// What every reconcile shares.
pub struct Context<A> {
    pub client: kube::Client,
    /// Makes each ensemble's admin client from its admin certificate.
    pub admins: A,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    /// The clock conditions are stamped with (fixed in tests).
    pub now: fn() -> Timestamp,
    /// Where steps and failures are reported as Kubernetes Events.
    pub events: EventSink,
    /// Pods missing their sidecar, per ensemble (found by `sidecar_audit`).
    pub missing_sidecars: Arc<MissingSidecars>,
    /// Consecutive failures per ensemble (`namespace/name`), for exponential requeue.
    failures: Mutex<HashMap<String, u32>>,
}

impl<A> Context<A> {
    /// A context with the system clock.
    pub fn new(client: kube::Client, admins: A, settings: Settings, metrics: Arc<Metrics>) -> Self {
        Context {
            events: EventSink::new(client.clone(), std::env::var("POD_NAME").ok()),
            client,
            admins,
            settings,
            metrics,
            now: Timestamp::now,
            missing_sidecars: Arc::default(),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// The same, reading pods missing their sidecar from `found`.
    pub fn with_missing_sidecars(mut self, found: Arc<MissingSidecars>) -> Self {
        self.missing_sidecars = found;
        self
    }

    /// The same with another clock.
    pub fn with_clock(mut self, now: fn() -> Timestamp) -> Self {
        self.now = now;
        self
    }
}

/// Why a reconcile failed; the controller requeues it with exponential backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error("ensemble step failed: {0}")]
    Step(#[from] StepError),
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error("ensemble admin client: {0}")]
    Admin(#[from] AdminError),
    #[error("no randomness for the super identity's password")]
    Random,
}

impl ReconcileError {
    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ReconcileError::Read(_) => "read",
            ReconcileError::Write(_) => "write",
            ReconcileError::Build(_) => "build",
            ReconcileError::Step(_) => "ensemble",
            ReconcileError::Pki(_) => "certificates",
            ReconcileError::Admin(_) => "admin-client",
            ReconcileError::Random => "random",
        }
    }
}

fn key(ce: &CoordinationEnsemble) -> String {
    format!(
        "{}/{}",
        ce.metadata.namespace.as_deref().unwrap_or(""),
        ce.metadata.name.as_deref().unwrap_or("")
    )
}

/// Reconciles one `CoordinationEnsemble`.
#[tracing::instrument(skip_all, fields(ensemble = %key(&ce)))]
pub async fn reconcile<A: AdminConnector>(
    ce: Arc<CoordinationEnsemble>,
    ctx: Arc<Context<A>>,
) -> Result<Requeue, ReconcileError> {
    let timer = ctx.metrics.start_reconcile();
    let result = reconcile_inner(&ce, &ctx).await;
    timer.finish(result.as_ref().err().map(ReconcileError::kind));
    if result.is_ok()
        && let Ok(mut failures) = ctx.failures.lock()
    {
        failures.remove(&key(&ce));
    }
    result
}

async fn reconcile_inner<A: AdminConnector>(
    ce: &CoordinationEnsemble,
    ctx: &Context<A>,
) -> Result<Requeue, ReconcileError> {
    let now = (ctx.now)();
    let settings = &ctx.settings;
    if ce.metadata.deletion_timestamp.is_some() {
        // Owned objects go with the ensemble; what owner references cannot reach goes here.
        finalizer::cleanup(&ctx.client, ce).await?;
        return Ok(Requeue::await_change());
    }
    let spec = match validate(ce, &settings.default_image) {
        Ok(spec) => spec,
        Err(invalid) => {
            tracing::warn!(error = %invalid, "spec is invalid; nothing applied");
            ctx.events
                .warning(ce, "InvalidSpec", &invalid.to_string())
                .await;
            if let (Some(name), Some(ns)) = (&ce.metadata.name, &ce.metadata.namespace) {
                let names = EnsembleNames::new(name, ns);
                let status = status::invalid(
                    ce.status.as_ref(),
                    ce.metadata.generation,
                    &invalid.to_string(),
                    now,
                );
                status::publish(&ctx.client, &names, &status).await?;
            }
            // A new spec triggers a reconcile by itself.
            return Ok(Requeue::await_change());
        }
    };
    let names = EnsembleNames::new(&spec.name, &spec.namespace);
    // Before anything is written outside the namespace, so nothing there outlives the ensemble.
    finalizer::ensure(&ctx.client, ce).await?;
    let mut dereferenced = dereference::observe(&ctx.client, &ctx.admins, &names).await?;
    let backup_exists = dereferenced.backup_cron_job.is_some();
    let last_backup = spec
        .backup
        .as_ref()
        .and(dereferenced.backup_cron_job.as_ref())
        .and_then(status::last_backup);
    let mut reseed = reseed::requested(ce);
    let reseed_id = reseed.as_ref().and_then(|r| r.as_ref().ok().copied());
    let recorded = ce
        .status
        .as_ref()
        .and_then(|s| s.membership_operation.as_ref())
        // A reseed is carried on only while the annotation still asks for it.
        .filter(|op| op.kind != OperationKind::Reseed || reseed_id == Some(op.member()));
    if let Some(id) = reseed_id {
        dereferenced.observed.volumes = dereference::observe_volume(&ctx.client, &names, id)
            .await?
            .into_iter()
            .collect();
    }
    let observed = &dereferenced.observed;
    if let Some(op) = recorded
        && op.kind == OperationKind::Reseed
        && operation::is_done(op, observed)
    {
        // Done, annotation still there: it goes before the record is cleared, so the reseed
        // is never started again.
        reseed::remove_annotation(&ctx.client, ce).await?;
        reseed = None;
    }
    let base = plan::plan(spec.replicas, observed);
    let (plan, refusal) = match reseed {
        None => (base, None),
        Some(Err(why)) => (base, Some(why)),
        Some(Ok(id)) => match reseed::plan(id, recorded, observed, base.clone(), now) {
            Ok(plan) => (plan, None),
            Err(why) => (base, Some(why)),
        },
    };
    if let Some(why) = &refusal {
        tracing::warn!(reason = %why, "reseed refused");
        ctx.events.warning(ce, "ReseedRefused", why).await;
    }
    let Decision { operation, plan } = operation::decide(recorded, plan, observed, now);
    tracing::debug!(?plan, ?operation, "planned");
    // Certificates for every member that has or is about to get a pod: the spec's, the plan's
    // next StatefulSet size and the current one (a scale-down keeps its pods until Raft has
    // dropped them).
    let highest = spec
        .replicas
        .max(plan.membership.replicas)
        .max(observed.statefulset.as_ref().map_or(0, |s| s.replicas))
        .max(0) as u64;
    let member_ids: Vec<u64> = (1..=highest).collect();
    let pki_plan = pki::plan(&dereferenced.pki, &member_ids, now);
    let pki = pki::issue(&dereferenced.pki, &pki_plan, &names, now)?;
    let new_super = match dereferenced.super_secret_exists {
        true => None,
        false => Some(SuperCredentials::generate().map_err(|_| ReconcileError::Random)?),
    };
    let built = build::build(
        ce,
        &spec,
        plan.membership,
        &pki,
        &settings.operator_pods,
        new_super.as_ref(),
    )?;
    let sidecars_missing = ctx.missing_sidecars.pods_of(&key(ce));
    let mut record = OperationRecord::new(ce.status.as_ref());
    if operation.is_some() {
        // Before the apply, which takes the replica steps.
        record
            .write(&ctx.client, &names, operation.as_ref())
            .await?;
    }
    let applied = apply::apply_all(
        &ctx.client,
        &names,
        &built,
        &dereferenced.secrets,
        backup_exists,
    )
    .await;
    if applied.is_ok() && !pki_plan.is_empty() {
        tracing::info!(certificates = %pki_plan, "certificates written");
        ctx.events.certificates(ce, &pki_plan.to_string()).await;
    }
    if let Err(e) = applied {
        // E.g. a change the API server refuses (volume claim templates are immutable): say so
        // in the status rather than only retrying.
        let status = status::compute(&StatusInputs {
            names: &names,
            generation: ce.metadata.generation,
            plan: &plan,
            view: &observed.ensemble,
            previous: ce.status.as_ref(),
            step_error: Some(e.to_string()),
            now,
            stuck_after: settings.stuck_after,
            plain_client_port: spec.plain_client_port,
            operation: operation.as_ref(),
            refusal: refusal.as_deref(),
            last_backup: last_backup.clone(),
            restore: spec.restore.as_ref(),
            sidecars_missing: &sidecars_missing,
            settings: None,
        });
        ctx.events.warning(ce, "ApplyFailed", &e.to_string()).await;
        if let Err(status_error) = status::publish(&ctx.client, &names, &status).await {
            tracing::warn!(error = %status_error, "cannot report the failed apply in the status");
        }
        return Err(e.into());
    }

    // The admin certificate just applied (the same as the stored one unless it was renewed).
    let admin = ctx.admins.connect(&pki.admin_credentials())?;
    let operation = operation.and_then(|op| op.after_apply(plan.membership.replicas));
    let stage = Stage {
        ce,
        names: &names,
        plan: &plan,
        observed,
    };
    let reseeding = operation
        .as_ref()
        .is_some_and(|op| op.kind == OperationKind::Reseed);
    let (view, operation, step_error) =
        take_step(ctx, &admin, &stage, operation, &mut record).await?;
    if reseeding && operation.is_none() {
        tracing::info!("reseed done");
        reseed::remove_annotation(&ctx.client, ce).await?;
    }
    let roster_size = plan
        .membership
        .replicas
        .max(observed.statefulset.as_ref().map_or(0, |s| s.replicas));
    let (applied_settings, settings_error) = keep_settings(
        ctx,
        &admin,
        ce,
        &dereference::roster(&names, roster_size),
        &view,
        &spec.limits.settings,
    )
    .await;

    let status = status::compute(&StatusInputs {
        names: &names,
        generation: ce.metadata.generation,
        plan: &plan,
        view: &view,
        previous: ce.status.as_ref(),
        step_error: step_error.as_ref().map(ToString::to_string),
        now,
        stuck_after: settings.stuck_after,
        plain_client_port: spec.plain_client_port,
        operation: operation.as_ref(),
        refusal: refusal.as_deref(),
        last_backup: last_backup.clone(),
        restore: spec.restore.as_ref(),
        sidecars_missing: &sidecars_missing,
        settings: applied_settings.as_ref(),
    });
    report_disk_alarm(ctx, ce, &status).await;
    status::publish(&ctx.client, &names, &status).await?;
    ctx.metrics.observe_ensemble(&key(ce), &status);
    ctx.metrics.observe_backup(
        &key(ce),
        spec.backup
            .as_ref()
            .filter(|b| !b.suspend)
            .map(|_| last_backup.as_ref()),
    );
    if let Some(e) = step_error {
        return Err(e.into());
    }
    if let Some(e) = settings_error {
        return Err(e.into());
    }
    let alarm = status::disk_alarm_up(Some(&status));
    Ok(match plan.phase {
        // While an alarm is up, look again soon, so its clearing shows in the status.
        Phase::Stable if refusal.is_none() && !alarm => {
            Requeue::requeue(ctx.settings.stable_requeue)
        }
        _ => Requeue::requeue(ctx.settings.step_requeue),
    })
}

/// Keeps the ensemble's replicated settings at `desired` (`spec.limits`, identities checked):
/// the settings it applies afterwards (`None` if unknown) and why a change failed, if it did
/// (an Event now; the reconcile fails after the status is written, and is retried).
async fn keep_settings<C: AdminConnector>(
    ctx: &Context<C>,
    admin: &C::Admin,
    ce: &CoordinationEnsemble,
    roster: &Roster,
    view: &EnsembleView,
    desired: &SettingsValues,
) -> (Option<EnsembleSettings>, Option<AdminError>) {
    match settings::keep(admin, roster, view, desired).await {
        Ok(outcome) => {
            if let Some(changed) = &outcome.changed {
                tracing::info!(%changed, "ensemble settings changed to match spec.limits");
                ctx.events
                    .normal(
                        ce,
                        "SettingsChanged",
                        "ChangeSettings",
                        &format!("PUT /v1/settings {changed}: applied"),
                    )
                    .await;
            }
            (outcome.applied, None)
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot change the ensemble's settings");
            ctx.events
                .warning(ce, "SettingsFailed", &format!("PUT /v1/settings: {e}"))
                .await;
            // What the leader reported before the attempt.
            let current = view
                .leader()
                .and_then(|l| view.statuses.get(&l))
                .and_then(|s| s.settings.clone());
            (current, Some(e))
        }
    }
}

/// An Event when a member's NOSPACE alarm rises or the last one clears (the condition
/// `DiskAlarm` says it meanwhile).
async fn report_disk_alarm<C>(
    ctx: &Context<C>,
    ce: &CoordinationEnsemble,
    status: &crate::crd::CoordinationEnsembleStatus,
) {
    let was = status::disk_alarm_up(ce.status.as_ref());
    let now = status::disk_alarm_up(Some(status));
    let message = status
        .conditions
        .iter()
        .find(|c| c.type_ == status::DISK_ALARM)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    match (was, now) {
        (false, true) => {
            tracing::warn!(%message, "disk alarm");
            ctx.events.warning(ce, "DiskAlarm", &message).await;
        }
        (true, false) => {
            tracing::info!("disk alarm cleared");
            ctx.events
                .normal(ce, "DiskAlarmCleared", "Observe", &message)
                .await;
        }
        _ => {}
    }
}

/// What the step stage works on.
struct Stage<'a> {
    ce: &'a CoordinationEnsemble,
    names: &'a EnsembleNames,
    plan: &'a plan::Plan,
    observed: &'a plan::Observed,
}

/// Takes the plan's step, if any, once `operation` is recorded at it, and moves the operation
/// past what the step and its effect did. Returns the ensemble as it is afterwards, the
/// operation and, if the ensemble refused the step, why (reported in the status, then retried
/// with backoff).
async fn take_step<C: AdminConnector>(
    ctx: &Context<C>,
    admin: &C::Admin,
    stage: &Stage<'_>,
    mut operation: Option<MembershipOperation>,
    record: &mut OperationRecord,
) -> Result<StepOutcome, ReconcileError> {
    let Stage {
        ce,
        names,
        plan,
        observed,
    } = *stage;
    let Some(action) = plan.action else {
        return Ok((observed.ensemble.clone(), operation, None));
    };
    record.write(&ctx.client, names, operation.as_ref()).await?;
    let reseeding = match plan.phase {
        Phase::Reseeding(id) => Some(id),
        _ => None,
    };
    ctx.events.step(ce, &action, reseeding).await;
    let step = match action {
        Action::Membership(step) => step,
        Action::ReplaceVolume { id } => {
            tracing::info!(member = id, "replacing the member's volume to reseed it");
            apply::replace_volume(&ctx.client, names, id).await?;
            let operation = operation.and_then(MembershipOperation::next);
            return Ok((observed.ensemble.clone(), operation, None));
        }
        Action::RestartMember { id } => {
            tracing::info!(member = id, "restarting member for the rolling update");
            apply::restart_member(&ctx.client, names, id).await?;
            let operation = operation.and_then(MembershipOperation::next);
            return Ok((observed.ensemble.clone(), operation, None));
        }
    };
    tracing::info!(%step, "membership step");
    let roster_size = plan
        .membership
        .replicas
        .max(observed.statefulset.as_ref().map_or(0, |s| s.replicas));
    let roster = dereference::roster(names, roster_size);
    if let Err(e) = run_action(admin, &roster, step).await {
        tracing::warn!(error = %e, "membership step failed");
        ctx.events.warning(ce, "StepFailed", &e.to_string()).await;
        return Ok((observed.ensemble.clone(), operation, Some(e)));
    }
    // Sent: now awaiting its effect.
    operation = operation.and_then(MembershipOperation::next);
    let limit = ctx.settings.settle_timeout;
    match wait_until(admin, &roster, &step.to_string(), limit, |v| {
        step.is_settled(v)
    })
    .await
    {
        Ok(settled) => Ok((settled, operation.and_then(MembershipOperation::next), None)),
        // Not an error: the next reconcile looks again, and a step that never settles is
        // reported as stuck.
        Err(e) => {
            tracing::info!(error = %e, "step not settled yet");
            Ok((EnsembleView::observe(admin, &roster).await, operation, None))
        }
    }
}

/// The ensemble after the step, the operation in flight, and why the step failed.
type StepOutcome = (EnsembleView, Option<MembershipOperation>, Option<StepError>);

/// Requeues a failed reconcile after 1 s, 2 s, 4 s ... up to 5 minutes.
pub fn error_policy<A: AdminConnector>(
    ce: Arc<CoordinationEnsemble>,
    error: &ReconcileError,
    ctx: Arc<Context<A>>,
) -> Requeue {
    let failures = match ctx.failures.lock() {
        Ok(mut map) => {
            let n = map.entry(key(&ce)).or_insert(0);
            *n = n.saturating_add(1);
            *n
        }
        Err(_) => 1,
    };
    let delay = backoff(failures);
    tracing::warn!(ensemble = %key(&ce), error = %error, failures, ?delay, "reconcile failed; requeueing");
    Requeue::requeue(delay)
}

/// Exponential backoff after `failures` consecutive failures (at least one).
pub fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(9);
    Duration::from_secs(1u64 << exp).min(Duration::from_secs(300))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_five_minutes() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(4), Duration::from_secs(8));
        assert_eq!(backoff(30), Duration::from_secs(300));
    }
}
