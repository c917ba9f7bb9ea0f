//! The replicated state machine: applies committed [`Command`]s to the tree and the session
//! table, deterministically, and says what to answer and which watches fire.
//!
//! Behaviour verified against Apache ZooKeeper 3.8.0 (raw protocol client):
//! - a failed multi replies with header err 0 and a body of `Error` results: 0 for the ops
//!   before the failing one, its code, then RuntimeInconsistency; nothing is applied. An
//!   empty multi succeeds with no results;
//! - inside a multi ZooKeeper rebuilds each create from its flags: container and TTL flags
//!   give a create2-style result with Stat, every other create (create2 included) a bare path;
//!   TTL flags on an op that is not createTTL make the whole request fail with
//!   MarshallingError (header err, no body);
//! - a create opcode other than createContainer with container flags makes a *persistent*
//!   node; createContainer makes a container whatever its flags (sequential still honoured);
//! - closing a session deletes its ephemerals (sorted here; ZooKeeper's order is a HashSet's),
//!   each firing NodeDeleted and its parent's NodeChildrenChanged.
//!
//! Deliberate differences: any entry of a session that no longer exists fails as a whole
//! with SessionExpired (ZooKeeper never lets such a request reach its log); `check` outside a
//! multi is answered (3.8.0 drops the connection); entries at or below `last_applied` are
//! ignored.

use std::collections::BTreeMap;

use baton_proto::{
    ErrorCode, EventType, Id, MultiOp, MultiResult, OpCode, Request, Response, Stat,
};

use crate::command::{Command, CommandKind};
use crate::path;
use crate::quota::{self, QuotaRefusal};
use crate::settings::ClusterSettings;
use crate::tenancy::{Refusal, TenancyPolicy};
use crate::tree::{DataTree, Node, NodeKind};
use crate::txn::{CreateContext, Prep, Txn};

/// An open session as the replicated state knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub id: i64,
    pub passwd: Vec<u8>,
    pub timeout_ms: i32,
}

/// What applying one entry produced: the reply for the client that asked (if it is connected
/// here), the watch events to fire, and whether a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub session_id: i64,
    pub xid: i32,
    pub zxid: i64,
    /// `ReplyHeader.err`: 0, or an `ErrorCode` value. A failed multi has 0 (as ZooKeeper).
    pub err: i32,
    /// `Some` for every success (`Response::Empty` when ZooKeeper sends no body) and for a
    /// failed multi; `None` for errors and for entries no client waits on (createSession,
    /// noop, container/TTL housekeeping).
    pub body: Option<Response>,
    /// Watch triggers in order: NodeCreated/NodeDeleted/NodeDataChanged on the node's path,
    /// NodeChildrenChanged on the parent's.
    pub events: Vec<(String, EventType)>,
    /// The session this entry closed or expired.
    pub closed_session: Option<i64>,
    /// The path and reason when the recipe-tree policy (`tenancy`) refused the write.
    pub refusal: Option<(String, Refusal)>,
    /// Why a quota or an alarm refused the write (`quota`), if one did.
    pub quota_refusal: Option<QuotaRefusal>,
    /// Whether this entry changed the replicated settings or alarms.
    pub settings_changed: bool,
}

/// ZooKeeper's data tree and session table, driven only by committed commands.
#[derive(Debug)]
pub struct StateMachine {
    pub(crate) tree: DataTree,
    /// Persistent, like the tree's nodes, so that `freeze` copies it in O(1).
    pub(crate) sessions: imbl::OrdMap<i64, SessionInfo>,
    pub(crate) last_applied: i64,
    /// The ensemble's address book (member id → peer address), kept here so it survives log
    /// compaction: the runtime updates it when it applies a membership change.
    pub(crate) members: BTreeMap<u64, String>,
    /// The tenancy policy, quotas and alarms: replicated (set by log entries, kept in
    /// snapshots), so every member decides a write alike (`settings.rs`).
    pub(crate) settings: ClusterSettings,
}

impl Default for StateMachine {
    fn default() -> Self {
        StateMachine::new()
    }
}

/// The result of applying a single write.
struct Outcome {
    err: i32,
    body: Option<Response>,
}

impl Outcome {
    fn ok(body: Response) -> Self {
        Outcome {
            err: 0,
            body: Some(body),
        }
    }

