//! The backup CronJob, the restore init container and their scripts (run under a real
//! `/bin/sh` with a stand-in `baton-ensemble`).

use std::path::Path;
use std::process::Command;

use super::*;

const PVC_BACKUP: &str = "{backup: {schedule: '0 3 * * *', keep: 2, target: {pvc: {claimName: backups, path: zk/daily}}}}";
const S3_BACKUP: &str = "{backup: {schedule: '@daily', target: {s3: {bucket: my-bucket, prefix: baton/prod, endpoint: 'https://minio:9000', region: eu-1, credentialsSecret: s3-creds}}}}";

fn env_of(container: &serde_json::Value) -> BTreeMap<String, serde_json::Value> {
    container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            let value = if e["value"].is_null() {
                e["valueFrom"].clone()
            } else {
                e["value"].clone()
            };
            (e["name"].as_str().unwrap_or_default().to_string(), value)
        })
        .collect()
}

#[test]
fn no_backup_no_cron_job_and_no_backup_peer_in_the_policy() {
    let b = built("{}", 3, 3);
    assert!(b.backup.is_none());
    let policy = json(&b.network_policy);
    assert_eq!(
        policy["spec"]["ingress"][1]["from"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let pod = json(&b.statefulset)["spec"]["template"]["spec"].clone();
    assert!(pod.get("initContainers").is_none());
}

#[test]
fn the_cron_job_saves_to_a_claim_through_each_member_as_the_admin() {
    let b = built(PVC_BACKUP, 3, 3);
    let cj = json(&b.backup.expect("a CronJob"));
    assert_eq!(cj["apiVersion"], "batch/v1");
    assert_eq!(cj["kind"], "CronJob");
    assert_eq!(cj["metadata"]["name"], "zk-backup");
    assert_eq!(cj["metadata"]["ownerReferences"][0]["uid"], "7d1b");
    assert_eq!(
        cj["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "baton-operator"
    );
    let spec = &cj["spec"];
    assert_eq!(spec["schedule"], "0 3 * * *");
    assert_eq!(spec["suspend"], false);
    assert_eq!(spec["concurrencyPolicy"], "Forbid");
    assert_eq!(spec["successfulJobsHistoryLimit"], 3);
    assert_eq!(spec["failedJobsHistoryLimit"], 3);
    let pod_labels = &spec["jobTemplate"]["spec"]["template"]["metadata"]["labels"];
    assert_eq!(pod_labels["app.kubernetes.io/name"], "baton-backup");
    assert_eq!(pod_labels["app.kubernetes.io/instance"], "zk");
    let pod = &spec["jobTemplate"]["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "baton:test");
    assert_eq!(c["command"][2], BACKUP_SCRIPT);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["args"], json!([]));
    let env = env_of(c);
    assert_eq!(
        env["BACKUP_ADMIN_HOSTS"],
        "zk-0.zk-peers.prod.svc:8080 zk-1.zk-peers.prod.svc:8080 zk-2.zk-peers.prod.svc:8080"
    );
    assert_eq!(env["BACKUP_ADMIN_DIR"], "/etc/baton/admin");
    assert_eq!(env["BACKUP_CLUSTER_ID"], "prod.zk");
    assert_eq!(env["BACKUP_DIR"], "/var/lib/baton/backup/zk/daily");
    assert_eq!(env["BACKUP_KEEP"], "2");
    assert!(!env.contains_key("AWS_ACCESS_KEY_ID"));
    // The admin certificate (and the CA in it), read-only; the claim; a writable /tmp.
    let volumes = pod["volumes"].as_array().expect("volumes");
    let admin = volumes
        .iter()
        .find(|v| v["name"] == "admin")
        .expect("admin");
    assert_eq!(admin["secret"]["secretName"], "zk-admin");
    assert_eq!(admin["secret"]["defaultMode"], 0o440);
    let claim = volumes
        .iter()
        .find(|v| v["name"] == "backup")
        .expect("claim");
    assert_eq!(claim["persistentVolumeClaim"]["claimName"], "backups");
    let mounts = c["volumeMounts"].as_array().expect("mounts");
    let at = |name: &str| mounts.iter().find(|m| m["name"] == name).cloned();
    assert_eq!(
        at("admin"),
        Some(json!({"name": "admin", "mountPath": "/etc/baton/admin", "readOnly": true}))
    );
    assert_eq!(
        at("backup").expect("mounted")["mountPath"],
        "/var/lib/baton/backup"
    );
    // The backup pods (and only they, besides the operator) reach the admin port.
    let policy = json(&b.network_policy);
    let admin_rule = &policy["spec"]["ingress"][1];
    assert_eq!(admin_rule["ports"][0]["port"], 8080);
    assert_eq!(
        admin_rule["from"][1],
        json!({"podSelector": {"matchLabels": pod_labels}})
    );
    // The members' own selector does not pick the backup pods.
    let members = &policy["spec"]["podSelector"]["matchLabels"];
    assert_ne!(
        members["app.kubernetes.io/name"],
        pod_labels["app.kubernetes.io/name"]
    );
}

#[test]
fn the_cron_job_saves_to_s3_with_the_credentials_secret() {
    let b = built(
        &S3_BACKUP.replace("'@daily'", "'@daily', suspend: true"),
        5,
        3,
    );
    let cj = json(&b.backup.expect("a CronJob"));
    assert_eq!(cj["spec"]["schedule"], "@daily");
    assert_eq!(cj["spec"]["suspend"], true);
    let pod = &cj["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(
        c["args"],
        json!([
            "--s3-url=s3://my-bucket/baton/prod/",
            "--s3-endpoint=https://minio:9000",
            "--s3-region=eu-1",
            "--keep=7"
        ])
    );
    let env = env_of(c);
    assert!(!env.contains_key("BACKUP_DIR"));
    assert_eq!(
        env["BACKUP_ADMIN_HOSTS"]
            .as_str()
            .map(|h| h.split(' ').count()),
        Some(5),
        "every member of the StatefulSet"
    );
    for key in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
        assert_eq!(
            env[key],
            json!({"secretKeyRef": {"name": "s3-creds", "key": key, "optional": false}})
        );
    }
    assert!(
        pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .all(|v| v["persistentVolumeClaim"].is_null())
    );
}

#[test]
fn the_s3_endpoints_ca_config_map_replaces_the_system_bundle_in_the_backup_job() {
    // Without one: the image's system bundle, no extra volume, no SSL_CERT_FILE.
    let cj = json(&built(S3_BACKUP, 3, 3).backup.expect("a CronJob"));
    let pod = &cj["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert!(!env_of(&pod["containers"][0]).contains_key("SSL_CERT_FILE"));
    assert!(!pod["volumes"].to_string().contains("s3-ca"));

    let spec = S3_BACKUP.replace(
        "credentialsSecret: s3-creds",
        "credentialsSecret: s3-creds, caConfigMap: minio-ca",
    );
    let cj = json(&built(&spec, 3, 3).backup.expect("a CronJob"));
    let pod = &cj["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(env_of(c)["SSL_CERT_FILE"], "/etc/baton/s3-ca/ca.crt");
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "s3-ca")
        .cloned()
        .expect("the CA volume");
    // Only the key `ca.crt`, and required: a missing ConfigMap or key stops the pod rather than
    // letting it trust the system bundle.
    assert_eq!(
        volume["configMap"],
        json!({"name": "minio-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}],
               "defaultMode": 0o444, "optional": false})
    );
    let mounts = c["volumeMounts"].as_array().expect("mounts");
    assert!(
        mounts
            .contains(&json!({"name": "s3-ca", "mountPath": "/etc/baton/s3-ca", "readOnly": true})),
        "{mounts:?}"
    );
    // The flags are the same as without it.
    assert_eq!(c["args"][1], "--s3-endpoint=https://minio:9000");
}

#[test]
fn a_pvc_backup_has_no_ca_config_map() {
    let cj = json(&built(PVC_BACKUP, 3, 3).backup.expect("a CronJob"));
    let pod = &cj["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert!(!env_of(&pod["containers"][0]).contains_key("SSL_CERT_FILE"));
}

/// A built ensemble whose status says what its restore got to.
fn restored(spec: &str, status: Option<&str>) -> Built {
    let mut ce = ensemble(spec);
    if let Some(status) = status {
        ce.status = Some(serde_saphyr::from_str(status).expect("status"));
    }
    let valid = validate(&ce, "baton:test").expect("valid spec");
    build(
        &ce,
        &valid,
        StoredMembership {
            replicas: 3,
            bootstrap: 3,
        },
        test_pki(),
        &operator(),
        None,
    )
    .expect("built")
}

#[test]
fn a_new_ensemble_restores_in_an_init_container_until_it_has_had_a_quorum() {
    let spec = "{restoreFrom: {s3: {bucket: my-bucket, key: baton/prod/, region: eu-1, credentialsSecret: s3-creds}}}";
    let pod = json(&restored(spec, None).statefulset)["spec"]["template"]["spec"].clone();
    let init = &pod["initContainers"][0];
    assert_eq!(init["name"], "restore");
    assert_eq!(init["image"], "baton:test");
    assert_eq!(init["command"][2], RESTORE_SCRIPT);
    assert_eq!(init["args"], json!(["--s3-region=eu-1"]));
    assert_eq!(init["securityContext"]["readOnlyRootFilesystem"], true);
    let env = env_of(init);
    assert_eq!(env["RESTORE_FROM"], "s3://my-bucket/baton/prod/");
    assert_eq!(env["RESTORE_DATA_DIR"], "/var/lib/baton/data");
    assert_eq!(env["RESTORE_TLS_DIR"], "/etc/baton/tls");
    assert_eq!(
        env["RESTORE_MEMBERS"],
        json!({"configMapKeyRef": {"name": "zk-config", "key": "BATON_MEMBERS", "optional": false}})
    );
    assert_eq!(
        env["RESTORE_BOOTSTRAP_REPLICAS"]["configMapKeyRef"]["key"],
        "BATON_BOOTSTRAP_REPLICAS"
    );
    assert_eq!(
        env["AWS_SECRET_ACCESS_KEY"]["secretKeyRef"]["name"],
        "s3-creds"
    );
    // No BATON_* variable baton-ensemble might take for a flag (--cluster-id among them).
    assert!(env.keys().all(|k| !k.starts_with("BATON_")), "{env:?}");
    let mounts: Vec<&str> = init["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    assert_eq!(mounts, ["/var/lib/baton", "/tmp", "/etc/baton/tls"]);

    // The status records the source; until the ensemble has had a quorum it still restores.
    let recorded = "{restore: {source: 's3://my-bucket/baton/prod/'}}";
    let pod = json(&restored(spec, Some(recorded)).statefulset)["spec"]["template"]["spec"].clone();
    assert_eq!(pod["initContainers"][0]["name"], "restore");
    // Once it has, members start as any others (the pods roll once to drop the step).
    let done =
        "{restore: {source: 's3://my-bucket/baton/prod/', completedAt: '2026-11-23T12:00:00Z'}}";
    let pod = json(&restored(spec, Some(done)).statefulset)["spec"]["template"]["spec"].clone();
    assert!(pod.get("initContainers").is_none());
}

#[test]
fn a_restore_from_s3_trusts_the_ca_config_map_in_the_init_container_only() {
    let spec = "{restoreFrom: {s3: {bucket: my-bucket, key: baton/prod/, endpoint: 'https://minio:9000', caConfigMap: minio-ca}}}";
    let pod = json(&restored(spec, None).statefulset)["spec"]["template"]["spec"].clone();
    let init = &pod["initContainers"][0];
    assert_eq!(env_of(init)["SSL_CERT_FILE"], "/etc/baton/s3-ca/ca.crt");
    assert_eq!(init["args"], json!(["--s3-endpoint=https://minio:9000"]));
    let ca = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "s3-ca")
        .cloned()
        .expect("the CA volume");
    assert_eq!(ca["configMap"]["name"], "minio-ca");
    assert_eq!(ca["configMap"]["items"][0]["key"], "ca.crt");
    let mounts: Vec<(&str, bool)> = init["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .map(|m| (m["mountPath"].as_str().unwrap_or(""), m["readOnly"] == true))
        .collect();
    assert_eq!(
        mounts,
        [
            ("/var/lib/baton", false),
            ("/tmp", false),
            ("/etc/baton/tls", true),
            ("/etc/baton/s3-ca", true)
        ]
    );
    // The member's own container keeps the system bundle (it talks to no S3 endpoint).
    let member = &pod["containers"][0];
    assert!(!member["volumeMounts"].to_string().contains("s3-ca"));
    assert!(!member["env"].to_string().contains("SSL_CERT_FILE"));
    // Once restored, the volume goes with the init container.
    let done =
        "{restore: {source: 's3://my-bucket/baton/prod/', completedAt: '2026-11-23T12:00:00Z'}}";
    let pod = json(&restored(spec, Some(done)).statefulset)["spec"]["template"]["spec"].clone();
    assert!(!pod["volumes"].to_string().contains("s3-ca"));
}

#[test]
fn a_restore_from_a_claim_mounts_it_read_only() {
    let spec = "{restoreFrom: {pvc: {claimName: backups, path: zk/daily/}}}";
    let b = restored(spec, None);
    let pod = json(&b.statefulset)["spec"]["template"]["spec"].clone();
    let init = &pod["initContainers"][0];
    assert_eq!(
        env_of(init)["RESTORE_FROM"],
        "/var/lib/baton/restore/zk/daily/"
    );
    assert_eq!(init["args"], json!([]));
    let restore = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "restore")
        .cloned()
        .expect("the claim");
    assert_eq!(
        restore["persistentVolumeClaim"],
        json!({"claimName": "backups", "readOnly": true})
    );
    let mount = init["volumeMounts"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["name"] == "restore").cloned())
        .expect("mounted");
    assert_eq!(mount["readOnly"], true);
    // The member container itself never sees the backups.
    let member_mounts = pod["containers"][0]["volumeMounts"].to_string();
    assert!(!member_mounts.contains("restore"), "{member_mounts}");
}

/// A stand-in `baton-ensemble` in `dir/bin`: logs its arguments to `dir/calls`, fails for an
/// admin URL of a host named `down`, writes the `--out` file, and for a restore makes the
/// `--data-dir` with a file in it.
fn stand_in(dir: &Path) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let script = format!(
        r#"#!/bin/sh
echo "$*" >> "{calls}"
case "$*" in *https://down*) exit 1 ;; esac
while [ "$#" -gt 0 ]; do
  case "$1" in
    --out) echo snapshot > "$2" ;;
    --data-dir) mkdir -p "$2" && echo restored > "$2/state" ;;
  esac
  shift
done
"#,
        calls = dir.join("calls").display()
    );
    let path = bin.join("baton-ensemble");
    std::fs::write(&path, script).expect("stand-in");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn calls(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("calls"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn sh(script: &str, name: &str, args: &[&str], env: &[(&str, String)]) -> std::process::Output {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", script, name]).args(args).env_clear();
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run /bin/sh")
}

#[test]
fn the_backup_script_tries_each_member_and_keeps_the_newest_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = stand_in(tmp.path());
    let dir = tmp.path().join("claim/zk/daily");
    // A first run makes the folder, its owner's alone (a backup holds session passwords).
    let first = tmp.path().join("claim/zk/first");
    let out = sh(
        BACKUP_SCRIPT,
        "baton-backup",
        &[],
        &[
            ("PATH", path.clone()),
            ("BACKUP_ADMIN_HOSTS", "up:8080".into()),
            ("BACKUP_ADMIN_DIR", "/etc/baton/admin".into()),
            ("BACKUP_CLUSTER_ID", "prod.zk".into()),
            ("BACKUP_DIR", first.display().to_string()),
            ("BACKUP_KEEP", "2".into()),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(&first), 0o700);
        let made = files(&first);
        assert_eq!(made.len(), 1, "{made:?}");
        assert_eq!(mode(&first.join(&made[0])), 0o600);
    }
    std::fs::remove_dir_all(&first).expect("clean up");
    std::fs::remove_file(tmp.path().join("calls")).ok();
    std::fs::create_dir_all(&dir).expect("dir");
    for old in [
        "prod.zk-20250101T030000Z.baton-backup",
        "prod.zk-20250102T030000Z.baton-backup",
        "prod.zk-00000000000000000042-20250103T030000Z.baton-backup.keep-me",
        "prod.zk2-20240101T030000Z.baton-backup",
    ] {
        std::fs::write(dir.join(old), "old").expect("old backup");
    }
    let env = |hosts: &str| {
        vec![
            ("PATH", path.clone()),
            ("BACKUP_ADMIN_HOSTS", hosts.to_string()),
            ("BACKUP_ADMIN_DIR", "/etc/baton/admin".into()),
            ("BACKUP_CLUSTER_ID", "prod.zk".into()),
            ("BACKUP_DIR", dir.display().to_string()),
            ("BACKUP_KEEP", "2".into()),
        ]
    };
    let out = sh(
        BACKUP_SCRIPT,
        "baton-backup",
        &[],
        &env("down:8080 up:8080 other:8080"),
    );
    assert!(out.status.success(), "{out:?}");
    let calls = calls(tmp.path());
    assert_eq!(
        calls.len(),
        2,
        "stops at the first member that saves: {calls:?}"
    );
    assert!(calls[0].starts_with("snapshot save --admin-url https://down:8080 "));
    assert!(calls[1].starts_with(
        "snapshot save --admin-url https://up:8080 --tls-ca /etc/baton/admin/ca.crt \
         --tls-cert /etc/baton/admin/admin.crt --tls-key /etc/baton/admin/admin.key --out "
    ));
    let now = files(&dir);
    // The new backup and the newest old one of this ensemble; another ensemble's untouched;
    // no partial file left.
    assert_eq!(now.len(), 4, "{now:?}");
    assert_eq!(
        now[0],
        "prod.zk-00000000000000000042-20250103T030000Z.baton-backup.keep-me"
    );
    assert_eq!(now[1], "prod.zk-20250102T030000Z.baton-backup");
    assert!(now[2].starts_with("prod.zk-20") && now[2].ends_with("Z.baton-backup"));
    assert_eq!(now[2].len(), "prod.zk-20260101T030000Z.baton-backup".len());
    assert_eq!(now[3], "prod.zk2-20240101T030000Z.baton-backup");
    assert_eq!(
        std::fs::read_to_string(dir.join(&now[2])).ok().as_deref(),
        Some("snapshot\n")
    );

    // No member answers: every member is asked again, BACKUP_PASSES rounds; then the run
    // fails and leaves nothing behind.
    std::fs::remove_file(tmp.path().join("calls")).ok();
    let mut no_wait = env("down:8080 down-too:8080");
    no_wait.push(("BACKUP_PASSES", "3".into()));
    no_wait.push(("BACKUP_RETRY_DELAY", "0".into()));
    let out = sh(BACKUP_SCRIPT, "baton-backup", &[], &no_wait);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no member made a backup"), "{stderr}");
    assert!(stderr.contains("round 3 in 0s"), "{stderr}");
    assert_eq!(
        self::calls(tmp.path()).len(),
        6,
        "two members, three rounds"
    );
    assert_eq!(files(&dir), now);
}

#[test]
fn the_backup_script_passes_the_s3_flags_through() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = stand_in(tmp.path());
    let env = vec![
        ("PATH", path),
        ("BACKUP_ADMIN_HOSTS", "up:8080".to_string()),
        ("BACKUP_ADMIN_DIR", "/a".into()),
        ("BACKUP_CLUSTER_ID", "prod.zk".into()),
    ];
    let out = sh(
        BACKUP_SCRIPT,
        "baton-backup",
        &["--s3-url=s3://b/p/", "--keep=7"],
        &env,
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        calls(tmp.path()),
        [
            "snapshot save --admin-url https://up:8080 --tls-ca /a/ca.crt --tls-cert /a/admin.crt \
          --tls-key /a/admin.key --s3-url=s3://b/p/ --keep=7"
        ]
    );
}

fn run_restore(tmp: &Path, pod: &str, from: &str, args: &[&str]) -> std::process::Output {
    let path = stand_in(tmp);
    let env = vec![
        ("PATH", path),
        ("POD_NAME", pod.to_string()),
        (
            "RESTORE_DATA_DIR",
            tmp.join("volume/data").display().to_string(),
        ),
        ("RESTORE_BOOTSTRAP_REPLICAS", "3".into()),
        ("RESTORE_FROM", from.to_string()),
        ("RESTORE_MEMBERS", "1=a:2888,2=b:2888,3=c:2888".into()),
        ("RESTORE_TLS_DIR", "/etc/baton/tls".into()),
    ];
    sh(RESTORE_SCRIPT, "baton-restore", args, &env)
}

#[test]
fn the_restore_script_fills_an_empty_bootstrap_member_and_nothing_else() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    std::fs::create_dir_all(t.join("volume/data")).expect("an empty data dir");
    let out = run_restore(t, "zk-1", "s3://b/prefix/", &["--s3-region=eu-1"]);
    assert!(out.status.success(), "{out:?}");
    let staging = t.join("volume/data.restoring");
    assert_eq!(
        calls(t),
        [format!(
            "snapshot restore --from s3://b/prefix/ --s3-region=eu-1 --data-dir {} --id 2 \
             --members 1=a:2888,2=b:2888,3=c:2888 --tls-cert /etc/baton/tls/member-2.crt",
            staging.display()
        )]
    );
    // Restored through a staging folder, renamed into place.
    assert_eq!(files(&t.join("volume")), ["data"]);
    assert_eq!(files(&t.join("volume/data")), ["state"]);

    // A restarted member keeps what it has.
    let out = run_restore(t, "zk-1", "s3://b/prefix/", &[]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("already has data"));
    assert_eq!(calls(t).len(), 1);

    // A member beyond the bootstrap set joins: no restore, even with an empty data dir.
    let other = tempfile::tempdir().expect("tempdir");
    let out = run_restore(other.path(), "zk-3", "s3://b/prefix/", &[]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("joins"));
    assert!(calls(other.path()).is_empty());
    assert!(files(other.path()).iter().all(|f| f != "volume"));

    // No member id in the pod name.
    let out = run_restore(other.path(), "zk-x", "s3://b/prefix/", &[]);
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn the_restore_script_takes_the_newest_backup_of_a_folder() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let backups = t.join("claim/zk");
    std::fs::create_dir_all(&backups).expect("backups");
    for name in [
        "prod.zk-00000000000000000900-20260101T030000Z.baton-backup",
        "prod.zk-20260103T030000Z.baton-backup",
        "prod.zk-00000000000000000100-20260102T030000Z.baton-backup",
        "prod.zk-20270101T030000Z.baton-backup.partial",
    ] {
        std::fs::write(backups.join(name), "b").expect("backup");
    }
    let from = format!("{}/", backups.display());
    let out = run_restore(t, "zk-0", &from, &[]);
    assert!(out.status.success(), "{out:?}");
    let call = calls(t).join("\n");
    assert!(
        call.starts_with(&format!(
            "snapshot restore --from {}prod.zk-20260103T030000Z.baton-backup --data-dir ",
            from
        )),
        "{call}"
    );
    assert!(call.contains("--id 1 "), "{call}");

    let empty = tempfile::tempdir().expect("tempdir");
    let folder = empty.path().join("nothing");
    std::fs::create_dir_all(&folder).expect("folder");
    let out = run_restore(empty.path(), "zk-0", &format!("{}/", folder.display()), &[]);
    assert_eq!(out.status.code(), Some(66), "{out:?}");
    assert!(calls(empty.path()).is_empty());
}

