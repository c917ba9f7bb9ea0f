//! Stage 2 of the reconcile pipeline: checks what the CRD schema already enforces (a client may
//! bypass it, e.g. an older CRD) and what it cannot express, and fills in operator defaults.

use std::ops::RangeInclusive;
use std::time::Duration;

use crate::crd::{CoordinationEnsemble, CoordinationEnsembleStatus, PvcLocation, RestoreSource};

mod limits;

pub use limits::{Limits, quantity_bytes};

/// Member counts a Raft ensemble may have here: odd, so that a majority survives a minority.
pub const ALLOWED_REPLICAS: [i32; 4] = [1, 3, 5, 7];

/// Why a `CoordinationEnsemble`'s spec cannot be reconciled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSpec {
    #[error("spec.replicas is {0}; it must be 1, 3, 5 or 7")]
    Replicas(i32),
    #[error("spec.storage.size {0:?} is not a Kubernetes quantity like 1Gi or 500Mi")]
    StorageSize(String),
    #[error("{field}: {error}")]
    Duration {
        field: &'static str,
        error: baton_duration::DurationError,
    },
    #[error("spec.sessionTimeout.min ({min}) is larger than spec.sessionTimeout.max ({max})")]
    SessionTimeoutBounds { min: String, max: String },
    #[error("the object has no {0}")]
    Metadata(&'static str),
    #[error("no image: set spec.image or the operator's --default-image")]
    NoImage,
    #[error(
        "spec.allowedNamespaces: {0:?} is not a namespace name (lower-case letters, digits and \
         '-'; no wildcards: list every namespace the ensemble serves)"
    )]
    AllowedNamespace(String),
    #[error(
        "metadata.name {0:?} contains a dot: the ensemble's Services and published ConfigMaps \
         need a DNS label"
    )]
    Name(String),
    #[error(
        "metadata.name {0:?} is longer than {MAX_NAME_LEN} characters: each member pod carries \
         NAME-HASH in its 63-character label controller-revision-hash, so the StatefulSet could \
         create none"
    )]
    NameTooLong(String),
    #[error("spec.backup.schedule {schedule:?} is not a cron schedule: {reason}")]
    Schedule { schedule: String, reason: String },
    #[error("{0}: set exactly one of pvc and s3")]
    Target(&'static str),
    #[error(
        "{field} {value:?} is not a name of a Kubernetes object (lower-case letters, digits, '-' and '.')"
    )]
    ObjectName { field: &'static str, value: String },
    #[error("{field} {value:?} must be relative to the claim's root, without '..' or empty parts")]
    Path { field: &'static str, value: String },
    #[error("{field} {value:?}: {reason}")]
    S3 {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("{field} is {value}; it must be between {min} and {max}")]
    Limit {
        field: &'static str,
        value: i64,
        min: i64,
        max: i64,
    },
    #[error(
        "spec.limits.minFreeDiskBytes ({min_free_disk_bytes}) is half of spec.storage.size \
         ({size}) or more: the disk alarm clears only once twice it is free, which that volume \
         never has. Lower it (0 turns the alarm off)"
    )]
    Watermark {
        min_free_disk_bytes: u64,
        size: String,
    },
    #[error("spec.backup.keep is {0}; keep at least 1 backup (at most 1000)")]
    Keep(i32),
    #[error(
        "spec.restoreFrom was added after the ensemble was created: a restore only seeds the \
         members of a new ensemble. Remove it, or create a new CoordinationEnsemble with it"
    )]
    RestoreAfterCreation,
    #[error(
        "spec.restoreFrom changed from {was} to {now} after the ensemble was created from it: \
         set it back or remove it, or create a new CoordinationEnsemble from {now}"
    )]
    RestoreChanged { was: String, now: String },
    #[error(
        "spec.pods.labels sets {0:?}, a label the operator selects its pods by: leave the \
         app.kubernetes.io/name, instance, component and managed-by labels to it"
    )]
    ReservedPodLabel(String),
}

/// Pod labels the operator sets itself and selects by (members and backup Jobs alike).
pub const RESERVED_POD_LABELS: [&str; 4] = [
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/managed-by",
];

