//! Backup and restore: the CronJob `NAME-backup` that saves a snapshot of the
//! ensemble through a member's admin API with the admin certificate, and the init container
//! that restores a backup into each bootstrapping member of a new ensemble before its first
//! start. Both run Baton's image, non-root, with a read-only root filesystem; both are shell
//! scripts around `baton-ensemble snapshot save|restore`, run under a real `/bin/sh` by the
//! tests.

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapKeySelector, ConfigMapVolumeSource, Container, EnvVar, EnvVarSource, KeyToPath,
    ObjectFieldSelector, PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec,
    SecretKeySelector, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::BOOTSTRAP_KEY;
use super::statefulset::{
    DATA_DIR, container_security_context, image_pull_secrets, plain_env, pod_meta,
    pod_security_context, secret_volume,
};
use crate::crd::CoordinationEnsembleSpec;
use crate::names::{DATA_VOLUME, EnsembleNames, MEMBER_TLS_DIR};
use crate::validate::{Backup, Location, Restore, ValidSpec};

/// Where the backup Job mounts the `NAME-admin` Secret (`ca.crt`, `admin.crt`, `admin.key`).
pub const ADMIN_DIR: &str = "/etc/baton/admin";
/// Where the backup Job mounts a PVC target.
pub const BACKUP_MOUNT: &str = "/var/lib/baton/backup";
/// Where the restore init container mounts a PVC source (read-only).
pub const RESTORE_MOUNT: &str = "/var/lib/baton/restore";
/// Where the backup Job's container and the restore container mount an S3 `caConfigMap`.
pub const S3_CA_DIR: &str = "/etc/baton/s3-ca";
/// The key of an S3 `caConfigMap` holding the PEM bundle, and the file it is mounted as.
pub const S3_CA_KEY: &str = "ca.crt";
/// The volume of an S3 `caConfigMap`.
const S3_CA_VOLUME: &str = "s3-ca";
/// Keys of the S3 credentials Secret, passed as environment of the same names.
pub const S3_CREDENTIAL_KEYS: [&str; 2] = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"];
/// Suffix of every backup file.
pub const BACKUP_SUFFIX: &str = ".baton-backup";

/// The backup Job's command. Asks each member in turn (`BACKUP_ADMIN_HOSTS`, `HOST:PORT` of
/// their admin APIs) until one saves a snapshot, with the admin certificate in
/// `BACKUP_ADMIN_DIR`; the target's flags come as "$@" (S3), or, with `BACKUP_DIR` (a PVC
/// folder), a file `CLUSTER-ID-yyyymmddThhmmssZ.baton-backup` written under a hidden partial
/// name and renamed once whole, after which only the newest `BACKUP_KEEP` of this ensemble's
/// backups stay (their names sort by time). A backup holds every session's password, so the
/// folder it makes and the files are the owner's alone (umask 077). When no member saves, the
/// round is tried again, `BACKUP_PASSES` rounds (default 4) `BACKUP_RETRY_DELAY` seconds apart
/// (default 5): a NetworkPolicy enforcer that admits pods by their labels (kube-router, Calico)
/// may refuse a new pod's first connections until it has seen the pod, and a Job's retry is a
/// new pod again.
pub const BACKUP_SCRIPT: &str = r#"set -eu
umask 077
tls="${BACKUP_ADMIN_DIR:?}"
partial=
if [ -n "${BACKUP_DIR:-}" ]; then
  mkdir -p "$BACKUP_DIR"
  name="${BACKUP_CLUSTER_ID:?}-$(date -u +%Y%m%dT%H%M%SZ).baton-backup"
  partial="$BACKUP_DIR/.$name.partial"
  set -- --out "$partial"
fi
saved=
pass=1
while :; do
  for host in ${BACKUP_ADMIN_HOSTS:?}; do
    [ -z "$partial" ] || rm -f -- "$partial"
    if baton-ensemble snapshot save --admin-url "https://$host" --tls-ca "$tls/ca.crt" \
         --tls-cert "$tls/admin.crt" --tls-key "$tls/admin.key" "$@"; then
      saved="$host"
      break
    fi
    echo "no backup through $host; trying the next member" >&2
  done
  [ -z "$saved" ] && [ "$pass" -lt "${BACKUP_PASSES:-4}" ] || break
  pass=$((pass + 1))
  echo "no member made a backup; round $pass in ${BACKUP_RETRY_DELAY:-5}s" >&2
  sleep "${BACKUP_RETRY_DELAY:-5}"
