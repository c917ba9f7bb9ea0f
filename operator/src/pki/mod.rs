//! The ensemble's PKI as the operator keeps it (DESIGN.md §4): one CA per ensemble, a
//! certificate per member id and one admin client certificate for the operator itself.
//!
//! [`plan`] decides, purely from what is stored, the member ids and the clock, what to issue,
//! renew or drop; [`issue`] carries the decision out (key generation, no I/O); `secrets` turns
//! the result into the three Secrets `apply` writes, and reads them back.
//!
//! Rotation without restarts: a renewed member certificate lands in the mounted Secret, the
//! kubelet refreshes the files, and the member re-reads them. A new CA is first added to the
//! trusted bundle beside the old one; certificates it signs replace the old CA's only after
//! [`TRUST_PROPAGATION`], when every member trusts both.

pub mod secrets;

use std::collections::BTreeMap;
use std::time::SystemTime;

use baton_tls::issue::CA_VALIDITY;
use baton_tls::{Ca, HostNames, Issued, TlsError};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::names::EnsembleNames;
use crate::pem;

/// A member or admin certificate is renewed when less than this is left.
pub const LEAF_RENEW_BEFORE: SignedDuration = SignedDuration::from_hours(30 * 24);
/// The CA is replaced when less than this is left: longer than a leaf's whole life (365 days),
/// so no certificate ever outlives the CA that signed it.
pub const CA_RENEW_BEFORE: SignedDuration = SignedDuration::from_hours(400 * 24);
/// How long a new CA sits in the trusted bundle before certificates it signs replace the old
/// CA's: the kubelet refreshes a mounted Secret within its sync period plus cache TTL (about a
/// minute by default), so by then every member trusts both CAs and no link breaks.
pub const TRUST_PROPAGATION: SignedDuration = SignedDuration::from_mins(10);

/// Why certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("ensemble {cluster}: {source}")]
    Tls {
        cluster: String,
        #[source]
        source: TlsError,
    },
    #[error("ensemble {cluster}: certificate date out of range: {reason}")]
    Date { cluster: String, reason: String },
}

/// The CA as stored: what members and clients trust, and the key that signs.
#[derive(Clone, PartialEq, Eq)]
pub struct CaState {
    /// `ca.crt`: the signing CA first, then the one before it while certificates it signed may
    /// still be in use.
    pub bundle_pem: String,
    /// The signing CA's private key.
    pub key_pem: String,
    /// End of the signing CA's validity.
    pub not_after: Timestamp,
    /// When the signing CA was made (its certificates replace the previous CA's after
    /// `TRUST_PROPAGATION`).
    pub since: Timestamp,
}

impl std::fmt::Debug for CaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaState")
            .field("certificates", &pem::certificates(&self.bundle_pem).len())
            .field("not_after", &self.not_after)
            .field("since", &self.since)
            .finish_non_exhaustive()
    }
}

impl CaState {
    /// Fingerprint of the signing CA (the bundle's first certificate).
    pub fn signing_fingerprint(&self) -> Option<String> {
        pem::first_certificate(&self.bundle_pem).map(|c| pem::fingerprint(&c))
    }

    /// Fingerprints of every trusted CA.
    pub fn trusted_fingerprints(&self) -> Vec<String> {
        pem::certificates(&self.bundle_pem)
            .iter()
            .map(|c| pem::fingerprint(c))
            .collect()
    }
}

/// One certificate and its key, with what rotation needs to know without parsing X.509.
#[derive(Clone, PartialEq, Eq)]
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after: Timestamp,
    /// Fingerprint of the CA that signed it.
    pub issuer: String,
}

impl std::fmt::Debug for Leaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaf")
            .field("not_after", &self.not_after)
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

/// What the Secrets hold; anything missing or unreadable is absent (and is issued anew).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredPki {
    pub ca: Option<CaState>,
    pub members: BTreeMap<u64, Leaf>,
    pub admin: Option<Leaf>,
}

/// A complete PKI: what the Secrets hold after `issue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pki {
    pub ca: CaState,
    pub members: BTreeMap<u64, Leaf>,
    pub admin: Leaf,
}

