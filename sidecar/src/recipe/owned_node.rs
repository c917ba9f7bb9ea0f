//! Ephemeral sequential nodes that know their owner, so a create whose reply was lost is
//! recovered instead of repeated.
//!
//! A create can reach the server and be applied while its reply is lost with the connection.
//! Creating again would queue the same owner twice: the orphan would block everyone behind it
//! for as long as the session lives. So every node's data carries an owner id, and any retry
//! first lists the folder and reads its children's data to find a node it already made.

use std::sync::Arc;

use serde::Deserialize;
use zookeeper_client as zk;

use super::access::NodeAcls;
use super::names::{Namespace, ROOT};
use super::{RecipeError, trust};

/// A queue node this process created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedNode {
    /// Child name, e.g. `lock-0000000007`.
    pub name: String,
    /// Full path.
    pub path: String,
    /// The zxid that created it: the fencing token when it is granted.
    pub czxid: i64,
}

/// The field every recipe writes into its nodes' JSON data.
#[derive(Deserialize)]
struct OwnerField<'a> {
    #[serde(borrow)]
    owner: Option<std::borrow::Cow<'a, str>>,
}

/// Whether `data` is JSON whose `owner` field equals `owner` (anything unparsable is not ours).
pub fn is_owned_by(data: &[u8], owner: &str) -> bool {
    serde_json::from_slice::<OwnerField<'_>>(data)
        .ok()
        .and_then(|f| f.owner)
        .is_some_and(|o| o == owner)
}

/// Among `children`, the first whose name starts with `prefix` and whose data names `owner`.
/// `read` fetches a child's data; a child that vanished reads as `None`.
pub async fn find_owned<F, Fut>(
    children: &[String],
    prefix: &str,
    owner: &str,
    mut read: F,
) -> Result<Option<(String, i64)>, RecipeError>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<Option<(Vec<u8>, i64)>, RecipeError>>,
{
    for child in children.iter().filter(|c| c.starts_with(prefix)) {
        if let Some((data, czxid)) = read(child.clone()).await?
            && is_owned_by(&data, owner)
        {
            return Ok(Some((child.clone(), czxid)));
        }
    }
    Ok(None)
}

/// Creates one ephemeral sequential node per owner, however many times it is retried.
///
/// Cancel-safe: if a call is dropped after sending its create, the next call (or
/// [`OwnedCreate::cleanup`]) searches for the node before doing anything else.
#[derive(Debug, Clone)]
pub struct OwnedCreate {
    dir: String,
    prefix: &'static str,
    owner: String,
    data: Vec<u8>,
    /// A create may have been applied: search before creating again.
    maybe_created: bool,
    /// Persistent parents to make, in order, when the folder is missing (the folder itself is
    /// a container the server removes once it is empty again).
    parents: Vec<String>,
    acls: Arc<NodeAcls>,
}

impl OwnedCreate {
    /// Prepares to create `dir/prefix<seq>` with `data` (JSON that must carry `owner`), where
    /// `dir` is a folder in `parent` (`/baton/<namespace>/elections` or `…/locks`) and every
    /// node below `/baton` gets `acls`.
    pub fn new(
        namespace: &Namespace,
        parent: String,
        dir: String,
        prefix: &'static str,
        owner: String,
        data: Vec<u8>,
        acls: Arc<NodeAcls>,
    ) -> Self {
        debug_assert!(is_owned_by(&data, &owner), "node data must name its owner");
        Self {
            dir,
            prefix,
            owner,
            data,
            maybe_created: false,
            parents: vec![ROOT.to_owned(), namespace.root(), parent],
            acls,
        }
    }

    /// The owner id written into the node.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Whether a node may exist on the server (a create was sent).
    pub fn maybe_created(&self) -> bool {
        self.maybe_created
    }