done
if [ -z "$saved" ]; then
  [ -z "$partial" ] || rm -f -- "$partial"
  echo "no member made a backup" >&2
  exit 1
fi
if [ -n "$partial" ]; then
  mv -f -- "$partial" "$BACKUP_DIR/$name"
  echo "saved $BACKUP_DIR/$name through $saved"
  set -- "$BACKUP_DIR/$BACKUP_CLUSTER_ID"-????????T??????Z.baton-backup
  while [ "$#" -gt "${BACKUP_KEEP:?}" ]; do
    echo "removing the old backup $1"
    rm -f -- "$1"
    shift
  done
fi
"#;

/// The restore init container's command. Member id from the pod name, as the start script
/// does. Only a bootstrapping member (ordinal below `RESTORE_BOOTSTRAP_REPLICAS`) with an
/// empty data dir restores: a joiner gets its data from the leader, and a member that has
/// data keeps it (a restarted pod). A folder (`RESTORE_FROM` ending in `/`, not S3) means its
/// newest backup, by the time stamp that ends every backup's name. The restore goes into a
/// staging folder beside the data dir, renamed into place once whole, so a restore cut short
/// is done again rather than started from. S3 flags come as "$@".
pub const RESTORE_SCRIPT: &str = r#"set -eu
ordinal="${POD_NAME##*-}"
case "$ordinal" in
  ''|*[!0-9]*) echo "cannot derive a member id from pod name '$POD_NAME'" >&2; exit 64 ;;
esac
id=$((ordinal + 1))
data="${RESTORE_DATA_DIR:?}"
if [ "$ordinal" -ge "${RESTORE_BOOTSTRAP_REPLICAS:?}" ]; then
  echo "member $id joins the ensemble: its data comes from the leader, not from the backup"
  exit 0
fi
if [ -n "$(ls -A "$data" 2>/dev/null)" ]; then
  echo "member $id already has data in $data: not restoring"
  exit 0
fi
from="${RESTORE_FROM:?}"
case "$from" in
  s3://*) ;;
  */)
    newest=$(for f in "$from"*.baton-backup; do
               [ -f "$f" ] || continue
               stamp="${f%.baton-backup}"
               printf '%s %s\n' "${stamp##*-}" "$f"
             done | sort | tail -n 1 | cut -d ' ' -f 2-)
    if [ -z "$newest" ]; then
      echo "no backup (*.baton-backup) in $from" >&2
      exit 66
    fi
    from="$newest" ;;
esac
staging="$data.restoring"
rm -rf -- "$staging"
echo "member $id: restoring $from"
baton-ensemble snapshot restore --from "$from" "$@" --data-dir "$staging" --id "$id" \
  --members "${RESTORE_MEMBERS:?}" --tls-cert "${RESTORE_TLS_DIR:?}/member-$id.crt"
if [ -d "$data" ]; then rmdir -- "$data"; fi
mv -- "$staging" "$data"
echo "member $id: restored"
"#;

