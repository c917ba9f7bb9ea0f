//! Backups and restores: the CronJob `zk-backup` created with `spec.backup`, updated when it
//! changes, deleted when it goes; `status.lastBackup` and the backup metrics from the
//! CronJob's status; `spec.restoreFrom` restoring only a new ensemble's members, and refused
//! when added to one that exists.

use baton_operator::build::{StoredMembership, build};
use baton_operator::crd::CoordinationEnsemble;
use baton_operator::validate::validate;
use http::Method;
use serde_json::{Value, json};

use super::api_server::{
    APPS, CE, CRON_JOB, EVENTS, NETWORKING, World, apply_lines, body, lines, operator_pods,
};
use super::fake_ensemble::FakeEnsemble;
use super::{condition, running, stored_pki};

const BACKUP: &str =
    "{schedule: '0 3 * * *', keep: 5, target: {pvc: {claimName: backups, path: zk}}}";

/// The CronJob `build` makes for the world's ensemble (3 members), as JSON.
fn expected_cron_job(world: &World) -> Value {
    let ce: CoordinationEnsemble = serde_json::from_value(world.ce.clone()).expect("ce");
    let spec = validate(&ce, "baton:1").expect("valid");
    let built = build(
        &ce,
        &spec,
        StoredMembership {
            replicas: 3,
            bootstrap: 3,
        },
        &stored_pki(world, &[1, 2, 3]),
        &operator_pods(),
        None,
    )
    .expect("built");
    serde_json::to_value(built.backup.expect("a CronJob")).expect("serializes")
}

