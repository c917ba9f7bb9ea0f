//! The webhook's own CA and serving certificate (rcgen, ring): pure functions of the stored
//! bundle, the DNS names and the clock, so rotation decisions are unit-tested without a cluster.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::pki::expires_within;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// How long a new CA is valid.
pub const CA_VALIDITY: SignedDuration = SignedDuration::from_hours(10 * 365 * 24);
/// How long a new serving certificate is valid.
pub const SERVING_VALIDITY: SignedDuration = SignedDuration::from_hours(365 * 24);
/// A serving certificate is renewed when less than this is left.
pub const SERVING_RENEW_BEFORE: SignedDuration = crate::pki::LEAF_RENEW_BEFORE;
/// A CA is replaced when less than this is left (longer than a serving certificate's life, so
/// no serving certificate outlives its CA).
pub const CA_RENEW_BEFORE: SignedDuration = crate::pki::CA_RENEW_BEFORE;
/// Common name of the CA; the issuer is rebuilt from it and the stored key, so it never changes.
const CA_COMMON_NAME: &str = "baton-webhook-ca";
/// Certificates are back-dated by this much, for API servers whose clocks are a little behind.
const CLOCK_SKEW: SignedDuration = SignedDuration::from_mins(5);

/// Certificate generation failed.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// rcgen refused the parameters or a stored key.
    #[error("certificate generation: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// A validity bound does not fit a certificate date.
    #[error("certificate date out of range: {0}")]
    Date(String),
}

/// The CA and the serving certificate, as the Secret stores them (PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertBundle {
    /// The CA bundle the API server trusts: the signing CA first, then a replaced CA while
    /// serving certificates it signed may still be in use.
    pub ca_bundle_pem: String,
    /// Private key of the signing CA (the first in `ca_bundle_pem`).
    pub ca_key_pem: String,
    /// The serving certificate.
    pub cert_pem: String,
    /// The serving certificate's private key.
    pub key_pem: String,
    /// End of the signing CA's validity.
    pub ca_not_after: Timestamp,
    /// End of the serving certificate's validity.
    pub cert_not_after: Timestamp,
    /// DNS names the serving certificate is for.
    pub dns_names: Vec<String>,
}

/// What a rotation check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The stored bundle is good.
    Keep,
    /// A new serving certificate from the same CA (the API servers' caBundle stays valid).
    Serving,
    /// A new CA and serving certificate; the old CA stays in the bundle.
    Everything,
}

/// Decides what `stored` needs at `now` to serve `dns_names`.
pub fn renewal(stored: Option<&CertBundle>, dns_names: &[String], now: Timestamp) -> Renewal {
    let Some(stored) = stored else {
        return Renewal::Everything;
    };
    if expires_within(stored.ca_not_after, now, CA_RENEW_BEFORE) {
        Renewal::Everything
    } else if expires_within(stored.cert_not_after, now, SERVING_RENEW_BEFORE)
        || stored.dns_names != dns_names
    {
        Renewal::Serving
    } else {
        Renewal::Keep
    }
}

/// A new CA, and a serving certificate for `dns_names` it signed. `previous_ca` (PEM) stays in
/// the bundle so the API server keeps trusting a replica that still serves the old certificate.
pub fn new_bundle(
    dns_names: &[String],
    previous_ca: Option<&str>,
    now: Timestamp,
) -> Result<CertBundle, CertError> {
    let ca_key = KeyPair::generate()?;
    let ca_not_after = now + CA_VALIDITY;
    let mut params = ca_params();
    params.not_before = to_offset(now - CLOCK_SKEW)?;
    params.not_after = to_offset(ca_not_after)?;
    let ca_cert = params.self_signed(&ca_key)?;
    let mut ca_bundle_pem = ca_cert.pem();
    if let Some(previous) = previous_ca.and_then(crate::pem::first_certificate) {
        ca_bundle_pem.push_str(&previous);
    }
    let partial = CertBundle {
        ca_bundle_pem,
        ca_key_pem: ca_key.serialize_pem(),
        cert_pem: String::new(),
        key_pem: String::new(),
        ca_not_after,
        cert_not_after: now,
        dns_names: Vec::new(),
    };
    renew_serving(&partial, dns_names, now)
}