impl Pki {
    /// What the operator needs to call the admin API.
    pub fn admin_credentials(&self) -> AdminCredentials {
        AdminCredentials {
            ca_pem: self.ca.bundle_pem.clone(),
            cert_pem: self.admin.cert_pem.clone(),
            key_pem: self.admin.key_pem.clone(),
        }
    }
}

/// The admin client certificate and the CAs it trusts, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminCredentials {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for AdminCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminCredentials").finish_non_exhaustive()
    }
}

/// What happens to the CA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaStep {
    Keep,
    /// A new CA; `keep_previous` keeps the old one trusted beside it (a renewal), else it is the
    /// first (or the stored one is unusable).
    New {
        keep_previous: bool,
    },
}

/// Who a certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Holder {
    Member(u64),
    Admin,
}

/// The decision `plan` makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PkiPlan {
    pub ca: CaStep,
    /// Certificates to issue, new or renewed.
    pub issue: Vec<Holder>,
    /// Members whose certificates go (ids no longer in the ensemble).
    pub drop: Vec<u64>,
}

impl std::fmt::Display for PkiPlan {
    /// E.g. `new CA; issue member 4, admin; drop member 5` (for Events and logs).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        match self.ca {
            CaStep::Keep => {}
            CaStep::New {
                keep_previous: true,
            } => parts.push("new CA (the old one stays trusted)".to_string()),
            CaStep::New {
                keep_previous: false,
            } => parts.push("new CA".to_string()),
        }
        if !self.issue.is_empty() {
            let who: Vec<String> = self
                .issue
                .iter()
                .map(|h| match h {
                    Holder::Member(id) => format!("member {id}"),
                    Holder::Admin => "admin".to_string(),
                })
                .collect();
            parts.push(format!("issue {}", who.join(", ")));
        }
        if !self.drop.is_empty() {
            let ids: Vec<String> = self.drop.iter().map(|id| format!("member {id}")).collect();
            parts.push(format!("drop {}", ids.join(", ")));
        }
        if parts.is_empty() {
            parts.push("keep".into());
        }
        f.write_str(&parts.join("; "))
    }
}

impl PkiPlan {
    /// Whether the stored PKI stays as it is.
    pub fn is_empty(&self) -> bool {
        self.ca == CaStep::Keep && self.issue.is_empty() && self.drop.is_empty()
    }
}

/// Decides what the stored PKI needs at `now` so that exactly `members` (ids) and the admin
/// hold good certificates.
pub fn plan(stored: &StoredPki, members: &[u64], now: Timestamp) -> PkiPlan {
    let ca = match &stored.ca {
        None => CaStep::New {
            keep_previous: false,
        },
        Some(ca) if ca.signing_fingerprint().is_none() => CaStep::New {
            keep_previous: false,
        },
        Some(ca) if expires_within(ca.not_after, now, CA_RENEW_BEFORE) => CaStep::New {
            keep_previous: true,
        },
        Some(_) => CaStep::Keep,
    };
    // Which CAs are trusted after this step, which one signs (None: the one made now), and
    // whether leaves of an older trusted CA may be replaced yet.
    let (signing, trusted, settled): (Option<String>, Vec<String>, bool) = match (&ca, &stored.ca) {
        (CaStep::Keep, Some(state)) => (
            state.signing_fingerprint(),
            state.trusted_fingerprints(),
            now.duration_since(state.since) >= TRUST_PROPAGATION,
        ),
        (
            CaStep::New {
                keep_previous: true,
            },
            Some(state),
        ) => (
            None,
            state.signing_fingerprint().into_iter().collect(),
            false,
        ),
        _ => (None, Vec::new(), true),
    };
    let needs = |leaf: Option<&Leaf>| match leaf {
        None => true,
        Some(leaf) => {
            expires_within(leaf.not_after, now, LEAF_RENEW_BEFORE)
                || !trusted.contains(&leaf.issuer)
                || (settled && signing.as_ref() != Some(&leaf.issuer))
        }
    };
    let mut issue: Vec<Holder> = members
        .iter()
        .filter(|id| needs(stored.members.get(id)))
        .map(|&id| Holder::Member(id))
        .collect();
    issue.sort_unstable();
    issue.dedup();
    if needs(stored.admin.as_ref()) {
        issue.push(Holder::Admin);
    }
    let drop = stored
        .members
        .keys()
        .copied()
        .filter(|id| !members.contains(id))
        .collect();
    PkiPlan { ca, issue, drop }
}

