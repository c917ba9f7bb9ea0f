//! The znode tree (ZooKeeper's `DataTree`): nodes by path, per-node child sets, shared ACLs,
//! and the indexes apply and housekeeping need (ephemerals by session, containers, TTL nodes).
//!
//! Mutations here are the already-validated transactions; the checks that decide which error
//! a client gets live in `txn`. A mutation that finds the tree unlike its validation expected
//! returns an error instead of panicking.
//!
//! Stat semantics (verified against ZooKeeper 3.8.0):
//! - a node keeps ZooKeeper's *persisted* cversion: the number of children ever created under
//!   it. Sequential names use it (`%010d`), so create /p/a, delete /p/a, create -s /p/x gives
//!   /p/x0000000001. Clients see `2 * cversion - numChildren` (creates plus deletes), which is
//!   why the root reports -1 and /zookeeper -2 in a fresh tree;
//! - pzxid moves on every child create and delete, mzxid/mtime/version on setData, aversion on
//!   setACL; a new node has pzxid = mzxid = czxid and mtime = ctime;
//! - ephemeralOwner shows the session for ephemerals and 0 for everything else, containers and
//!   TTL nodes included.
//!
//! The nodes live in a persistent map (`imbl`), each behind an `Arc`: copying the map is
//! O(1), which is how a snapshot is taken without stopping the core (`StateMachine::freeze`).
//! A change after such a copy copies only the map's path to the node and the node itself
//! (`Arc::make_mut`); child sets are persistent too when large (`children.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use baton_proto::{Acl, ErrorCode, Stat};
use thiserror::Error;

use crate::acl::{self, AclCache};
use crate::children::ChildSet;
use crate::path::{self, ROOT};
use crate::quota::PoolUsage;

/// Every node by path. Keys are `Arc`s because copying a shared map's path copies them.
pub(crate) type NodeMap = imbl::HashMap<Arc<str>, Arc<Node>>;

/// Largest TTL ZooKeeper can encode in an ephemeral owner (40 bits of milliseconds).
pub const MAX_TTL_MS: i64 = (1 << 40) - 1;

/// What kind of znode this is; decides its lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// Lives until deleted.
    Persistent,
    /// Deleted when the owning session closes.
    Ephemeral { owner: i64 },
    /// Reaped once empty after having had children.
    Container,
    /// Reaped once childless and unmodified for `ttl_ms`.
    Ttl { ttl_ms: i64 },
}

impl NodeKind {
    /// The `ephemeralOwner` clients see (`DataNode.getClientEphemeralOwner`).
    pub fn client_owner(self) -> i64 {
        match self {
            NodeKind::Ephemeral { owner } => owner,
            _ => 0,
        }
    }
}

/// One znode. Fields are ZooKeeper's persisted stat; `stat()` derives what clients see.
#[derive(Debug, Clone)]
pub struct Node {
    /// `None` for null data (a create or setData with a null buffer), which ZooKeeper keeps
    /// apart from empty data; free: `Option<Box<[u8]>>` is as large as `Box<[u8]>`.
    pub(crate) data: Option<Box<[u8]>>,
    pub(crate) acl: Arc<[Acl]>,
    pub(crate) children: ChildSet,
    pub(crate) czxid: i64,
    pub(crate) mzxid: i64,
    pub(crate) pzxid: i64,
    pub(crate) ctime: i64,
    pub(crate) mtime: i64,
    pub(crate) version: i32,
    /// Children ever created (ZooKeeper's persisted cversion), not what clients see.
    pub(crate) cversion: i32,
    pub(crate) aversion: i32,
    pub(crate) kind: NodeKind,
}

impl Node {
    /// The Stat clients see.
    pub fn stat(&self) -> Stat {
        let num_children = self.num_children();
        Stat {
            czxid: self.czxid,
            mzxid: self.mzxid,
            ctime: self.ctime,
            mtime: self.mtime,
            version: self.version,
            cversion: self.cversion.wrapping_mul(2).wrapping_sub(num_children),
            aversion: self.aversion,
            ephemeral_owner: self.kind.client_owner(),
            data_length: i32::try_from(self.data_len()).unwrap_or(i32::MAX),
            num_children,
            pzxid: self.pzxid,
        }
    }

