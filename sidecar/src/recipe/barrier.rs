//! Barriers: a pod enters (`party-<seq>` in `/baton/<namespace>/barriers/<name>`) and waits
//! until N parties are in; leaving is deleting its node (when its call returns, or with its
//! session), so the barrier is a double one and can be used again.
//!
//! A round ends when a party sees N live parties not yet released: it marks each of them
//! released (`"passed": true` in the node's data) and passes. Each party watches its own node
//! and the folder's children, so it passes when marked even if the others left already; a
//! party that comes after the marking counts towards the next round. Only live ephemeral
//! nodes count ([`super::trust`]), and each node carries N: a pod asking for another N than
//! the earliest waiting party is refused ([`BarrierError::PartiesMismatch`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use zookeeper_client as zk;

use super::owned_node::{OwnedCreate, wait_reconnected};
use super::pending_node::PendingNode;
use super::queue::{NodeKind, Queue};
use super::trust::is_trusted;
use super::{RecipeError, ResourceName, SessionHandle};

/// The JSON data of a party node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartyData {
    #[serde(default)]
    pub identity: String,
    #[serde(default)]
    pub owner: String,
    #[serde(default)]
    pub parties: Option<u32>,
    /// Set by whoever saw the round complete: this party may pass.
    #[serde(default)]
    pub passed: bool,
}

/// Why entering a barrier did not pass it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BarrierError {
    #[error("fewer than the parties asked for entered within {}ms", .waited.as_millis())]
    NotPassed { waited: Duration },
    #[error(
        "barrier node {node} asks for parties={theirs}, this request for parties={ours}: every pod must use the same count"
    )]
    PartiesMismatch {
        ours: u32,
        theirs: u32,
        node: String,
    },
    #[error(transparent)]
    Recipe(#[from] RecipeError),
}

/// A barrier named `name` of `parties` pods.
#[derive(Clone, Debug)]
pub struct BarrierRecipe {
    session: SessionHandle,
    name: ResourceName,
    dir: String,
    identity: String,
    parties: u32,
}

/// What one look found.
enum Look {
    Passed,
    Blocked,
}

impl BarrierRecipe {
    /// A barrier named `name` that opens once `parties` (at least 1) pods are in, entered as
    /// `identity`.
    pub fn new(
        session: SessionHandle,
        name: ResourceName,
        identity: impl Into<String>,
        parties: u32,
    ) -> Self {
        Self {
            dir: name.barrier_dir(session.namespace()),
            session,
            name,
            identity: identity.into(),
            parties: parties.max(1),
        }
    }

    /// Enters and waits up to `wait` for the round to complete. Either way this party has left when it returns (its node deleted,
    /// waiting at most the session timeout; past it the delete goes on in the background).
    pub async fn enter(&self, wait: Duration) -> Result<(), BarrierError> {
        let started = Instant::now();
        let deadline = started + wait;
        let conn = self.session.connected_by(deadline).await?;
        let owner = self.session.next_owner_id(&self.identity, &conn);
        let data = serde_json::to_vec(&PartyData {
            identity: self.identity.clone(),
            owner: owner.clone(),
            parties: Some(self.parties),
            passed: false,
        })
        .unwrap_or_default();
        let namespace = self.session.namespace();
        let create = OwnedCreate::new(
            namespace,
            namespace.barriers(),
            self.dir.clone(),
            NodeKind::Party.prefix(),
            owner,
            data,
            self.session.acls(),
        );
        let mut pending = PendingNode::new(conn, create, false);
        let ops_deadline = deadline.max(started + self.session.session_timeout());
        let outcome =
            tokio::time::timeout_at(ops_deadline, self.wait_to_pass(&mut pending, deadline)).await;
        let result = match outcome {
            Ok(Ok(())) => Ok(()),
            // Marked released just as `wait` ran out: the others count this party as passed.
            Ok(Err(BarrierError::NotPassed { .. })) | Err(_) if self.marked(&pending).await => {
                Ok(())
            }
            Ok(Err(BarrierError::NotPassed { .. })) | Err(_) => {
                Err(BarrierError::NotPassed { waited: wait })
            }
            Ok(Err(e)) => Err(e),
        };
        if let Err(e) = pending.remove(self.session.session_timeout()).await {
            tracing::warn!(barrier = %self.name, error = %e, "barrier node not deleted yet");
        }
        result
    }

