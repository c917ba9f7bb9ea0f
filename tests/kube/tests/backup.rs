//! Backups to S3 over HTTPS on the real node (`tests/kube/src/node.rs`): the backup CronJob's
//! pods, run by the kubelet from the project's image, write to an S3 server (moto) that serves
//! HTTPS on the node's address with a certificate of the test's own CA, in no system bundle.
//!
//! - without `caConfigMap` the run fails, the certificate refused in the Job's log, and nothing
//!   is stored (the image's system bundle does not know the CA: the check can fail);
//! - with `caConfigMap` naming a ConfigMap that holds the CA (`ca.crt`) the operator's CronJob
//!   mounts it and sets `SSL_CERT_FILE`, and a run stores one object
//!   `PREFIX/NS.NAME-INDEX-TIME.baton-backup`, not empty;
//! - a new ensemble with `restoreFrom.s3` and the same `caConfigMap` restores it in its init
//!   container over HTTPS and serves what was written before the backup.
//!
//! Runs are started at once, not on the schedule: a Job made from the CronJob's `jobTemplate`,
//! owned by the CronJob, as `kubectl create job --from=cronjob/NAME-backup` makes it.
//!
//! `#[ignore]`d: `tests/scripts/test.sh` runs it on the node it starts (it needs moto too,
//! which that script installs).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use baton_kube_tests::Kube;
use baton_kube_tests::node::{self, wait_for};
use baton_tests::moto::{self, Moto, MotoTls};
use baton_tests::pki::Pki;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DynamicObject, ListParams, LogParams, PostParams};
use serde_json::{Value, json};
use zookeeper_client as zk;