    fn error(code: ErrorCode) -> Self {
        Outcome {
            err: code.code(),
            body: None,
        }
    }
}

/// What one applied transaction step returns.
enum StepResult {
    Created {
        path: String,
        stat: Stat,
        with_stat: bool,
    },
    Deleted,
    DataSet(Stat),
    AclSet(Stat),
    Checked,
}

impl StateMachine {
    /// A fresh ensemble's state: the tree ZooKeeper 3.8 starts with, no sessions, index 0.
    pub fn new() -> Self {
        StateMachine {
            tree: DataTree::new(),
            sessions: imbl::OrdMap::new(),
            last_applied: 0,
            members: BTreeMap::new(),
            settings: ClusterSettings::default(),
        }
    }

    /// The recipe-tree policy in force (replicated: `settings`).
    pub fn tenancy(&self) -> TenancyPolicy {
        self.settings.tenancy
    }

    /// The replicated settings and alarms.
    pub fn settings(&self) -> &ClusterSettings {
        &self.settings
    }

    /// Records (or replaces) a member's peer address; called when a membership change applies.
    pub fn set_member(&mut self, id: u64, peer_addr: String) {
        self.members.insert(id, peer_addr);
    }

    /// Forgets a removed member's address and its alarms (nobody else could clear them).
    pub fn remove_member(&mut self, id: u64) {
        self.members.remove(&id);
        self.settings.forget_member(id);
    }

    /// The replicated address book: member id → peer address.
    pub fn members(&self) -> &BTreeMap<u64, String> {
        &self.members
    }

    /// Applies the command committed at `zxid` (the Raft index, strictly increasing). The
    /// result depends only on the state, `zxid` and `cmd`. A `zxid` at or below
    /// `last_applied` is already reflected (e.g. replay after restore): nothing changes and
    /// the result carries SystemError.
    pub fn apply(&mut self, zxid: i64, cmd: &Command) -> Applied {
        let mut applied = Applied {
            session_id: cmd.session_id,
            xid: cmd.xid,
            zxid,
            err: 0,
            body: None,
            events: Vec::new(),
            closed_session: None,
            refusal: None,
            quota_refusal: None,
            settings_changed: false,
        };
        if zxid <= self.last_applied {
            applied.err = ErrorCode::SystemError.code();
            return applied;
        }
        self.last_applied = zxid;
        let time = cmd.time_ms;
        let outcome = match &cmd.kind {
            CommandKind::CreateSession { timeout_ms, passwd } => {
                self.sessions.insert(
                    cmd.session_id,
                    SessionInfo {
                        id: cmd.session_id,
                        passwd: passwd.clone(),
                        timeout_ms: *timeout_ms,
                    },
                );
                Outcome { err: 0, body: None }
            }
            CommandKind::CloseSession { .. } => {
                self.close_session(zxid, cmd.session_id, &mut applied)
            }
            CommandKind::Write { auth, request } => {
                if !self.sessions.contains_key(&cmd.session_id) {
                    Outcome::error(ErrorCode::SessionExpired)
                } else {
                    self.write(zxid, time, cmd.session_id, auth, request, &mut applied)
                }
            }
            CommandKind::ReapContainer { path } => {
                let eligible = self.tree.get(path).map(reapable_container);
                self.housekeeping_delete(zxid, path, eligible, &mut applied.events)
            }
            CommandKind::ExpireTtl { path } => {
                let eligible = self.tree.get(path).map(|n| expired_ttl_node(n, time));
                self.housekeeping_delete(zxid, path, eligible, &mut applied.events)
            }
            CommandKind::Noop => Outcome { err: 0, body: None },
            CommandKind::SetSettings { initial, changes } => {
                applied.settings_changed = self.settings.apply(*initial, changes);
                Outcome { err: 0, body: None }
            }
            CommandKind::Alarm {
                member,
                kind,
                raised,
            } => {
                applied.settings_changed = self.settings.set_alarm(*member, *kind, *raised);
                Outcome { err: 0, body: None }
            }
        };
        applied.err = outcome.err;
        applied.body = outcome.body;
        applied
    }

