//! The PKI in three Secrets, so that each reader gets only what it needs:
//!
//! | Secret | keys | read by |
//! |---|---|---|
//! | `NAME-tls` | `ca.crt`, `member-ID.crt`, `member-ID.key` per member | every member (mounted) |
//! | `NAME-admin` | `ca.crt`, `admin.crt`, `admin.key` | the operator; a person debugging |
//! | `NAME-ca-key` | `ca.crt`, `ca.key` | the operator only; never mounted |
//!
//! All members mount the one `NAME-tls`, so a member can read the other members' keys. That is
//! accepted: a member already holds the whole replicated state and votes on every write; a
//! Secret per member would mean a volume per pod, which a StatefulSet's shared template cannot
//! express without a restart on every scale. What a member cannot do is act as the admin or
//! mint certificates: neither the admin key nor the CA key is in what it mounts.
//!
//! Validity and issuer are annotations (`baton.dev/certificates`, `baton.dev/ca-*`), so
//! rotation decisions need no X.509 parsing. A Secret that cannot be read back whole counts as
//! missing, and what it held is issued anew.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::{CaState, Leaf, Pki, StoredPki};

/// Annotation of `NAME-tls` and `NAME-admin`: per certificate, its end and its issuer.
pub const CERTIFICATES_ANNOTATION: &str = "baton.dev/certificates";
/// Annotation of `NAME-ca-key`: end of the signing CA's validity.
pub const CA_NOT_AFTER_ANNOTATION: &str = "baton.dev/ca-not-after";
/// Annotation of `NAME-ca-key`: when the signing CA was made.
pub const CA_SINCE_ANNOTATION: &str = "baton.dev/ca-since";
/// Key of the CA bundle in every Secret and in the `NAME-ca` ConfigMap.
pub const CA_CERT_KEY: &str = "ca.crt";
/// Key of the CA's private key in `NAME-ca-key`.
pub const CA_KEY_KEY: &str = "ca.key";

/// What `baton.dev/certificates` records for one certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeafRecord {
    not_after: Timestamp,
    issuer: String,
}

/// The three Secrets, each with `meta` (name, namespace, labels, owner) filled in by the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct PkiSecrets {
    pub members: Secret,
    pub admin: Secret,
    pub ca_key: Secret,
}

impl PkiSecrets {
    /// In the order they are applied: the CA key first, so an interrupted round never leaves
    /// certificates whose CA key is lost.
    pub fn in_order(&self) -> [&Secret; 3] {
        [&self.ca_key, &self.members, &self.admin]
    }
}

/// The Secrets holding `pki`; `meta(name)` gives each its metadata.
pub fn secrets(
    pki: &Pki,
    names: &crate::names::EnsembleNames,
    meta: impl Fn(String) -> ObjectMeta,
) -> PkiSecrets {
    let member_leaves: Vec<(String, &Leaf)> = pki
        .members
        .iter()
        .map(|(id, leaf)| (format!("member-{id}"), leaf))
        .collect();
    let admin_leaves = vec![("admin".to_string(), &pki.admin)];
    let mut ca_data = BTreeMap::new();
    ca_data.insert(CA_CERT_KEY.to_string(), bytes(&pki.ca.bundle_pem));
    ca_data.insert(CA_KEY_KEY.to_string(), bytes(&pki.ca.key_pem));
    let ca_annotations = BTreeMap::from([
        (
            CA_NOT_AFTER_ANNOTATION.to_string(),
            pki.ca.not_after.to_string(),
        ),
        (CA_SINCE_ANNOTATION.to_string(), pki.ca.since.to_string()),
    ]);
    PkiSecrets {
        members: leaf_secret(meta(names.tls_secret()), &pki.ca.bundle_pem, &member_leaves),
        admin: leaf_secret(
            meta(names.admin_secret()),
            &pki.ca.bundle_pem,
            &admin_leaves,
        ),
        ca_key: secret(meta(names.ca_key_secret()), ca_data, ca_annotations),
    }
}

