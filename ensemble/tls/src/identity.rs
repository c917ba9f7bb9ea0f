//! Who a certificate speaks for. Every certificate the ensemble CA signs carries exactly one
//! identity as a URI subject alternative name, `baton://CLUSTER/member/ID` or
//! `baton://CLUSTER/admin`, so a peer's claim ("I am member 2 of cluster prod.demo") is checked
//! against what the CA vouched for, not against what the peer says.

use std::fmt;

use rustls::pki_types::CertificateDer;

use crate::TlsError;

/// URI scheme of identities.
const SCHEME: &str = "baton://";

/// What a certificate holder may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// An ensemble member with this Raft id: may open peer links and serve.
    Member(u64),
    /// The ensemble's administrator (the operator, a person debugging): may use the admin API.
    Admin,
}

/// A certificate's identity: the cluster it belongs to and its role there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    pub cluster: String,
    pub role: Role,
}

impl Identity {
    /// Member `id` of `cluster`.
    pub fn member(cluster: impl Into<String>, id: u64) -> Self {
        Identity {
            cluster: cluster.into(),
            role: Role::Member(id),
        }
    }

    /// The administrator of `cluster`.
    pub fn admin(cluster: impl Into<String>) -> Self {
        Identity {
            cluster: cluster.into(),
            role: Role::Admin,
        }
    }

    /// The URI the certificate carries.
    pub fn to_uri(&self) -> String {
        match self.role {
            Role::Member(id) => format!("{SCHEME}{}/member/{id}", self.cluster),
            Role::Admin => format!("{SCHEME}{}/admin", self.cluster),
        }
    }

    /// Parses a URI made by `to_uri`; `None` for anything else (other URIs may share a SAN list).
    pub fn from_uri(uri: &str) -> Option<Self> {
        let rest = uri.strip_prefix(SCHEME)?;
        let (cluster, role) = rest.split_once('/')?;
        if !valid_cluster_id(cluster) {
            return None;
        }
        let role = match role.split_once('/') {
            None if role == "admin" => Role::Admin,
            Some(("member", id)) if id.bytes().all(|b| b.is_ascii_digit()) => match id.parse() {
                Ok(0) | Err(_) => return None,
                Ok(id) => Role::Member(id),
            },
            _ => return None,
        };
        Some(Identity {
            cluster: cluster.to_string(),
            role,
        })
    }

    /// The identity an end-entity certificate carries. Call it only on a certificate whose
    /// chain was verified: this reads, it does not verify.
    pub fn of_certificate(cert: &CertificateDer<'_>) -> Result<Self, TlsError> {
        let parsed = webpki::EndEntityCert::try_from(cert)
            .map_err(|e| TlsError::NoIdentity(format!("unparseable certificate: {e}")))?;
        let mut found = parsed.valid_uri_names().filter_map(Identity::from_uri);
        match (found.next(), found.next()) {
            (Some(identity), None) => Ok(identity),
            (None, _) => Err(TlsError::NoIdentity(
                "the certificate names no baton:// identity".into(),
            )),
            (Some(_), Some(_)) => Err(TlsError::NoIdentity(
                "the certificate names more than one baton:// identity".into(),
            )),
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.role {
            Role::Member(id) => write!(f, "member {id} of cluster {}", self.cluster),
            Role::Admin => write!(f, "the administrator of cluster {}", self.cluster),
        }
    }
}

/// Cluster ids as the ensemble accepts them (letters, digits, `._-`, at most 255 bytes): they
/// fit a URI authority unescaped.
pub fn valid_cluster_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 255
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_round_trip_through_their_uri() {
        for identity in [
            Identity::member("prod.demo", 3),
            Identity::member("a1b2", u64::MAX),
            Identity::admin("prod.demo"),
        ] {
            assert_eq!(Identity::from_uri(&identity.to_uri()), Some(identity));
        }
    }

    #[test]
    fn anything_else_is_no_identity() {
        for uri in [
            "",
            "baton://",
            "baton://x",
            "baton:///member/1",
            "baton://x/member/0",
            "baton://x/member/-1",
            "baton://x/member/+1",
            "baton://x/member/1/extra",
            "baton://x/member/99999999999999999999999",
            "baton://x/admin/",
            "baton://x/adminx",
            "baton://x y/admin",
            "baton://x%2Fy/admin",
            "spiffe://x/member/1",
            "BATON://x/admin",
        ] {
            assert_eq!(Identity::from_uri(uri), None, "{uri:?}");
        }
    }
}