    fn housekeeping_delete(
        &mut self,
        zxid: i64,
        path: &str,
        eligible: Option<Result<(), ErrorCode>>,
        events: &mut Vec<(String, EventType)>,
    ) -> Outcome {
        match eligible {
            None => Outcome::error(ErrorCode::NoNode),
            Some(Err(code)) => Outcome::error(code),
            Some(Ok(())) => match self.step(
                zxid,
                0,
                Txn::Delete {
                    path: path.to_owned(),
                },
                events,
            ) {
                Ok(_) => Outcome { err: 0, body: None },
                Err(code) => Outcome::error(code),
            },
        }
    }

    fn close_session(&mut self, zxid: i64, session_id: i64, applied: &mut Applied) -> Outcome {
        if !self.sessions.contains_key(&session_id) {
            return Outcome::error(ErrorCode::SessionExpired);
        }
        let doomed: Vec<String> = self
            .tree
            .ephemerals(session_id)
            .map(str::to_owned)
            .collect();
        for path in doomed {
            // An ephemeral never has children, so this cannot fail; if it somehow did, the
            // node stays and the session still closes.
            let _ = self.step(zxid, 0, Txn::Delete { path }, &mut applied.events);
        }
        self.sessions.remove(&session_id);
        applied.closed_session = Some(session_id);
        Outcome::ok(Response::Empty)
    }

    fn write(
        &mut self,
        zxid: i64,
        time: i64,
        session_id: i64,
        auth: &[Id],
        request: &Request,
        applied: &mut Applied,
    ) -> Outcome {
        let mut prep = Prep::new(&self.tree, session_id, auth, self.settings.tenancy);
        let txn = {
            match request {
                Request::Create { op, req } => prep.create(*op, req, CreateContext::Single),
                Request::Delete(req) => prep.delete(req),
                Request::SetData(req) => prep.set_data(req),
                Request::SetAcl(req) => prep.set_acl(req),
                Request::Check(req) => prep.check(req),
                Request::Multi(ops) => {
                    drop(prep);
                    return self.multi(zxid, time, session_id, auth, ops, applied);
                }
                Request::CloseSession => {
                    drop(prep);
                    return self.close_session(zxid, session_id, applied);
                }
                Request::Sync { path } => {
                    return Outcome::ok(Response::Sync { path: path.clone() });
                }
                other => {
                    drop(prep);
                    return match self.read(session_id, auth, other) {
                        Ok(body) => Outcome::ok(body),
                        Err(code) => Outcome::error(code),
                    };
                }
            }
        };
        applied.refusal = prep.refusal.take();
        drop(prep);
        let txn = match txn {
            Ok(txn) => txn,
            Err(code) => return Outcome::error(code),
        };
        if let Err((_, why)) = quota::check(
            &self.tree,
            &self.settings,
            session_id,
            std::slice::from_ref(&txn),
        ) {
            applied.quota_refusal = Some(why);
            return Outcome::error(why.code());
        }
        match self.step(zxid, time, txn, &mut applied.events) {
            Ok(StepResult::Created {
                path,
                stat,
                with_stat,
            }) => Outcome::ok(if with_stat {
                Response::Create2 { path, stat }
            } else {
                Response::Create { path }
            }),
            Ok(StepResult::Deleted | StepResult::Checked) => Outcome::ok(Response::Empty),
            Ok(StepResult::DataSet(stat) | StepResult::AclSet(stat)) => {
                Outcome::ok(Response::Stat(stat))
            }
            Err(code) => Outcome::error(code),
        }
    }

    fn multi(
        &mut self,
        zxid: i64,
        time: i64,
        session_id: i64,
        auth: &[Id],
        ops: &[MultiOp],
        applied: &mut Applied,
    ) -> Outcome {
        if ops.iter().any(is_unmarshallable) {
            return Outcome::error(ErrorCode::MarshallingError);
        }
        let mut prep = Prep::new(&self.tree, session_id, auth, self.settings.tenancy);
        let mut txns = Vec::with_capacity(ops.len());
        for (index, op) in ops.iter().enumerate() {
            let txn = match op {
                MultiOp::Create { op, req } => prep.create(*op, req, CreateContext::Multi),
                MultiOp::Delete(req) => prep.delete(req),
                MultiOp::SetData(req) => prep.set_data(req),
                MultiOp::Check(req) => prep.check(req),
            };
            match txn {
                Ok(txn) => txns.push(txn),
                Err(code) => {
                    applied.refusal = prep.refusal.take();
                    return Outcome::ok(Response::Multi(failed_results(ops.len(), index, code)));
                }
            }
        }
        drop(prep);
        if let Err((index, why)) = quota::check(&self.tree, &self.settings, session_id, &txns) {
            applied.quota_refusal = Some(why);
            return Outcome::ok(Response::Multi(failed_results(
                ops.len(),
                index,
                why.code(),
            )));
        }
        let mut results = Vec::with_capacity(txns.len());
        for txn in txns {
            let result = match self.step(zxid, time, txn, &mut applied.events) {
                Ok(StepResult::Created {
                    path,
                    stat,
                    with_stat: true,
                }) => MultiResult::Create2 { path, stat },
                Ok(StepResult::Created { path, .. }) => MultiResult::Create { path },
                Ok(StepResult::Deleted) => MultiResult::Delete,
                Ok(StepResult::DataSet(stat)) => MultiResult::SetData { stat },
                // setACL is not a multi op; keep the shape total anyway.
                Ok(StepResult::AclSet(stat)) => MultiResult::SetData { stat },
                Ok(StepResult::Checked) => MultiResult::Check,
                Err(code) => MultiResult::Error { err: code.code() },
            };
            results.push(result);
        }
        Outcome::ok(Response::Multi(results))
    }

