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

/// Why no single ensemble answers a pod's choice; its text is the webhook's denial message.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("baton.dev/ensemble: CoordinationEnsemble {namespace}/{name} does not exist")]
    Missing { namespace: String, name: String },
    #[error(
        "no CoordinationEnsemble in namespace {namespace}: create one, or name one elsewhere \
         with the baton.dev/ensemble annotation (NAMESPACE/NAME)"
    )]
    NoneIn { namespace: String },
    #[error(
        "{count} CoordinationEnsembles in namespace {namespace}: choose one with the \
         baton.dev/ensemble annotation"
    )]
    Several { count: usize, namespace: String },
    #[error(transparent)]
    Lookup(#[from] LookupError),
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

/// The one ensemble a pod's choice names, or why there is none.
pub async fn resolve<L: EnsembleLookup>(
    lookup: &L,
    choice: &EnsembleChoice,
) -> Result<CoordinationEnsemble, ResolveError> {
    match choice {
        EnsembleChoice::Named { namespace, name } => {
            lookup
                .get(namespace, name)
                .await?
                .ok_or_else(|| ResolveError::Missing {
                    namespace: namespace.clone(),
                    name: name.clone(),
                })
        }
        EnsembleChoice::OnlyIn { namespace } => {
            let mut all = lookup.list(namespace).await?;
            match all.len() {
                1 => Ok(all.remove(0)),
                0 => Err(ResolveError::NoneIn {
                    namespace: namespace.clone(),
                }),
                count => Err(ResolveError::Several {
                    count,
                    namespace: namespace.clone(),
                }),
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
