//! Fair locks: exclusive (`lock-<seq>`) and read/write (`read-<seq>` / `write-<seq>`) in
//! `/baton/<namespace>/locks/<name>`, granted in sequence order without herd effect, among
//! live ephemeral nodes only ([`super::trust`]).
//!
//! A grant's fencing token is the czxid of its node: unique and increasing across the
//! ensemble, so a protected resource can refuse a holder whose token is lower than one it saw.
//!
//! The modes, node data and errors are in `lock_types`; the node of an acquisition in
//! progress in `pending_node`.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use zookeeper_client as zk;

use super::lock_types::{LockData, LockEntry, LockError, LockMode, LockState};
use super::owned_node::{OwnedCreate, OwnedNode, wait_reconnected};
use super::pending_node::PendingNode;
use super::queue::{NodeKind, Queue};
use super::timestamp::rfc3339;
use super::trust::is_trusted;
use super::{ConnectionState, RecipeError, ResourceName, SessionHandle};

/// A named lock that this process can request in any mode.
#[derive(Clone, Debug)]
pub struct LockRecipe {
    session: SessionHandle,
    name: ResourceName,
    dir: String,
    identity: String,
    /// `Some(n)`: a semaphore of `n` permits ([`LockRecipe::semaphore`]).
    permits: Option<u32>,
}
/// What one look at the queue found.
enum Look {
    Granted,
    Again,
    Blocked(zk::OneshotWatcher),
}

impl LockRecipe {
    /// A lock named `name`, requested as `identity`.
    pub fn new(session: SessionHandle, name: ResourceName, identity: impl Into<String>) -> Self {
        Self {
            dir: name.lock_dir(session.namespace()),
            session,
            name,
            identity: identity.into(),
            permits: None,
        }
    }

    /// A semaphore named `name` of `permits` holders (at least 1), requested as `identity`
    /// with [`LockMode::Permit`]: nodes `permit-<seq>` in `/baton/<namespace>/semaphores/<name>`,
    /// first come first served, each carrying `permits` so pods that disagree are refused
    /// ([`LockError::PermitsMismatch`]).
    pub fn semaphore(
        session: SessionHandle,
        name: ResourceName,
        identity: impl Into<String>,
        permits: u32,
    ) -> Self {
        Self {
            dir: name.semaphore_dir(session.namespace()),
            session,
            name,
            identity: identity.into(),
            permits: Some(permits.max(1)),
        }
    }

    /// A semaphore's permit count; `None` for a lock.
    pub fn permits(&self) -> Option<u32> {
        self.permits
    }

    /// The lock's name.
    pub fn name(&self) -> &ResourceName {
        &self.name
    }

