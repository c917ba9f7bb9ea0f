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
    /// Whether to list the folder in the create's round trip (see `OwnedCreate::run_and_list`).
    list_with_create: bool,
    /// That listing, until the first look takes it.
    listed: Option<Vec<String>>,
}

impl PendingNode {
    /// An acquisition that has sent nothing yet. With `list_with_create`, the folder is listed
    /// in the create's round trip, for [`PendingNode::take_listing`].
    pub(super) fn new(conn: Connection, create: OwnedCreate, list_with_create: bool) -> Self {
        PendingNode {
            conn,
            create,
            node: None,
            armed: true,
            list_with_create,
            listed: None,
        }
    }

    /// The folder's children as listed right behind this node's create, once.
    pub(super) fn take_listing(&mut self) -> Option<Vec<String>> {
        self.listed.take()
    }

    /// This acquisition's node: the one made already, or a new one (found again by its owner
    /// after a lost create reply), riding out a suspension while it is made.
    pub(super) async fn node(&mut self) -> Result<OwnedNode, RecipeError> {
        loop {
            if let Some(node) = &self.node {
                return Ok(node.clone());
            }
            let list = self.list_with_create;
            match self.create.run_and_list(&self.conn.client, list).await {
                Ok((node, listed)) => {
                    self.node = Some(node);
                    self.listed = listed;
                }
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