/// A spec that passed validation, with defaults resolved: what `build` works from.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidSpec {
    pub name: String,
    pub namespace: String,
    pub replicas: i32,
    pub image: String,
    pub min_session_timeout: String,
    pub max_session_timeout: String,
    /// Serve plain ZooKeeper clients on 2181 beside TLS on 2281.
    pub plain_client_port: bool,
    /// Namespaces served besides the ensemble's own: sorted, each once, never its own.
    pub allowed_namespaces: Vec<String>,
    /// Scheduled backups (`spec.backup`).
    pub backup: Option<Backup>,
    /// The restore the ensemble was (or is being) created from (`spec.restoreFrom`).
    pub restore: Option<Restore>,
    /// Quotas and the disk watermark (`spec.limits`).
    pub limits: Limits,
}

/// Where backups go, or the backup a restore reads: checked, prefixes normalized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// `path` relative to the claim's root (`""`: the root); a folder ends in `/`.
    Pvc { claim_name: String, path: String },
    /// `key` is an object's key, or a prefix ending in `/` (`""`: the bucket's root).
    S3 {
        bucket: String,
        key: String,
        endpoint: Option<String>,
        region: Option<String>,
        /// None: the pod's own credentials (a web identity from the ServiceAccount).
        credentials_secret: Option<String>,
        /// A ConfigMap whose `ca.crt` the pod trusts instead of the system bundle.
        ca_config_map: Option<String>,
    },
}

impl Location {
    /// `pvc://CLAIM/PATH` or `s3://BUCKET/KEY`: what the status reports and compares.
    pub fn describe(&self) -> String {
        match self {
            Location::Pvc { claim_name, path } => format!("pvc://{claim_name}/{path}"),
            Location::S3 { bucket, key, .. } => format!("s3://{bucket}/{key}"),
        }
    }
}

/// `spec.backup`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    pub schedule: String,
    pub suspend: bool,
    /// Backups of this ensemble kept at the target (1 to 1000).
    pub keep: i32,
    /// A PVC folder (its path ends in `/` unless it is the root) or an S3 prefix.
    pub target: Location,
}

/// `spec.restoreFrom`, checked against what the ensemble was created with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restore {
    pub source: Location,
    /// The restore is still to be done: the ensemble has not had a quorum yet, so its members
    /// restore before their first start. False once it has (`status.restore.completedAt`).
    pub pending: bool,
}

impl ValidSpec {
    /// Every namespace whose pods may use the ensemble: its own first, then the allowed ones.
    pub fn served_namespaces(&self) -> Vec<String> {
        std::iter::once(self.namespace.clone())
            .chain(self.allowed_namespaces.iter().cloned())
            .collect()
    }
}

/// The longest ensemble name: the StatefulSet controller labels each pod
/// `controller-revision-hash: NAME-HASH` (HASH up to 10 characters), and a label value holds at
/// most 63 (kube-controller-manager 1.33 then fails every pod's creation; its Services, at most
/// NAME + 7 characters, would still fit).
pub const MAX_NAME_LEN: usize = 52;