/// `ca`'s bundle with a new serving certificate for `dns_names`, signed by its CA.
pub fn renew_serving(
    ca: &CertBundle,
    dns_names: &[String],
    now: Timestamp,
) -> Result<CertBundle, CertError> {
    let ca_key = KeyPair::from_pem(&ca.ca_key_pem)?;
    let issuer = Issuer::new(ca_params(), ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(dns_names.to_vec())?;
    let mut name = DistinguishedName::new();
    name.push(
        DnType::CommonName,
        dns_names.first().map_or("baton-webhook", String::as_str),
    );
    params.distinguished_name = name;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    // Never past the CA: a certificate cannot outlive its issuer.
    let cert_not_after = (now + SERVING_VALIDITY).min(ca.ca_not_after);
    params.not_before = to_offset(now - CLOCK_SKEW)?;
    params.not_after = to_offset(cert_not_after)?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(CertBundle {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_not_after,
        dns_names: dns_names.to_vec(),
        ..ca.clone()
    })
}

/// The DNS names a Service `name` in `namespace` is called by.
pub fn service_dns_names(name: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{name}.{namespace}.svc"),
        format!("{name}.{namespace}.svc.cluster.local"),
        format!("{name}.{namespace}"),
        name.to_string(),
    ]
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, CA_COMMON_NAME);
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn to_offset(t: Timestamp) -> Result<time::OffsetDateTime, CertError> {
    time::OffsetDateTime::from_unix_timestamp(t.as_second())
        .map_err(|e| CertError::Date(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-11-23T12:00:00Z".parse().expect("timestamp")
    }

    fn names() -> Vec<String> {
        service_dns_names("baton-webhook", "baton-system")
    }

    #[test]
    fn a_missing_bundle_is_made_and_then_kept() {
        assert_eq!(renewal(None, &names(), now()), Renewal::Everything);
        let bundle = new_bundle(&names(), None, now()).expect("bundle");
        assert_eq!(bundle.ca_bundle_pem.matches("BEGIN CERTIFICATE").count(), 1);
        assert_eq!(renewal(Some(&bundle), &names(), now()), Renewal::Keep);
        assert_eq!(bundle.cert_not_after, now() + SERVING_VALIDITY);
    }

    #[test]
    fn the_serving_certificate_is_renewed_a_month_before_it_expires() {
        let bundle = new_bundle(&names(), None, now()).expect("bundle");
        let later = now() + SERVING_VALIDITY - SERVING_RENEW_BEFORE + SignedDuration::from_secs(1);
        assert_eq!(renewal(Some(&bundle), &names(), later), Renewal::Serving);
        let renewed = renew_serving(&bundle, &names(), later).expect("renew");
        assert_eq!(renewed.ca_bundle_pem, bundle.ca_bundle_pem);
        assert_ne!(renewed.cert_pem, bundle.cert_pem);
        assert_eq!(renewal(Some(&renewed), &names(), later), Renewal::Keep);
    }

    #[test]
    fn other_dns_names_renew_the_serving_certificate() {
        let bundle = new_bundle(&names(), None, now()).expect("bundle");
        let other = service_dns_names("other", "baton-system");
        assert_eq!(renewal(Some(&bundle), &other, now()), Renewal::Serving);
    }

    #[test]
    fn an_old_ca_is_replaced_and_stays_trusted_beside_the_new_one() {
        let bundle = new_bundle(&names(), None, now()).expect("bundle");
        let later = now() + CA_VALIDITY - CA_RENEW_BEFORE + SignedDuration::from_secs(1);
        assert_eq!(renewal(Some(&bundle), &names(), later), Renewal::Everything);
        let replaced = new_bundle(&names(), Some(&bundle.ca_bundle_pem), later).expect("bundle");
        assert_eq!(
            replaced.ca_bundle_pem.matches("BEGIN CERTIFICATE").count(),
            2
        );
        assert!(replaced.ca_bundle_pem.ends_with(&bundle.ca_bundle_pem));
        // A third CA drops the first: only the one before the current stays.
        let third = new_bundle(&names(), Some(&replaced.ca_bundle_pem), later).expect("bundle");
        assert_eq!(third.ca_bundle_pem.matches("BEGIN CERTIFICATE").count(), 2);
        assert!(!third.ca_bundle_pem.contains(&bundle.ca_bundle_pem));
    }
}
