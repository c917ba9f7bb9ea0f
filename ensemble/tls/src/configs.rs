//! The TLS settings of every port, in one place (DESIGN.md §4):
//!
//! | port | server presents | client must present |
//! |---|---|---|
//! | peer | member certificate | member certificate of the same CA |
//! | admin | member certificate | admin certificate for anything but probes (checked per route) |
//! | secure client | member certificate | nothing (clients prove who they are with auth packets) |
//!
//! A server's certificate is checked against the ensemble CA only, not against a host name:
//! members reach each other by addresses that change (pod IPs, loopback ports), and what must
//! hold is the identity the CA signed, which the caller checks after the handshake.

use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls::{ClientConfig, CommonState, DigitallySignedStruct, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::TlsError;
use crate::identity::Identity;
use crate::material::{ReloadingKey, ReloadingRoots, TlsFiles};

/// A member's TLS: the CA it trusts and its own (reloading) certificate.
#[derive(Debug, Clone)]
pub struct MemberTls {
    roots: Arc<ReloadingRoots>,
    key: Arc<ReloadingKey>,
}

impl MemberTls {
    /// Loads a member's files; its certificate must name a member identity.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        Self::load_with_recheck(files, None)
    }

    /// `load`, looking at the files for changes at most every `recheck` (tests use zero).
    pub fn load_with_recheck(files: TlsFiles, recheck: Option<Duration>) -> Result<Self, TlsError> {
        let mut roots = ReloadingRoots::load(&files.ca)?;
        let mut key = ReloadingKey::load(files)?;
        if let Some(recheck) = recheck {
            roots = roots.with_recheck(recheck);
            key = key.with_recheck(recheck);
        }
        Ok(MemberTls {
            roots: Arc::new(roots),
            key: Arc::new(key),
        })
    }

    /// Who this member's certificate says it is.
    pub fn identity(&self) -> &Identity {
        self.key.identity()
    }

    /// The peer port: both sides present member certificates of the ensemble CA.
    pub fn peer_acceptor(&self) -> Result<TlsAcceptor, TlsError> {
        self.server_config(Some(ClientVerifier::new(self.roots.clone(), true)?))
    }

    /// The admin port: a client certificate is asked for but not required, so probes work
    /// without one; each route decides what it needs from `peer_identity`.
    pub fn admin_acceptor(&self) -> Result<TlsAcceptor, TlsError> {
        self.server_config(Some(ClientVerifier::new(self.roots.clone(), false)?))
    }

    /// The secure client port: no client certificate.
    pub fn client_acceptor(&self) -> Result<TlsAcceptor, TlsError> {
        self.server_config(None)
    }

    /// Outbound peer links: presents this member's certificate, accepts any server the CA
    /// signed for server use; the caller checks the identity it expected.
    pub fn peer_connector(&self) -> Result<TlsConnector, TlsError> {
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(CaVerifier::new(Roots::Reloading(
                self.roots.clone(),
            ))))
            .with_client_cert_resolver(self.key.clone());
        Ok(TlsConnector::from(Arc::new(config)))
    }

    fn server_config(
        &self,
        verifier: Option<Arc<ClientVerifier>>,
    ) -> Result<TlsAcceptor, TlsError> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = match verifier {
            Some(v) => builder.with_client_cert_verifier(v as Arc<dyn ClientCertVerifier>),
            None => builder.with_no_client_auth(),
        };
        let config = builder.with_cert_resolver(self.key.clone());
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

