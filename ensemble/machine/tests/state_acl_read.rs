//! ACL enforcement on writes and reads, digest and `auth` ids, and the read paths
//! (ZooKeeper 3.8.0 behaviour).

mod common;

use baton_machine::acl::digest_auth_id;
use baton_proto::{
    ErrorCode, Id, MultiReadOp, MultiReadResult, OpCode, Request, Response, open_acl_unsafe, perms,
};
use common::*;

fn alice() -> Id {
    digest_auth_id(b"alice:pw")
}

fn bob() -> Id {
    digest_auth_id(b"bob:pw2")
}

#[test]
fn auth_scheme_expands_to_callers_digest_ids() {
    let mut h = Harness::with_sessions();
    let both = [Id::new("ip", "127.0.0.1"), alice(), bob()];
    let a = h.write_as(
        1,
        &both,
        create_with(OpCode::Create2, "/auth", b"", vec![acl(31, "auth", "")], 0),
    );
    assert_eq!(err(&a), None);
    let got = h.sm.read(
        1,
        &both,
        &Request::GetAcl {
            path: "/auth".into(),
        },
    );
    let Ok(Response::GetAcl { acl: list, .. }) = got else {
        panic!("{got:?}")
    };
    assert_eq!(
        list,
        vec![acl(31, "digest", &alice().id), acl(31, "digest", &bob().id)]
    );
    // No digest identity: nothing to expand to.
    let ip_only = [Id::new("ip", "127.0.0.1")];
    let a = h.write_as(
        1,
        &ip_only,
        create_with(OpCode::Create2, "/auth2", b"", vec![acl(31, "auth", "")], 0),
    );
    assert_eq!(err(&a), Some(ErrorCode::InvalidAcl));
}

#[test]
fn permissions_per_operation() {
    let mut h = Harness::with_sessions();
    let me = [alice()];
    let other = [bob()];
    // Only alice may read; nobody may write, create, delete below or administer.
    h.write_as(
        1,
        &me,
        create_with(
            OpCode::Create2,
            "/r",
            b"x",
            vec![acl(perms::READ, "digest", &alice().id)],
            0,
        ),
    );
    let r = |h: &Harness, auth: &[Id], req: Request| h.sm.read(1, auth, &req).err();
    assert_eq!(
        r(&h, &other, Request::Exists(pw("/r"))),
        None,
        "exists needs no permission"
    );
    assert_eq!(
        r(&h, &other, Request::GetData(pw("/r"))),
        Some(ErrorCode::NoAuth)
    );
    assert_eq!(
        r(&h, &other, Request::GetChildren(pw("/r"))),
        Some(ErrorCode::NoAuth)
    );
    assert_eq!(
        r(&h, &other, Request::GetChildren2(pw("/r"))),
        Some(ErrorCode::NoAuth)
    );
    assert_eq!(
        r(&h, &other, Request::GetAcl { path: "/r".into() }),
        Some(ErrorCode::NoAuth)
    );
    assert_eq!(
        r(
            &h,
            &other,
            Request::GetAllChildrenNumber { path: "/r".into() }
        ),
        Some(ErrorCode::NoAuth)
    );
    assert_eq!(r(&h, &me, Request::GetData(pw("/r"))), None);
    assert_eq!(
        err(&h.write_as(1, &me, set_data("/r", b"", -1))),
        Some(ErrorCode::NoAuth)
    );
    assert_eq!(
        err(&h.write_as(1, &me, create("/r/x", 0))),
        Some(ErrorCode::NoAuth)
    );
    assert_eq!(
        err(&h.write_as(1, &me, create("/r/x/y", 0))),
        Some(ErrorCode::NoNode)
    );
    assert_eq!(
        err(&h.write_as(1, &me, set_acl("/r", open_acl_unsafe(), -1))),
        Some(ErrorCode::NoAuth)
    );
    // Delete needs DELETE on the parent (the root here), not on the node.
    assert_eq!(err(&h.write_as(1, &other, delete("/r", -1))), None);
}

#[test]
fn get_acl_redacts_digests_without_admin() {
    let mut h = Harness::with_sessions();
    let me = [alice()];
    h.write_as(
        1,
        &me,
        create_with(
            OpCode::Create2,
            "/adm",
            b"",
            vec![acl(16, "digest", &alice().id), acl(1, "world", "anyone")],
            0,
        ),
    );
    let shown = |auth: &[Id]| match h.sm.read(
        1,
        auth,
        &Request::GetAcl {
            path: "/adm".into(),
        },
    ) {
        Ok(Response::GetAcl { acl, .. }) => acl,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        shown(&[]),
        vec![acl(16, "digest", "alice:x"), acl(1, "world", "anyone")]
    );
    assert_eq!(
        shown(&me),
        vec![acl(16, "digest", &alice().id), acl(1, "world", "anyone")]
    );
    // READ without ADMIN: allowed, redacted, even for the owner.
    h.write_as(
        1,
        &me,
        create_with(
            OpCode::Create2,
            "/ro",
            b"",
            vec![acl(7, "digest", &alice().id)],
            0,
        ),
    );
    let got = h.sm.read(1, &me, &Request::GetAcl { path: "/ro".into() });
    let Ok(Response::GetAcl { acl: list, .. }) = got else {
        panic!("{got:?}")
    };
    assert_eq!(list, vec![acl(7, "digest", "alice:x")]);
}