    /// Creates the node, or finds the one an earlier attempt made. Returns
    /// [`RecipeError::Suspended`] when the connection drops: call again once reconnected.
    pub async fn run(&mut self, client: &zk::Client) -> Result<OwnedNode, RecipeError> {
        self.run_and_list(client, false).await.map(|(node, _)| node)
    }

    /// `run`; with `list`, the folder's children are also asked for in the same round trip,
    /// sent right behind the create: the session's FIFO order makes the listing include the new
    /// node, so a lock can tell whether it holds without waiting for a second answer. The
    /// listing is `None` when it was not asked for, failed, or the node was found again rather
    /// than made.
    pub async fn run_and_list(
        &mut self,
        client: &zk::Client,
        list: bool,
    ) -> Result<(OwnedNode, Option<Vec<String>>), RecipeError> {
        let base = format!("{}/{}", self.dir, self.prefix);
        loop {
            if self.maybe_created
                && let Some(node) = self.find(client).await?
            {
                return Ok((node, None));
            }
            // Set before sending: if this future is dropped mid-flight, the create may still land.
            self.maybe_created = true;
            let options = zk::CreateMode::EphemeralSequential.with_acls(self.acls.tenant());
            // zookeeper-client orders requests when their futures are made, not when polled.
            let create = client.create(&base, &self.data, &options);
            let listing = list.then(|| client.list_children(&self.dir));
            let (created, listed) = match listing {
                Some(listing) => {
                    let (created, listed) = tokio::join!(create, listing);
                    (created, listed.ok())
                }
                None => (create.await, None),
            };
            match created {
                Ok((stat, sequence)) => {
                    let name = format!("{}{sequence}", self.prefix);
                    let node = OwnedNode {
                        path: format!("{}/{name}", self.dir),
                        name,
                        czxid: stat.czxid,
                    };
                    // A listing without our node cannot be behind the create; never trust it.
                    let listed = listed.filter(|children| children.contains(&node.name));
                    return Ok((node, listed));
                }
                Err(zk::Error::NoNode) => {
                    // Definitively not created: the folder is missing (new, or a container the
                    // server just removed).
                    self.maybe_created = false;
                    self.make_dir(client).await?;
                }
                Err(e) => return Err(RecipeError::from_zk("create", &base, e)),
            }
        }
    }

    /// Deletes whatever node this owner may have: the known one, or one a lost create made.
    pub async fn cleanup(
        &mut self,
        client: &zk::Client,
        known: Option<&OwnedNode>,
    ) -> Result<(), RecipeError> {
        let found = match known {
            Some(node) => Some(node.path.clone()),
            None if self.maybe_created => self.find(client).await?.map(|n| n.path),
            None => None,
        };
        if let Some(path) = found {
            delete_node(client, &path).await?;
        }
        self.maybe_created = false;
        Ok(())
    }

    async fn find(&self, client: &zk::Client) -> Result<Option<OwnedNode>, RecipeError> {
        let children = match client.list_children(&self.dir).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(RecipeError::from_zk("list", &self.dir, e)),
        };
        let dir = &self.dir;
        let session = client.session_id().0;
        let found = find_owned(&children, self.prefix, &self.owner, |child| async move {
            let path = format!("{dir}/{child}");
            match client.get_data(&path).await {
                // Only a node of this very session is ours: a planted copy of our data (a
                // persistent node, or another session's) is not adopted.
                Ok((_, stat)) if !trust::is_trusted(&stat) || stat.ephemeral_owner != session => {
                    Ok(None)
                }
                Ok((data, stat)) => Ok(Some((data, stat.czxid))),
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(RecipeError::from_zk("get", &path, e)),
            }
        })
        .await?;
        if found.is_some() {
            tracing::info!(dir = %self.dir, owner = %self.owner, "recovered a node whose create reply was lost");
        }
        Ok(found.map(|(name, czxid)| OwnedNode {
            path: format!("{}/{name}", self.dir),
            name,
            czxid,
        }))
    }

    /// Makes `/baton` (shared: its own ACL), `/baton/<namespace>`, its `elections` or `locks`
    /// and the folder, each unless it exists. An existing node keeps the ACL it has.
    async fn make_dir(&self, client: &zk::Client) -> Result<(), RecipeError> {
        for (i, path) in self.parents.iter().enumerate() {
            let acls = if i == 0 {
                self.acls.root()
            } else {
                self.acls.tenant()
            };
            match client
                .create(path, &[], &zk::CreateMode::Persistent.with_acls(acls))
                .await
            {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(RecipeError::from_zk("create", path, e)),
            }
        }
        let container = zk::CreateMode::Container.with_acls(self.acls.tenant());
        match client.create(&self.dir, &[], &container).await {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(RecipeError::from_zk("create", &self.dir, e)),
        }
    }
}