/// Carries out `plan` on `stored`: generates keys and signs (no I/O).
pub fn issue(
    stored: &StoredPki,
    plan: &PkiPlan,
    names: &EnsembleNames,
    now: Timestamp,
) -> Result<Pki, PkiError> {
    let cluster = names.cluster_id();
    let tls = |source| PkiError::Tls {
        cluster: cluster.clone(),
        source,
    };
    let date = |reason: String| PkiError::Date {
        cluster: cluster.clone(),
        reason,
    };
    let system_now = SystemTime::from(now);
    let (ca, state) = match (plan.ca, &stored.ca) {
        (CaStep::Keep, Some(state)) => {
            let signing = pem::first_certificate(&state.bundle_pem)
                .ok_or_else(|| tls(TlsError::Issue("the stored CA bundle is empty".into())))?;
            (
                Ca::from_pem(&cluster, &signing, &state.key_pem).map_err(tls)?,
                state.clone(),
            )
        }
        (step, previous) => {
            let ca = Ca::generate(&cluster, system_now).map_err(tls)?;
            let mut bundle_pem = ca.cert_pem().to_string();
            if !bundle_pem.ends_with('\n') {
                bundle_pem.push('\n');
            }
            let keep = matches!(
                step,
                CaStep::New {
                    keep_previous: true
                }
            );
            if let Some(old) = previous
                .as_ref()
                .filter(|_| keep)
                .and_then(|p| pem::first_certificate(&p.bundle_pem))
            {
                bundle_pem.push_str(&old);
            }
            let not_after = now
                .checked_add(
                    SignedDuration::try_from(CA_VALIDITY).map_err(|e| date(e.to_string()))?,
                )
                .map_err(|e| date(e.to_string()))?;
            let state = CaState {
                bundle_pem,
                key_pem: ca.key_pem().to_string(),
                not_after,
                since: now,
            };
            (ca, state)
        }
    };
    let issuer = state
        .signing_fingerprint()
        .ok_or_else(|| tls(TlsError::Issue("the new CA has no certificate".into())))?;
    let leaf = |issued: Issued| -> Result<Leaf, PkiError> {
        Ok(Leaf {
            not_after: Timestamp::try_from(issued.not_after).map_err(|e| date(e.to_string()))?,
            cert_pem: issued.cert_pem,
            key_pem: issued.key_pem,
            issuer: issuer.clone(),
        })
    };
    let mut members: BTreeMap<u64, Leaf> = stored
        .members
        .iter()
        .filter(|(id, _)| !plan.drop.contains(id))
        .map(|(id, leaf)| (*id, leaf.clone()))
        .collect();
    let mut admin = stored.admin.clone();
    for holder in &plan.issue {
        match *holder {
            Holder::Member(id) => {
                let hosts = HostNames(names.member_dns_names(id));
                let issued = ca.issue_member(id, &hosts, system_now).map_err(tls)?;
                members.insert(id, leaf(issued)?);
            }
            Holder::Admin => admin = Some(leaf(ca.issue_admin(system_now).map_err(tls)?)?),
        }
    }
    let admin = admin.ok_or_else(|| tls(TlsError::Issue("no admin certificate".into())))?;
    Ok(Pki {
        ca: state,
        members,
        admin,
    })
}

/// Whether `not_after` is less than `margin` away from `now` (or past).
pub fn expires_within(not_after: Timestamp, now: Timestamp, margin: SignedDuration) -> bool {
    not_after.duration_since(now) < margin
}

#[cfg(test)]
mod tests;
