//! Validation of write operations (ZooKeeper's `PrepRequestProcessor`): decides which error a
//! request gets, in ZooKeeper's order, and turns it into a [`Txn`] that cannot fail to apply.
//!
//! Checks run against the tree plus the changes of earlier ops of the same transaction, so a
//! multi's ops see each other's effects before anything is applied. Orders verified against
//! ZooKeeper 3.8.0 (first failing check wins):
//! - create: flags (BadArguments) → TTL (BadArguments) → a '/' and no NUL (BadArguments) →
//!   ACL (InvalidAcl) → parent exists (NoNode) → CREATE on parent (NoAuth) → full path, with
//!   the sequence appended, is valid (BadArguments; so "/p/" is fine when sequential) →
//!   NodeExists → parent is ephemeral (NoChildrenForEphemerals);
//! - delete: a '/', no NUL, not /, /zookeeper, /zookeeper/quota or /zookeeper/config
//!   (BadArguments) → parent exists (NoNode) → DELETE on parent (NoAuth) → node exists (NoNode) →
//!   version (BadVersion) → children (NotEmpty). The path is not otherwise validated, so
//!   delete "/a/" is NoNode;
//! - setData: path (BadArguments) → NoNode → WRITE (NoAuth) → BadVersion;
//! - setACL: path (BadArguments) → ACL (InvalidAcl) → NoNode → ADMIN (NoAuth) → BadVersion
//!   (against aversion);
//! - check: path (BadArguments) → NoNode → READ (NoAuth) → BadVersion.
//!
//! Baton's recipe-tree policy (`tenancy`) adds NoAuth right after the path checks, before
//! anything that would tell whether a node exists, and owner-only deletion right after
//! NoNode; the refusal is kept in [`Prep::refusal`] for the caller's logs and metrics. Creating
//! `/baton` itself skips CREATE on `/` (`TenancyPolicy::waives_parent_acl`): no ACL anyone puts
//! on `/` can keep tenants from their tree.

use std::collections::HashMap;
use std::sync::Arc;

use baton_proto::{
    Acl, CheckVersionRequest, CreateMode, CreateRequest, DeleteRequest, ErrorCode, Id, OpCode,
    SetAclRequest, SetDataRequest, perms,
};

use crate::acl;
use crate::path;
use crate::tenancy::{self, Access, Refusal, TenancyPolicy};
use crate::tree::{DataTree, MAX_TTL_MS, NodeKind};

/// A validated change, applied to the tree without further checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Txn {
    Create {
        path: String,
        /// `None` for null data.
        data: Option<Vec<u8>>,
        acl: Vec<Acl>,
        kind: NodeKind,
        /// Whether the reply carries the new node's Stat (create2-style).
        with_stat: bool,
    },
    Delete {
        path: String,
    },
    SetData {
        path: String,
        /// `None` for null data.
        data: Option<Vec<u8>>,
        version: i32,
    },
    SetAcl {
        path: String,
        acl: Vec<Acl>,
        aversion: i32,
    },
    Check,
}

/// What validation needs to know about a node (ZooKeeper's `ChangeRecord`).
#[derive(Debug, Clone)]
struct Record {
    version: i32,
    aversion: i32,
    child_creates: i32,
    child_count: usize,
    kind: NodeKind,
    acl: Arc<[Acl]>,
}

/// Where a create comes from: alone, its opcode decides the node kind; inside a multi,
/// ZooKeeper rebuilds each op from its flags, so the flags decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CreateContext {
    Single,
    Multi,
}

/// Validates the ops of one transaction against the tree and the ops before them.
pub(crate) struct Prep<'a> {
    tree: &'a DataTree,
    session_id: i64,
    auth: &'a [Id],
    policy: TenancyPolicy,
    /// Pending state by normalized path; `None` marks a node deleted by an earlier op.
    pending: HashMap<String, Option<Record>>,
    /// Why the recipe-tree policy refused an op (its NoAuth), if it did.
    pub(crate) refusal: Option<(String, Refusal)>,
}

impl<'a> Prep<'a> {
    pub(crate) fn new(
        tree: &'a DataTree,
        session_id: i64,
        auth: &'a [Id],
        policy: TenancyPolicy,
    ) -> Self {
        Prep {
            tree,
            session_id,
            auth,
            policy,
            pending: HashMap::new(),
            refusal: None,
        }
    }

    /// Records a policy refusal as NoAuth.
    fn refuse(&mut self, path: &str, result: Result<(), Refusal>) -> Result<(), ErrorCode> {
        result.map_err(|refusal| {
            self.refusal = Some((path.to_owned(), refusal));
            ErrorCode::NoAuth
        })
    }

    /// The recipe-tree policy for `access` to `path`.
    fn allowed(&mut self, path: &str, access: Access) -> Result<(), ErrorCode> {
        let verdict = self.policy.check(path::normalize(path), access, self.auth);
        self.refuse(path, verdict)
    }