/// What the three Secrets hold (each `None` when it does not exist).
pub fn stored(
    ca_key: Option<&Secret>,
    members: Option<&Secret>,
    admin: Option<&Secret>,
) -> StoredPki {
    let ca = ca_key.and_then(|s| {
        let annotations = s.metadata.annotations.as_ref()?;
        let time = |key: &str| annotations.get(key)?.parse::<Timestamp>().ok();
        Some(CaState {
            bundle_pem: text(s, CA_CERT_KEY)?,
            key_pem: text(s, CA_KEY_KEY)?,
            not_after: time(CA_NOT_AFTER_ANNOTATION)?,
            since: time(CA_SINCE_ANNOTATION)?,
        })
    });
    let members = members
        .map(leaves)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(name, leaf)| {
            let id: u64 = name.strip_prefix("member-")?.parse().ok()?;
            (id > 0).then_some((id, leaf))
        })
        .collect();
    let admin = admin.and_then(|s| leaves(s).remove("admin"));
    StoredPki { ca, members, admin }
}

/// Whether `existing` already holds what `desired` says (data, type and annotations), so that
/// an unchanged PKI is not rewritten (and its keys not re-sent) on every reconcile.
pub fn holds(existing: Option<&Secret>, desired: &Secret) -> bool {
    existing.is_some_and(|e| {
        e.data == desired.data
            && e.type_ == desired.type_
            && desired
                .metadata
                .annotations
                .iter()
                .flatten()
                .all(|(k, v)| e.metadata.annotations.as_ref().and_then(|a| a.get(k)) == Some(v))
    })
}

fn leaf_secret(meta: ObjectMeta, ca_bundle: &str, leaves: &[(String, &Leaf)]) -> Secret {
    let mut data = BTreeMap::from([(CA_CERT_KEY.to_string(), bytes(ca_bundle))]);
    let mut records = BTreeMap::new();
    for (name, leaf) in leaves {
        data.insert(format!("{name}.crt"), bytes(&leaf.cert_pem));
        data.insert(format!("{name}.key"), bytes(&leaf.key_pem));
        records.insert(
            name.clone(),
            LeafRecord {
                not_after: leaf.not_after,
                issuer: leaf.issuer.clone(),
            },
        );
    }
    let record = serde_json::to_string(&records).unwrap_or_default();
    secret(
        meta,
        data,
        BTreeMap::from([(CERTIFICATES_ANNOTATION.to_string(), record)]),
    )
}

fn leaves(secret: &Secret) -> BTreeMap<String, Leaf> {
    let Some(records) = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CERTIFICATES_ANNOTATION))
        .and_then(|r| serde_json::from_str::<BTreeMap<String, LeafRecord>>(r).ok())
    else {
        return BTreeMap::new();
    };
    records
        .into_iter()
        .filter_map(|(name, record)| {
            let leaf = Leaf {
                cert_pem: text(secret, &format!("{name}.crt"))?,
                key_pem: text(secret, &format!("{name}.key"))?,
                not_after: record.not_after,
                issuer: record.issuer,
            };
            Some((name, leaf))
        })
        .collect()
}

fn secret(
    mut meta: ObjectMeta,
    data: BTreeMap<String, ByteString>,
    annotations: BTreeMap<String, String>,
) -> Secret {
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .extend(annotations);
    Secret {
        metadata: meta,
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Secret::default()
    }
}

/// Secret data as bytes.
pub fn bytes(s: &str) -> ByteString {
    ByteString(s.as_bytes().to_vec())
}

/// The UTF-8 text of `key` in `secret`, if present and non-empty.
pub fn text(secret: &Secret, key: &str) -> Option<String> {
    let value = secret.data.as_ref()?.get(key)?;
    String::from_utf8(value.0.clone())
        .ok()
        .filter(|s| !s.is_empty())
}
