//! Stage 5 of the reconcile pipeline: the status the operator reports — conditions Available,
//! Progressing and Degraded, members and leader from the ensemble's own `/v1/status` — computed
//! purely, then written with server-side apply on the status subresource.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::apply::WriteError;
use k8s_openapi::api::batch::v1::CronJob;

use crate::crd::{
    AlarmStatus, BackupResult, CoordinationEnsemble, CoordinationEnsembleStatus, LastBackup,
    MembershipOperation, RestoreStatus, SettingsStatus, StepStatus,
};
use crate::ensemble::{EnsembleSettings, EnsembleView};
use crate::names::{EnsembleNames, FIELD_MANAGER};
use crate::plan::{Phase, Plan};
use crate::validate::Restore;

/// What the status is computed from.
#[derive(Debug, Clone)]
pub struct StatusInputs<'a> {
    pub names: &'a EnsembleNames,
    pub generation: Option<i64>,
    pub plan: &'a Plan,
    /// The ensemble after this reconcile's step.
    pub view: &'a EnsembleView,
    pub previous: Option<&'a CoordinationEnsembleStatus>,
    /// Why this reconcile's step failed, if it did.
    pub step_error: Option<String>,
    pub now: Timestamp,
    /// A step in progress for longer than this is reported as Degraded.
    pub stuck_after: Duration,
    /// Whether the plain client port is on (`spec.plainClientPort`).
    pub plain_client_port: bool,
    /// The membership operation in flight after this reconcile.
    pub operation: Option<&'a MembershipOperation>,
    /// Why the reseed the ensemble's annotation asks for is refused, if it is.
    pub refusal: Option<&'a str>,
    /// The backup CronJob's last run (`last_backup`), with `spec.backup`.
    pub last_backup: Option<LastBackup>,
    /// `spec.restoreFrom`, accepted.
    pub restore: Option<&'a Restore>,
    /// Pods (`NAMESPACE/POD`) naming this ensemble that run without the sidecar
    /// (`sidecar_audit`): the condition `SidecarsMissing` while there are any.
    pub sidecars_missing: &'a [String],
    /// The ensemble's replicated settings as its leader reports them after this reconcile's
    /// change, if any (`None`: no leader answered; the previous status's are kept).
    pub settings: Option<&'a EnsembleSettings>,
}

/// The condition reporting members' NOSPACE alarms.
pub const DISK_ALARM: &str = "DiskAlarm";

/// The status for a reconciled ensemble.
pub fn compute(input: &StatusInputs<'_>) -> CoordinationEnsembleStatus {
    let description = input.plan.describe();
    let step = description.map(|description| {
        let since = input
            .previous
            .and_then(|p| p.step.as_ref())
            .filter(|s| step_key(&s.description) == step_key(&description))
            .map(|s| s.since.clone())
            .unwrap_or_else(|| input.now.to_string());
        StepStatus { description, since }
    });
    let stuck_for = step.as_ref().and_then(|s| {
        let since: Timestamp = s.since.parse().ok()?;
        let secs = input.now.as_second().saturating_sub(since.as_second());
        (secs >= 0 && secs as u64 >= input.stuck_after.as_secs()).then_some(secs)
    });
    let view = input.view;
    let leader = view.leader();
    let ready = view.ready_voters();
    let available = if view.has_quorum() {
        (
            true,
            "QuorumReady",
            format!(
                "leader is member {}; ready voters {ready:?} of {:?}",
                leader.unwrap_or(0),
                view.voters()
            ),
        )
    } else {
        (
            false,
            "NoQuorum",
            match leader {
                Some(l) => format!(
                    "leader {l} has ready voters {ready:?} of {:?}",
                    view.voters()
                ),
                None => "no member reports a leader".to_string(),
            },
        )
    };
    let progressing = match &input.plan.phase {
        Phase::Stable => (false, "Stable", "every member is up to date".to_string()),
        phase => (
            true,
            phase_reason(phase),
            step.as_ref()
                .map(|s| s.description.clone())
                .unwrap_or_default(),
        ),
    };
    let degraded = match (&input.step_error, stuck_for) {
        (Some(error), _) => (true, "StepFailed", error.clone()),
        (None, _) if input.refusal.is_some() => (
            true,
            "ReseedRefused",
            input.refusal.unwrap_or_default().to_string(),
        ),
        (None, Some(secs)) => (
            true,
            "StepStuck",
            format!(
                "{} has not completed for {secs}s",
                step.as_ref()
                    .map(|s| s.description.as_str())
                    .unwrap_or("a step")
            ),
        ),
        (None, None) => (false, "AsExpected", String::new()),
    };
    let missing = (!input.sidecars_missing.is_empty()).then(|| {
        (
            crate::sidecar_audit::CONDITION,
            (
                true,
                "PodsWithoutSidecar",
                crate::sidecar_audit::condition_message(input.sidecars_missing),
            ),
        )
    });
    let settings = input
        .settings
        .map(settings_status)
        .or_else(|| input.previous.and_then(|p| p.settings.clone()));
    let disk_alarm = settings
        .as_ref()
        .map(|s| (DISK_ALARM, disk_alarm_condition(s)));
    let conditions = [
        ("Available", available),
        ("Progressing", progressing),
        ("Degraded", degraded),
    ]
    .into_iter()
    .chain(disk_alarm)
    .chain(missing)
    .map(|(type_, (status, reason, message))| {
        condition(
            input.previous,
            input.generation,
            input.now,
            type_,
            status,
            reason,
            message,
        )
    })
    .collect();
    CoordinationEnsembleStatus {
        observed_generation: input.generation,
        conditions,
        ready_replicas: ready.len() as i32,
        // int64 in the schema: the API server knows no unsigned formats.
        members: view.voters().into_iter().map(member_id).collect(),
        leader: leader.map(member_id),
        client_endpoint: input
            .plain_client_port
            .then(|| input.names.client_endpoint()),
        secure_client_endpoint: Some(input.names.secure_client_endpoint()),
        selector: Some(input.names.selector_string()),
        step,
        membership_operation: input.operation.cloned(),
        last_backup: input.last_backup.clone(),
        restore: restore_status(input),
        settings,
        // Kept from the previous status while no member answers (the level never goes down).
        feature_level: view
            .feature_level()
            .map(i64::from)
            .or_else(|| input.previous.and_then(|p| p.feature_level)),
        max_feature_level: view
            .max_feature_level()
            .map(i64::from)
            .or_else(|| input.previous.and_then(|p| p.max_feature_level)),
    }
}

