//! The queue node of an acquisition in progress (a lock's or a barrier party's) and its
//! deletion, which rides out disconnections.

use std::time::Duration;

use zookeeper_client as zk;

use super::owned_node::{OwnedCreate, OwnedNode, wait_reconnected};
use super::{Connection, RecipeError};

/// The node of an acquisition in progress, deleted in the background if the acquisition is
/// dropped (an HTTP client that hangs up must not leave a node blocking the queue).
pub(super) struct PendingNode {
    pub(super) conn: Connection,
    pub(super) create: OwnedCreate,
    pub(super) node: Option<OwnedNode>,
    pub(super) armed: bool,
}

impl PendingNode {
    /// This acquisition's node: the one made already, or a new one (found again by its owner
    /// after a lost create reply), riding out a suspension while it is made.
    pub(super) async fn node(&mut self) -> Result<OwnedNode, RecipeError> {
        loop {
            if let Some(node) = &self.node {
                return Ok(node.clone());
            }
            match self.create.run(&self.conn.client).await {
                Ok(node) => self.node = Some(node),
                Err(RecipeError::Suspended) => wait_reconnected(&self.conn.client).await?,
                Err(e) => return Err(e),
            }
        }
    }

    /// Deletes the node (or a node a lost create made), waiting at most `bound`; the deletion
    /// carries on in the background past it. `Ok` once the node is gone.
    pub(super) async fn remove(&mut self, bound: Duration) -> Result<(), RecipeError> {
        self.armed = false;
        let task = tokio::spawn(cleanup(
            self.conn.client.clone(),
            self.create.clone(),
            self.node.clone(),
        ));
        match tokio::time::timeout(bound, task).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) | Err(_) => Err(RecipeError::Suspended),
        }
    }
}

impl Drop for PendingNode {
    fn drop(&mut self) {
        if !self.armed || !(self.create.maybe_created() || self.node.is_some()) {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(cleanup(
                self.conn.client.clone(),
                self.create.clone(),
                self.node.take(),
            ));
        }
    }
}

/// Deletes the node, riding out disconnections; a lost session already deleted it.
async fn cleanup(
    client: zk::Client,
    mut create: OwnedCreate,
    node: Option<OwnedNode>,
) -> Result<(), RecipeError> {
    loop {
        match create.cleanup(&client, node.as_ref()).await {
            Ok(()) | Err(RecipeError::SessionLost) => return Ok(()),
            Err(RecipeError::Suspended) => {
                if wait_reconnected(&client).await.is_err() {
                    return Ok(());
                }
            }
            Err(e) => {
                tracing::warn!(owner = %create.owner(), error = %e, "could not delete a lock node; it ends with the session");
                return Err(e);
            }
        }
    }
}