/// Deletes `path`; a node that is already gone counts as deleted.
pub async fn delete_node(client: &zk::Client, path: &str) -> Result<(), RecipeError> {
    match client.delete(path, None).await {
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        Err(e) => Err(RecipeError::from_zk("delete", path, e)),
    }
}

/// Waits until `client`'s connection is back; `Err(SessionLost)` when the session ended.
pub async fn wait_reconnected(client: &zk::Client) -> Result<(), RecipeError> {
    let mut watcher = client.state_watcher();
    let mut state = client.state();
    loop {
        match state {
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => return Ok(()),
            s if s.is_terminated() => return Err(RecipeError::SessionLost),
            _ => state = watcher.changed().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn owner_is_read_from_json_only() {
        assert!(is_owned_by(
            br#"{"identity":"a","owner":"a/1f/3"}"#,
            "a/1f/3"
        ));
        assert!(!is_owned_by(
            br#"{"identity":"a","owner":"a/1f/4"}"#,
            "a/1f/3"
        ));
        assert!(!is_owned_by(br#"{"identity":"a"}"#, "a/1f/3"));
        assert!(!is_owned_by(br#"{"owner":3}"#, "3"));
        assert!(!is_owned_by(b"a/1f/3", "a/1f/3"));
        assert!(!is_owned_by(b"", "a/1f/3"));
        assert!(is_owned_by(br#"{"owner":"caf\u00e9"}"#, "caf\u{e9}"));
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    /// A folder as the recovery scan sees it: names, data, and children that vanish between
    /// the listing and the read.
    #[test]
    fn recovery_finds_our_node_among_strangers() {
        let data: HashMap<&str, (&[u8], i64)> = HashMap::from([
            ("lock-0000000001", (&br#"{"owner":"b/2/1"}"#[..], 101)),
            ("lock-0000000002", (&b"not json"[..], 102)),
            ("read-0000000004", (&br#"{"owner":"a/1/7"}"#[..], 104)),
            ("lock-0000000005", (&br#"{"owner":"a/1/7"}"#[..], 105)),
        ]);
        // lock-0000000003 is listed but deleted before it is read.
        let children: Vec<String> = [
            "lock-0000000001",
            "lock-0000000002",
            "lock-0000000003",
            "read-0000000004",
            "lock-0000000005",
        ]
        .map(String::from)
        .to_vec();
        let read = |child: String| {
            let found = data.get(child.as_str()).map(|(d, z)| (d.to_vec(), *z));
            async move { Ok(found) }
        };
        let found = block_on(find_owned(&children, "lock-", "a/1/7", read)).expect("no error");
        assert_eq!(found, Some(("lock-0000000005".to_owned(), 105)));
        let none = block_on(find_owned(&children, "lock-", "c/3/1", read)).expect("no error");
        assert_eq!(none, None);
    }

    #[test]
    fn recovery_stops_at_the_first_error() {
        let children = vec!["lock-0000000001".to_owned()];
        let result = block_on(find_owned(&children, "lock-", "a", |_| async {
            Err::<Option<(Vec<u8>, i64)>, _>(RecipeError::Suspended)
        }));
        assert!(matches!(result, Err(RecipeError::Suspended)));
    }
}
