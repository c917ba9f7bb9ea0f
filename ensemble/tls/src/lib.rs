//! Baton's ensemble PKI (DESIGN.md §4): one CA per ensemble signs a certificate per member and
//! one for its administrator, each naming its identity (`identity`); members present theirs on
//! every port and accept peers and administrators only by what the CA signed (`configs`).
//! `issue` makes the CA and certificates (the operator, `baton-ensemble certs`, the tests);
//! `material` loads them from files and picks up renewals; `https` calls the admin API.

pub mod configs;
pub mod https;
pub mod identity;
pub mod issue;
pub mod local;
pub mod material;

use std::path::PathBuf;

pub use configs::{MemberTls, client_config, client_config_from_pem, peer_identity};
pub use https::{HttpClient, HttpError, Response};
pub use identity::{Identity, Role, valid_cluster_id};
pub use issue::{Ca, HostNames, Issued};
pub use material::{ReloadingKey, ReloadingRoots, TlsFiles, load_roots};

/// Why TLS material could not be made, loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("certificate has no usable identity: {0}")]
    NoIdentity(String),
    #[error("cannot issue a certificate: {0}")]
    Issue(String),
    #[error("bad TLS settings: {0}")]
    Config(String),
}