    /// Queues for the lock and waits up to `wait` for it (zero: try once), including for the
    /// session to connect. The ensemble calls themselves are bounded by the session timeout.
    /// On failure nothing stays queued.
    pub async fn acquire(
        &self,
        mode: LockMode,
        wait: Duration,
        lease_expires_at: Option<SystemTime>,
    ) -> Result<LockGrant, LockError> {
        let started = Instant::now();
        let deadline = started + wait;
        let conn = self.session.connected_by(deadline).await?;
        let owner = self.session.next_owner_id(&self.identity, &conn);
        let data = self.data(&owner, lease_expires_at);
        let namespace = self.session.namespace();
        let parent = match self.permits {
            Some(_) => namespace.semaphores(),
            None => namespace.locks(),
        };
        let mode = if self.permits.is_some() {
            LockMode::Permit
        } else if mode == LockMode::Permit {
            LockMode::Exclusive
        } else {
            mode
        };
        let create = OwnedCreate::new(
            namespace,
            parent,
            self.dir.clone(),
            mode.kind().prefix(),
            owner,
            data,
            self.session.acls(),
        );
        // A semaphore's look lists with a watch, which the create's round trip cannot carry.
        let mut pending = PendingNode::new(conn, create, self.permits.is_none());
        let ops_deadline = deadline.max(started + self.session.session_timeout());
        let outcome =
            tokio::time::timeout_at(ops_deadline, self.wait_for_grant(&mut pending, deadline))
                .await;
        let failure = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(LockError::NotGranted { .. })) | Err(_) => {
                Some(LockError::NotGranted { waited: wait })
            }
            Ok(Err(e)) => Some(e),
        };
        match (failure, pending.node.clone()) {
            (None, Some(node)) => {
                tracing::debug!(lock = %self.name, node = %node.name, token = node.czxid, "lock granted");
                Ok(LockGrant {
                    name: self.name.clone(),
                    mode,
                    node,
                    identity: self.identity.clone(),
                    permits: self.permits,
                    session: self.session.clone(),
                    pending,
                })
            }
            (failure, _) => {
                if let Err(e) = pending.remove(self.session.session_timeout()).await {
                    tracing::warn!(lock = %self.name, error = %e, "abandoned lock node not deleted yet");
                }
                Err(failure.unwrap_or(LockError::Recipe(RecipeError::SessionLost)))
            }
        }
    }

    async fn wait_for_grant(
        &self,
        pending: &mut PendingNode,
        deadline: Instant,
    ) -> Result<(), LockError> {
        let client = pending.conn.client.clone();
        loop {
            let node = pending.node().await?;
            let look = match self.permits {
                Some(permits) => self.look_permit(&client, &node, permits).await,
                None => self
                    .look(&client, &node, pending.take_listing())
                    .await
                    .map_err(LockError::from),
            };
            match look {
                Ok(Look::Granted) => return Ok(()),
                Ok(Look::Again) => {}
                Ok(Look::Blocked(watcher)) => {
                    // `waited` is filled in by the caller, which knows what was asked.
                    let not_granted = LockError::NotGranted {
                        waited: Duration::ZERO,
                    };
                    if Instant::now() >= deadline {
                        return Err(not_granted);
                    }
                    tokio::select! {
                        _ = watcher.changed() => {}
                        _ = tokio::time::sleep_until(deadline) => return Err(not_granted),
                    }
                }
                Err(LockError::Recipe(RecipeError::Suspended)) => wait_reconnected(&client).await?,
                Err(e) => return Err(e),
            }
        }
    }

    /// One look at a semaphore's folder: granted once fewer than `permits` live nodes precede
    /// ours. Any earlier node leaving may grant us, so a waiter watches the folder's children
    /// (set with the listing, so no departure is missed); each earlier node is read to drop
    /// planted ones ([`is_trusted`]) and to compare its permit count with ours.
    async fn look_permit(
        &self,
        client: &zk::Client,
        node: &OwnedNode,
        permits: u32,
    ) -> Result<Look, LockError> {
        let (children, watcher) = match client.list_and_watch_children(&self.dir).await {
            Ok(found) => found,
            Err(zk::Error::NoNode) => {
                return Err(RecipeError::NodeVanished(node.path.clone()).into());
            }
            Err(e) => return Err(RecipeError::from_zk("list", &self.dir, e).into()),
        };
        let queue = Queue::new(&children, NodeKind::SEMAPHORE_KINDS);
        let Some(index) = queue.position(&node.name) else {
            return Err(RecipeError::NodeVanished(node.path.clone()).into());
        };
        let mut ahead = 0u32;
        for earlier in queue.nodes()[..index].iter().rev() {
            let path = format!("{}/{}", self.dir, earlier.name);
            let (data, stat) = match client.get_data(&path).await {
                Ok(found) => found,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(RecipeError::from_zk("get", &path, e).into()),
            };
            if !is_trusted(&stat) {
                self.session
                    .ignored_nodes()
                    .report(earlier.kind, &path, stat.czxid);
                continue;
            }
            let theirs = serde_json::from_slice::<LockData>(&data)
                .ok()
                .and_then(|d| d.permits);
            if let Some(theirs) = theirs
                && theirs != permits
            {
                return Err(LockError::PermitsMismatch {
                    ours: permits,
                    theirs,
                    node: earlier.name.clone(),
                });
            }
            ahead += 1;
            if ahead >= permits {
                return Ok(Look::Blocked(watcher));
            }
        }
        Ok(Look::Granted)
    }

    /// One look at the queue: granted, or the watch on the one node we wait for.
    ///
    /// The node we would wait for is watched with `exists`, whose stat says whether it is a
    /// live session's: a persistent (planted) one is dropped from the order, its watch removed,
    /// and the node we would wait for without it is checked next. So with no planted nodes a
    /// look costs what it always did (one list, one exists), a planted node never blocks or
    /// holds, and a live one is never skipped (see `election_folder::evaluate` for why nothing
    /// is cached).
    ///
    /// `listed` is the folder as listed right behind our create, when there is one: the first
    /// look then costs no listing of its own.
    async fn look(
        &self,
        client: &zk::Client,
        node: &OwnedNode,
        listed: Option<Vec<String>>,
    ) -> Result<Look, RecipeError> {
        let children = match listed {
            Some(children) => children,
            None => match client.list_children(&self.dir).await {
                Ok(children) => children,
                Err(zk::Error::NoNode) => {
                    return Err(RecipeError::NodeVanished(node.path.clone()));
                }
                Err(e) => return Err(RecipeError::from_zk("list", &self.dir, e)),
            },
        };
        let mut queue = Queue::new(&children, NodeKind::LOCK_KINDS);
        loop {
            let Some(index) = queue.position(&node.name) else {
                return Err(RecipeError::NodeVanished(node.path.clone()));
            };
            let Some(blocker) = queue.blocker(index).cloned() else {
                return Ok(Look::Granted);
            };
            let path = format!("{}/{}", self.dir, blocker.name);
            let (stat, watcher) = client
                .check_and_watch_stat(&path)
                .await
                .map_err(|e| RecipeError::from_zk("exists", &path, e))?;
            match stat {
                None => return Ok(Look::Again),
                Some(stat) if !is_trusted(&stat) => {
                    self.session
                        .ignored_nodes()
                        .report(blocker.kind, &path, stat.czxid);
                    drop(watcher);
                    queue.remove(&blocker.name);
                }
                Some(_) => return Ok(Look::Blocked(watcher)),
            }
        }
    }

    /// Reads the queue: who holds the lock, who waits (in order), with their data.
    pub async fn inspect(&self) -> Result<LockState, RecipeError> {
        let conn = match self.session.connected_now() {
            Some(conn) => conn,
            None if self.session.state() == ConnectionState::Suspended => {
                return Err(RecipeError::Suspended);
            }
            None => return Err(RecipeError::SessionLost),
        };
        let client = &conn.client;
        let children = match client.list_children(&self.dir).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Ok(LockState::default()),
            Err(e) => return Err(RecipeError::from_zk("list", &self.dir, e)),
        };
        let kinds = match self.permits {
            Some(_) => NodeKind::SEMAPHORE_KINDS,
            None => NodeKind::LOCK_KINDS,
        };
        let mut queue = Queue::new(&children, kinds);
        let mut read = Vec::new();
        for node in queue.nodes() {
            let path = format!("{}/{}", self.dir, node.name);
            match client.get_data(&path).await {
                Ok(found) => read.push((node.clone(), path, found)),
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(RecipeError::from_zk("get", &path, e)),
            }
        }
        // Planted (persistent) nodes neither hold nor wait: drop them before ordering.
        read.retain(|(node, path, (_, stat))| {
            let trusted = is_trusted(stat);
            if !trusted {
                self.session
                    .ignored_nodes()
                    .report(node.kind, path, stat.czxid);
                queue.remove(&node.name);
            }
            trusted
        });
        let mut state = LockState::default();
        for (node, _, (data, stat)) in read {
            let Some(mode) = LockMode::from_kind(node.kind) else {
                continue;
            };
            let Some(index) = queue.position(&node.name) else {
                continue;
            };
            let data: LockData = serde_json::from_slice(&data).unwrap_or(LockData {
                identity: String::new(),
                owner: String::new(),
                lease_expires_at: None,
                permits: None,
            });
            let entry = LockEntry {
                node: node.name.clone(),
                mode,
                identity: data.identity,
                owner: data.owner,
                token: stat.czxid,
                lease_expires_at: data.lease_expires_at,
                permits: data.permits,
            };
            let granted = match self.permits {
                Some(permits) => queue.holds_permit(index, permits),
                None => queue.is_granted(index),
            };
            if granted {
                state.holders.push(entry);
            } else {
                state.waiters.push(entry);
            }
        }
        Ok(state)
    }

    fn data(&self, owner: &str, lease_expires_at: Option<SystemTime>) -> Vec<u8> {
        let data = LockData {
            identity: self.identity.clone(),
            owner: owner.to_owned(),
            lease_expires_at: lease_expires_at.map(rfc3339),
            permits: self.permits,
        };
        serde_json::to_vec(&data).unwrap_or_default()
    }
}