const BUCKET: &str = "baton-node-backups";
const PREFIX: &str = "node/";
const CA_CONFIG_MAP: &str = "s3-ca";
const CREDENTIALS: &str = "s3-creds";

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a real node (root, the image): tests/scripts/test.sh runs it"]
async fn a_backup_job_trusts_the_s3_endpoints_ca_from_its_config_map() -> Result<()> {
    let t0 = Instant::now();
    let kube = Kube::on_node("backup-s3-ca").await?;
    node::chart(&kube, &[]).await?;
    let ns = kube.namespace.clone();

    // moto on the node's address (where pods reach the host), its certificate naming that
    // address and issued by a CA made here.
    let ip = node_ip(&kube).await?;
    let endpoint_pki = Pki::with_hosts("baton-tests-s3-node", &[1], &[ip.to_string()])?;
    let dir = endpoint_pki.dir();
    let moto = Moto::start_tls_at(
        ip,
        MotoTls {
            cert: &dir.join("member-1.crt"),
            key: &dir.join("member-1.key"),
            ca: &endpoint_pki.ca(),
        },
    )
    .await?;
    moto.create_bucket(BUCKET).await?;
    let ca_pem = std::fs::read_to_string(endpoint_pki.ca())?;
    kube.apply(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CA_CONFIG_MAP},
               "data": {"ca.crt": ca_pem}}),
        false,
    )
    .await?;
    kube.apply(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": CREDENTIALS},
               "stringData": {"AWS_ACCESS_KEY_ID": moto::ACCESS_KEY_ID,
                              "AWS_SECRET_ACCESS_KEY": moto::SECRET_ACCESS_KEY}}),
        false,
    )
    .await?;
    let s3 = |extra: Value| {
        let mut s3 = json!({"bucket": BUCKET, "endpoint": moto.endpoint(),
                            "region": moto::REGION, "credentialsSecret": CREDENTIALS});
        if let (Some(s3), Some(extra)) = (s3.as_object_mut(), extra.as_object()) {
            s3.extend(extra.clone());
        }
        s3
    };
    let backup_spec = |ca: bool| {
        let extra = if ca {
            json!({"prefix": PREFIX, "caConfigMap": CA_CONFIG_MAP})
        } else {
            json!({"prefix": PREFIX})
        };
        json!({"replicas": 1, "storage": {"size": "1Gi"}, "plainClientPort": true,
               "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
               // Never on its own during the test: the runs are started by hand.
               "backup": {"schedule": "@yearly", "keep": 3, "target": {"s3": s3(extra)}}})
    };

    apply_ensemble(&kube, "demo", backup_spec(false)).await?;
    available(&kube, "demo").await?;
    let ip_of_demo = member_ip(&kube, "demo-0").await?;
    node::super_session(&kube, "demo", &ip_of_demo)
        .await?
        .create(
            "/over-https",
            b"backed up through a private CA",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await?;
    eprintln!("demo Available, a znode written: {:?}", t0.elapsed());

    // Without the CA: refused for the certificate, nothing stored.
    let cron_job = cron_job_with(&kube, "demo-backup", false).await?;
    let t = Instant::now();
    let (ok, log) = run_now(&kube, &cron_job, "demo-backup-untrusted").await?;
    ensure!(
        !ok,
        "a backup over HTTPS to an endpoint whose CA is in no bundle of the image succeeded:\n{log}"
    );
    ensure!(
        log.to_lowercase().contains("certificate"),
        "the run failed, but not for the endpoint's certificate:\n{log}"
    );
    let keys = moto.keys(BUCKET, PREFIX).await?;
    ensure!(keys.is_empty(), "a refused backup stored {keys:?}");
    eprintln!("without caConfigMap: failed in {:?}", t.elapsed());

    // With the CA's ConfigMap: the operator's CronJob mounts it, and a run stores the backup.
    apply_ensemble(&kube, "demo", backup_spec(true)).await?;
    let cron_job = cron_job_with(&kube, "demo-backup", true).await?;
    let t = Instant::now();
    let (ok, log) = run_now(&kube, &cron_job, "demo-backup-trusted").await?;
    ensure!(ok, "the backup with caConfigMap failed:\n{log}");
    eprintln!("with caConfigMap: succeeded in {:?}", t.elapsed());
    let keys = moto.keys(BUCKET, PREFIX).await?;
    ensure!(keys.len() == 1, "the bucket holds {keys:?}; log:\n{log}");
    let key = &keys[0];
    check_key_shape(key, &format!("{ns}.demo"))?;
    let sizes = moto.sizes(BUCKET, PREFIX).await?;
    let bytes = sizes.first().map_or(0, |(_, size)| *size);
    ensure!(bytes > 0, "{key} is empty: {sizes:?}");
    eprintln!("stored {key}, {bytes} bytes");

    // A new ensemble restored from it over HTTPS, trusting the same ConfigMap.
    let t = Instant::now();
    apply_ensemble(
        &kube,
        "restored",
        json!({"replicas": 1, "storage": {"size": "1Gi"}, "plainClientPort": true,
               "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
               "restoreFrom": {"s3": s3(json!({"key": PREFIX, "caConfigMap": CA_CONFIG_MAP}))}}),
    )
    .await?;
    let status = available(&kube, "restored").await?;
    ensure!(
        status["restore"]["source"] == format!("s3://{BUCKET}/{PREFIX}").as_str()
            && status["restore"]["completedAt"].is_string(),
        "status.restore {}",
        status["restore"]
    );
    let data = wait_for(
        &kube,
        "/over-https read from the restored ensemble",
        Duration::from_secs(120),
        || async {
            let ip = member_ip(&kube, "restored-0").await?;
            let (data, _) = node::super_session(&kube, "restored", &ip)
                .await?
                .get_data("/over-https")
                .await?;
            Ok(data)
        },
    )
    .await?;
    ensure!(
        data == b"backed up through a private CA",
        "restored data {data:?}"
    );
    eprintln!(
        "restored from {key} in {:?}; the test took {:?}",
        t.elapsed(),
        t0.elapsed()
    );
    Ok(())
}

