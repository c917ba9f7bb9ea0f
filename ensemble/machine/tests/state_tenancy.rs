//! The recipe-tree policy through `StateMachine::apply` and `read`: namespaces under
//! `/baton/<ns>` with `check_identities`, owner-only deletion of ephemerals below `/baton/`
//! (always), and the super identity; multi refused atomically.

mod common;

use baton_machine::tenancy::Refusal;
use baton_proto::{
    Acl, ErrorCode, Id, MultiOp, MultiReadOp, MultiResult, Request, Response, perms,
};
use common::*;

/// Sessions: 1 and 2 are pods of namespace a, 3 of namespace b, 4 has no identity, 5 is super.
const A1: i64 = 1;
const A2: i64 = 2;
const B: i64 = 3;
const ANON: i64 = 4;
const SUPER: i64 = 5;

fn ids(session: i64) -> Vec<Id> {
    let ip = Id::new("ip", "10.0.0.9");
    match session {
        A1 => vec![ip, Id::new("k8s", "a/app/pod-1")],
        A2 => vec![ip, Id::new("k8s", "a/app/pod-2")],
        B => vec![ip, Id::new("k8s", "b/app/pod-1")],
        SUPER => vec![
            ip,
            Id::new("digest", "super:D/InIHSb7yEEbrWz8b9l71RjZJU="),
            Id::new("super", ""),
        ],
        _ => vec![ip],
    }
}

const EPHEMERAL_SEQ: i32 = 3;
const EPHEMERAL: i32 = 1;
const CANDIDATE: &str = "/baton/a/elections/web/candidate-0000000000";

/// A tree with `/baton/a/elections/web` and session A1's ephemeral candidate in it.
fn harness(check_identities: bool) -> Harness {
    let mut h = Harness::new();
    h.set_check_identities(check_identities);
    for s in [A1, A2, B, ANON, SUPER] {
        h.open(s);
    }
    for p in [
        "/baton",
        "/baton/a",
        "/baton/a/elections",
        "/baton/a/elections/web",
    ] {
        let a = as_(&mut h, A1, create(p, 0));
        assert_eq!(err(&a), None, "create {p}");
    }
    let a = as_(
        &mut h,
        A1,
        create("/baton/a/elections/web/candidate-", EPHEMERAL_SEQ),
    );
    assert_eq!(created_path(&a), CANDIDATE);
    h
}

fn as_(h: &mut Harness, session: i64, request: Request) -> baton_machine::Applied {
    h.write_as(session, &ids(session), request)
}

fn read_as(h: &Harness, session: i64, request: Request) -> Result<Response, ErrorCode> {
    h.sm.read(session, &ids(session), &request)
}

/// The children of `path`, as super sees them.
fn children(h: &Harness, path: &str) -> Vec<String> {
    match read_as(h, SUPER, Request::GetChildren(pw(path))) {
        Ok(Response::GetChildren { children }) => children,
        other => panic!("getChildren {path}: {other:?}"),
    }
}

fn digest_only_acl() -> Vec<Acl> {
    vec![Acl {
        perms: perms::ALL,
        id: Id::new("digest", "mallory:x"),
    }]
}

#[test]
fn another_namespace_can_neither_read_nor_write() {
    let mut h = harness(true);
    for session in [B, ANON] {
        let reason = if session == B {
            Refusal::OtherNamespace
        } else {
            Refusal::Unauthenticated
        };
        let writes = [
            create("/baton/a/elections/web/candidate-", EPHEMERAL_SEQ),
            create("/baton/a/elections/other", 0),
            delete(CANDIDATE, -1),
            delete("/baton/a/elections/nothing-here", -1),
            set_data(CANDIDATE, b"{\"identity\":\"mallory\"}", -1),
            set_acl("/baton/a", digest_only_acl(), -1),
            set_acl("/baton/a/elections/web", digest_only_acl(), -1),
        ];
        for w in writes {
            let a = as_(&mut h, session, w.clone());
            assert_eq!(err(&a), Some(ErrorCode::NoAuth), "{w:?} by {session}");
            assert_eq!(a.refusal.as_ref().map(|r| r.1), Some(reason), "{w:?}");
        }
        let reads = [
            Request::Exists(pw(CANDIDATE)),
            Request::Exists(pw("/baton/a/missing")),
            Request::GetData(pw(CANDIDATE)),
            Request::GetChildren(pw("/baton/a/elections/web")),
            Request::GetChildren2(pw("/baton/a")),
            Request::GetAcl {
                path: "/baton/a".into(),
            },
            Request::GetAllChildrenNumber {
                path: "/baton/a".into(),
            },
        ];
        for r in reads {
            assert_eq!(
                read_as(&h, session, r.clone()),
                Err(ErrorCode::NoAuth),
                "{r:?}"
            );
            assert!(h.sm.read_refusal(&ids(session), &r).is_some(), "{r:?}");
        }
        let multi_read = Request::MultiRead(vec![MultiReadOp::GetData(pw(CANDIDATE))]);
        assert_eq!(
            read_as(&h, session, multi_read),
            Ok(Response::MultiRead(vec![
                baton_proto::MultiReadResult::Error {
                    err: ErrorCode::NoAuth
                }
            ]))
        );
        // A namespace of its own is not made in a's name either.
        let a = as_(&mut h, session, create("/baton/", EPHEMERAL_SEQ));
        assert_eq!(err(&a), Some(ErrorCode::NoAuth));
    }
    // Nothing changed.
    assert_eq!(
        children(&h, "/baton/a/elections/web"),
        vec!["candidate-0000000000"]
    );
    assert_eq!(children(&h, "/baton/a/elections"), vec!["web"]);
    assert_eq!(h.stat(CANDIDATE).version, 0);
}

