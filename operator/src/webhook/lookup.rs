//! Finding the ensemble a pod asks for: through the API server in the operator, a fixed list in
//! tests.

use std::future::Future;

use kube::Api;
use kube::api::ListParams;

use super::inject::EnsembleChoice;
use crate::crd::CoordinationEnsemble;

/// The API server could not be asked.
#[derive(Debug, thiserror::Error)]
#[error("cannot read CoordinationEnsembles in {namespace}: {source}")]
pub struct LookupError {
    namespace: String,
    #[source]
    source: kube::Error,
}

/// Reads CoordinationEnsembles.
pub trait EnsembleLookup: Send + Sync + 'static {
    /// The ensemble `name` in `namespace`, if it exists.
    fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<CoordinationEnsemble>, LookupError>> + Send;
    /// Every ensemble in `namespace`.
    fn list(
        &self,
        namespace: &str,
    ) -> impl Future<Output = Result<Vec<CoordinationEnsemble>, LookupError>> + Send;
}

/// Why no single ensemble answers a pod's choice: the denial message.
pub async fn resolve<L: EnsembleLookup>(
    lookup: &L,
    choice: &EnsembleChoice,
) -> Result<CoordinationEnsemble, String> {
    match choice {
        EnsembleChoice::Named { namespace, name } => match lookup.get(namespace, name).await {
            Ok(Some(ce)) => Ok(ce),
            Ok(None) => Err(format!(
                "baton.dev/ensemble: CoordinationEnsemble {namespace}/{name} does not exist"
            )),
            Err(e) => Err(e.to_string()),
        },
        EnsembleChoice::OnlyIn { namespace } => {
            let mut all = lookup.list(namespace).await.map_err(|e| e.to_string())?;
            match all.len() {
                1 => Ok(all.remove(0)),
                0 => Err(format!(
                    "no CoordinationEnsemble in namespace {namespace}: create one, or name one \
                     elsewhere with the baton.dev/ensemble annotation (NAMESPACE/NAME)"
                )),
                n => Err(format!(
                    "{n} CoordinationEnsembles in namespace {namespace}: choose one with the \
                     baton.dev/ensemble annotation"
                )),
            }
        }
    }
}

/// Lookups through the API server.
#[derive(Clone)]
pub struct KubeEnsembles {
    client: kube::Client,
}

impl KubeEnsembles {
    /// Lookups with `client`.
    pub fn new(client: kube::Client) -> Self {
        KubeEnsembles { client }
    }
}

impl EnsembleLookup for KubeEnsembles {
    async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<CoordinationEnsemble>, LookupError> {
        Api::<CoordinationEnsemble>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|source| LookupError {
                namespace: namespace.into(),
                source,
            })
    }

    async fn list(&self, namespace: &str) -> Result<Vec<CoordinationEnsemble>, LookupError> {
        Api::<CoordinationEnsemble>::namespaced(self.client.clone(), namespace)
            .list(&ListParams::default())
            .await
            .map(|list| list.items)
            .map_err(|source| LookupError {
                namespace: namespace.into(),
                source,
            })
    }
}