/// Validates `ce` and resolves the image (`spec.image`, else `default_image`).
pub fn validate(ce: &CoordinationEnsemble, default_image: &str) -> Result<ValidSpec, InvalidSpec> {
    let spec = &ce.spec;
    let name = ce
        .metadata
        .name
        .clone()
        .ok_or(InvalidSpec::Metadata("metadata.name"))?;
    let namespace = ce
        .metadata
        .namespace
        .clone()
        .ok_or(InvalidSpec::Metadata("metadata.namespace"))?;
    if name.contains('.') {
        return Err(InvalidSpec::Name(name));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(InvalidSpec::NameTooLong(name));
    }
    if ce.metadata.uid.is_none() {
        // Owner references need it; only a hand-made object lacks one.
        return Err(InvalidSpec::Metadata("metadata.uid"));
    }
    if !ALLOWED_REPLICAS.contains(&spec.replicas) {
        return Err(InvalidSpec::Replicas(spec.replicas));
    }
    if !is_quantity(&spec.storage.size) {
        return Err(InvalidSpec::StorageSize(spec.storage.size.clone()));
    }
    let min = duration(
        "spec.sessionTimeout.min",
        &spec.session_timeout.min,
        ENSEMBLE_SESSION_TIMEOUT,
    )?;
    let max = duration(
        "spec.sessionTimeout.max",
        &spec.session_timeout.max,
        ENSEMBLE_SESSION_TIMEOUT,
    )?;
    if min > max {
        return Err(InvalidSpec::SessionTimeoutBounds {
            min: spec.session_timeout.min.clone(),
            max: spec.session_timeout.max.clone(),
        });
    }
    if let Some(timeout) = spec
        .sidecar
        .as_ref()
        .and_then(|s| s.session_timeout.as_ref())
    {
        duration(
            "spec.sidecar.sessionTimeout",
            timeout,
            SIDECAR_SESSION_TIMEOUT,
        )?;
    }
    let image = spec
        .image
        .clone()
        .filter(|i| !i.trim().is_empty())
        .unwrap_or_else(|| default_image.to_string());
    if image.trim().is_empty() {
        return Err(InvalidSpec::NoImage);
    }
    let mut allowed_namespaces = Vec::new();
    for ns in &spec.allowed_namespaces {
        if !is_namespace_name(ns) {
            return Err(InvalidSpec::AllowedNamespace(ns.clone()));
        }
        if *ns != namespace {
            allowed_namespaces.push(ns.clone());
        }
    }
    allowed_namespaces.sort();
    allowed_namespaces.dedup();
    let backup = match &spec.backup {
        None => None,
        Some(backup) => {
            if let Err(reason) = check_cron(&backup.schedule) {
                return Err(InvalidSpec::Schedule {
                    schedule: backup.schedule.clone(),
                    reason,
                });
            }
            if !(1..=1000).contains(&backup.keep) {
                return Err(InvalidSpec::Keep(backup.keep));
            }
            let target = match (&backup.target.pvc, &backup.target.s3) {
                (Some(pvc), None) => pvc_location("spec.backup.target.pvc", pvc, true)?,
                (None, Some(s3)) => Location::S3 {
                    bucket: bucket("spec.backup.target.s3.bucket", &s3.bucket)?,
                    key: s3_key(
                        "spec.backup.target.s3.prefix",
                        s3.prefix.as_deref().unwrap_or(""),
                        true,
                    )?,
                    endpoint: s3.endpoint.clone().filter(|e| !e.trim().is_empty()),
                    region: s3.region.clone().filter(|r| !r.trim().is_empty()),
                    credentials_secret: s3
                        .credentials_secret
                        .as_deref()
                        .map(|s| object_name("spec.backup.target.s3.credentialsSecret", s))
                        .transpose()?,
                    ca_config_map: s3
                        .ca_config_map
                        .as_deref()
                        .map(|c| object_name("spec.backup.target.s3.caConfigMap", c))
                        .transpose()?,
                },
                _ => return Err(InvalidSpec::Target("spec.backup.target")),
            };
            Some(Backup {
                schedule: backup.schedule.trim().to_string(),
                suspend: backup.suspend,
                keep: backup.keep,
                target,
            })
        }
    };
    if let Some(key) = spec
        .pods
        .labels
        .keys()
        .find(|k| RESERVED_POD_LABELS.contains(&k.as_str()))
    {
        return Err(InvalidSpec::ReservedPodLabel(key.clone()));
    }
    let restore = match &spec.restore_from {
        None => None,
        Some(source) => Some(restore(source, ce.status.as_ref())?),
    };
    let limits = limits::limits(&spec.limits, &spec.storage.size)?;
    Ok(ValidSpec {
        limits,
        backup,
        restore,
        allowed_namespaces,
        name,
        namespace,
        replicas: spec.replicas,
        image,
        min_session_timeout: spec.session_timeout.min.clone(),
        max_session_timeout: spec.session_timeout.max.clone(),
        plain_client_port: spec.plain_client_port,
    })
}

