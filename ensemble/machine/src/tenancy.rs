//! Who may touch Baton's recipe tree `/baton/<namespace>/…` (DESIGN.md §4 Tenancy): the
//! namespace policy (`--check-identities`), owner-only deletion of ephemeral nodes, and the
//! super identity.
//!
//! Everything here is a pure function of the path, the operation, the caller's identities, the
//! node's ephemeral owner, the caller's session and the policy, so every member reaches the
//! same decision: writes are decided at apply on every replica, reads by the member that
//! answers them.
//!
//! - **Super** (`super:`, added by the member when a digest auth matches `--super-digest`, as
//!   ZooKeeper's `DigestAuthenticationProvider` does) passes everything here and every ACL.
//! - **Owner-only deletion**, always on: an ephemeral node below `/baton/` may be deleted only
//!   by the session that owns it (its own close or expiry deletes it without asking).
//! - **Namespaces**, with `check_identities`: `/baton/<ns>` and below are for sessions with a
//!   `k8s` identity of namespace `<ns>` (`k8s:NS/SA/POD`); ZooKeeper ACLs still apply there
//!   in addition, so a namespace can only lock itself out. `/baton` itself is shared: anyone
//!   may create it (persistent only: an ephemeral or TTL `/baton` would be a squat), read it
//!   and create namespaces below it whatever its ACL (or, for creating it, `/`'s) says; only
//!   super may change its data or ACL or delete it. So no ACL on `/` or `/baton` can lock
//!   tenants out, while `setACL /` still works as in ZooKeeper for everything else.
//! - Everything outside `/baton` is left to ZooKeeper's ACLs.

use baton_proto::Id;

/// The root of the recipe tree.
pub const RECIPE_ROOT: &str = "/baton";
/// The scheme of a Kubernetes identity (`k8s:NAMESPACE/SERVICEACCOUNT/POD`).
pub const K8S_SCHEME: &str = "k8s";
/// The scheme ZooKeeper gives a session that authenticated as its super digest.
pub const SUPER_SCHEME: &str = "super";

/// The ensemble-wide settings of the policy; every member must be given the same.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenancyPolicy {
    /// Enforce namespaces below `/baton` (`--check-identities`).
    pub check_identities: bool,
}

/// What an operation does to the node at its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// exists, getData, getChildren, getACL, a multi's check, watches.
    Read,
    Create,
    Delete,
    SetData,
    SetAcl,
}

/// Why the policy refused (the client sees NoAuth).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the path belongs to another Kubernetes namespace than the session's")]
    OtherNamespace,
    #[error("the path belongs to a Kubernetes namespace and the session has no k8s identity")]
    Unauthenticated,
    #[error("only the super identity may change or delete /baton itself")]
    SuperOnly,
    #[error("/baton may only be created as a persistent node")]
    RootNotPersistent,
    #[error("the ephemeral node belongs to another session")]
    NotOwner,
}

impl Refusal {
    /// The `reason` label of `baton_tenancy_refusals_total`.
    /// Every refusal, for metrics that show each reason from the start.
    pub const ALL: [Refusal; 5] = [
        Refusal::OtherNamespace,
        Refusal::Unauthenticated,
        Refusal::SuperOnly,
        Refusal::RootNotPersistent,
        Refusal::NotOwner,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Refusal::OtherNamespace => "other_namespace",
            Refusal::Unauthenticated => "unauthenticated",
            Refusal::SuperOnly => "super_only",
            Refusal::RootNotPersistent => "root_not_persistent",
            Refusal::NotOwner => "not_owner",
        }
    }
}

/// Where a path lies in the recipe tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Not below `/baton`: ZooKeeper ACLs alone.
    Outside,
    /// `/baton` itself.
    Root,
    /// `/baton/<ns>` or below (`<ns>` may be empty for a malformed path such as "/baton/").
    Namespace(&'a str),
}

/// Where `path` lies. "" is the root, as ZooKeeper reads it.
pub fn scope(path: &str) -> Scope<'_> {
    if path == RECIPE_ROOT {
        return Scope::Root;
    }
    match path
        .strip_prefix(RECIPE_ROOT)
        .and_then(|r| r.strip_prefix('/'))
    {
        Some(rest) => Scope::Namespace(rest.split('/').next().unwrap_or_default()),
        None => Scope::Outside,
    }
}

/// Whether the identities include the super identity.
pub fn is_super(auth: &[Id]) -> bool {
    auth.iter().any(|id| id.scheme == SUPER_SCHEME)
}

