//! The sidecars of one run: worker `i` is `baton-sidecar` process `bench-i`, whose session
//! goes to server `i mod N` like every other workload's.

use std::time::Duration;

use super::RunConfig;
use crate::ensemble::Ensemble;
use crate::error::BenchError;
use crate::sidecar::{Sidecar, SidecarLauncher, check_binary};

/// The sidecars' session timeout: the sidecar's default, what a pod would run with.
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// Running sidecars, by worker; a slot is empty while its sidecar is being restarted.
pub(super) struct Sidecars {
    launcher: SidecarLauncher,
    ensemble: Ensemble,
    election: Option<String>,
    slots: Vec<Option<Sidecar>>,
}

/// The identity of worker `worker`'s sidecar.
pub(super) fn identity(worker: usize) -> String {
    format!("bench-{worker}")
}

/// A lock or election name unique to this run, from its directory (`.../<pid>-<nanos>`):
/// sidecar names are single path segments.
pub(super) fn resource_name(dir: &str) -> String {
    let run = dir.rsplit('/').next().unwrap_or(dir);
    format!("bench-{run}")
}

impl Sidecars {
    /// Starts `config.workers` sidecars one after the other, each standing in `election` if
    /// given, and returns once every session is connected.
    pub(super) async fn start(
        ensemble: &Ensemble,
        config: &RunConfig,
        election: Option<&str>,
    ) -> Result<Self, BenchError> {
        check_binary(&config.sidecar_bin)?;
        let mut sidecars = Sidecars {
            launcher: SidecarLauncher {
                binary: config.sidecar_bin.clone(),
                session_timeout: SESSION_TIMEOUT,
                ensemble_ca: ensemble.tls_ca().map(ToOwned::to_owned),
            },
            ensemble: ensemble.clone(),
            election: election.map(str::to_owned),
            slots: Vec::new(),
        };
        for worker in 0..config.workers {
            let sidecar = sidecars.launch(worker).await?;
            sidecars.slots.push(Some(sidecar));
        }
        Ok(sidecars)
    }

    async fn launch(&self, worker: usize) -> Result<Sidecar, BenchError> {
        self.launcher
            .start(
                self.ensemble.server_for(worker),
                &identity(worker),
                self.election.as_deref(),
            )
            .await
    }

    /// Every sidecar that runs, in worker order.
    pub(super) fn running(&self) -> impl Iterator<Item = &Sidecar> {
        self.slots.iter().flatten()
    }

    /// The worker whose sidecar has `identity`, if it runs.
    pub(super) fn worker_of(&self, identity: &str) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.identity == identity))
    }

    /// Takes worker `worker`'s sidecar out (to terminate it); [`Sidecars::restart`] fills the
    /// slot again.
    pub(super) fn take(&mut self, worker: usize) -> Option<Sidecar> {
        self.slots.get_mut(worker).and_then(Option::take)
    }

    /// Starts worker `worker`'s sidecar again, with the same identity.
    pub(super) async fn restart(&mut self, worker: usize) -> Result<(), BenchError> {
        let sidecar = self.launch(worker).await?;
        if let Some(slot) = self.slots.get_mut(worker) {
            *slot = Some(sidecar);
        }
        Ok(())
    }

    /// Stops every sidecar with SIGTERM, so sessions close rather than expire during the next
    /// run; the first failure is returned after all were asked to stop.
    pub(super) async fn stop(self) -> Result<(), BenchError> {
        let mut first_error = None;
        for sidecar in self.slots.into_iter().flatten() {
            if let Err(e) = sidecar.stop().await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_single_segments_unique_per_run() {
        assert_eq!(
            resource_name("/baton-bench/sidecar-handover/123-1a2b"),
            "bench-123-1a2b"
        );
        assert_eq!(identity(3), "bench-3");
    }
}