/// A client of the ensemble's TLS ports (the admin API): trusts the ensemble CA, optionally
/// presents a certificate of its own (the admin's).
pub fn client_config(
    ca: &std::path::Path,
    own: Option<TlsFiles>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let roots = Roots::Reloading(Arc::new(ReloadingRoots::load(ca)?));
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(CaVerifier::new(roots)));
    let config = match own {
        Some(files) => builder.with_client_cert_resolver(Arc::new(ReloadingKey::load(files)?)),
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// `client_config` from PEM held in memory (the operator reads its admin certificate from a
/// Secret): `ca_pem` is trusted, `own` is `(certificate, key)` to present.
pub fn client_config_from_pem(
    ca_pem: &str,
    own: Option<(&str, &str)>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let pem_error = |what: &str, e: rustls::pki_types::pem::Error| {
        TlsError::Config(format!("{what} is not valid PEM: {e}"))
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| pem_error("the CA certificate", e))?;
        roots
            .add(cert)
            .map_err(|e| TlsError::Config(format!("not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(TlsError::Config("no CA certificate given".into()));
    }
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(CaVerifier::new(Roots::Fixed(Arc::new(roots)))));
    let config = match own {
        Some((cert_pem, key_pem)) => {
            let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| pem_error("the certificate", e))?;
            let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
                .map_err(|e| pem_error("the private key", e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsError::Config(format!("certificate and key: {e}")))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The identity the other side of a finished handshake proved, if it presented a certificate
/// (which the handshake verified against the CA).
pub fn peer_identity(conn: &CommonState) -> Option<Result<Identity, TlsError>> {
    let cert = conn.peer_certificates()?.first()?;
    Some(Identity::of_certificate(cert))
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Trust roots fixed at start (given in memory) or re-read from their file.
#[derive(Debug)]
enum Roots {
    Fixed(Arc<RootCertStore>),
    Reloading(Arc<ReloadingRoots>),
}

impl Roots {
    fn current(&self) -> Arc<RootCertStore> {
        match self {
            Roots::Fixed(roots) => roots.clone(),
            Roots::Reloading(roots) => roots.current(),
        }
    }
}

/// Checks client certificates against the current trust roots: webpki's verifier, rebuilt
/// when the roots change (a CA rotation).
#[derive(Debug)]
struct ClientVerifier {
    roots: Arc<ReloadingRoots>,
    mandatory: bool,
    built: std::sync::Mutex<(Arc<RootCertStore>, Arc<dyn ClientCertVerifier>)>,
}

impl ClientVerifier {
    fn new(roots: Arc<ReloadingRoots>, mandatory: bool) -> Result<Arc<Self>, TlsError> {
        let current = roots.current();
        let inner = Self::build(current.clone(), mandatory)?;
        Ok(Arc::new(ClientVerifier {
            roots,
            mandatory,
            built: std::sync::Mutex::new((current, inner)),
        }))
    }

    fn build(
        roots: Arc<RootCertStore>,
        mandatory: bool,
    ) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
        let builder = WebPkiClientVerifier::builder_with_provider(roots, provider());
        let builder = if mandatory {
            builder
        } else {
            builder.allow_unauthenticated()
        };
        builder.build().map_err(|e| TlsError::Config(e.to_string()))
    }

    fn inner(&self) -> Arc<dyn ClientCertVerifier> {
        let roots = self.roots.current();
        let mut built = self
            .built
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !Arc::ptr_eq(&built.0, &roots) {
            match Self::build(roots.clone(), self.mandatory) {
                Ok(inner) => *built = (roots, inner),
                Err(error) => tracing::warn!(%error, "cannot use the changed trusted CAs"),
            }
        }
        built.1.clone()
    }
}

impl ClientCertVerifier for ClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    // No hints: they would borrow from roots that may change under us, and clients that
    // present a certificate send their one certificate anyway.
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        self.inner()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner().supported_verify_schemes()
    }
}

/// Verifies a server's chain to the ensemble CA for server use, and its handshake signature;
/// not its host name (see the module header).
#[derive(Debug)]
struct CaVerifier {
    roots: Roots,
    algorithms: WebPkiSupportedAlgorithms,
}

impl CaVerifier {
    fn new(roots: Roots) -> Self {
        CaVerifier {
            roots,
            algorithms: provider().signature_verification_algorithms,
        }
    }
}

impl ServerCertVerifier for CaVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = webpki::EndEntityCert::try_from(end_entity).map_err(pki_error)?;
        let roots = self.roots.current();
        cert.verify_for_usage(
            self.algorithms.all,
            &roots.roots,
            intermediates,
            now,
            webpki::KeyUsage::server_auth(),
            None,
            None,
        )
        .map_err(pki_error)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

fn pki_error(e: webpki::Error) -> rustls::Error {
    use rustls::CertificateError as C;
    let reason = match e {
        webpki::Error::UnknownIssuer => C::UnknownIssuer,
        webpki::Error::CertExpired { .. } => C::Expired,
        webpki::Error::CertNotValidYet { .. } => C::NotValidYet,
        webpki::Error::InvalidSignatureForPublicKey => C::BadSignature,
        other => C::Other(rustls::OtherError(Arc::new(other))),
    };
    rustls::Error::InvalidCertificate(reason)
}