/// The namespace of a `k8s` identity (`NS/SA/POD`).
pub fn k8s_namespace(id: &Id) -> Option<&str> {
    if id.scheme != K8S_SCHEME {
        return None;
    }
    id.id.split('/').next().filter(|ns| !ns.is_empty())
}

impl TenancyPolicy {
    /// Whether `access` to `path` is allowed by the policy (ACLs are checked separately, see
    /// [`TenancyPolicy::waives_acl`]).
    pub fn check(&self, path: &str, access: Access, auth: &[Id]) -> Result<(), Refusal> {
        if !self.check_identities || is_super(auth) || crate::deliberate::policy_ignored() {
            return Ok(());
        }
        match scope(path) {
            Scope::Outside => Ok(()),
            Scope::Root => match access {
                Access::Read | Access::Create => Ok(()),
                Access::Delete | Access::SetData | Access::SetAcl => Err(Refusal::SuperOnly),
            },
            Scope::Namespace(ns) => {
                let mut namespaces = auth.iter().filter_map(k8s_namespace).peekable();
                if namespaces.peek().is_none() {
                    Err(Refusal::Unauthenticated)
                } else if namespaces.any(|own| own == ns) {
                    Ok(())
                } else {
                    Err(Refusal::OtherNamespace)
                }
            }
        }
    }

    /// Whether the ACL of the node at `path` is not enforced because the policy alone decides:
    /// `/baton` itself when identities are checked, so that nobody can squat the shared root
    /// with an ACL of their own.
    pub fn waives_acl(&self, path: &str) -> bool {
        self.check_identities && scope(path) == Scope::Root
    }

    /// Whether creating the node at `path` (not sequential) skips the CREATE permission of its
    /// parent: `/baton` when identities are checked. Otherwise anyone allowed `setACL /` (on a
    /// fresh ensemble, anyone) could keep every namespace from its tree by taking CREATE off
    /// `/` before `/baton` exists. ZooKeeper's `setACL /` is kept for everything else.
    pub fn waives_parent_acl(&self, path: &str) -> bool {
        self.check_identities && scope(path) == Scope::Root
    }

    /// Whether the node at `path` may be created with this lifetime (`persistent`: neither
    /// ephemeral, TTL nor container): `/baton` must be persistent when identities are checked (an ephemeral one could never get
    /// children, a TTL or container one would vanish).
    pub fn check_root_kind(&self, path: &str, persistent: bool) -> Result<(), Refusal> {
        if self.check_identities && scope(path) == Scope::Root && !persistent {
            Err(Refusal::RootNotPersistent)
        } else {
            Ok(())
        }
    }
}

