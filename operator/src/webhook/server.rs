//! HTTPS for the webhook: rustls (ring) with a certificate that can be swapped while serving, and
//! hyper answering `POST /mutate-pods` (and `GET /healthz`).

use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::ServerConfig;
use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::lookup::EnsembleLookup;
use super::review::Injector;

/// How long a client may take to send a request's headers. hyper enforces no limit unless it
/// is given a timer, and without one a client that stops halfway holds its connection (and a
/// file descriptor) forever: enough of them exhaust the process's descriptors.
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The path the MutatingWebhookConfiguration calls.
pub const MUTATE_PODS_PATH: &str = "/mutate-pods";
/// Largest AdmissionReview read (the API server's own request limit is 3 MiB).
const MAX_BODY: usize = 6 * 1024 * 1024;
/// A client that has not finished its TLS handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more wait in the accept queue (the API server retries within
/// its timeout, and a flood cannot exhaust the operator's memory).
const MAX_CONNECTIONS: usize = 256;

/// A certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// No certificate in the PEM.
    #[error("no certificate in {0}")]
    NoCertificate(String),
    /// The PEM held no usable private key.
    #[error("no private key in {what}: {reason}")]
    BadKey { what: String, reason: String },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The serving certificate, replaceable while connections are served (rotation never restarts
/// the server; a handshake takes whichever certificate is current).
#[derive(Debug)]
pub struct ReloadableCert {
    current: RwLock<Arc<CertifiedKey>>,
    /// False while an interim certificate is served, which no caBundle names: the API server
    /// cannot call this replica yet (its readiness waits for it).
    trusted: AtomicBool,
}

impl ReloadableCert {
    /// Serves `key` (the real certificate) until `replace`d.
    pub fn new(key: CertifiedKey) -> Arc<Self> {
        Arc::new(ReloadableCert {
            current: RwLock::new(Arc::new(key)),
            trusted: AtomicBool::new(true),
        })
    }

    /// Serves a throw-away `key` until the real one is given to `replace`.
    pub fn interim(key: CertifiedKey) -> Arc<Self> {
        Arc::new(ReloadableCert {
            current: RwLock::new(Arc::new(key)),
            trusted: AtomicBool::new(false),
        })
    }

    /// Serves `key` from the next handshake on.
    pub fn replace(&self, key: CertifiedKey) {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        *current = Arc::new(key);
        self.trusted.store(true, Ordering::Release);
    }

    /// Whether the certificate served is a real one (not [`ReloadableCert::interim`]'s).
    pub fn is_trusted(&self) -> bool {
        self.trusted.load(Ordering::Acquire)
    }

    /// The certificate handshakes get now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl ResolvesServerCert for ReloadableCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// A certificate chain and its key from PEM (`what` names them in errors).
pub fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    what: &str,
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(what.into()));
    }
    let bad_key = |reason: String| TlsError::BadKey {
        what: what.into(),
        reason,
    };
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| bad_key(e.to_string()))?;
    let signer = ring::sign::any_supported_type(&key).map_err(|e| bad_key(e.to_string()))?;
    Ok(CertifiedKey::new(chain, signer))
}

/// `tls.crt` and `tls.key` from `dir` (a mounted cert-manager Secret).
pub fn certified_key_from_dir(dir: &Path) -> Result<(CertifiedKey, Vec<u8>), TlsError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|source| TlsError::Read { path, source })
    };
    let cert = read("tls.crt")?;
    let key = read("tls.key")?;
    let certified = certified_key(&cert, &key, &dir.display().to_string())?;
    let mut fingerprint = cert;
    fingerprint.extend_from_slice(&key);
    Ok((certified, fingerprint))
}

/// Reloads `dir` whenever its files change (kubelet swaps a mounted Secret's files atomically),
/// checking every `every`.
pub async fn watch_cert_dir(
    dir: PathBuf,
    cert: Arc<ReloadableCert>,
    mut seen: Vec<u8>,
    every: Duration,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        seen = reload_if_changed(&dir, &cert, seen);
    }
}