/// `status.settings` from what the ensemble reports.
pub fn settings_status(s: &EnsembleSettings) -> SettingsStatus {
    // int64 in the schema; the ensemble's values fit (the CRD bounds them far below).
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let v = &s.values;
    SettingsStatus {
        check_identities: v.check_identities,
        namespace_znodes: int(v.namespace_znodes),
        namespace_bytes: int(v.namespace_bytes),
        shared_znodes: int(v.shared_znodes),
        shared_bytes: int(v.shared_bytes),
        ephemerals_per_session: int(v.ephemerals_per_session),
        alarms: s
            .alarms
            .iter()
            .map(|a| AlarmStatus {
                member: int(a.member),
                kind: a.kind.clone(),
            })
            .collect(),
    }
}

/// `DiskAlarm`: True while any member's NOSPACE alarm is up.
fn disk_alarm_condition(s: &SettingsStatus) -> (bool, &'static str, String) {
    let members: Vec<i64> = s
        .alarms
        .iter()
        .filter(|a| a.kind == "nospace")
        .map(|a| a.member)
        .collect();
    if members.is_empty() {
        return (
            false,
            "NoAlarm",
            "every member has room on its volume".into(),
        );
    }
    (
        true,
        "NoSpace",
        format!(
            "members {members:?} are below spec.limits.minFreeDiskBytes of free space: every \
             member refuses creates and writes that add data (BadArguments, -8) until they have \
             twice that free; reads, deletes and sessions go on. Delete data, or give the \
             members larger volumes"
        ),
    )
}

/// Whether `status` reports a member's NOSPACE alarm.
pub fn disk_alarm_up(status: Option<&CoordinationEnsembleStatus>) -> bool {
    status.is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == DISK_ALARM && c.status == "True")
    })
}

/// `status.restore`: the source, and when the restored ensemble first had a quorum (from
/// then on new pods start without the restore). Kept when `spec.restoreFrom` is removed.
fn restore_status(input: &StatusInputs<'_>) -> Option<RestoreStatus> {
    let previous = input.previous.and_then(|p| p.restore.as_ref());
    let Some(restore) = input.restore else {
        return previous.cloned();
    };
    let source = restore.source.describe();
    let completed_at = previous
        .filter(|p| p.source == source)
        .and_then(|p| p.completed_at.clone())
        .or_else(|| input.view.has_quorum().then(|| input.now.to_string()));
    Some(RestoreStatus {
        source,
        completed_at,
    })
}