/// Owner-only deletion, always on: deleting the node at `path`, whose ephemeral owner is
/// `owner` (None for a node that is not ephemeral), by session `session_id` holding `auth`.
pub fn check_delete_owner(
    path: &str,
    owner: Option<i64>,
    session_id: i64,
    auth: &[Id],
) -> Result<(), Refusal> {
    match (scope(path), owner) {
        (Scope::Namespace(_), Some(owner)) if owner != session_id && !is_super(auth) => {
            Err(Refusal::NotOwner)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ON: TenancyPolicy = TenancyPolicy {
        check_identities: true,
    };
    const OFF: TenancyPolicy = TenancyPolicy {
        check_identities: false,
    };
    const ALL: [Access; 5] = [
        Access::Read,
        Access::Create,
        Access::Delete,
        Access::SetData,
        Access::SetAcl,
    ];

    fn k8s(id: &str) -> Id {
        Id::new(K8S_SCHEME, id)
    }

    fn sup() -> Id {
        Id::new(SUPER_SCHEME, "")
    }

    fn ip() -> Id {
        Id::new("ip", "10.0.0.1")
    }

    #[test]
    fn scopes() {
        assert_eq!(scope("/baton"), Scope::Root);
        assert_eq!(scope("/baton/a"), Scope::Namespace("a"));
        assert_eq!(scope("/baton/a/elections/web/c-1"), Scope::Namespace("a"));
        assert_eq!(scope("/baton/"), Scope::Namespace(""));
        assert_eq!(scope("/batons"), Scope::Outside);
        assert_eq!(scope("/batonx/a"), Scope::Outside);
        assert_eq!(scope("/"), Scope::Outside);
        assert_eq!(scope(""), Scope::Outside);
        assert_eq!(scope("/x/baton/a"), Scope::Outside);
    }

    #[test]
    fn namespace_members_may_do_everything_in_their_namespace() {
        let a = [ip(), k8s("a/sa/pod-1")];
        for access in ALL {
            assert_eq!(ON.check("/baton/a", access, &a), Ok(()));
            assert_eq!(ON.check("/baton/a/locks/x/lock-1", access, &a), Ok(()));
        }
    }

    #[test]
    fn other_namespaces_and_strangers_may_do_nothing_there() {
        let b = [ip(), k8s("b/sa/pod-1")];
        let digest = [ip(), Id::new("digest", "alice:x")];
        for access in ALL {
            for path in ["/baton/a", "/baton/a/elections/web/candidate-0000000001"] {
                assert_eq!(ON.check(path, access, &b), Err(Refusal::OtherNamespace));
                assert_eq!(ON.check(path, access, &[]), Err(Refusal::Unauthenticated));
                assert_eq!(
                    ON.check(path, access, &digest),
                    Err(Refusal::Unauthenticated)
                );
            }
            // A namespace named like a prefix of another is another namespace.
            assert_eq!(
                ON.check("/baton/ab/x", access, &[k8s("a/sa/p")]),
                Err(Refusal::OtherNamespace)
            );
            // A malformed path names no namespace anyone has.
            assert_eq!(
                ON.check("/baton/", access, &[k8s("a/sa/p")]),
                Err(Refusal::OtherNamespace)
            );
        }
    }

    #[test]
    fn the_shared_root_is_readable_and_creatable_by_anyone_and_changed_only_by_super() {
        for who in [vec![], vec![k8s("a/sa/p")]] {
            assert_eq!(ON.check("/baton", Access::Read, &who), Ok(()));
            assert_eq!(ON.check("/baton", Access::Create, &who), Ok(()));
            for access in [Access::Delete, Access::SetData, Access::SetAcl] {
                assert_eq!(ON.check("/baton", access, &who), Err(Refusal::SuperOnly));
            }
        }
        assert!(ON.waives_acl("/baton"));
        assert!(!ON.waives_acl("/baton/a"));
        assert!(!OFF.waives_acl("/baton"));
        assert!(ON.waives_parent_acl("/baton"));
        assert!(!ON.waives_parent_acl("/baton/a"));
        assert!(!ON.waives_parent_acl("/batons"));
        assert!(!OFF.waives_parent_acl("/baton"));
        assert_eq!(
            ON.check_root_kind("/baton", false),
            Err(Refusal::RootNotPersistent)
        );
        assert_eq!(ON.check_root_kind("/baton", true), Ok(()));
        assert_eq!(ON.check_root_kind("/baton/a", false), Ok(()));
        assert_eq!(OFF.check_root_kind("/baton", false), Ok(()));
    }

    #[test]
    fn super_passes_everything() {
        for access in ALL {
            for path in ["/baton", "/baton/a", "/baton/a/x", "/other"] {
                assert_eq!(ON.check(path, access, &[sup()]), Ok(()));
            }
        }
        assert_eq!(
            check_delete_owner("/baton/a/x", Some(7), 8, &[sup()]),
            Ok(())
        );
    }

    #[test]
    fn outside_baton_and_without_the_flag_the_policy_stays_out() {
        for access in ALL {
            assert_eq!(ON.check("/app/x", access, &[]), Ok(()));
            assert_eq!(ON.check("/batons/a", access, &[]), Ok(()));
            assert_eq!(OFF.check("/baton/a/x", access, &[]), Ok(()));
            assert_eq!(OFF.check("/baton", access, &[]), Ok(()));
        }
    }

    #[test]
    fn only_the_owner_deletes_an_ephemeral_below_baton() {
        let same_ns = [k8s("a/sa/pod-2")];
        assert_eq!(
            check_delete_owner("/baton/a/locks/x/lock-1", Some(7), 8, &same_ns),
            Err(Refusal::NotOwner)
        );
        assert_eq!(
            check_delete_owner("/baton/a/locks/x/lock-1", Some(7), 7, &[]),
            Ok(())
        );
        // Not ephemeral, or not below /baton/: ZooKeeper's rules alone.
        assert_eq!(check_delete_owner("/baton/a/x", None, 8, &[]), Ok(()));
        assert_eq!(check_delete_owner("/app/lock-1", Some(7), 8, &[]), Ok(()));
        assert_eq!(check_delete_owner("/baton", Some(7), 8, &[]), Ok(()));
    }

    #[test]
    fn k8s_identities_name_their_namespace() {
        assert_eq!(k8s_namespace(&k8s("ns/sa/pod")), Some("ns"));
        assert_eq!(k8s_namespace(&k8s("/sa/pod")), None);
        assert_eq!(k8s_namespace(&Id::new("digest", "ns/x")), None);
    }
}