/// `spec.restoreFrom`, accepted only as the ensemble was created with it: a new ensemble (one
/// never reconciled) takes any; a created one only the source its status records.
fn restore(
    source: &RestoreSource,
    status: Option<&CoordinationEnsembleStatus>,
) -> Result<Restore, InvalidSpec> {
    let source = match (&source.pvc, &source.s3) {
        (Some(pvc), None) => pvc_location("spec.restoreFrom.pvc", pvc, false)?,
        (None, Some(s3)) => Location::S3 {
            bucket: bucket("spec.restoreFrom.s3.bucket", &s3.bucket)?,
            key: s3_key("spec.restoreFrom.s3.key", &s3.key, false)?,
            endpoint: s3.endpoint.clone().filter(|e| !e.trim().is_empty()),
            region: s3.region.clone().filter(|r| !r.trim().is_empty()),
            credentials_secret: s3
                .credentials_secret
                .as_deref()
                .map(|s| object_name("spec.restoreFrom.s3.credentialsSecret", s))
                .transpose()?,
            ca_config_map: s3
                .ca_config_map
                .as_deref()
                .map(|c| object_name("spec.restoreFrom.s3.caConfigMap", c))
                .transpose()?,
        },
        _ => return Err(InvalidSpec::Target("spec.restoreFrom")),
    };
    let now = source.describe();
    match status.and_then(|s| s.restore.as_ref()) {
        Some(recorded) if recorded.source == now => Ok(Restore {
            source,
            pending: recorded.completed_at.is_none(),
        }),
        Some(recorded) => Err(InvalidSpec::RestoreChanged {
            was: recorded.source.clone(),
            now,
        }),
        // Every reconcile that gets as far as applying writes the selector (and the restore
        // with it); a spec refused from the start has none, and nothing was created for it.
        None if status.is_some_and(|s| s.selector.is_some()) => {
            Err(InvalidSpec::RestoreAfterCreation)
        }
        None => Ok(Restore {
            source,
            pending: true,
        }),
    }
}

fn pvc_location(
    field: &'static str,
    pvc: &PvcLocation,
    folder: bool,
) -> Result<Location, InvalidSpec> {
    let claim_name = object_name(field, &pvc.claim_name)?;
    let raw = pvc.path.as_deref().unwrap_or("").trim();
    let path_field = if folder {
        "spec.backup.target.pvc.path"
    } else {
        "spec.restoreFrom.pvc.path"
    };
    let bad = || InvalidSpec::Path {
        field: path_field,
        value: raw.to_string(),
    };
    let trimmed = raw.trim_end_matches('/');
    let parts: Vec<&str> = if trimmed.is_empty() {
        Vec::new()
    } else {
        trimmed.split('/').collect()
    };
    if raw.starts_with('/')
        || parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == ".." || p.contains('\0'))
    {
        return Err(bad());
    }
    if !folder && parts.is_empty() && !raw.is_empty() {
        return Err(bad());
    }
    let mut path = parts.join("/");
    // A backup target is always a folder; a restore's is one when it says so (or is the root).
    if !path.is_empty() && (folder || raw.ends_with('/')) {
        path.push('/');
    }
    Ok(Location::Pvc { claim_name, path })
}

fn object_name(field: &'static str, value: &str) -> Result<String, InvalidSpec> {
    let ok = value.len() <= 253
        && value.split('.').all(|label| {
            let b = label.as_bytes();
            let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
            !b.is_empty()
                && b.first().is_some_and(inner)
                && b.last().is_some_and(inner)
                && b.iter().all(|c| inner(c) || *c == b'-')
        });
    if ok {
        Ok(value.to_string())
    } else {
        Err(InvalidSpec::ObjectName {
            field,
            value: value.to_string(),
        })
    }
}

fn bucket(field: &'static str, value: &str) -> Result<String, InvalidSpec> {
    let ok = (3..=255).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    if ok {
        Ok(value.to_string())
    } else {
        Err(InvalidSpec::S3 {
            field,
            value: value.to_string(),
            reason: "not a bucket name (letters, digits, '-', '.' and '_')",
        })
    }
}

/// An S3 key or prefix: no leading `/`, no spaces or control characters; a prefix gets its
/// trailing `/`.
fn s3_key(field: &'static str, value: &str, prefix: bool) -> Result<String, InvalidSpec> {
    let bad = |reason| InvalidSpec::S3 {
        field,
        value: value.to_string(),
        reason,
    };
    if value.starts_with('/') {
        return Err(bad("starts with '/': keys are relative to the bucket"));
    }
    if value.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(bad("holds spaces or control characters"));
    }
    if !prefix && value.is_empty() {
        return Err(bad("empty: name a backup's key, or a prefix ending in '/'"));
    }
    let mut key = value.to_string();
    if prefix && !key.is_empty() && !key.ends_with('/') {
        key.push('/');
    }
    Ok(key)
}

