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

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, CommonState, DigitallySignedStruct, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::TlsError;
use crate::identity::Identity;
use crate::material::{ReloadingKey, TlsFiles, load_roots};

/// A member's TLS: the CA it trusts and its own (reloading) certificate.
#[derive(Debug, Clone)]
pub struct MemberTls {
    roots: Arc<RootCertStore>,
    key: Arc<ReloadingKey>,
}

impl MemberTls {
    /// Loads a member's files; its certificate must name a member identity.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let roots = files.roots()?;
        let key = Arc::new(ReloadingKey::load(files)?);
        Ok(MemberTls { roots, key })
    }

    /// Who this member's certificate says it is.
    pub fn identity(&self) -> &Identity {
        self.key.identity()
    }

    /// The peer port: both sides present member certificates of the ensemble CA.
    pub fn peer_acceptor(&self) -> Result<TlsAcceptor, TlsError> {
        let verifier = WebPkiClientVerifier::builder_with_provider(self.roots.clone(), provider())
            .build()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        self.server_config(Some(verifier))
    }

    /// The admin port: a client certificate is asked for but not required, so probes work
    /// without one; each route decides what it needs from `peer_identity`.
    pub fn admin_acceptor(&self) -> Result<TlsAcceptor, TlsError> {
        let verifier = WebPkiClientVerifier::builder_with_provider(self.roots.clone(), provider())
            .allow_unauthenticated()
            .build()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        self.server_config(Some(verifier))
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
            .with_custom_certificate_verifier(Arc::new(CaVerifier::new(self.roots.clone())))
            .with_client_cert_resolver(self.key.clone());
        Ok(TlsConnector::from(Arc::new(config)))
    }

    fn server_config(
        &self,
        verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    ) -> Result<TlsAcceptor, TlsError> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = match verifier {
            Some(v) => builder.with_client_cert_verifier(v),
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
    let roots = load_roots(ca)?;
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
        .with_custom_certificate_verifier(Arc::new(CaVerifier::new(Arc::new(roots))));
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

/// Verifies a server's chain to the ensemble CA for server use, and its handshake signature;
/// not its host name (see the module header).
#[derive(Debug)]
struct CaVerifier {
    roots: Arc<RootCertStore>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl CaVerifier {
    fn new(roots: Arc<RootCertStore>) -> Self {
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
        cert.verify_for_usage(
            self.algorithms.all,
            &self.roots.roots,
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