/// A granted lock. Dropping it releases the lock in the background; [`LockGrant::release`]
/// releases it and waits.
pub struct LockGrant {
    name: ResourceName,
    mode: LockMode,
    node: OwnedNode,
    identity: String,
    permits: Option<u32>,
    session: SessionHandle,
    pending: PendingNode,
}

impl std::fmt::Debug for LockGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGrant")
            .field("name", &self.name)
            .field("mode", &self.mode)
            .field("node", &self.node.path)
            .field("token", &self.node.czxid)
            .finish()
    }
}

impl LockGrant {
    /// The fencing token: czxid of the granted node, higher than every earlier grant's.
    pub fn token(&self) -> i64 {
        self.node.czxid
    }

    /// The lock's name.
    pub fn name(&self) -> &ResourceName {
        &self.name
    }

    /// A semaphore grant's permit count; `None` for a lock.
    pub fn permits(&self) -> Option<u32> {
        self.permits
    }

    /// The mode it was granted in.
    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// The granted node's path.
    pub fn path(&self) -> &str {
        &self.node.path
    }

    /// The session generation the grant lives in.
    pub fn generation(&self) -> u64 {
        self.pending.conn.generation
    }

    /// Whether the grant certainly still holds: its session is CONNECTED (SUSPENDED makes it
    /// uncertain, a new session means it is gone).
    pub fn is_held(&self) -> bool {
        self.session
            .connected_now()
            .is_some_and(|c| c.generation == self.generation())
    }