/// The operator's backup series for prod/zk, as `/metrics` shows them.
fn backup_metrics(world: &World) -> Vec<String> {
    world
        .metrics
        .render()
        .lines()
        .filter(|l| l.starts_with("baton_operator_backup_") && l.contains("prod/zk"))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn the_backup_cron_job_follows_the_spec_and_reports_its_runs() {
    let mut world = running(&format!("{{replicas: 3, backup: {BACKUP}}}"), 3, 1).await;
    assert_eq!(
        world.cron_job,
        Some(expected_cron_job(&world)),
        "made with the ensemble"
    );

    // Steady: applied again (server-side apply, so no change), after the StatefulSet.
    let seen = world.reconcile().await;
    let mut expected = apply_lines(true, &[]);
    expected.push(format!("PATCH {CRON_JOB}"));
    expected.push(format!("PATCH {CE}/status"));
    assert_eq!(lines(&seen), expected);
    let cron_job = body(&seen, Method::PATCH, CRON_JOB);
    assert_eq!(cron_job["spec"]["schedule"], "0 3 * * *");
    assert_eq!(cron_job["spec"]["concurrencyPolicy"], "Forbid");
    let policy = body(
        &seen,
        Method::PATCH,
        &format!("{NETWORKING}/networkpolicies/zk-members"),
    );
    assert_eq!(
        policy["spec"]["ingress"][1]["from"][1]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "baton-backup",
        "the backup pods reach the admin port"
    );
    // Not run yet: no lastBackup, no success to report, nothing failed.
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert!(status.get("lastBackup").is_none(), "{status}");
    assert_eq!(
        backup_metrics(&world),
        ["baton_operator_backup_last_run_failed{ensemble=\"prod/zk\"} 0"]
    );

    // A new schedule: the CronJob is updated.
    let mut changed: Value = serde_saphyr::from_str(BACKUP).expect("yaml");
    changed["schedule"] = json!("30 1 * * *");
    world.set_spec("backup", changed);
    let seen = world.reconcile().await;
    assert_eq!(
        body(&seen, Method::PATCH, CRON_JOB)["spec"]["schedule"],
        "30 1 * * *"
    );
    assert_eq!(world.cron_job, Some(expected_cron_job(&world)));

    // A run succeeded.
    world.cron_job_status = json!({
        "lastScheduleTime": "2026-11-23T01:30:00Z",
        "lastSuccessfulTime": "2026-11-23T01:30:40Z",
    });
    let seen = world.reconcile().await;
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert_eq!(status["lastBackup"]["result"], "Succeeded");
    assert_eq!(status["lastBackup"]["time"], "2026-11-23T01:30:00Z");
    assert_eq!(
        status["lastBackup"]["lastSuccessTime"],
        "2026-11-23T01:30:40Z"
    );
    assert!(
        status["lastBackup"]["job"]
            .as_str()
            .is_some_and(|j| j.starts_with("zk-backup-"))
    );
    let success: i64 = "2026-11-23T01:30:40Z"
        .parse::<k8s_openapi::jiff::Timestamp>()
        .map(|t| t.as_second())
        .expect("time");
    assert_eq!(
        backup_metrics(&world),
        [
            format!(
                "baton_operator_backup_last_success_timestamp_seconds{{ensemble=\"prod/zk\"}} {success}"
            ),
            "baton_operator_backup_last_run_failed{ensemble=\"prod/zk\"} 0".to_string(),
        ]
    );

    // The next one failed: the last success stays, the failure shows.
    world.cron_job_status["lastScheduleTime"] = json!("2026-11-24T01:30:00Z");
    let seen = world.reconcile().await;
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert_eq!(status["lastBackup"]["result"], "Failed");
    assert_eq!(
        status["lastBackup"]["lastSuccessTime"],
        "2026-11-23T01:30:40Z"
    );
    let metrics = backup_metrics(&world);
    assert!(
        metrics
            .contains(&"baton_operator_backup_last_run_failed{ensemble=\"prod/zk\"} 1".to_string()),
        "{metrics:?}"
    );
    assert!(
        metrics.iter().any(|m| m.ends_with(&format!(" {success}"))),
        "{metrics:?}"
    );

    // Suspended: the CronJob says so, and the alert's series go.
    let mut suspended: Value = serde_saphyr::from_str(BACKUP).expect("yaml");
    suspended["suspend"] = json!(true);
    world.set_spec("backup", suspended);
    let seen = world.reconcile().await;
    assert_eq!(
        body(&seen, Method::PATCH, CRON_JOB)["spec"]["suspend"],
        true
    );
    assert!(backup_metrics(&world).is_empty());

    // spec.backup removed: the CronJob is deleted (its Jobs with it), once.
    world.set_spec("backup", Value::Null);
    let seen = world.reconcile().await;
    let mut expected = apply_lines(true, &[]);
    expected.push(format!("DELETE {CRON_JOB}"));
    expected.push(format!("PATCH {CE}/status"));
    assert_eq!(lines(&seen), expected);
    assert_eq!(
        body(&seen, Method::DELETE, CRON_JOB)["propagationPolicy"],
        "Background"
    );
    assert_eq!(world.cron_job, None);
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert!(status.get("lastBackup").is_none(), "{status}");
    let policy = body(
        &seen,
        Method::PATCH,
        &format!("{NETWORKING}/networkpolicies/zk-members"),
    );
    assert_eq!(
        policy["spec"]["ingress"][1]["from"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "only the operator reaches the admin port again"
    );
    let seen = world.reconcile().await;
    assert!(
        !lines(&seen)
            .iter()
            .any(|l| l.contains("cronjobs") && !l.starts_with("GET"))
    );
}

#[tokio::test]
async fn restore_from_restores_the_members_of_a_new_ensemble_only() {
    let spec = "{replicas: 3, restoreFrom: {s3: {bucket: baton-backups, key: prod/, region: eu-1, credentialsSecret: s3}}}";
    let mut world = World::new(spec, FakeEnsemble::new(&[1, 2, 3], 1));
    world.reconcile().await;
    let sts = world.statefulset.clone().expect("a StatefulSet");
    let init = &sts["spec"]["template"]["spec"]["initContainers"][0];
    assert_eq!(init["name"], "restore");
    assert!(
        init["env"]
            .as_array()
            .expect("env")
            .iter()
            .any(|e| e["name"] == "RESTORE_FROM" && e["value"] == "s3://baton-backups/prod/")
    );
    assert_eq!(
        world.ce["status"]["restore"],
        json!({"source": "s3://baton-backups/prod/"})
    );

    // The members start, restore, and form a quorum: the restore is complete.
    world.run_pods(3, "r1");
    let seen = world.reconcile().await;
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert_eq!(condition(status, "Available")["status"], "True");
    assert_eq!(status["restore"]["completedAt"], "2026-11-23T12:00:00Z");

    // From then on members start without it (a member re-created later joins or keeps its data).
    let seen = world.reconcile().await;
    let sts = body(&seen, Method::PATCH, &format!("{APPS}/statefulsets/zk"));
    assert!(
        sts["spec"]["template"]["spec"]
            .get("initContainers")
            .is_none(),
        "{sts}"
    );
    assert_eq!(
        world.ce["status"]["restore"]["completedAt"],
        "2026-11-23T12:00:00Z"
    );

    // The same source stays accepted; another one is refused, nothing applied.
    world.set_spec(
        "restoreFrom",
        json!({"pvc": {"claimName": "backups", "path": "zk/"}}),
    );
    world.events.clear();
    let seen = world.reconcile().await;
    assert_eq!(
        lines(&seen),
        vec![format!("POST {EVENTS}"), format!("PATCH {CE}/status")]
    );
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert_eq!(condition(status, "Degraded")["reason"], "InvalidSpec");
    let message = condition(status, "Degraded")["message"]
        .as_str()
        .unwrap_or("");
    assert!(
        message.contains("changed from s3://baton-backups/prod/ to pvc://backups/zk/"),
        "{message}"
    );
    assert_eq!(
        status["restore"]["source"], "s3://baton-backups/prod/",
        "kept"
    );
}

#[tokio::test]
async fn restore_from_added_to_an_existing_ensemble_is_refused() {
    let mut world = running("{replicas: 3}", 3, 1).await;
    world.set_spec(
        "restoreFrom",
        json!({"pvc": {"claimName": "backups", "path": "zk/prod.zk-20261101T030000Z.baton-backup"}}),
    );
    let seen = world.reconcile().await;
    assert_eq!(
        lines(&seen),
        vec![format!("POST {EVENTS}"), format!("PATCH {CE}/status")],
        "nothing applied"
    );
    assert_eq!(world.events.len(), 1);
    assert!(
        world.events[0].starts_with("Warning InvalidSpec: spec.restoreFrom was added after"),
        "{:?}",
        world.events
    );
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert_eq!(condition(status, "Degraded")["status"], "True");
    assert!(
        condition(status, "Degraded")["message"]
            .as_str()
            .is_some_and(|m| m.contains("create a new CoordinationEnsemble")),
        "{status}"
    );
    let sts = world.statefulset.clone().expect("the StatefulSet");
    assert!(
        sts["spec"]["template"]["spec"]
            .get("initContainers")
            .is_none()
    );

    // Taken back out: reconciled as before.
    world.set_spec("restoreFrom", Value::Null);
    let seen = world.reconcile().await;
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert_eq!(condition(status, "Degraded")["status"], "False");
    assert!(status.get("restore").is_none());
}