#[test]
fn the_own_namespace_reads_and_writes_and_namespaces_are_made_by_their_own() {
    let mut h = harness(true);
    assert!(read_as(&h, A2, Request::GetData(pw(CANDIDATE))).is_ok());
    let a = as_(
        &mut h,
        A2,
        create("/baton/a/elections/web/candidate-", EPHEMERAL_SEQ),
    );
    assert_eq!(err(&a), None);
    let a = as_(&mut h, B, create("/baton/b", 0));
    assert_eq!(err(&a), None);
    let a = as_(&mut h, A1, create("/baton/b/x", 0));
    assert_eq!(err(&a), Some(ErrorCode::NoAuth));
    // The shared root lists every namespace, to anyone.
    match read_as(&h, ANON, Request::GetChildren(pw("/baton"))) {
        Ok(Response::GetChildren { mut children }) => {
            children.sort();
            assert_eq!(children, vec!["a", "b"]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_shared_root_cannot_be_squatted_or_locked() {
    let mut h = Harness::new();
    h.set_check_identities(true);
    for s in [A1, ANON, SUPER] {
        h.open(s);
    }
    // An ephemeral /baton would refuse every namespace (NoChildrenForEphemerals).
    let a = as_(&mut h, ANON, create("/baton", EPHEMERAL));
    assert_eq!(err(&a), Some(ErrorCode::NoAuth));
    assert_eq!(a.refusal.map(|r| r.1), Some(Refusal::RootNotPersistent));
    // A stranger makes /baton with an ACL only they hold: namespaces are still created.
    let a = as_(
        &mut h,
        ANON,
        create_with(
            baton_proto::OpCode::Create2,
            "/baton",
            b"",
            digest_only_acl(),
            0,
        ),
    );
    assert_eq!(err(&a), None);
    assert_eq!(err(&as_(&mut h, A1, create("/baton/a", 0))), None);
    assert!(read_as(&h, ANON, Request::GetChildren(pw("/baton"))).is_ok());
    for w in [
        set_acl("/baton", open_acl(), -1),
        set_data("/baton", b"x", -1),
        delete("/baton", -1),
    ] {
        let a = as_(&mut h, A1, w.clone());
        assert_eq!(err(&a), Some(ErrorCode::NoAuth), "{w:?}");
        assert_eq!(a.refusal.map(|r| r.1), Some(Refusal::SuperOnly));
    }
    // Super repairs the ACL.
    assert_eq!(
        err(&as_(&mut h, SUPER, set_acl("/baton", open_acl(), -1))),
        None
    );
}

fn open_acl() -> Vec<Acl> {
    baton_proto::open_acl_unsafe()
}

#[test]
fn only_the_owner_deletes_an_ephemeral_even_without_identity_checks() {
    for check_identities in [false, true] {
        let mut h = harness(check_identities);
        let a = as_(&mut h, A2, delete(CANDIDATE, -1));
        assert_eq!(
            err(&a),
            Some(ErrorCode::NoAuth),
            "checks {check_identities}"
        );
        assert_eq!(a.refusal.map(|r| r.1), Some(Refusal::NotOwner));
        // The same inside a multi, atomically: the op before it does not happen either.
        let a = as_(
            &mut h,
            A2,
            Request::Multi(vec![
                MultiOp::Create {
                    op: baton_proto::OpCode::Create,
                    req: create_full(
                        "/baton/a/elections/web/planted-0000000000",
                        b"",
                        open_acl(),
                        0,
                        None,
                    ),
                },
                MultiOp::Delete(baton_proto::DeleteRequest {
                    path: CANDIDATE.into(),
                    version: -1,
                }),
            ]),
        );
        assert_eq!(
            a.body,
            Some(Response::Multi(vec![
                MultiResult::Error { err: 0 },
                MultiResult::Error {
                    err: ErrorCode::NoAuth.code()
                },
            ]))
        );
        assert_eq!(a.refusal.map(|r| r.1), Some(Refusal::NotOwner));
        assert_eq!(
            children(&h, "/baton/a/elections/web"),
            vec!["candidate-0000000000"]
        );
        // Super may.
        let a = as_(&mut h, SUPER, delete(CANDIDATE, -1));
        assert_eq!(err(&a), None);
        // The owner may; and its session's close deletes its ephemerals.
        let a = as_(
            &mut h,
            A1,
            create("/baton/a/elections/web/candidate-", EPHEMERAL_SEQ),
        );
        let mine = created_path(&a);
        assert_eq!(err(&as_(&mut h, A1, delete(&mine, -1))), None);
        let a = as_(
            &mut h,
            A1,
            create("/baton/a/elections/web/candidate-", EPHEMERAL_SEQ),
        );
        let mine = created_path(&a);
        h.close(A1);
        assert!(h.sm.stat(&mine).is_none());
    }
}

#[test]
fn outside_baton_plain_zookeeper_rules_hold() {
    let mut h = harness(true);
    let a = as_(&mut h, A1, create("/app-lock", EPHEMERAL));
    assert_eq!(err(&a), None);
    // Anyone may delete another session's ephemeral outside /baton, as in ZooKeeper.
    assert_eq!(err(&as_(&mut h, ANON, delete("/app-lock", -1))), None);
    assert!(read_as(&h, B, Request::GetData(pw("/zookeeper"))).is_ok());
}

#[test]
fn without_identity_checks_namespaces_are_open() {
    let mut h = harness(false);
    assert!(read_as(&h, B, Request::GetData(pw(CANDIDATE))).is_ok());
    assert_eq!(err(&as_(&mut h, ANON, create("/baton/a/x", 0))), None);
    assert_eq!(
        err(&as_(&mut h, ANON, set_acl("/baton", digest_only_acl(), -1))),
        None
    );
    // ... and ZooKeeper ACLs decide: the root is now locked for everyone but super.
    assert_eq!(
        err(&as_(&mut h, A1, create("/baton/c", 0))),
        Some(ErrorCode::NoAuth)
    );
    assert_eq!(
        err(&as_(&mut h, SUPER, set_acl("/baton", open_acl(), -1))),
        None
    );
    assert_eq!(err(&as_(&mut h, A1, create("/baton/c", 0))), None);
}

#[test]
fn super_passes_acls_and_sees_them_whole() {
    let mut h = harness(true);
    assert_eq!(
        err(&as_(
            &mut h,
            A1,
            set_acl("/baton/a/elections", digest_only_acl(), -1)
        )),
        None
    );
    // The namespace locked itself out of that node; super reads it and repairs it.
    assert_eq!(
        read_as(&h, A1, Request::GetChildren(pw("/baton/a/elections"))),
        Err(ErrorCode::NoAuth)
    );
    match read_as(
        &h,
        SUPER,
        Request::GetAcl {
            path: "/baton/a/elections".into(),
        },
    ) {
        Ok(Response::GetAcl { acl, .. }) => assert_eq!(acl, digest_only_acl()),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err(&as_(
            &mut h,
            SUPER,
            set_acl("/baton/a/elections", open_acl(), -1)
        )),
        None
    );
    assert!(read_as(&h, A1, Request::GetChildren(pw("/baton/a/elections"))).is_ok());
}

fn count_as(h: &Harness, session: i64, auth: &[Id], path: &str) -> Result<i32, ErrorCode> {
    match h.sm.read(
        session,
        auth,
        &Request::GetAllChildrenNumber { path: path.into() },
    ) {
        Ok(Response::GetAllChildrenNumber { total }) => Ok(total),
        Ok(other) => panic!("getAllChildrenNumber {path}: {other:?}"),
        Err(e) => Err(e),
    }
}

/// A client allowed `setACL /` (on a fresh ensemble, anyone) takes CREATE off `/` before
/// `/baton` exists: tenants still make `/baton` and their namespaces, while `/`'s new ACL
/// still governs every other top-level node, as in ZooKeeper.
#[test]
fn no_acl_on_the_root_locks_tenants_out_of_baton() {
    let mut h = Harness::new();
    h.set_check_identities(true);
    for s in [A1, B, ANON] {
        h.open(s);
    }
    let read_only = vec![acl(perms::READ, "world", "anyone")];
    let a = as_(&mut h, ANON, set_acl("/", read_only, -1));
    assert_eq!(err(&a), None, "setACL / is ZooKeeper's to allow");
    let a = as_(&mut h, ANON, create("/other", 0));
    assert_eq!(
        err(&a),
        Some(ErrorCode::NoAuth),
        "/ keeps its ACL elsewhere"
    );
    // A sequential create named like the root lands outside it: `/`'s ACL applies.
    let a = as_(&mut h, A1, create("/baton", 2));
    assert_eq!(err(&a), Some(ErrorCode::NoAuth));
    let a = as_(&mut h, A1, create("/baton", 0));
    assert_eq!(err(&a), None, "a tenant creates /baton whatever / says");
    for (s, ns) in [(A1, "/baton/a"), (B, "/baton/b")] {
        let a = as_(&mut h, s, create(ns, 0));
        assert_eq!(err(&a), None, "create {ns}");
    }
    // Without the policy there are no tenants: `/` is ZooKeeper's alone.
    let mut plain = Harness::new();
    plain.open(ANON);
    let a = as_(
        &mut plain,
        ANON,
        set_acl("/", vec![acl(perms::READ, "world", "anyone")], -1),
    );
    assert_eq!(err(&a), None);
    let a = as_(&mut plain, ANON, create("/baton", 0));
    assert_eq!(err(&a), Some(ErrorCode::NoAuth));
}

/// getAllChildrenNumber counts only what the caller could list with getChildren: nothing
/// below a namespace it may not read, whichever ancestor it counts from.
#[test]
fn counts_leave_out_other_namespaces() {
    let mut h = harness(true);
    let a = as_(&mut h, B, create("/baton/b", 0));
    assert_eq!(err(&a), None);
    let a = as_(&mut h, B, create("/baton/b/locks", 0));
    assert_eq!(err(&a), None);
    // Below /baton: a, a/elections, a/elections/web, the candidate, b, b/locks.
    assert_eq!(count_as(&h, SUPER, &ids(SUPER), "/baton"), Ok(6));
    assert_eq!(
        count_as(&h, A1, &ids(A1), "/baton"),
        Ok(5),
        "a's 3, b itself"
    );
    assert_eq!(
        count_as(&h, B, &ids(B), "/baton"),
        Ok(3),
        "a itself, b's 1, b"
    );
    assert_eq!(
        count_as(&h, ANON, &ids(ANON), "/baton"),
        Ok(2),
        "a and b only"
    );
    let everything = count_as(&h, SUPER, &ids(SUPER), "/").expect("super counts /");
    assert_eq!(count_as(&h, ANON, &ids(ANON), "/"), Ok(everything - 4));
    let with_root = count_as(&h, SUPER, &ids(SUPER), "").expect("super counts \"\"");
    assert_eq!(count_as(&h, ANON, &ids(ANON), ""), Ok(with_root - 4));
    // Inside a namespace the path itself is refused, as getChildren is.
    assert_eq!(count_as(&h, B, &ids(B), "/baton/a"), Err(ErrorCode::NoAuth));
    assert_eq!(count_as(&h, A2, &ids(A2), "/baton/a"), Ok(3));
    // Without the policy, ZooKeeper's count.
    let h = harness(false);
    assert_eq!(count_as(&h, ANON, &ids(ANON), "/baton"), Ok(4));
}

/// getEphemerals lists a session's own nodes only where its current identities may read.
#[test]
fn ephemerals_are_listed_only_where_the_caller_may_read() {
    let h = harness(true);
    let list = |auth: &[Id]| match h.sm.read(
        A1,
        auth,
        &Request::GetEphemerals {
            prefix_path: "/".into(),
        },
    ) {
        Ok(Response::GetEphemerals { ephemerals }) => ephemerals,
        other => panic!("getEphemerals: {other:?}"),
    };
    assert_eq!(list(&ids(A1)), vec![CANDIDATE.to_owned()]);
    // The session now speaks for namespace b (a newer k8s identity replaces the older).
    assert!(list(&ids(B)).is_empty());
    assert_eq!(list(&ids(SUPER)), vec![CANDIDATE.to_owned()]);
}
