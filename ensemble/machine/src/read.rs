//! Local reads (ZooKeeper's `FinalRequestProcessor` read paths), answered from the applied
//! state without going through the log.
//!
//! Verified against Apache ZooKeeper 3.8.0:
//! - reads do not validate paths: a malformed path is simply NoNode, and "" is the root
//!   (ZooKeeper stores the root under "" too). Only exists refuses a NUL (BadArguments);
//! - exists needs no permission; getData, getChildren(2) and getAllChildrenNumber need READ;
//!   getACL needs READ or ADMIN, and without ADMIN digest ids come back as "user:x";
//! - getAllChildrenNumber counts all descendants ("/" excludes the root, "" includes it);
//! - getEphemerals filters the caller's ephemerals by plain string prefix ("/s" matches
//!   "/sx"); an empty or "/" prefix (after trimming) returns them all;
//! - multiRead answers each op on its own, errors inline.
//!
//! Baton's recipe-tree policy (`tenancy`) refuses with NoAuth before anything that would tell
//! whether a node exists; exists is checked too (its answer and its watch reveal a node).
//! Counts and listings obey it like getChildren: getAllChildrenNumber of `/`, "" or `/baton`
//! (which ZooKeeper answers with READ on the path alone) leaves out everything below a
//! namespace the caller may not read, so it counts only what the caller could list; and
//! getEphemerals lists only the caller's nodes it may still read (a session whose `k8s`
//! identity was replaced by another namespace's keeps its old ephemerals but no view of them).
//!
//! Watches are the caller's job: exists registers one even on NoNode (not on BadArguments);
//! getData and getChildren register only on success; a multiRead never registers one, whatever
//! its ops' watch flags say.

use baton_proto::{ErrorCode, Id, MultiReadOp, MultiReadResult, Request, Response, perms};

use crate::acl;
use crate::path;
use crate::state::StateMachine;
use crate::tenancy::{Access, RECIPE_ROOT, Refusal, Scope, scope};
use crate::tree::Node;

impl StateMachine {
    /// Answers a read request for `session_id` holding identities `auth`. Requests that are
    /// not reads get `Unimplemented`.
    pub fn read(&self, session_id: i64, auth: &[Id], req: &Request) -> Result<Response, ErrorCode> {
        match req {
            Request::Exists(r) => {
                if r.path.contains('\0') {
                    return Err(ErrorCode::BadArguments);
                }
                self.policy_allows(&r.path, auth)?;
                self.stat(&r.path)
                    .map(Response::Stat)
                    .ok_or(ErrorCode::NoNode)
            }
            Request::GetData(r) => {
                let node = self.readable(&r.path, auth)?;
                Ok(Response::GetData {
                    data: node.data().map(<[u8]>::to_vec),
                    stat: node.stat(),
                })
            }
            Request::GetChildren(r) => Ok(Response::GetChildren {
                children: children_of(self.readable(&r.path, auth)?),
            }),
            Request::GetChildren2(r) => {
                let node = self.readable(&r.path, auth)?;
                Ok(Response::GetChildren2 {
                    children: children_of(node),
                    stat: node.stat(),
                })
            }
            Request::GetAcl { path } => {
                self.policy_allows(path, auth)?;
                let node = self.tree.get(path).ok_or(ErrorCode::NoNode)?;
                let waived = self.settings.tenancy.waives_acl(path::normalize(path));
                if !waived {
                    acl::check(node.acl(), perms::READ | perms::ADMIN, auth)?;
                }
                let acl = if waived || acl::is_allowed(node.acl(), perms::ADMIN, auth) {
                    node.acl().to_vec()
                } else {
                    acl::redact_digests(node.acl())
                };
                Ok(Response::GetAcl {
                    acl,
                    stat: node.stat(),
                })
            }
            Request::GetAllChildrenNumber { path } => {
                self.readable(path, auth)?;
                let total = if path.is_empty() {
                    self.tree.len()
                } else {
                    self.tree.descendant_count(path).unwrap_or(0)
                };
                let total = total.saturating_sub(self.hidden_below(path, auth));
                Ok(Response::GetAllChildrenNumber {
                    total: i32::try_from(total).unwrap_or(i32::MAX),
                })
            }
            Request::GetEphemerals { prefix_path } => {
                // Java's String.trim(): strips every char <= ' ' at both ends.
                let trimmed = prefix_path.trim_matches(|c: char| c <= ' ');
                let all = trimmed.is_empty() || trimmed == "/";
                let ephemerals = self
                    .tree
                    .ephemerals(session_id)
                    .filter(|p| all || p.starts_with(prefix_path.as_str()))
                    .filter(|p| self.may_read(p, auth).is_ok())
                    .map(str::to_owned)
                    .collect();
                Ok(Response::GetEphemerals { ephemerals })
            }
            Request::MultiRead(ops) => Ok(Response::MultiRead(
                ops.iter().map(|op| self.multi_read_op(auth, op)).collect(),
            )),
            _ => Err(ErrorCode::Unimplemented),
        }
    }