    /// Until when this grant certainly stands without hearing from the ensemble again
    /// ([`SessionHandle::valid_until`]); `None` unless it certainly holds now.
    pub fn valid_until(&self) -> Option<SystemTime> {
        if !self.is_held() {
            return None;
        }
        self.session.valid_until(self.generation())
    }

    /// Records a new lease expiry in the node's data, for observers; the lease itself is
    /// enforced by whoever holds this grant.
    pub async fn set_lease(&self, expires_at: SystemTime) -> Result<(), RecipeError> {
        self.lease_writer(expires_at).await
    }

    /// [`Self::set_lease`] as a future that borrows nothing, to run after letting go of a lock
    /// guarding the grant.
    pub fn lease_writer(
        &self,
        expires_at: SystemTime,
    ) -> impl Future<Output = Result<(), RecipeError>> + Send + 'static {
        let data = LockData {
            identity: self.identity.clone(),
            owner: self.pending.create.owner().to_owned(),
            lease_expires_at: Some(rfc3339(expires_at)),
            permits: self.permits,
        };
        let bytes = serde_json::to_vec(&data).unwrap_or_default();
        let client = self.pending.conn.client.clone();
        let path = self.node.path.clone();
        async move {
            match client.set_data(&path, &bytes, None).await {
                Ok(_) => Ok(()),
                Err(zk::Error::NoNode) => Err(RecipeError::NodeVanished(path)),
                Err(e) => Err(RecipeError::from_zk("set", &path, e)),
            }
        }
    }

    /// Releases the lock, waiting at most `bound` for the delete; past it the delete goes on
    /// in the background and `Err(Suspended)` says so.
    pub async fn release(mut self, bound: Duration) -> Result<(), RecipeError> {
        self.pending.remove(bound).await
    }
}