    /// The ACL check of the node at `path`, unless the policy decides alone there.
    fn acl_check(&self, path: &str, acl: &[Acl], perm: i32) -> Result<(), ErrorCode> {
        if self.policy.waives_acl(path::normalize(path)) {
            return Ok(());
        }
        acl::check(acl, perm, self.auth)
    }

    fn record(&self, path: &str) -> Option<Record> {
        let path = path::normalize(path);
        if let Some(pending) = self.pending.get(path) {
            return pending.clone();
        }
        self.tree.get(path).map(|n| Record {
            version: n.version,
            aversion: n.aversion,
            child_creates: n.child_creates(),
            child_count: n.children.len(),
            kind: n.kind(),
            acl: Arc::clone(&n.acl),
        })
    }

    fn put(&mut self, path: &str, record: Option<Record>) {
        self.pending
            .insert(path::normalize(path).to_owned(), record);
    }

    pub(crate) fn create(
        &mut self,
        op: OpCode,
        req: &CreateRequest,
        context: CreateContext,
    ) -> Result<Txn, ErrorCode> {
        let mode = CreateMode::from_flags(req.flags).ok_or(ErrorCode::BadArguments)?;
        let ttl = match (op, context) {
            // A multi drops the TTL of an op whose flags are not a TTL mode.
            (OpCode::CreateTtl, CreateContext::Multi) if !mode.is_ttl() => -1,
            (OpCode::CreateTtl, _) => req.ttl.unwrap_or(-1),
            _ => -1,
        };
        if op == OpCode::CreateTtl && context == CreateContext::Single && !mode.is_ttl() {
            // ZooKeeper answers BadArguments when a ttl is given; with ttl -1 its apply thread
            // dies. Refusing both is the only safe reading.
            return Err(ErrorCode::BadArguments);
        }
        validate_ttl(mode, ttl)?;
        let kind = match (context, op) {
            (CreateContext::Single, OpCode::CreateContainer) => NodeKind::Container,
            (CreateContext::Single, OpCode::CreateTtl) => NodeKind::Ttl { ttl_ms: ttl },
            (CreateContext::Multi, _) if mode.is_container() => NodeKind::Container,
            (CreateContext::Multi, _) if mode.is_ttl() => NodeKind::Ttl { ttl_ms: ttl },
            // create/create2 with container flags make a persistent node, as in 3.8.0.
            _ if mode.is_ephemeral() => NodeKind::Ephemeral {
                owner: self.session_id,
            },
            _ => NodeKind::Persistent,
        };
        let with_stat = match context {
            CreateContext::Single => op != OpCode::Create,
            CreateContext::Multi => matches!(kind, NodeKind::Container | NodeKind::Ttl { .. }),
        };
        if req.path.contains('\0') {
            return Err(ErrorCode::BadArguments);
        }
        let (parent_path, _) = path::split_last(&req.path).ok_or(ErrorCode::BadArguments)?;
        self.allowed(&req.path, Access::Create)?;
        let persistent = kind == NodeKind::Persistent;
        let root_kind = self.policy.check_root_kind(&req.path, persistent);
        self.refuse(&req.path, root_kind)?;
        let acl = acl::fixup_acl(&req.acl, self.auth)?;
        let mut parent = self.record(parent_path).ok_or(ErrorCode::NoNode)?;
        if mode.is_sequential() || !self.policy.waives_parent_acl(path::normalize(&req.path)) {
            self.acl_check(parent_path, &parent.acl, perms::CREATE)?;
        }
        let path = if mode.is_sequential() {
            format!("{}{:010}", req.path, parent.child_creates)
        } else {
            req.path.clone()
        };
        path::validate_path(&path).map_err(|_| ErrorCode::BadArguments)?;
        if mode.is_sequential() {
            // The sequence may complete a namespace's name ("/baton/" + "0000000001").
            self.allowed(&path, Access::Create)?;
            let root_kind = self.policy.check_root_kind(&path, persistent);
            self.refuse(&path, root_kind)?;
        }
        if self.record(&path).is_some() {
            return Err(ErrorCode::NodeExists);
        }
        if matches!(parent.kind, NodeKind::Ephemeral { .. }) {
            return Err(ErrorCode::NoChildrenForEphemerals);
        }
        parent.child_creates = parent.child_creates.wrapping_add(1);
        parent.child_count += 1;
        self.put(parent_path, Some(parent));
        let record = Record {
            version: 0,
            aversion: 0,
            child_creates: 0,
            child_count: 0,
            kind,
            acl: Arc::from(acl.as_slice()),
        };
        self.put(&path, Some(record));
        Ok(Txn::Create {
            path,
            data: req.data.clone(),
            acl,
            kind,
            with_stat,
        })
    }