/// `spec.pods` reaches every pod the operator makes: the members' (where the restore init
/// container runs) and the backup Jobs'; `spec.serviceAccount.annotations` reach the
/// ServiceAccount both run as. Without `credentialsSecret` no static key is passed, so the S3
/// client takes the pod's web identity (IRSA).
#[test]
fn pod_settings_reach_the_members_the_restore_and_the_backup_jobs() {
    let spec = "{pods: {imagePullSecrets: [{name: regcred}], priorityClassName: baton-critical, \
                labels: {team: storage}, annotations: {mesh.example/inject: 'false'}}, \
                serviceAccount: {annotations: {eks.amazonaws.com/role-arn: 'arn:aws:iam::1:role/b'}}, \
                backup: {schedule: '@daily', target: {s3: {bucket: bkt, region: eu-1}}}, \
                restoreFrom: {s3: {bucket: bkt, key: prod/}}}";
    let b = built(spec, 3, 3);
    let sts = json(&b.statefulset);
    let cj = json(&b.backup.expect("a CronJob"));
    let members = &sts["spec"]["template"];
    let jobs = &cj["spec"]["jobTemplate"]["spec"]["template"];
    for (what, template) in [("members", members), ("backup Jobs", jobs)] {
        let meta = &template["metadata"];
        assert_eq!(meta["labels"]["team"], "storage", "{what}: {meta}");
        assert_eq!(
            meta["annotations"]["mesh.example/inject"], "false",
            "{what}: {meta}"
        );
        let pod = &template["spec"];
        assert_eq!(
            pod["imagePullSecrets"],
            json!([{"name": "regcred"}]),
            "{what}"
        );
        assert_eq!(pod["priorityClassName"], "baton-critical", "{what}");
        assert_eq!(pod["serviceAccountName"], "zk", "{what}");
    }
    // The operator's own labels stay, so its selectors still find the pods.
    assert_eq!(
        members["metadata"]["labels"]["app.kubernetes.io/name"],
        "baton-ensemble"
    );
    assert_eq!(
        jobs["metadata"]["labels"]["app.kubernetes.io/name"],
        "baton-backup"
    );
    // The restore runs in the members' pods, under those pod settings.
    let init = &members["spec"]["initContainers"];
    assert_eq!(init[0]["name"], "restore", "{init}");
    assert_eq!(jobs["spec"]["automountServiceAccountToken"], false);
    for container in [&init[0], &jobs["spec"]["containers"][0]] {
        let env = env_of(container);
        assert!(
            !env.keys().any(|k| k.starts_with("AWS_")),
            "no static S3 key without credentialsSecret: {env:?}"
        );
    }
    let sa = json(&b.service_account);
    assert_eq!(
        sa["metadata"]["annotations"],
        json!({"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/b"})
    );
}

/// Without `spec.pods` nothing extra is set: no pull secrets, no priority class, no pod
/// annotations, no ServiceAccount annotations.
#[test]
fn without_pod_settings_the_pods_get_none() {
    let b = built(S3_BACKUP, 3, 3);
    let sts = json(&b.statefulset);
    let cj = json(&b.backup.expect("a CronJob"));
    for template in [
        &sts["spec"]["template"],
        &cj["spec"]["jobTemplate"]["spec"]["template"],
    ] {
        assert!(
            template["metadata"].get("annotations").is_none(),
            "{template}"
        );
        assert!(template["spec"].get("imagePullSecrets").is_none());
        assert!(template["spec"].get("priorityClassName").is_none());
    }
    assert!(
        json(&b.service_account)["metadata"]
            .get("annotations")
            .is_none()
    );
    // With a credentials Secret, its two keys are the Job's environment.
    let env = env_of(&cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]);
    assert_eq!(env["AWS_ACCESS_KEY_ID"]["secretKeyRef"]["name"], "s3-creds");
}