/// The last run of the backup CronJob, from its status: running while it lists an active Job;
/// else succeeded if its last success is its last schedule, failed if not. The Job of a run is
/// named as the CronJob controller names it (`CRONJOB-MINUTES_SINCE_EPOCH`).
pub fn last_backup(cron_job: &CronJob) -> Option<LastBackup> {
    let status = cron_job.status.as_ref()?;
    let scheduled = status.last_schedule_time.as_ref()?.0;
    let succeeded = status.last_successful_time.as_ref().map(|t| t.0);
    let active = status
        .active
        .as_ref()
        .and_then(|jobs| jobs.iter().find_map(|job| job.name.clone()));
    let result = match (&active, succeeded) {
        (Some(_), _) => BackupResult::Running,
        (None, Some(success)) if success >= scheduled => BackupResult::Succeeded,
        (None, _) => BackupResult::Failed,
    };
    let name = cron_job.metadata.name.as_deref().unwrap_or_default();
    Some(LastBackup {
        time: scheduled.to_string(),
        result,
        job: active.or_else(|| Some(format!("{name}-{}", scheduled.as_second().div_euclid(60)))),
        last_success_time: succeeded.map(|t| t.to_string()),
    })
}

/// The status for a spec that failed validation: nothing was applied.
pub fn invalid(
    previous: Option<&CoordinationEnsembleStatus>,
    generation: Option<i64>,
    error: &str,
    now: Timestamp,
) -> CoordinationEnsembleStatus {
    let mut status = previous.cloned().unwrap_or_default();
    let keep = |type_: &str, status: bool, reason: &str, message: String| {
        condition(previous, generation, now, type_, status, reason, message)
    };
    let available = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Available")
        .cloned();
    status.conditions = vec![
        available.unwrap_or_else(|| keep("Available", false, "NotReconciled", String::new())),
        keep("Progressing", false, "InvalidSpec", error.to_string()),
        keep("Degraded", true, "InvalidSpec", error.to_string()),
    ];
    status.observed_generation = generation;
    status
}