/// The backup CronJob for `backup`, asking the admin APIs of members 1..=`replicas`.
pub(super) fn cron_job(
    names: &EnsembleNames,
    meta: ObjectMeta,
    crd: &CoordinationEnsembleSpec,
    spec: &ValidSpec,
    backup: &Backup,
    replicas: i32,
) -> CronJob {
    let hosts: Vec<String> = (1..=replicas.max(1) as u64)
        .map(|id| names.admin_addr(id))
        .collect();
    let mut env = vec![
        plain_env("BACKUP_ADMIN_HOSTS", &hosts.join(" ")),
        plain_env("BACKUP_ADMIN_DIR", ADMIN_DIR),
        plain_env("BACKUP_CLUSTER_ID", &names.cluster_id()),
    ];
    let mut volumes = vec![
        Volume {
            name: "tmp".into(),
            empty_dir: Some(Default::default()),
            ..Volume::default()
        },
        secret_volume("admin", names.admin_secret()),
    ];
    let mut mounts = vec![mount("tmp", "/tmp", false), mount("admin", ADMIN_DIR, true)];
    let mut args = Vec::new();
    match &backup.target {
        Location::Pvc { claim_name, path } => {
            let dir = format!("{BACKUP_MOUNT}/{path}");
            env.push(plain_env("BACKUP_DIR", dir.trim_end_matches('/')));
            env.push(plain_env("BACKUP_KEEP", &backup.keep.to_string()));
            volumes.push(claim_volume("backup", claim_name, false));
            mounts.push(mount("backup", BACKUP_MOUNT, false));
        }
        Location::S3 {
            bucket,
            key,
            endpoint,
            region,
            credentials_secret,
            ca_config_map,
        } => {
            env.extend(s3_credentials(credentials_secret.as_deref()));
            if let Some(ca) = ca_config_map {
                env.push(s3_ca_env());
                volumes.push(s3_ca_volume(ca));
                mounts.push(mount(S3_CA_VOLUME, S3_CA_DIR, true));
            }
            args.push(format!("--s3-url=s3://{bucket}/{key}"));
            args.extend(s3_flags(endpoint, region));
            args.push(format!("--keep={}", backup.keep));
        }
    }
    let container = Container {
        name: "backup".into(),
        image: Some(spec.image.clone()),
        image_pull_policy: crd.image_pull_policy.clone(),
        command: Some(vec![
            "/bin/sh".into(),
            "-c".into(),
            BACKUP_SCRIPT.into(),
            "baton-backup".into(),
        ]),
        args: Some(args),
        env: Some(env),
        security_context: Some(container_security_context()),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    let pod = PodSpec {
        containers: vec![container],
        restart_policy: Some("Never".into()),
        security_context: Some(pod_security_context()),
        // The members' ServiceAccount, for what its annotations give a pod (an IRSA web
        // identity for S3); its API token is not mounted: the Job talks to the members only.
        service_account_name: Some(names.service_account()),
        automount_service_account_token: Some(false),
        image_pull_secrets: image_pull_secrets(crd),
        priority_class_name: crd.pods.priority_class_name.clone(),
        enable_service_links: Some(false),
        node_selector: crd.scheduling.node_selector.clone(),
        tolerations: crd.scheduling.tolerations.clone(),
        volumes: Some(volumes),
        ..PodSpec::default()
    };
    let labels = names.backup_pod_labels();
    CronJob {
        metadata: meta,
        spec: Some(CronJobSpec {
            schedule: backup.schedule.clone(),
            suspend: Some(backup.suspend),
            // Never two snapshots at once; a run that overlaps the next is skipped.
            concurrency_policy: Some("Forbid".into()),
            // A run missed by more than an hour (controller down) is skipped, not made up.
            starting_deadline_seconds: Some(3600),
            successful_jobs_history_limit: Some(3),
            failed_jobs_history_limit: Some(3),
            job_template: JobTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(JobSpec {
                    // Each try already asks every member; two more tries for a blip.
                    backoff_limit: Some(2),
                    active_deadline_seconds: Some(3600),
                    template: PodTemplateSpec {
                        metadata: Some(pod_meta(crd, labels)),
                        spec: Some(pod),
                    },
                    ..JobSpec::default()
                }),
            },
            ..CronJobSpec::default()
        }),
        status: None,
    }
}

/// The volumes of the restore container: the claim it reads from (a PVC source), or the
/// S3 endpoint's CA bundle (with `caConfigMap`).
pub(super) fn restore_volumes(restore: &Restore) -> Vec<Volume> {
    match &restore.source {
        Location::Pvc { claim_name, .. } => vec![claim_volume("restore", claim_name, true)],
        Location::S3 { ca_config_map, .. } => {
            ca_config_map.iter().map(|ca| s3_ca_volume(ca)).collect()
        }
    }
}