/// The node's InternalIP: the host's address pods reach it at (`control-plane.sh`'s `node_ip`,
/// the default route's source address), one of this machine's own.
async fn node_ip(kube: &Kube) -> Result<Ipv4Addr> {
    let node = Api::<Node>::all(kube.client.clone())
        .get(node::NODE)
        .await?;
    node.status
        .and_then(|s| s.addresses)
        .unwrap_or_default()
        .into_iter()
        .find(|a| a.type_ == "InternalIP")
        .and_then(|a| a.address.parse().ok())
        .context("the node has no IPv4 InternalIP")
}

async fn apply_ensemble(kube: &Kube, name: &str, spec: Value) -> Result<()> {
    kube.apply(
        json!({"apiVersion": "baton.dev/v1alpha1", "kind": "CoordinationEnsemble",
               "metadata": {"name": name}, "spec": spec}),
        false,
    )
    .await?;
    Ok(())
}

/// Waits until the ensemble is Available with a leader for its current generation; its status.
async fn available(kube: &Kube, name: &str) -> Result<Value> {
    let gvk = kube::api::GroupVersionKind::gvk("baton.dev", "v1alpha1", "CoordinationEnsemble");
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "coordinationensembles");
    let api: Api<DynamicObject> =
        Api::namespaced_with(kube.client.clone(), &kube.namespace, &resource);
    wait_for(
        kube,
        &format!("ensemble {name} Available with a leader"),
        Duration::from_secs(240),
        || async {
            let ce = api.get(name).await?;
            let status = ce.data.get("status").cloned().unwrap_or(Value::Null);
            let generation = ce.metadata.generation.unwrap_or(0);
            let available = status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Available" && c["status"] == "True");
            ensure!(
                available
                    && status["leader"].is_i64()
                    && status["observedGeneration"].as_i64() == Some(generation),
                "status {status}"
            );
            Ok(status)
        },
    )
    .await
}

async fn member_ip(kube: &Kube, pod: &str) -> Result<String> {
    Api::<Pod>::namespaced(kube.client.clone(), &kube.namespace)
        .get(pod)
        .await?
        .status
        .and_then(|s| s.pod_ip)
        .with_context(|| format!("{pod} has no IP"))
}

/// The CronJob `name` once the operator has made it as the spec says: with the CA's
/// ConfigMap mounted and `SSL_CERT_FILE` naming it (`with_ca`), or neither.
async fn cron_job_with(kube: &Kube, name: &str, with_ca: bool) -> Result<CronJob> {
    let api = Api::<CronJob>::namespaced(kube.client.clone(), &kube.namespace);
    wait_for(
        kube,
        &format!("CronJob {name} with caConfigMap {with_ca}"),
        Duration::from_secs(60),
        || async {
            let cron_job = api.get(name).await?;
            let pod = cron_job
                .spec
                .as_ref()
                .and_then(|s| s.job_template.spec.as_ref())
                .and_then(|s| s.template.spec.as_ref())
                .context("no pod template")?;
            let env = pod.containers[0].env.clone().unwrap_or_default();
            let cert_file = env
                .iter()
                .find(|e| e.name == "SSL_CERT_FILE")
                .and_then(|e| e.value.clone());
            let volume = pod
                .volumes
                .iter()
                .flatten()
                .find_map(|v| v.config_map.as_ref())
                .map(|c| c.name.clone());
            if with_ca {
                ensure!(
                    cert_file.as_deref() == Some("/etc/baton/s3-ca/ca.crt")
                        && volume.as_deref() == Some(CA_CONFIG_MAP),
                    "SSL_CERT_FILE {cert_file:?}, ConfigMap volume {volume:?}"
                );
            } else {
                ensure!(
                    cert_file.is_none() && volume.is_none(),
                    "SSL_CERT_FILE {cert_file:?}, ConfigMap volume {volume:?}"
                );
            }
            Ok(cron_job)
        },
    )
    .await
}