    /// The node's data; `None` if it is null (ZooKeeper's getData answers null then).
    pub fn data(&self) -> Option<&[u8]> {
        self.data.as_deref()
    }

    /// Length of the data, 0 for null (ZooKeeper's `Stat.dataLength`).
    pub fn data_len(&self) -> usize {
        self.data.as_ref().map_or(0, |d| d.len())
    }

    /// The node's ACL (shared with every node that has the same list).
    pub fn acl(&self) -> &[Acl] {
        &self.acl
    }

    /// Child names in sorted order.
    pub fn children(&self) -> impl Iterator<Item = &str> {
        self.children.iter()
    }

    /// Current number of children.
    pub fn num_children(&self) -> i32 {
        i32::try_from(self.children.len()).unwrap_or(i32::MAX)
    }

    /// Persistent, ephemeral, container or TTL.
    pub fn kind(&self) -> NodeKind {
        self.kind
    }

    /// The persisted cversion: children ever created, the next sequential suffix.
    pub fn child_creates(&self) -> i32 {
        self.cversion
    }

    /// Time of the last setData (or the create).
    pub fn mtime(&self) -> i64 {
        self.mtime
    }

    fn new(data: Option<Box<[u8]>>, acl: Arc<[Acl]>, kind: NodeKind, zxid: i64, time: i64) -> Node {
        Node {
            data,
            acl,
            children: ChildSet::default(),
            czxid: zxid,
            mzxid: zxid,
            pzxid: zxid,
            ctime: time,
            mtime: time,
            version: 0,
            cversion: 0,
            aversion: 0,
            kind,
        }
    }
}

/// The node at `path` to change, copied first if a snapshot still shares it.
fn node_mut<'a>(nodes: &'a mut NodeMap, path: &str) -> Option<&'a mut Node> {
    nodes.get_mut(path::normalize(path)).map(Arc::make_mut)
}

/// Why a list of (path, node) pairs, as read from a snapshot, does not make a tree.
#[derive(Debug, Error, PartialEq, Eq)]
pub(crate) enum NotATree {
    #[error("duplicate node {0}")]
    Duplicate(Box<str>),
    #[error("no root node")]
    NoRoot,
    #[error("invalid path {0:?}")]
    InvalidPath(Box<str>),
    #[error("node {0} has no parent")]
    NoParent(Box<str>),
}

/// The whole znode tree and its indexes.
#[derive(Debug)]
pub struct DataTree {
    nodes: NodeMap,
    acls: AclCache,
    ephemerals: BTreeMap<i64, BTreeSet<Box<str>>>,
    containers: BTreeSet<Box<str>>,
    ttls: BTreeSet<Box<str>>,
    /// Sum of path and data lengths, ZooKeeper's `approximate_data_size`.
    data_size: u64,
    /// Znodes and bytes per quota pool, kept as nodes come and go (derived, so a restored
    /// snapshot recomputes it).
    usage: PoolUsage,
}

impl Default for DataTree {
    fn default() -> Self {
        DataTree::new()
    }
}

impl DataTree {
    /// A fresh tree as ZooKeeper 3.8 starts: /, /zookeeper, /zookeeper/quota and
    /// /zookeeper/config (READ-only for everyone, aversion -1), all with zero stats.
    pub fn new() -> DataTree {
        let mut tree = DataTree::empty();
        let mut open = || tree.acls.intern(&acl::open());
        let mut root = Node::new(Some(Box::default()), open(), NodeKind::Persistent, 0, 0);
        root.children.insert("zookeeper");
        let mut zookeeper = Node::new(Some(Box::default()), open(), NodeKind::Persistent, 0, 0);
        zookeeper.children.insert("quota");
        zookeeper.children.insert("config");
        let quota = Node::new(Some(Box::default()), open(), NodeKind::Persistent, 0, 0);
        let read_only = tree.acls.intern(&acl::read_only());
        let mut config = Node::new(Some(Box::default()), read_only, NodeKind::Persistent, 0, 0);
        config.aversion = -1;
        for (p, node) in [
            (ROOT, root),
            ("/zookeeper", zookeeper),
            ("/zookeeper/quota", quota),
            ("/zookeeper/config", config),
        ] {
            tree.data_size += p.len() as u64;
            tree.usage.add(p, 1, p.len() as i64);
            tree.nodes.insert(p.into(), Arc::new(node));
        }
        tree
    }