    pub(crate) fn delete(&mut self, req: &DeleteRequest) -> Result<Txn, ErrorCode> {
        let path = req.path.as_str();
        if path.contains('\0') || path::is_special(path) {
            return Err(ErrorCode::BadArguments);
        }
        let (parent_path, _) = path::split_last(path).ok_or(ErrorCode::BadArguments)?;
        self.allowed(path, Access::Delete)?;
        let mut parent = self.record(parent_path).ok_or(ErrorCode::NoNode)?;
        self.acl_check(parent_path, &parent.acl, perms::DELETE)?;
        let node = self.record(path).ok_or(ErrorCode::NoNode)?;
        let owner = match node.kind {
            NodeKind::Ephemeral { owner } => Some(owner),
            _ => None,
        };
        let owned =
            tenancy::check_delete_owner(path::normalize(path), owner, self.session_id, self.auth);
        self.refuse(path, owned)?;
        next_version(node.version, req.version)?;
        if node.child_count > 0 {
            return Err(ErrorCode::NotEmpty);
        }
        parent.child_count = parent.child_count.saturating_sub(1);
        self.put(parent_path, Some(parent));
        self.put(path, None);
        Ok(Txn::Delete {
            path: path.to_owned(),
        })
    }

    pub(crate) fn set_data(&mut self, req: &SetDataRequest) -> Result<Txn, ErrorCode> {
        path::validate_path(&req.path).map_err(|_| ErrorCode::BadArguments)?;
        self.allowed(&req.path, Access::SetData)?;
        let mut node = self.record(&req.path).ok_or(ErrorCode::NoNode)?;
        self.acl_check(&req.path, &node.acl, perms::WRITE)?;
        let version = next_version(node.version, req.version)?;
        node.version = version;
        self.put(&req.path, Some(node));
        Ok(Txn::SetData {
            path: req.path.clone(),
            data: req.data.clone(),
            version,
        })
    }

    pub(crate) fn set_acl(&mut self, req: &SetAclRequest) -> Result<Txn, ErrorCode> {
        path::validate_path(&req.path).map_err(|_| ErrorCode::BadArguments)?;
        self.allowed(&req.path, Access::SetAcl)?;
        let acl = acl::fixup_acl(&req.acl, self.auth)?;
        let mut node = self.record(&req.path).ok_or(ErrorCode::NoNode)?;
        self.acl_check(&req.path, &node.acl, perms::ADMIN)?;
        let aversion = next_version(node.aversion, req.version)?;
        node.aversion = aversion;
        node.acl = Arc::from(acl.as_slice());
        self.put(&req.path, Some(node));
        Ok(Txn::SetAcl {
            path: req.path.clone(),
            acl,
            aversion,
        })
    }

    pub(crate) fn check(&mut self, req: &CheckVersionRequest) -> Result<Txn, ErrorCode> {
        path::validate_path(&req.path).map_err(|_| ErrorCode::BadArguments)?;
        self.allowed(&req.path, Access::Read)?;
        let node = self.record(&req.path).ok_or(ErrorCode::NoNode)?;
        self.acl_check(&req.path, &node.acl, perms::READ)?;
        next_version(node.version, req.version)?;
        Ok(Txn::Check)
    }
}

/// `EphemeralType.validateTTL`: TTL modes need 0 < ttl <= 2^40-1; other modes must not
/// carry a ttl (>= 0).
fn validate_ttl(mode: CreateMode, ttl: i64) -> Result<(), ErrorCode> {
    let ok = if mode.is_ttl() {
        ttl > 0 && ttl <= MAX_TTL_MS
    } else {
        ttl < 0
    };
    if ok {
        Ok(())
    } else {
        Err(ErrorCode::BadArguments)
    }
}

/// `checkAndIncVersion`: -1 matches any version. The next version skips -1 on wrap-around
/// (ZOOKEEPER-4743), so a node's version can always be matched exactly.
fn next_version(current: i32, expected: i32) -> Result<i32, ErrorCode> {
    if expected != -1 && expected != current {
        return Err(ErrorCode::BadVersion);
    }
    Ok(match current.wrapping_add(1) {
        -1 => 0,
        v => v,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(next_version(3, -1), Ok(4));
        assert_eq!(next_version(3, 3), Ok(4));
        assert_eq!(next_version(3, 2), Err(ErrorCode::BadVersion));
        assert_eq!(next_version(i32::MAX, -1), Ok(i32::MIN));
        assert_eq!(next_version(-2, -1), Ok(0));
    }

    #[test]
    fn ttl_bounds() {
        use CreateMode::*;
        assert_eq!(validate_ttl(PersistentWithTtl, 1), Ok(()));
        assert_eq!(validate_ttl(PersistentWithTtl, MAX_TTL_MS), Ok(()));
        for bad in [0, -1, MAX_TTL_MS + 1] {
            assert_eq!(
                validate_ttl(PersistentSequentialWithTtl, bad),
                Err(ErrorCode::BadArguments)
            );
        }
        assert_eq!(validate_ttl(Persistent, -1), Ok(()));
        assert_eq!(validate_ttl(Persistent, 0), Err(ErrorCode::BadArguments));
    }
}