    fn multi_read_op(&self, auth: &[Id], op: &MultiReadOp) -> MultiReadResult {
        let result = match op {
            MultiReadOp::GetChildren(r) => {
                self.readable(&r.path, auth)
                    .map(|n| MultiReadResult::GetChildren {
                        children: children_of(n),
                    })
            }
            MultiReadOp::GetData(r) => {
                self.readable(&r.path, auth)
                    .map(|n| MultiReadResult::GetData {
                        data: n.data().map(<[u8]>::to_vec),
                        stat: n.stat(),
                    })
            }
        };
        result.unwrap_or_else(|err| MultiReadResult::Error { err })
    }

    /// The node at `path` if the recipe-tree policy lets `auth` read it (NoAuth), it exists
    /// (NoNode) and `auth` may READ it (NoAuth).
    fn readable(&self, path: &str, auth: &[Id]) -> Result<&Node, ErrorCode> {
        self.policy_allows(path, auth)?;
        let node = self.tree.get(path).ok_or(ErrorCode::NoNode)?;
        if !self.settings.tenancy.waives_acl(path::normalize(path)) {
            acl::check(node.acl(), perms::READ, auth)?;
        }
        Ok(node)
    }

    /// How many nodes below `path` the recipe-tree policy hides from `auth`: the descendants
    /// of every namespace it may not read, when `path` is an ancestor of them (`/`, "" or
    /// `/baton`; a path inside a namespace is refused whole by `readable`). The namespaces'
    /// own nodes stay counted: getChildren of `/baton` lists them to anyone.
    fn hidden_below(&self, path: &str, auth: &[Id]) -> usize {
        let spans_namespaces = matches!(path, "" | "/") || scope(path) == Scope::Root;
        let Some(root) = self.tree.get(RECIPE_ROOT).filter(|_| spans_namespaces) else {
            return 0;
        };
        root.children()
            .map(|ns| format!("{RECIPE_ROOT}/{ns}"))
            .filter(|ns| self.may_read(ns, auth).is_err())
            .map(|ns| self.tree.descendant_count(&ns).unwrap_or(0))
            .sum()
    }

    fn policy_allows(&self, path: &str, auth: &[Id]) -> Result<(), ErrorCode> {
        self.settings
            .tenancy
            .check(path::normalize(path), Access::Read, auth)
            .map_err(|_| ErrorCode::NoAuth)
    }

    /// Whether the recipe-tree policy lets `auth` read (or watch) `path`: what a member checks
    /// before it registers a watch or delivers a watch event.
    pub fn may_read(&self, path: &str, auth: &[Id]) -> Result<(), Refusal> {
        self.settings
            .tenancy
            .check(path::normalize(path), Access::Read, auth)
    }

    /// The first path of read request `req` the recipe-tree policy refuses `auth`, and why: for
    /// the logs and metrics of a read answered NoAuth.
    pub fn read_refusal(&self, auth: &[Id], req: &Request) -> Option<(String, Refusal)> {
        let paths: Vec<&str> = match req {
            Request::Exists(r) | Request::GetData(r) => vec![&r.path],
            Request::GetChildren(r) | Request::GetChildren2(r) => vec![&r.path],
            Request::GetAcl { path } | Request::GetAllChildrenNumber { path } => vec![path],
            Request::AddWatch(r) => vec![&r.path],
            Request::MultiRead(ops) => ops
                .iter()
                .map(|op| match op {
                    MultiReadOp::GetChildren(r) => r.path.as_str(),
                    MultiReadOp::GetData(r) => r.path.as_str(),
                })
                .collect(),
            _ => Vec::new(),
        };
        paths.into_iter().find_map(|p| {
            self.may_read(p, auth)
                .err()
                .map(|refusal| (p.to_owned(), refusal))
        })
    }
}

fn children_of(node: &Node) -> Vec<String> {
    node.children().map(str::to_owned).collect()
}