/// Writes `status` to the status subresource by server-side apply.
pub async fn publish(
    client: &kube::Client,
    names: &EnsembleNames,
    status: &CoordinationEnsembleStatus,
) -> Result<(), WriteError> {
    let patch = json!({
        "apiVersion": "baton.dev/v1alpha1",
        "kind": "CoordinationEnsemble",
        "status": status,
    });
    Api::<CoordinationEnsemble>::namespaced(client.clone(), &names.namespace)
        .patch_status(
            &names.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map(|_| ())
        .map_err(|source| WriteError {
            verb: "update status of",
            what: format!("CoordinationEnsemble {}", names.name),
            source,
        })
}

/// Writes `status.membershipOperation` ahead of each step, the rest of the status as it was:
/// the apply owns every field it sends, so a status without the others would drop them.
pub struct OperationRecord {
    status: CoordinationEnsembleStatus,
}

impl OperationRecord {
    /// The record as the ensemble's `previous` status holds it.
    pub fn new(previous: Option<&CoordinationEnsembleStatus>) -> Self {
        OperationRecord {
            status: previous.cloned().unwrap_or_default(),
        }
    }

    /// Records `operation` unless it is what the status holds already.
    pub async fn write(
        &mut self,
        client: &kube::Client,
        names: &EnsembleNames,
        operation: Option<&MembershipOperation>,
    ) -> Result<(), WriteError> {
        if self.status.membership_operation.as_ref() == operation {
            return Ok(());
        }
        self.status.membership_operation = operation.cloned();
        publish(client, names, &self.status).await
    }
}

/// What makes two descriptions the same step: a wait is one wait however its reason reads
/// (members going from `[3]` to `[2, 3]` not ready must not restart the stuck clock).
fn step_key(description: &str) -> &str {
    if description.starts_with("Waiting") {
        "Waiting"
    } else {
        description
    }
}

fn member_id(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

fn phase_reason(phase: &Phase) -> &'static str {
    match phase {
        Phase::Creating => "Creating",
        Phase::Recreating => "Recreating",
        Phase::ScalingUp => "ScalingUp",
        Phase::ScalingDown => "ScalingDown",
        Phase::Rolling => "RollingUpdate",
        Phase::Repairing => "Repairing",
        Phase::Reseeding(_) => "Reseeding",
        Phase::Waiting(_) => "WaitingForHealthyQuorum",
        Phase::Stable => "Stable",
    }
}

fn bool_str(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// A condition whose `lastTransitionTime` moves only when its status does.
fn condition(
    previous: Option<&CoordinationEnsembleStatus>,
    generation: Option<i64>,
    now: Timestamp,
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
) -> Condition {
    let previous_time = previous
        .and_then(|p| p.conditions.iter().find(|c| c.type_ == type_))
        .filter(|c| c.status == bool_str(status))
        .map(|c| c.last_transition_time.clone());
    Condition {
        type_: type_.into(),
        status: bool_str(status).into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: previous_time.unwrap_or(Time(now)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::StoredMembership;

    fn inputs<'a>(
        names: &'a EnsembleNames,
        plan: &'a Plan,
        view: &'a EnsembleView,
        previous: Option<&'a CoordinationEnsembleStatus>,
        now: &str,
    ) -> StatusInputs<'a> {
        StatusInputs {
            names,
            generation: Some(3),
            plan,
            view,
            previous,
            step_error: None,
            now: now.parse().unwrap_or(Timestamp::UNIX_EPOCH),
            stuck_after: Duration::from_secs(600),
            plain_client_port: false,
            operation: None,
            refusal: None,
            last_backup: None,
            restore: None,
            sidecars_missing: &[],
            settings: None,
        }
    }

    fn waiting(why: &str) -> Plan {
        Plan {
            membership: StoredMembership {
                replicas: 3,
                bootstrap: 3,
            },
            action: None,
            phase: Phase::Waiting(why.into()),
        }
    }

    #[test]
    fn a_wait_whose_reason_changes_is_still_one_step() {
        let names = EnsembleNames::new("zk", "prod");
        let view = EnsembleView::default();
        let first = waiting("members [3] not ready");
        let s1 = compute(&inputs(&names, &first, &view, None, "2026-01-01T00:00:00Z"));
        let second = waiting("members [2, 3] not ready");
        let s2 = compute(&inputs(
            &names,
            &second,
            &view,
            Some(&s1),
            "2026-01-01T00:11:00Z",
        ));
        let step = s2.step.as_ref().map(|s| s.since.as_str());
        assert_eq!(step, Some("2026-01-01T00:00:00Z"));
        let degraded = s2.conditions.iter().find(|c| c.type_ == "Degraded");
        assert_eq!(degraded.map(|c| c.reason.as_str()), Some("StepStuck"));
        assert_eq!(s2.observed_generation, Some(3));
    }

    fn cron_job(status: serde_json::Value) -> CronJob {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "zk-backup"},
            "spec": {"schedule": "0 3 * * *", "jobTemplate": {}},
            "status": status,
        }))
        .expect("a CronJob")
    }

    #[test]
    fn the_last_backup_comes_from_the_cron_jobs_status() {
        use serde_json::json;
        assert_eq!(last_backup(&cron_job(json!({}))), None, "never ran");
        let ok = last_backup(&cron_job(json!({
            "lastScheduleTime": "2026-11-23T03:00:00Z",
            "lastSuccessfulTime": "2026-11-23T03:00:41Z",
        })))
        .expect("ran");
        assert_eq!(ok.result, BackupResult::Succeeded);
        assert_eq!(ok.time, "2026-11-23T03:00:00Z");
        assert_eq!(
            ok.last_success_time.as_deref(),
            Some("2026-11-23T03:00:41Z")
        );
        // Named as the CronJob controller names it: minutes since the epoch.
        let minutes = "2026-11-23T03:00:00Z"
            .parse::<Timestamp>()
            .map(|t| t.as_second() / 60)
            .unwrap_or_default();
        assert_eq!(ok.job, Some(format!("zk-backup-{minutes}")));
        let failed = last_backup(&cron_job(json!({
            "lastScheduleTime": "2026-11-24T03:00:00Z",
            "lastSuccessfulTime": "2026-11-23T03:00:41Z",
        })))
        .expect("ran");
        assert_eq!(failed.result, BackupResult::Failed);
        assert_eq!(
            failed.last_success_time.as_deref(),
            Some("2026-11-23T03:00:41Z")
        );
        let never = last_backup(&cron_job(
            json!({"lastScheduleTime": "2026-11-24T03:00:00Z"}),
        ));
        assert_eq!(never.map(|b| b.result), Some(BackupResult::Failed));
        let running = last_backup(&cron_job(json!({
            "lastScheduleTime": "2026-11-24T03:00:00Z",
            "lastSuccessfulTime": "2026-11-23T03:00:41Z",
            "active": [{"kind": "Job", "name": "zk-backup-29000000", "namespace": "prod"}],
        })))
        .expect("runs");
        assert_eq!(running.result, BackupResult::Running);
        assert_eq!(running.job.as_deref(), Some("zk-backup-29000000"));
    }

    #[test]
    fn a_restore_completes_when_the_ensemble_first_has_a_quorum() {
        use crate::validate::{Location, Restore};
        let names = EnsembleNames::new("zk", "prod");
        let plan = waiting("creating");
        let restore = Restore {
            source: Location::S3 {
                bucket: "bkt".into(),
                key: "prod/".into(),
                endpoint: None,
                region: None,
                credentials_secret: Some("c".into()),
                ca_config_map: None,
            },
            pending: true,
        };
        let no_quorum = EnsembleView::default();
        let mut input = inputs(&names, &plan, &no_quorum, None, "2026-01-01T00:00:00Z");
        input.restore = Some(&restore);
        let first = compute(&input);
        assert_eq!(
            first.restore,
            Some(RestoreStatus {
                source: "s3://bkt/prod/".into(),
                completed_at: None
            })
        );
        // Removed from the spec: the record stays.
        input.restore = None;
        input.previous = Some(&first);
        assert_eq!(compute(&input).restore, first.restore);
    }
}
