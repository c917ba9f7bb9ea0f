//! A holder's TLS material on disk (the CA it trusts, its certificate and key) and a resolver
//! that picks up a renewed certificate without a restart: Kubernetes swaps a mounted Secret's
//! files in place, so the files are looked at again, at most every `RECHECK`, on a handshake.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use rustls::RootCertStore;
use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::TlsError;
use crate::identity::Identity;

/// How often a handshake may look at the files for a renewed certificate.
const RECHECK: Duration = Duration::from_secs(10);

/// Where a holder's material lives: PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The ensemble CA's certificate: the only one trusted.
    pub ca: PathBuf,
    /// This holder's certificate (its chain, end entity first).
    pub cert: PathBuf,
    /// This holder's private key.
    pub key: PathBuf,
}

impl TlsFiles {
    /// The files `baton-ensemble certs` writes into `dir` for `name` (`member-1`, `admin`).
    pub fn in_dir(dir: &Path, name: &str) -> Self {
        TlsFiles {
            ca: dir.join("ca.crt"),
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
        }
    }

    /// The trusted CA.
    pub fn roots(&self) -> Result<Arc<RootCertStore>, TlsError> {
        load_roots(&self.ca)
    }

    /// This holder's certificate and key, checked to belong together and to name an identity.
    pub fn certified_key(&self) -> Result<(Arc<CertifiedKey>, Identity), TlsError> {
        let chain = read_certs(&self.cert)?;
        let identity = Identity::of_certificate(&chain[0]).map_err(|e| TlsError::File {
            path: self.cert.clone(),
            reason: e.to_string(),
        })?;
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| TlsError::File {
            path: self.key.clone(),
            reason: format!("no private key: {e}"),
        })?;
        let provider = rustls::crypto::ring::default_provider();
        let certified =
            CertifiedKey::from_der(chain, key, &provider).map_err(|e| TlsError::File {
                path: self.key.clone(),
                reason: format!("does not fit {}: {e}", self.cert.display()),
            })?;
        Ok((Arc::new(certified), identity))
    }
}

/// The CA certificates in a PEM file, as trust roots.
pub fn load_roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path)? {
        roots.add(cert).map_err(|e| TlsError::File {
            path: path.to_path_buf(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(Arc::new(roots))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file_error = |reason: String| TlsError::File {
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(file_error("holds no certificate".into()));
    }
    Ok(certs)
}

/// Serves this holder's certificate, reloading it when its files change. A renewed
/// certificate must carry the same identity; one that does not (or does not load) is refused
/// with an error in the log, and the current one stays in use.
#[derive(Debug)]
pub struct ReloadingKey {
    files: TlsFiles,
    identity: Identity,
    recheck: Duration,
    state: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    stamp: Option<(SystemTime, SystemTime)>,
    checked: Instant,
}

impl ReloadingKey {
    /// Loads the files now; fails if they do not hold a usable certificate and key.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let stamp = stamp(&files);
        let (key, identity) = files.certified_key()?;
        Ok(ReloadingKey {
            files,
            identity,
            recheck: RECHECK,
            state: Mutex::new(Loaded {
                key,
                stamp,
                checked: Instant::now(),
            }),
        })
    }

    /// Looks at the files at most every `recheck` instead of every 10 s.
    pub fn with_recheck(mut self, recheck: Duration) -> Self {
        self.recheck = recheck;
        self
    }

    /// The identity the certificate carries (fixed for the life of this resolver).
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The certificate to present now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.checked.elapsed() >= self.recheck {
            state.checked = Instant::now();
            let now = stamp(&self.files);
            if now != state.stamp {
                state.stamp = now;
                match self.files.certified_key() {
                    Ok((key, identity)) if identity == self.identity => {
                        tracing::info!(cert = %self.files.cert.display(), %identity, "loaded a renewed certificate");
                        state.key = key;
                    }
                    Ok((_, identity)) => tracing::error!(
                        cert = %self.files.cert.display(), expected = %self.identity, found = %identity,
                        "a renewed certificate names another identity; keeping the current one"
                    ),
                    // A Secret update can be seen half-written; the next check sees it whole.
                    Err(error) => {
                        tracing::warn!(%error, "cannot load a renewed certificate yet; keeping the current one")
                    }
                }
            }
        }
        state.key.clone()
    }
}

fn stamp(files: &TlsFiles) -> Option<(SystemTime, SystemTime)> {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    Some((modified(&files.cert)?, modified(&files.key)?))
}

impl ResolvesServerCert for ReloadingKey {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ResolvesClientCert for ReloadingKey {
    fn resolve(
        &self,
        _hints: &[&[u8]],
        _schemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The trusted CA certificates, re-read when their file changes: the operator rotates a CA by
/// first adding the new one beside the old in `ca.crt`, and only later signing with it, so
/// every member must come to trust it without a restart. A file that does not load keeps
/// the current roots (and says so).
#[derive(Debug)]
pub struct ReloadingRoots {
    path: PathBuf,
    recheck: Duration,
    state: Mutex<LoadedRoots>,
}

#[derive(Debug)]
struct LoadedRoots {
    roots: Arc<RootCertStore>,
    stamp: Option<SystemTime>,
    checked: Instant,
}

impl ReloadingRoots {
    /// Loads `path` now; fails if it holds no usable CA certificate.
    pub fn load(path: &Path) -> Result<Self, TlsError> {
        let stamp = modified(path);
        Ok(ReloadingRoots {
            path: path.to_path_buf(),
            recheck: RECHECK,
            state: Mutex::new(LoadedRoots {
                roots: load_roots(path)?,
                stamp,
                checked: Instant::now(),
            }),
        })
    }

    /// Looks at the file at most every `recheck` instead of every 10 s.
    pub fn with_recheck(mut self, recheck: Duration) -> Self {
        self.recheck = recheck;
        self
    }

    /// The roots to verify against now.
    pub fn current(&self) -> Arc<RootCertStore> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.checked.elapsed() >= self.recheck {
            state.checked = Instant::now();
            let now = modified(&self.path);
            if now != state.stamp {
                state.stamp = now;
                match load_roots(&self.path) {
                    Ok(roots) => {
                        tracing::info!(ca = %self.path.display(), cas = roots.len(), "loaded changed trusted CAs");
                        state.roots = roots;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "cannot load the changed trusted CAs yet; keeping the current ones")
                    }
                }
            }
        }
        state.roots.clone()
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}