/// Checks a schedule as a CronJob's (the standard five fields, or `@hourly`, `@daily`,
/// `@midnight`, `@weekly`, `@monthly`, `@yearly`, `@annually`); says what is wrong.
pub fn check_cron(schedule: &str) -> Result<(), String> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    let schedule = schedule.trim();
    if schedule.starts_with("TZ=") || schedule.starts_with("CRON_TZ=") {
        return Err("time zones are not taken in the schedule".into());
    }
    if let Some(name) = schedule.strip_prefix('@') {
        return match name {
            "yearly" | "annually" | "monthly" | "weekly" | "daily" | "midnight" | "hourly" => {
                Ok(())
            }
            _ => Err(format!(
                "unknown @{name}: use five fields or @hourly, @daily, @weekly, @monthly, @yearly"
            )),
        };
    }
    let fields: Vec<&str> = schedule.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "{} fields; a schedule has five: minute hour day-of-month month day-of-week",
            fields.len()
        ));
    }
    let specs: [(&str, u32, u32, &[&str]); 5] = [
        ("minute", 0, 59, &[]),
        ("hour", 0, 23, &[]),
        ("day of month", 1, 31, &[]),
        ("month", 1, 12, &MONTHS),
        ("day of week", 0, 6, &DAYS),
    ];
    for (field, (what, min, max, names)) in fields.iter().zip(specs) {
        let value = |v: &str| -> Result<u32, String> {
            let offset = if what == "month" { 1 } else { 0 };
            let n = match names.iter().position(|n| n.eq_ignore_ascii_case(v)) {
                Some(i) => i as u32 + offset,
                None => v
                    .parse::<u32>()
                    .map_err(|_| format!("{what}: {v:?} is not a number"))?,
            };
            if n < min || n > max {
                return Err(format!("{what}: {n} is outside {min}-{max}"));
            }
            Ok(n)
        };
        for item in field.split(',') {
            let (range, step) = match item.split_once('/') {
                Some((range, step)) => (range, Some(step)),
                None => (item, None),
            };
            if let Some(step) = step {
                match step.parse::<u32>() {
                    Ok(n) if n >= 1 => {}
                    _ => return Err(format!("{what}: step {step:?} is not a positive number")),
                }
            }
            if range == "*" || range == "?" {
                continue;
            }
            match range.split_once('-') {
                Some((low, high)) => {
                    let (low, high) = (value(low)?, value(high)?);
                    if low > high {
                        return Err(format!("{what}: range {range} runs backwards"));
                    }
                }
                None => {
                    value(range)?;
                }
            }
        }
    }
    Ok(())
}

/// A namespace name (RFC 1123 label, as `NAMESPACE_PATTERN` in the CRD says).
pub fn is_namespace_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(inner)
        && bytes.last().is_some_and(inner)
        && bytes.iter().all(|b| inner(b) || *b == b'-')
}

/// A Kubernetes quantity of the forms the CRD admits (`SIZE_PATTERN`), greater than zero.
fn is_quantity(s: &str) -> bool {
    const SUFFIXES: [&str; 12] = [
        "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E",
    ];
    let number = SUFFIXES
        .iter()
        .find_map(|suffix| s.strip_suffix(suffix))
        .unwrap_or(s);
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (number, None),
    };
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    digits(whole)
        && fraction.is_none_or(digits)
        && number.bytes().any(|b| b.is_ascii_digit() && b != b'0')
}

/// What `baton-ensemble --min-session-timeout`/`--max-session-timeout` accept (its
/// `SESSION_TIMEOUT`): ZooKeeper's protocol carries session timeouts as 32-bit milliseconds.
pub const ENSEMBLE_SESSION_TIMEOUT: RangeInclusive<Duration> =
    Duration::ZERO..=Duration::from_secs(24 * 3600);

/// What `baton-sidecar --session-timeout` accepts (its `SESSION_TIMEOUT`): a value outside
/// would make every injected sidecar refuse to start.
pub const SIDECAR_SESSION_TIMEOUT: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(600);

/// A duration field, read as every Baton binary reads durations (`baton_duration`) and kept in
/// the range of the flag it becomes.
fn duration(
    field: &'static str,
    value: &str,
    range: RangeInclusive<Duration>,
) -> Result<Duration, InvalidSpec> {
    baton_duration::parse_within(value, range)
        .map_err(|error| InvalidSpec::Duration { field, error })
}

#[cfg(test)]
mod tests;
