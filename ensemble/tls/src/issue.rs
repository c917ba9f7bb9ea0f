//! Making an ensemble CA and the certificates it signs. The operator keeps the CA in a Secret
//! and issues from it; `baton-ensemble certs` does the same into a folder for local use. Both
//! go through here, so every certificate carries its identity the same way.

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::TlsError;
use crate::identity::{Identity, Role, valid_cluster_id};

/// How long a new CA is valid.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// How long a new member or admin certificate is valid.
pub const LEAF_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// Certificates are back-dated by this much, for peers whose clocks are a little behind.
const CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// An ensemble's CA: its certificate and signing key, PEM.
#[derive(Clone)]
pub struct Ca {
    cluster: String,
    cert_pem: String,
    key_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

/// A certificate and its private key, PEM, with the end of its validity.
#[derive(Clone, PartialEq, Eq)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after: SystemTime,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued")
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// The names a member's serving certificate answers to besides its identity (DNS names and
/// IP addresses), so TLS clients that check host names (zkCli, kazoo, curl) accept it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostNames(pub Vec<String>);

impl HostNames {
    /// `localhost`, `127.0.0.1` and `::1`: what local tools connect to.
    pub fn loopback() -> Self {
        HostNames(vec!["localhost".into(), "127.0.0.1".into(), "::1".into()])
    }

    fn sans(&self) -> Result<Vec<SanType>, TlsError> {
        self.0
            .iter()
            .map(|name| match name.parse::<IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => Ok(SanType::DnsName(name.as_str().try_into().map_err(
                    |e: rcgen::Error| TlsError::Issue(format!("host name {name:?}: {e}")),
                )?)),
            })
            .collect()
    }
}

impl Ca {
    /// A new CA for `cluster`, valid from `now` for `CA_VALIDITY`.
    pub fn generate(cluster: &str, now: SystemTime) -> Result<Ca, TlsError> {
        check_cluster(cluster)?;
        let key = KeyPair::generate().map_err(rcgen_error)?;
        let mut params = ca_params(cluster);
        params.not_before = (now - CLOCK_SKEW).into();
        params.not_after = (now + CA_VALIDITY).into();
        let cert = params.self_signed(&key).map_err(rcgen_error)?;
        Ok(Ca {
            cluster: cluster.to_string(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A CA kept earlier (a Secret, a folder), for issuing more certificates.
    pub fn from_pem(cluster: &str, cert_pem: &str, key_pem: &str) -> Result<Ca, TlsError> {
        check_cluster(cluster)?;
        KeyPair::from_pem(key_pem).map_err(rcgen_error)?;
        Ok(Ca {
            cluster: cluster.to_string(),
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
        })
    }

    /// The cluster this CA vouches for.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The CA certificate, PEM: what every member and client trusts.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key, PEM: keep it secret.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A certificate for member `id`, usable to serve (peer, admin and client ports) and to
    /// connect to other members, answering also to `hosts`.
    pub fn issue_member(
        &self,
        id: u64,
        hosts: &HostNames,
        now: SystemTime,
    ) -> Result<Issued, TlsError> {
        if id == 0 {
            return Err(TlsError::Issue("member id 0 is reserved".into()));
        }
        self.issue(Identity::member(&self.cluster, id), hosts, now)
    }

    /// The administrator's client certificate (for the admin API).
    pub fn issue_admin(&self, now: SystemTime) -> Result<Issued, TlsError> {
        self.issue(Identity::admin(&self.cluster), &HostNames::default(), now)
    }

    fn issue(
        &self,
        identity: Identity,
        hosts: &HostNames,
        now: SystemTime,
    ) -> Result<Issued, TlsError> {
        let ca_key = KeyPair::from_pem(&self.key_pem).map_err(rcgen_error)?;
        // rcgen signs with the CA's name and key; both are fixed for a cluster, so the issuer is
        // rebuilt from them instead of parsing the stored certificate.
        let issuer = Issuer::new(ca_params(&self.cluster), ca_key);
        let key = KeyPair::generate().map_err(rcgen_error)?;
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, identity.to_string());
        params.distinguished_name = name;
        let uri = identity.to_uri();
        params.subject_alt_names =
            vec![SanType::URI(uri.as_str().try_into().map_err(
                |e: rcgen::Error| TlsError::Issue(format!("identity {uri}: {e}")),
            )?)];
        params.subject_alt_names.extend(hosts.sans()?);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = match identity.role {
            Role::Member(_) => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            Role::Admin => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
        params.use_authority_key_identifier_extension = true;
        let not_after = now + LEAF_VALIDITY;
        params.not_before = (now - CLOCK_SKEW).into();
        params.not_after = not_after.into();
        let cert = params.signed_by(&key, &issuer).map_err(rcgen_error)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_after,
        })
    }
}

fn ca_params(cluster: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "baton");
    name.push(DnType::CommonName, format!("baton ensemble CA {cluster}"));
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn check_cluster(cluster: &str) -> Result<(), TlsError> {
    if valid_cluster_id(cluster) {
        Ok(())
    } else {
        Err(TlsError::Issue(format!(
            "cluster id {cluster:?} must be 1-255 letters, digits, '.', '_' or '-'"
        )))
    }
}

fn rcgen_error(e: rcgen::Error) -> TlsError {
    TlsError::Issue(e.to_string())
}