    /// Applies one validated transaction and records its watch events.
    fn step(
        &mut self,
        zxid: i64,
        time: i64,
        txn: Txn,
        events: &mut Vec<(String, EventType)>,
    ) -> Result<StepResult, ErrorCode> {
        match txn {
            Txn::Create {
                path,
                data,
                acl,
                kind,
                with_stat,
            } => {
                // Null data as the replicated feature level says, never as this build would.
                let data = self.settings.feature_level.stored_data(data);
                let stat = self.tree.create(&path, data, &acl, kind, zxid, time)?;
                events.push((path.clone(), EventType::NodeCreated));
                events.push((
                    path::parent_of(&path).to_owned(),
                    EventType::NodeChildrenChanged,
                ));
                Ok(StepResult::Created {
                    path,
                    stat,
                    with_stat,
                })
            }
            Txn::Delete { path } => {
                self.tree.delete(&path, zxid)?;
                let parent = path::parent_of(&path).to_owned();
                events.push((path, EventType::NodeDeleted));
                events.push((parent, EventType::NodeChildrenChanged));
                Ok(StepResult::Deleted)
            }
            Txn::SetData {
                path,
                data,
                version,
            } => {
                let data = self.settings.feature_level.stored_data(data);
                let stat = self.tree.set_data(&path, data, version, zxid, time)?;
                events.push((path, EventType::NodeDataChanged));
                Ok(StepResult::DataSet(stat))
            }
            Txn::SetAcl {
                path,
                acl,
                aversion,
            } => Ok(StepResult::AclSet(
                self.tree.set_acl(&path, &acl, aversion)?,
            )),
            Txn::Check => Ok(StepResult::Checked),
        }
    }

    /// Ends every session and deletes its ephemeral nodes, as closing each would, but outside
    /// the log: no index is taken and `last_applied` stays (the parents' pzxid becomes at most
    /// that). For a state restored from a backup into a new ensemble, whose clients never had
    /// these sessions. Returns how many sessions and ephemeral nodes went.
    pub fn drop_all_sessions(&mut self) -> (usize, usize) {
        let zxid = self.last_applied;
        let sessions = std::mem::take(&mut self.sessions);
        let mut events = Vec::new();
        let mut ephemerals = 0;
        for id in sessions.keys() {
            let doomed: Vec<String> = self.tree.ephemerals(*id).map(str::to_owned).collect();
            for path in doomed {
                // An ephemeral never has children, so this cannot fail.
                if self
                    .step(zxid, 0, Txn::Delete { path }, &mut events)
                    .is_ok()
                {
                    ephemerals += 1;
                }
            }
        }
        (sessions.len(), ephemerals)
    }

    /// Whether a single create, setData or setACL of `session_id` would be refused by a quota
    /// or an alarm if it applied now: the receiving member answers it without a log entry.
    /// Only a hint (other entries may apply first); apply decides. Anything else, a multi
    /// included, is left to apply (`None`).
    pub fn refuses_early(
        &self,
        session_id: i64,
        auth: &[Id],
        request: &Request,
    ) -> Option<QuotaRefusal> {
        if !quota::may_refuse(&self.tree, &self.settings, session_id, request) {
            return None;
        }
        let mut prep = Prep::new(&self.tree, session_id, auth, self.settings.tenancy);
        let txn = match request {
            Request::Create { op, req } => prep.create(*op, req, CreateContext::Single),
            Request::SetData(req) => prep.set_data(req),
            Request::SetAcl(req) => prep.set_acl(req),
            _ => return None,
        }
        .ok()?;
        quota::check(&self.tree, &self.settings, session_id, &[txn])
            .err()
            .map(|(_, why)| why)
    }