#[test]
fn ip_acls_match_the_connection_address() {
    let mut h = Harness::with_sessions();
    h.write(create_with(
        OpCode::Create2,
        "/ip8",
        b"",
        vec![acl(31, "ip", "127.0.0.0/8")],
        0,
    ));
    h.write(create_with(
        OpCode::Create2,
        "/ipo",
        b"",
        vec![acl(31, "ip", "10.0.0.1")],
        0,
    ));
    let local = [Id::new("ip", "127.0.0.1")];
    assert!(h.sm.read(1, &local, &Request::GetData(pw("/ip8"))).is_ok());
    assert_eq!(
        h.sm.read(1, &local, &Request::GetData(pw("/ipo"))).err(),
        Some(ErrorCode::NoAuth)
    );
    let a = h.write(create_with(
        OpCode::Create2,
        "/ip6",
        b"",
        vec![acl(31, "ip", "::1")],
        0,
    ));
    assert_eq!(err(&a), Some(ErrorCode::InvalidAcl));
}

#[test]
fn reads_of_odd_paths() {
    let mut h = Harness::with_sessions();
    h.mk("/v");
    h.mk("/v/a");
    // "" is the root for reads; malformed paths are just missing.
    assert_eq!(
        h.read(Request::Exists(pw(""))),
        Ok(Response::Stat(h.stat("/")))
    );
    assert_eq!(
        h.read(Request::GetChildren(pw(""))).ok(),
        h.read(Request::GetChildren(pw("/"))).ok()
    );
    for path in ["v", "/v/", "/v//a", "/v/.", "/missing"] {
        assert_eq!(
            h.read(Request::Exists(pw(path))),
            Err(ErrorCode::NoNode),
            "{path}"
        );
        assert_eq!(
            h.read(Request::GetData(pw(path))),
            Err(ErrorCode::NoNode),
            "{path}"
        );
    }
    assert_eq!(
        h.read(Request::Exists(pw("/v/a\0"))),
        Err(ErrorCode::BadArguments)
    );
    assert_eq!(
        h.read(Request::GetData(pw("/v/a\0"))),
        Err(ErrorCode::NoNode)
    );
    // getAllChildrenNumber counts descendants; "" counts the root too.
    let total =
        |h: &Harness, p: &str| match h.read(Request::GetAllChildrenNumber { path: p.into() }) {
            Ok(Response::GetAllChildrenNumber { total }) => total,
            other => panic!("{other:?}"),
        };
    assert_eq!(total(&h, "/v"), 1);
    assert_eq!(total(&h, "/"), 5, "zookeeper, quota, config, v, v/a");
    assert_eq!(total(&h, ""), 6);
    assert_eq!(h.sm.node_count(), 6);
    assert_eq!(
        h.read(Request::Sync { path: "/".into() }),
        Err(ErrorCode::Unimplemented)
    );
}

#[test]
fn get_children2_and_get_data() {
    let mut h = Harness::with_sessions();
    h.write(create_with(
        OpCode::Create2,
        "/p",
        b"data",
        open_acl_unsafe(),
        0,
    ));
    for c in ["b", "a", "c"] {
        h.mk(&format!("/p/{c}"));
    }
    match h.read(Request::GetChildren2(pw("/p"))) {
        Ok(Response::GetChildren2 { children, stat }) => {
            assert_eq!(children, vec!["a", "b", "c"]);
            assert_eq!(stat, h.stat("/p"));
        }
        other => panic!("{other:?}"),
    }
    match h.read(Request::GetData(pw("/p"))) {
        Ok(Response::GetData { data, stat }) => {
            assert_eq!(data.as_deref(), Some(&b"data"[..]));
            assert_eq!(stat.data_length, 4);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn multi_read_answers_each_op() {
    let mut h = Harness::with_sessions();
    h.mk("/m");
    h.mk("/m/k");
    h.write_as(
        1,
        &[alice()],
        create_with(
            OpCode::Create2,
            "/secret",
            b"",
            vec![acl(1, "digest", &alice().id)],
            0,
        ),
    );
    let req = Request::MultiRead(vec![
        MultiReadOp::GetChildren(pw("/m")),
        MultiReadOp::GetData(pw("/nope")),
        MultiReadOp::GetData(pw("/secret")),
        MultiReadOp::GetData(pw("/m")),
    ]);
    let Ok(Response::MultiRead(results)) = h.read(req) else {
        panic!()
    };
    assert_eq!(
        results,
        vec![
            MultiReadResult::GetChildren {
                children: vec!["k".into()]
            },
            MultiReadResult::Error {
                err: ErrorCode::NoNode
            },
            MultiReadResult::Error {
                err: ErrorCode::NoAuth
            },
            MultiReadResult::GetData {
                data: Some(vec![]),
                stat: h.stat("/m")
            },
        ]
    );
}

#[test]
fn get_ephemerals_filters_by_string_prefix() {
    let mut h = Harness::with_sessions();
    h.mk("/s");
    h.mk("/s/x");
    for p in ["/s/e1", "/s/x/e3", "/sx"] {
        h.write(create(p, 1));
    }
    h.write_as(2, &[], create("/s/other", 1));
    let eph = |h: &Harness, session: i64, prefix: &str| match h.sm.read(
        session,
        &[],
        &Request::GetEphemerals {
            prefix_path: prefix.into(),
        },
    ) {
        Ok(Response::GetEphemerals { ephemerals }) => ephemerals,
        other => panic!("{other:?}"),
    };
    let all = vec!["/s/e1", "/s/x/e3", "/sx"];
    assert_eq!(eph(&h, 1, "/"), all);
    assert_eq!(eph(&h, 1, ""), all);
    assert_eq!(eph(&h, 1, " / "), all);
    assert_eq!(eph(&h, 1, "/s"), all, "plain string prefix: /s matches /sx");
    assert_eq!(eph(&h, 1, "/s/x/"), vec!["/s/x/e3"]);
    assert_eq!(eph(&h, 2, "/"), vec!["/s/other"]);
    assert!(eph(&h, 3, "/").is_empty());
}
