//! Quotas per tenant (DESIGN.md §4 "What one tenant can take"): each namespace
//! (`/baton/<ns>` and below) and one shared pool for everything else have a znode count and a
//! byte budget (paths plus data, ZooKeeper's `approximate_data_size` measure), and each
//! session a number of ephemeral nodes. The disk alarm refuses every write that adds data.
//!
//! Decided at apply, from the replicated settings and the tree alone, so every member refuses
//! the same writes at the same index; the member that receives a write asks the same question
//! first (`StateMachine::refuses_early`) to save the log a doomed entry. A write is refused
//! only if it *grows* a pool that is over its quota afterwards: deleting and shrinking always
//! work, also after a quota was lowered below what a pool holds.

use std::collections::HashMap;

use baton_proto::ErrorCode;

use crate::settings::ClusterSettings;
use crate::tenancy::{Scope, scope};
use crate::tree::{DataTree, NodeKind};
use crate::txn::Txn;

/// What one pool holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub znodes: u64,
    pub bytes: u64,
}

impl Usage {
    fn add(&mut self, znodes: i64, bytes: i64) {
        self.znodes = self.znodes.saturating_add_signed(znodes);
        self.bytes = self.bytes.saturating_add_signed(bytes);
    }
}

/// A quota pool: a namespace, or the shared pool (`None`).
pub type Pool<'a> = Option<&'a str>;

/// The pool a path is charged to: its namespace below `/baton/`, else the shared pool
/// (`/baton` itself included).
pub fn pool_of(path: &str) -> Pool<'_> {
    match scope(path) {
        Scope::Namespace(ns) => Some(ns),
        Scope::Root | Scope::Outside => None,
    }
}

/// Usage of every pool; a namespace that holds nothing has no entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolUsage {
    shared: Usage,
    namespaces: HashMap<Box<str>, Usage>,
}

impl PoolUsage {
    /// What `pool` holds.
    pub fn get(&self, pool: Pool<'_>) -> Usage {
        match pool {
            None => self.shared,
            Some(ns) => self.namespaces.get(ns).copied().unwrap_or_default(),
        }
    }

    /// Every namespace's usage, sorted by name.
    pub fn namespaces(&self) -> Vec<(&str, Usage)> {
        let mut all: Vec<(&str, Usage)> = self.namespaces.iter().map(|(n, u)| (&**n, *u)).collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        all
    }

    /// Charges (or with negative numbers refunds) the pool of `path`.
    pub(crate) fn add(&mut self, path: &str, znodes: i64, bytes: i64) {
        match pool_of(path) {
            None => self.shared.add(znodes, bytes),
            Some(ns) => {
                let usage = self.namespaces.entry(ns.into()).or_default();
                usage.add(znodes, bytes);
                if usage.znodes == 0 {
                    self.namespaces.remove(ns);
                }
            }
        }
    }
}

/// Why a write was refused by a quota or an alarm (the client sees `ErrorCode::REFUSED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QuotaRefusal {
    #[error("a member's disk is below its free-space watermark (alarm nospace)")]
    Alarm,
    #[error("the namespace's znode quota is reached")]
    NamespaceZnodes,
    #[error("the namespace's byte quota is reached")]
    NamespaceBytes,
    #[error("the shared pool's znode quota is reached")]
    SharedZnodes,
    #[error("the shared pool's byte quota is reached")]
    SharedBytes,
    #[error("the session owns as many ephemeral nodes as it may")]
    Ephemerals,
}

impl QuotaRefusal {
    /// Every refusal, for metrics that show each from the start.
    pub const ALL: [QuotaRefusal; 6] = [
        QuotaRefusal::Alarm,
        QuotaRefusal::NamespaceZnodes,
        QuotaRefusal::NamespaceBytes,
        QuotaRefusal::SharedZnodes,
        QuotaRefusal::SharedBytes,
        QuotaRefusal::Ephemerals,
    ];

    /// The `reason` label of `baton_quota_refusals_total`.
    pub fn label(self) -> &'static str {
        match self {
            QuotaRefusal::Alarm => "alarm",
            QuotaRefusal::NamespaceZnodes => "namespace_znodes",
            QuotaRefusal::NamespaceBytes => "namespace_bytes",
            QuotaRefusal::SharedZnodes => "shared_znodes",
            QuotaRefusal::SharedBytes => "shared_bytes",
            QuotaRefusal::Ephemerals => "ephemerals",
        }
    }

    /// What the client sees.
    pub fn code(self) -> ErrorCode {
        ErrorCode::REFUSED
    }
}