/// The init container that restores `restore` into a bootstrapping member's empty data dir.
pub(super) fn restore_container(
    names: &EnsembleNames,
    crd: &CoordinationEnsembleSpec,
    spec: &ValidSpec,
    restore: &Restore,
) -> Container {
    // Named apart from BATON_*: baton-ensemble may read those as its flags' environment.
    let from_config = |name: &str, key: &str| EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector {
                name: names.config_map(),
                key: key.into(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
    };
    let mut env = vec![
        EnvVar {
            name: "POD_NAME".into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".into(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
        },
        from_config("RESTORE_MEMBERS", "BATON_MEMBERS"),
        from_config("RESTORE_BOOTSTRAP_REPLICAS", BOOTSTRAP_KEY),
        plain_env("RESTORE_DATA_DIR", DATA_DIR),
        plain_env("RESTORE_TLS_DIR", MEMBER_TLS_DIR),
    ];
    let mut mounts = vec![
        mount(DATA_VOLUME, "/var/lib/baton", false),
        mount("tmp", "/tmp", false),
        mount("tls", MEMBER_TLS_DIR, true),
    ];
    let mut args = Vec::new();
    match &restore.source {
        Location::Pvc { path, .. } => {
            env.push(plain_env(
                "RESTORE_FROM",
                &format!("{RESTORE_MOUNT}/{path}"),
            ));
            mounts.push(mount("restore", RESTORE_MOUNT, true));
        }
        Location::S3 {
            bucket,
            key,
            endpoint,
            region,
            credentials_secret,
            ca_config_map,
        } => {
            env.push(plain_env("RESTORE_FROM", &format!("s3://{bucket}/{key}")));
            env.extend(s3_credentials(credentials_secret.as_deref()));
            if ca_config_map.is_some() {
                env.push(s3_ca_env());
                mounts.push(mount(S3_CA_VOLUME, S3_CA_DIR, true));
            }
            args.extend(s3_flags(endpoint, region));
        }
    }
    Container {
        name: "restore".into(),
        image: Some(spec.image.clone()),
        image_pull_policy: crd.image_pull_policy.clone(),
        command: Some(vec![
            "/bin/sh".into(),
            "-c".into(),
            RESTORE_SCRIPT.into(),
            "baton-restore".into(),
        ]),
        args: Some(args),
        env: Some(env),
        resources: crd.resources.clone(),
        security_context: Some(container_security_context()),
        volume_mounts: Some(mounts),
        ..Container::default()
    }
}

fn s3_flags(endpoint: &Option<String>, region: &Option<String>) -> Vec<String> {
    let mut flags = Vec::new();
    if let Some(endpoint) = endpoint {
        flags.push(format!("--s3-endpoint={endpoint}"));
    }
    if let Some(region) = region {
        flags.push(format!("--s3-region={region}"));
    }
    flags
}

/// The `caConfigMap`'s key `ca.crt` as a read-only file (certificates are public: anyone may
/// read it). Only that key, and not optional: a ConfigMap or key that is missing keeps the pod
/// from starting, with the kubelet's event naming it, rather than trusting the system bundle.
fn s3_ca_volume(config_map: &str) -> Volume {
    Volume {
        name: S3_CA_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map.into(),
            items: Some(vec![KeyToPath {
                key: S3_CA_KEY.into(),
                path: S3_CA_KEY.into(),
                mode: None,
            }]),
            default_mode: Some(0o444),
            optional: Some(false),
        }),
        ..Volume::default()
    }
}

/// `SSL_CERT_FILE`, which `baton-ensemble`'s S3 client trusts instead of the system bundle.
fn s3_ca_env() -> EnvVar {
    plain_env("SSL_CERT_FILE", &format!("{S3_CA_DIR}/{S3_CA_KEY}"))
}

/// `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` from the Secret's keys of those names.
fn s3_credentials(secret: Option<&str>) -> Vec<EnvVar> {
    let Some(secret) = secret else {
        return Vec::new();
    };
    S3_CREDENTIAL_KEYS
        .iter()
        .map(|key| EnvVar {
            name: (*key).into(),
            value: None,
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.into(),
                    key: (*key).into(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
        })
        .collect()
}

fn claim_volume(name: &str, claim: &str, read_only: bool) -> Volume {
    Volume {
        name: name.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.into(),
            read_only: Some(read_only),
        }),
        ..Volume::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}
