//! Lease mirroring in a build without the `k8s` feature (baton-playground's): the interface
//! `sidecar.rs` uses, with no way to make a mirror (`cli` refuses `--mirror-lease`).

use std::convert::Infallible;
use std::sync::Arc;

use tokio::sync::watch;

use crate::recipe::ElectionRecipe;

/// Never made: there is no value of this type in a build without `k8s`.
pub struct LeaseMirror(Infallible);

/// Unreachable: no `LeaseMirror` exists to pass.
pub async fn run_lease_mirror(
    _elections: Vec<ElectionRecipe>,
    mirror: Arc<LeaseMirror>,
    _stop: watch::Receiver<bool>,
) {
    match mirror.0 {}
}
