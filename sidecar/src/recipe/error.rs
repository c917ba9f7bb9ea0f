//! The one error type of the recipe layer.

use zookeeper_client as zk;

/// What can go wrong in a recipe, sorted by what the caller should do about it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RecipeError {
    /// The session is disconnected (SUSPENDED): it may still be alive; retry once connected.
    #[error("not connected to the ensemble (session suspended)")]
    Suspended,
    /// The session expired or was closed (LOST): every ephemeral node of it is gone.
    #[error("the ZooKeeper session was lost")]
    SessionLost,
    /// Our node was deleted by someone else (an operator, or a repair) while we relied on it.
    #[error("our node {0} was deleted by someone else")]
    NodeVanished(String),
    /// The recipe was shut down while the call was in progress.
    #[error("the recipe is shutting down")]
    ShuttingDown,
    /// The ensemble refused or failed an operation for another reason.
    #[error("{op} {path}: {source}")]
    ZooKeeper {
        op: &'static str,
        path: String,
        #[source]
        source: zk::Error,
    },
}

impl RecipeError {
    /// Wraps a client error, keeping which operation on which path failed; connection-level
    /// errors become [`RecipeError::Suspended`] / [`RecipeError::SessionLost`].
    pub fn from_zk(op: &'static str, path: &str, source: zk::Error) -> Self {
        match source {
            zk::Error::ConnectionLoss => RecipeError::Suspended,
            zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::SessionMoved => {
                RecipeError::SessionLost
            }
            source => RecipeError::ZooKeeper {
                op,
                path: path.to_owned(),
                source,
            },
        }
    }

    /// Whether retrying on the same session (once reconnected) can succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, RecipeError::Suspended)
    }
}