    fn empty() -> DataTree {
        DataTree {
            nodes: NodeMap::default(),
            acls: AclCache::default(),
            ephemerals: BTreeMap::new(),
            containers: BTreeSet::new(),
            ttls: BTreeSet::new(),
            data_size: 0,
            usage: PoolUsage::default(),
        }
    }

    /// The node at `path`; "" is the root, as in ZooKeeper.
    pub fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path::normalize(path)).map(|n| &**n)
    }

    /// Every node, sharing structure with the tree: O(1), and unaffected by later changes.
    pub(crate) fn shared_nodes(&self) -> NodeMap {
        self.nodes.clone()
    }

    /// Number of znodes, the root included.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never true: the root always exists.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Sum of path and data lengths of every node.
    pub fn data_size(&self) -> u64 {
        self.data_size
    }

    /// Znodes and bytes per quota pool.
    pub fn usage(&self) -> &PoolUsage {
        &self.usage
    }

    /// Number of ephemeral nodes `session` owns.
    pub fn ephemerals_of(&self, session: i64) -> usize {
        self.ephemerals.get(&session).map_or(0, BTreeSet::len)
    }

    /// Number of distinct ACL lists in use.
    pub fn distinct_acls(&self) -> usize {
        self.acls.len()
    }

    /// The ephemeral nodes `session` owns, sorted.
    pub fn ephemerals(&self, session: i64) -> impl Iterator<Item = &str> {
        self.ephemerals
            .get(&session)
            .into_iter()
            .flatten()
            .map(|p| &**p)
    }

    /// Number of ephemeral nodes across all sessions.
    pub fn ephemeral_count(&self) -> usize {
        self.ephemerals.values().map(BTreeSet::len).sum()
    }

    /// Every container node, sorted.
    pub fn containers(&self) -> impl Iterator<Item = &str> {
        self.containers.iter().map(|p| &**p)
    }

    /// Every TTL node, sorted.
    pub fn ttl_nodes(&self) -> impl Iterator<Item = &str> {
        self.ttls.iter().map(|p| &**p)
    }

    /// Every (path, node), in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Node)> {
        self.nodes.iter().map(|(p, n)| (&**p, &**n))
    }

    /// Number of descendants of `path` (ZooKeeper's getAllChildrenNumber); `None` if absent.
    pub fn descendant_count(&self, path: &str) -> Option<usize> {
        let start = self.get(path)?;
        let mut count = 0;
        let mut stack: Vec<String> = start
            .children()
            .map(|c| path::join(path::normalize(path), c))
            .collect();
        while let Some(p) = stack.pop() {
            count += 1;
            if let Some(node) = self.nodes.get(p.as_str()) {
                stack.extend(node.children().map(|c| path::join(&p, c)));
            }
        }
        Some(count)
    }

    /// Adds a validated node under an existing parent; bumps the parent's cversion and pzxid.
    pub fn create(
        &mut self,
        path: &str,
        data: Option<Vec<u8>>,
        acl: &[Acl],
        kind: NodeKind,
        zxid: i64,
        time: i64,
    ) -> Result<Stat, ErrorCode> {
        let (parent_path, name) = path::split_last(path).ok_or(ErrorCode::BadArguments)?;
        let parent_path = path::normalize(parent_path);
        if name.is_empty() || self.nodes.contains_key(path) {
            return Err(ErrorCode::NodeExists);
        }
        let parent = node_mut(&mut self.nodes, parent_path).ok_or(ErrorCode::NoNode)?;
        parent.children.insert(name);
        parent.cversion = parent.cversion.wrapping_add(1);
        parent.pzxid = zxid;
        let acl = self.acls.intern(acl);
        let node = Node::new(data.map(Vec::into_boxed_slice), acl, kind, zxid, time);
        self.data_size += (path.len() + node.data_len()) as u64;
        self.usage
            .add(path, 1, (path.len() + node.data_len()) as i64);
        let stat = node.stat();
        self.nodes.insert(path.into(), Arc::new(node));
        match kind {
            NodeKind::Persistent => {}
            NodeKind::Ephemeral { owner } => {
                self.ephemerals
                    .entry(owner)
                    .or_default()
                    .insert(path.into());
            }
            NodeKind::Container => {
                self.containers.insert(path.into());
            }
            NodeKind::Ttl { .. } => {
                self.ttls.insert(path.into());
            }
        }
        Ok(stat)
    }

    /// Removes a validated childless node; bumps the parent's pzxid.
    pub fn delete(&mut self, path: &str, zxid: i64) -> Result<(), ErrorCode> {
        let (parent_path, name) = path::split_last(path).ok_or(ErrorCode::BadArguments)?;
        let parent_path = path::normalize(parent_path);
        if path == ROOT {
            return Err(ErrorCode::BadArguments);
        }
        match self.nodes.get(path) {
            None => return Err(ErrorCode::NoNode),
            Some(node) if !node.children.is_empty() => return Err(ErrorCode::NotEmpty),
            Some(_) => {}
        }
        let parent = node_mut(&mut self.nodes, parent_path).ok_or(ErrorCode::NoNode)?;
        parent.children.remove(name);
        parent.pzxid = parent.pzxid.max(zxid);
        let Some(node) = self.nodes.remove(path) else {
            return Err(ErrorCode::NoNode);
        };
        self.data_size = self
            .data_size
            .saturating_sub((path.len() + node.data_len()) as u64);
        self.usage
            .add(path, -1, -((path.len() + node.data_len()) as i64));
        match node.kind {
            NodeKind::Persistent => {}
            NodeKind::Ephemeral { owner } => {
                if let Some(set) = self.ephemerals.get_mut(&owner) {
                    set.remove(path);
                    if set.is_empty() {
                        self.ephemerals.remove(&owner);
                    }
                }
            }
            NodeKind::Container => {
                self.containers.remove(path);
            }
            NodeKind::Ttl { .. } => {
                self.ttls.remove(path);
            }
        }
        // A snapshot in progress may still hold the node; the ACL's count is ours either way.
        self.acls.release(&node.acl);
        Ok(())
    }

    /// Replaces a node's data with a validated new version.
    pub fn set_data(
        &mut self,
        path: &str,
        data: Option<Vec<u8>>,
        version: i32,
        zxid: i64,
        time: i64,
    ) -> Result<Stat, ErrorCode> {
        let node = node_mut(&mut self.nodes, path).ok_or(ErrorCode::NoNode)?;
        let new_len = data.as_ref().map_or(0, Vec::len);
        self.data_size = (self.data_size + new_len as u64).saturating_sub(node.data_len() as u64);
        self.usage
            .add(path, 0, new_len as i64 - node.data_len() as i64);
        node.data = data.map(Vec::into_boxed_slice);
        node.version = version;
        node.mzxid = zxid;
        node.mtime = time;
        Ok(node.stat())
    }

    /// Replaces a node's ACL with a validated one and new aversion.
    pub fn set_acl(&mut self, path: &str, acl: &[Acl], aversion: i32) -> Result<Stat, ErrorCode> {
        let shared = self.acls.intern(acl);
        let Some(node) = node_mut(&mut self.nodes, path) else {
            self.acls.release(&shared);
            return Err(ErrorCode::NoNode);
        };
        let old = std::mem::replace(&mut node.acl, shared);
        node.aversion = aversion;
        let stat = node.stat();
        self.acls.release(&old);
        Ok(stat)
    }

    /// Rebuilds a tree from (path, node) pairs read from a snapshot; children sets and
    /// indexes are derived. Fails on a duplicate path or a node whose parent is missing.
    pub(crate) fn from_nodes(nodes: Vec<(Box<str>, Node)>) -> Result<DataTree, NotATree> {
        let mut tree = DataTree::empty();
        for (p, mut node) in nodes {
            node.children.clear();
            node.acl = tree.acls.intern(&node.acl);
            tree.data_size += (p.len() + node.data_len()) as u64;
            tree.usage.add(&p, 1, (p.len() + node.data_len()) as i64);
            match node.kind {
                NodeKind::Persistent => {}
                NodeKind::Ephemeral { owner } => {
                    tree.ephemerals.entry(owner).or_default().insert(p.clone());
                }
                NodeKind::Container => {
                    tree.containers.insert(p.clone());
                }
                NodeKind::Ttl { .. } => {
                    tree.ttls.insert(p.clone());
                }
            }
            if tree
                .nodes
                .insert(p.clone().into(), Arc::new(node))
                .is_some()
            {
                return Err(NotATree::Duplicate(p));
            }
        }
        if !tree.nodes.contains_key(ROOT) {
            return Err(NotATree::NoRoot);
        }
        let paths: Vec<Arc<str>> = tree
            .nodes
            .keys()
            .filter(|p| &***p != ROOT)
            .cloned()
            .collect();
        for p in paths {
            if path::validate_path(&p).is_err() {
                return Err(NotATree::InvalidPath((*p).into()));
            }
            let (_, name) = path::split_last(&p).unwrap_or_default();
            let parent = tree
                .nodes
                .get_mut(path::parent_of(&p))
                .map(Arc::make_mut)
                .ok_or_else(|| NotATree::NoParent((*p).into()))?;
            parent.children.insert(name);
        }
        Ok(tree)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_tree_matches_zookeeper() {
        let tree = DataTree::new();
        let root = tree.get("/").expect("root").stat();
        assert_eq!((root.cversion, root.num_children, root.pzxid), (-1, 1, 0));
        assert_eq!(tree.get("").map(Node::stat), Some(root));
        let zk = tree.get("/zookeeper").expect("zk").stat();
        assert_eq!((zk.cversion, zk.num_children), (-2, 2));
        let config = tree.get("/zookeeper/config").expect("config");
        assert_eq!(config.stat().aversion, -1);
        assert_eq!(config.acl(), acl::read_only().as_slice());
        assert_eq!(tree.descendant_count("/"), Some(3));
        assert_eq!(tree.distinct_acls(), 2);
    }

    #[test]
    fn cversion_counts_creates_and_deletes() {
        let mut tree = DataTree::new();
        let open = acl::open();
        tree.create("/p", Some(vec![]), &open, NodeKind::Persistent, 2, 10)
            .expect("p");
        tree.create("/p/a", Some(vec![1]), &open, NodeKind::Persistent, 3, 11)
            .expect("a");
        tree.delete("/p/a", 4).expect("delete");
        let p = tree.get("/p").expect("p");
        assert_eq!(p.child_creates(), 1);
        let stat = p.stat();
        assert_eq!((stat.cversion, stat.pzxid, stat.num_children), (2, 4, 0));
        assert_eq!(tree.delete("/p", 5), Ok(()));
        assert_eq!(tree.delete("/", 6), Err(ErrorCode::BadArguments));
    }

    #[test]
    fn null_data_is_kept_apart_from_empty_data() {
        let mut tree = DataTree::new();
        let open = acl::open();
        let size = tree.data_size();
        let stat = tree
            .create("/n", None, &open, NodeKind::Persistent, 2, 10)
            .expect("n");
        assert_eq!(stat.data_length, 0);
        assert_eq!(tree.get("/n").and_then(Node::data), None);
        tree.set_data("/n", Some(b"ab".to_vec()), 1, 3, 11)
            .expect("set");
        assert_eq!(tree.get("/n").and_then(Node::data), Some(&b"ab"[..]));
        assert_eq!(tree.data_size(), size + 4);
        tree.set_data("/n", None, 2, 4, 12).expect("set null");
        assert_eq!(tree.get("/n").and_then(Node::data), None);
        assert_eq!(tree.data_size(), size + 2);
        tree.set_data("/n", Some(vec![]), 3, 5, 13)
            .expect("set empty");
        assert_eq!(tree.get("/n").and_then(Node::data), Some(&b""[..]));
        assert_eq!(tree.get("/").and_then(Node::data), Some(&b""[..]));
        assert_eq!(
            std::mem::size_of::<Option<Box<[u8]>>>(),
            std::mem::size_of::<Box<[u8]>>()
        );
    }
}
