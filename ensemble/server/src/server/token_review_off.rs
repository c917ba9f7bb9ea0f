//! The `k8s` auth scheme in a build without the `k8s` feature (baton-playground's): the same
//! interface as `token_review.rs` where the rest of the server uses it, but no reviewer can be
//! made (`run` refuses `--k8s-auth` with `cli::K8S_UNAVAILABLE`), so `k8s` auth packets are
//! refused by the core as on any member run without `--k8s-auth`.

use std::convert::Infallible;
use std::net::IpAddr;

use crate::core::IdentityVerdict;

/// Never made: there is no value of this type in a build without `k8s`.
pub struct TokenReviewer(Infallible);

impl TokenReviewer {
    pub async fn review(&self, _token: &[u8], _from: IpAddr) -> IdentityVerdict {
        match self.0 {}
    }
}

/// Logs a refused token (rate-limited in the real module; refusals cannot happen here).
pub fn log_rejected(peer: std::net::SocketAddr, reason: &str) {
    tracing::info!(%peer, reason, "k8s token refused");
}