/// Starts a run of `cron_job` at once, as `kubectl create job --from=cronjob/NAME JOB` does
/// (its `jobTemplate`, owned by the CronJob, annotated as made by hand); waits until it
/// succeeds or fails (each try asks every member; the template allows two retries): whether
/// it succeeded, and the logs of its pods.
async fn run_now(kube: &Kube, cron_job: &CronJob, job: &str) -> Result<(bool, String)> {
    let template = cron_job
        .spec
        .as_ref()
        .map(|s| s.job_template.clone())
        .context("the CronJob has no spec")?;
    let spec = template.spec.context("no job spec in the template")?;
    let meta = template.metadata.unwrap_or_default();
    let owner = OwnerReference {
        api_version: "batch/v1".into(),
        kind: "CronJob".into(),
        name: cron_job.metadata.name.clone().unwrap_or_default(),
        uid: cron_job.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let run = Job {
        metadata: ObjectMeta {
            name: Some(job.into()),
            labels: meta.labels,
            annotations: Some(
                [(
                    "cronjob.kubernetes.io/instantiate".to_string(),
                    "manual".to_string(),
                )]
                .into(),
            ),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    };
    let jobs = Api::<Job>::namespaced(kube.client.clone(), &kube.namespace);
    jobs.create(&PostParams::default(), &run)
        .await
        .with_context(|| format!("create Job {job}"))?;
    let succeeded = wait_for(
        kube,
        &format!("Job {job} finished"),
        Duration::from_secs(240),
        || async {
            let status = jobs.get(job).await?.status.unwrap_or_default();
            for c in status.conditions.iter().flatten() {
                if c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed") {
                    return Ok(c.type_ == "Complete");
                }
            }
            bail!(
                "active {:?}, succeeded {:?}, failed {:?}",
                status.active,
                status.succeeded,
                status.failed
            )
        },
    )
    .await?;
    Ok((succeeded, job_logs(kube, job).await?))
}

/// What each pod of Job `job` printed.
async fn job_logs(kube: &Kube, job: &str) -> Result<String> {
    let pods = Api::<Pod>::namespaced(kube.client.clone(), &kube.namespace);
    let list = pods
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await?;
    let mut out = String::new();
    for pod in list.items {
        let name = pod.metadata.name.unwrap_or_default();
        let log = pods
            .logs(&name, &LogParams::default())
            .await
            .unwrap_or_else(|e| format!("(no log: {e})"));
        out.push_str(&format!("--- {name} ---\n{log}\n"));
    }
    Ok(out)
}

/// `PREFIX/CLUSTER-ID-INDEX-TIME.baton-backup`: the cluster id, the applied index as 20 digits
/// and the time as `yyyymmddThhmmssZ`.
fn check_key_shape(key: &str, cluster_id: &str) -> Result<()> {
    let bad = || anyhow!("{key} is not {PREFIX}{cluster_id}-INDEX-yyyymmddThhmmssZ.baton-backup");
    let rest = key
        .strip_prefix(PREFIX)
        .and_then(|k| k.strip_prefix(cluster_id))
        .and_then(|k| k.strip_prefix('-'))
        .and_then(|k| k.strip_suffix(".baton-backup"))
        .ok_or_else(bad)?;
    let (index, time) = rest.split_once('-').ok_or_else(bad)?;
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    ensure!(index.len() == 20 && digits(index), bad());
    let (date, clock) = time.split_once('T').ok_or_else(bad)?;
    let clock = clock.strip_suffix('Z').ok_or_else(bad)?;
    ensure!(
        date.len() == 8 && digits(date) && clock.len() == 6 && digits(clock),
        bad()
    );
    ensure!(
        index.parse::<u64>().is_ok_and(|i| i > 0),
        "{key}: index 0, yet a znode was written"
    );
    Ok(())
}