/// Checks the validated transactions of one request, in order; `Err((i, why))` names the
/// first one that a quota or an alarm refuses. Pure: looks at the tree, changes nothing.
pub(crate) fn check(
    tree: &DataTree,
    settings: &ClusterSettings,
    session_id: i64,
    txns: &[Txn],
) -> Result<(), (usize, QuotaRefusal)> {
    let quotas = settings.quotas;
    // Pending changes: per pool (znodes, bytes), the data length of nodes touched earlier in
    // the request, and the session's ephemerals.
    let mut delta: HashMap<Pool<'_>, (i64, i64)> = HashMap::new();
    let mut data_len: HashMap<&str, Option<usize>> = HashMap::new();
    let mut ephemerals = 0i64;
    for (index, txn) in txns.iter().enumerate() {
        let (path, znodes, bytes) = match txn {
            Txn::Create {
                path, data, kind, ..
            } => {
                if matches!(kind, NodeKind::Ephemeral { .. }) {
                    ephemerals += 1;
                }
                let len = data.as_ref().map_or(0, Vec::len);
                data_len.insert(path, Some(len));
                (path, 1, (path.len() + len) as i64)
            }
            Txn::Delete { path } => {
                let len = current_len(tree, &data_len, path);
                if let Some(NodeKind::Ephemeral { owner }) = tree.get(path).map(|n| n.kind())
                    && owner == session_id
                {
                    ephemerals -= 1;
                }
                data_len.insert(path, None);
                (path, -1, -((path.len() + len) as i64))
            }
            Txn::SetData { path, data, .. } => {
                let old = current_len(tree, &data_len, path);
                let new = data.as_ref().map_or(0, Vec::len);
                data_len.insert(path, Some(new));
                (path, 0, new as i64 - old as i64)
            }
            // An ACL list is shared and small; only the alarm stops a setACL.
            Txn::SetAcl { .. } => {
                if settings.alarmed() {
                    return Err((index, QuotaRefusal::Alarm));
                }
                continue;
            }
            Txn::Check => continue,
        };
        let grows = znodes > 0 || bytes > 0;
        if grows && settings.alarmed() {
            return Err((index, QuotaRefusal::Alarm));
        }
        let pool = pool_of(path);
        let pending = delta.entry(pool).or_default();
        pending.0 += znodes;
        pending.1 += bytes;
        if !grows {
            continue;
        }
        let usage = tree.usage().get(pool);
        let after_znodes = usage.znodes.saturating_add_signed(pending.0);
        let after_bytes = usage.bytes.saturating_add_signed(pending.1);
        let (znode_limit, byte_limit, znode_why, byte_why) = match pool {
            Some(_) => (
                quotas.namespace_znodes,
                quotas.namespace_bytes,
                QuotaRefusal::NamespaceZnodes,
                QuotaRefusal::NamespaceBytes,
            ),
            None => (
                quotas.shared_znodes,
                quotas.shared_bytes,
                QuotaRefusal::SharedZnodes,
                QuotaRefusal::SharedBytes,
            ),
        };
        if znodes > 0 && after_znodes > znode_limit {
            return Err((index, znode_why));
        }
        if bytes > 0 && after_bytes > byte_limit {
            return Err((index, byte_why));
        }
        if matches!(
            txn,
            Txn::Create {
                kind: NodeKind::Ephemeral { .. },
                ..
            }
        ) {
            let owned = tree.ephemerals_of(session_id) as u64;
            if owned.saturating_add_signed(ephemerals) > quotas.ephemerals_per_session {
                return Err((index, QuotaRefusal::Ephemerals));
            }
        }
    }
    Ok(())
}

/// Whether `request` (a single create, setData or setACL) could be refused by `check` at all:
/// false when no alarm is up and its pool has room for it even at its largest (a sequential
/// suffix, the whole new data). Lets the receiving member skip validating most writes twice.
pub(crate) fn may_refuse(
    tree: &DataTree,
    settings: &ClusterSettings,
    session_id: i64,
    request: &baton_proto::Request,
) -> bool {
    use baton_proto::Request;
    if settings.alarmed() {
        return true;
    }
    let q = settings.quotas;
    let (path, znodes, bytes, ephemeral) = match request {
        Request::Create { req, .. } => {
            let ephemeral =
                baton_proto::CreateMode::from_flags(req.flags).is_some_and(|m| m.is_ephemeral());
            let len = req.path.len() + 10 + req.data.as_ref().map_or(0, Vec::len);
            (&req.path, 1, len as u64, ephemeral)
        }
        Request::SetData(req) => (
            &req.path,
            0,
            req.data.as_ref().map_or(0, Vec::len) as u64,
            false,
        ),
        _ => return false,
    };
    let pool = pool_of(path);
    let usage = tree.usage().get(pool);
    let (znode_limit, byte_limit) = match pool {
        Some(_) => (q.namespace_znodes, q.namespace_bytes),
        None => (q.shared_znodes, q.shared_bytes),
    };
    usage.znodes + znodes > znode_limit
        || usage.bytes.saturating_add(bytes) > byte_limit
        || (ephemeral && tree.ephemerals_of(session_id) as u64 >= q.ephemerals_per_session)
}

/// The data length of `path` as the request left it so far.
fn current_len(tree: &DataTree, pending: &HashMap<&str, Option<usize>>, path: &str) -> usize {
    match pending.get(path) {
        Some(len) => len.unwrap_or(0),
        None => tree.get(path).map_or(0, |n| n.data_len()),
    }
}