    async fn wait_to_pass(
        &self,
        pending: &mut PendingNode,
        deadline: Instant,
    ) -> Result<(), BarrierError> {
        let client = pending.conn.client.clone();
        loop {
            let node = pending.node().await?;
            // Watch our own node (marked released) and the folder (parties come and go).
            let (own, own_watch) = match client.get_and_watch_data(&node.path).await {
                Ok((data, _, watcher)) => (data, watcher),
                Err(zk::Error::NoNode) => {
                    return Err(RecipeError::NodeVanished(node.path.clone()).into());
                }
                Err(zk::Error::ConnectionLoss) => {
                    wait_reconnected(&client).await?;
                    continue;
                }
                Err(e) => return Err(RecipeError::from_zk("get", &node.path, e).into()),
            };
            let (children, children_watch) = match client.list_and_watch_children(&self.dir).await {
                Ok(found) => found,
                Err(zk::Error::ConnectionLoss) => {
                    wait_reconnected(&client).await?;
                    continue;
                }
                Err(e) => return Err(RecipeError::from_zk("list", &self.dir, e).into()),
            };
            let passed = serde_json::from_slice::<PartyData>(&own).is_ok_and(|d| d.passed);
            let look = if passed {
                Ok(Look::Passed)
            } else {
                self.look(&client, &children).await
            };
            match look {
                Ok(Look::Passed) => return Ok(()),
                Ok(Look::Blocked) => {
                    let not_passed = BarrierError::NotPassed {
                        waited: Duration::ZERO,
                    };
                    if Instant::now() >= deadline {
                        return Err(not_passed);
                    }
                    tokio::select! {
                        _ = own_watch.changed() => {}
                        _ = children_watch.changed() => {}
                        _ = tokio::time::sleep_until(deadline) => return Err(not_passed),
                    }
                }
                Err(BarrierError::Recipe(RecipeError::Suspended)) => {
                    wait_reconnected(&client).await?
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether our node says we were released (one read, bounded by the session timeout).
    async fn marked(&self, pending: &PendingNode) -> bool {
        let Some(node) = &pending.node else {
            return false;
        };
        let read = pending.conn.client.get_data(&node.path);
        match tokio::time::timeout(self.session.session_timeout(), read).await {
            Ok(Ok((data, _))) => serde_json::from_slice::<PartyData>(&data).is_ok_and(|d| d.passed),
            _ => false,
        }
    }

    /// Reads every party: with N live ones not yet released, marks them released and passes.
    async fn look(&self, client: &zk::Client, children: &[String]) -> Result<Look, BarrierError> {
        let queue = Queue::new(children, NodeKind::BARRIER_KINDS);
        let mut waiting = Vec::new();
        for party in queue.nodes() {
            let path = format!("{}/{}", self.dir, party.name);
            let (data, stat) = match client.get_data(&path).await {
                Ok(found) => found,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(RecipeError::from_zk("get", &path, e).into()),
            };
            if !is_trusted(&stat) {
                self.session
                    .ignored_nodes()
                    .report(party.kind, &path, stat.czxid);
                continue;
            }
            let Ok(data) = serde_json::from_slice::<PartyData>(&data) else {
                continue;
            };
            if data.passed {
                continue;
            }
            // The earliest waiting party sets the count: a later one asking for another is
            // refused (when it looks), and is not counted by the others meanwhile.
            if let Some(theirs) = data.parties
                && theirs != self.parties
            {
                if waiting.is_empty() {
                    return Err(BarrierError::PartiesMismatch {
                        ours: self.parties,
                        theirs,
                        node: party.name.clone(),
                    });
                }
                continue;
            }
            waiting.push((path, data, stat.version));
        }
        if waiting.len() < self.parties as usize {
            return Ok(Look::Blocked);
        }
        for (path, mut data, version) in waiting {
            data.passed = true;
            let bytes = serde_json::to_vec(&data).unwrap_or_default();
            match client.set_data(&path, &bytes, Some(version)).await {
                // Gone (it left) or marked by another party meanwhile: either way released.
                Ok(_) | Err(zk::Error::NoNode) | Err(zk::Error::BadVersion) => {}
                Err(e) => return Err(RecipeError::from_zk("set", &path, e).into()),
            }
        }
        Ok(Look::Passed)
    }

    /// The barrier's name.
    pub fn name(&self) -> &ResourceName {
        &self.name
    }
}