    /// The zxid of the last applied entry (0 for a fresh machine).
    pub fn last_applied(&self) -> i64 {
        self.last_applied
    }

    /// An open session.
    pub fn session(&self, id: i64) -> Option<&SessionInfo> {
        self.sessions.get(&id)
    }

    /// Every open session, by id.
    pub fn sessions(&self) -> impl Iterator<Item = &SessionInfo> {
        self.sessions.values()
    }

    /// Number of open sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// The tree, for inspection.
    pub fn tree(&self) -> &DataTree {
        &self.tree
    }

    /// Number of znodes, the root included (ZooKeeper's mntr counts the root twice).
    pub fn node_count(&self) -> usize {
        self.tree.len()
    }

    /// Number of ephemeral znodes across all sessions.
    pub fn ephemeral_count(&self) -> usize {
        self.tree.ephemeral_count()
    }

    /// Sum of path and data lengths of every znode (ZooKeeper's `approximate_data_size`).
    pub fn approximate_data_size(&self) -> u64 {
        self.tree.data_size()
    }

    /// The Stat of `path`, if it exists.
    pub fn stat(&self, path: &str) -> Option<Stat> {
        self.tree.get(path).map(|n| n.stat())
    }

    /// Containers that are empty and once had a child (ZooKeeper's `ContainerManager`), sorted.
    pub fn containers_to_reap(&self) -> Vec<String> {
        self.tree
            .containers()
            .filter(|p| self.tree.get(p).map(reapable_container) == Some(Ok(())))
            .map(str::to_owned)
            .collect()
    }

    /// Childless TTL nodes not modified for longer than their TTL at `now_ms`, sorted.
    pub fn expired_ttl_nodes(&self, now_ms: i64) -> Vec<String> {
        self.tree
            .ttl_nodes()
            .filter(|p| self.tree.get(p).map(|n| expired_ttl_node(n, now_ms)) == Some(Ok(())))
            .map(str::to_owned)
            .collect()
    }
}

/// Whether a container may be reaped: empty, and it once had a child (so a container is
/// not reaped between its create and its first child's).
fn reapable_container(node: &Node) -> Result<(), ErrorCode> {
    if !node.children.is_empty() {
        Err(ErrorCode::NotEmpty)
    } else if node.kind() != NodeKind::Container || node.child_creates() <= 0 {
        Err(ErrorCode::BadVersion)
    } else {
        Ok(())
    }
}

/// Whether a TTL node may be deleted at `now_ms`: childless and not modified for strictly
/// more than its TTL (ContainerManager's rule).
fn expired_ttl_node(node: &Node, now_ms: i64) -> Result<(), ErrorCode> {
    match node.kind() {
        _ if !node.children.is_empty() => Err(ErrorCode::NotEmpty),
        NodeKind::Ttl { ttl_ms } if now_ms.saturating_sub(node.mtime()) > ttl_ms => Ok(()),
        _ => Err(ErrorCode::BadVersion),
    }
}

/// A multi op ZooKeeper cannot even decode: TTL flags on an op that carries no TTL.
fn is_unmarshallable(op: &MultiOp) -> bool {
    match op {
        MultiOp::Create { op, req } => {
            let ttl_mode =
                baton_proto::CreateMode::from_flags(req.flags).is_some_and(|m| m.is_ttl());
            ttl_mode && (*op != OpCode::CreateTtl || req.ttl.is_none())
        }
        _ => false,
    }
}

/// Results of a multi whose op `failed` was refused with `code`.
fn failed_results(len: usize, failed: usize, code: ErrorCode) -> Vec<MultiResult> {
    (0..len)
        .map(|i| MultiResult::Error {
            err: match i.cmp(&failed) {
                std::cmp::Ordering::Less => 0,
                std::cmp::Ordering::Equal => code.code(),
                std::cmp::Ordering::Greater => ErrorCode::RuntimeInconsistency.code(),
            },
        })
        .collect()
}