/// One check of `watch_cert_dir`: serves `dir`'s files if they differ from `seen` (their
/// contents when last loaded); returns what is served now.
pub fn reload_if_changed(dir: &Path, cert: &ReloadableCert, seen: Vec<u8>) -> Vec<u8> {
    match certified_key_from_dir(dir) {
        Ok((key, fingerprint)) if fingerprint != seen => {
            cert.replace(key);
            tracing::info!(dir = %dir.display(), "webhook certificate reloaded");
            fingerprint
        }
        Ok(_) => seen,
        Err(e) => {
            // Keep serving the last good certificate: a half-written update is retried.
            tracing::warn!(dir = %dir.display(), error = %e, "cannot reload the webhook certificate");
            seen
        }
    }
}

/// A rustls server configuration (ring provider) serving `cert`.
pub fn tls_config(cert: Arc<ReloadableCert>) -> Result<Arc<ServerConfig>, TlsError> {
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves the webhook on `listener` until `shutdown` completes.
pub async fn serve<L: EnsembleLookup>(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    injector: Arc<Injector<L>>,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
            _ = &mut shutdown => return,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "webhook accept failed");
                    continue;
                }
            },
            _ = &mut shutdown => return,
        };
        let acceptor = acceptor.clone();
        let injector = injector.clone();
        tokio::spawn(async move {
            // Held until the connection ends.
            let _slot = slot;
            let stream =
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "webhook TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "webhook TLS handshake timed out");
                        return;
                    }
                };
            let service = service_fn(move |req| {
                let injector = injector.clone();
                async move { Ok::<_, Infallible>(handle(&injector, req).await) }
            });
            if let Err(e) = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "webhook connection ended with an error");
            }
        });
    }
}

async fn handle<L: EnsembleLookup>(
    injector: &Injector<L>,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::POST, MUTATE_PODS_PATH) => {
            let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
                Ok(body) => body.to_bytes(),
                Err(e) => {
                    return reply(
                        StatusCode::BAD_REQUEST,
                        "text/plain",
                        format!("{e}\n").into(),
                    );
                }
            };
            let answer = injector.review(&body).await;
            let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
            reply(status, "application/json", answer.body.into())
        }
        (&Method::GET, "/healthz") => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

fn reply(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::certs;
    use k8s_openapi::jiff::Timestamp;

    fn write(dir: &Path) -> CertificateDer<'static> {
        let bundle =
            certs::new_bundle(&["localhost".into()], None, Timestamp::now()).expect("bundle");
        std::fs::write(dir.join("tls.crt"), &bundle.cert_pem).expect("write");
        std::fs::write(dir.join("tls.key"), &bundle.key_pem).expect("write");
        CertificateDer::from_pem_slice(bundle.cert_pem.as_bytes()).expect("pem")
    }

    #[test]
    fn an_interim_certificate_is_untrusted_until_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path());
        let (interim, _) = certified_key_from_dir(dir.path()).expect("load");
        let cert = ReloadableCert::interim(interim);
        assert!(!cert.is_trusted());
        let (stored, _) = certified_key_from_dir(dir.path()).expect("load");
        cert.replace(stored);
        assert!(cert.is_trusted());
    }

    #[test]
    fn a_cert_dir_is_reloaded_when_its_files_change_and_kept_when_they_break() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = write(dir.path());
        let (key, seen) = certified_key_from_dir(dir.path()).expect("load");
        let cert = ReloadableCert::new(key);
        assert!(
            cert.is_trusted(),
            "a cert dir's certificate is the real one"
        );
        let seen = reload_if_changed(dir.path(), &cert, seen);
        assert_eq!(
            cert.current().cert[0],
            first,
            "unchanged files, same certificate"
        );
        let second = write(dir.path());
        let seen = reload_if_changed(dir.path(), &cert, seen);
        assert_eq!(cert.current().cert[0], second);
        std::fs::write(dir.path().join("tls.key"), "garbage").expect("write");
        let _ = reload_if_changed(dir.path(), &cert, seen);
        assert_eq!(
            cert.current().cert[0],
            second,
            "a broken update keeps the last good one"
        );
    }
}
