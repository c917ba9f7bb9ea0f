//! create: stats, sequential names, path errors and error precedence, ephemerals,
//! containers and TTL nodes — each case checked against ZooKeeper 3.8.0.

mod common;

use baton_proto::{ErrorCode, EventType, OpCode, Response, open_acl_unsafe};
use common::*;

#[test]
fn create_stat_and_parent_bookkeeping() {
    let mut h = Harness::with_sessions();
    let before = h.stat("/");
    let p = h.mk("/p");
    assert_eq!((p.czxid, p.mzxid, p.pzxid), (h.zxid, h.zxid, h.zxid));
    assert_eq!((p.ctime, p.mtime), (h.now, h.now));
    assert_eq!((p.version, p.cversion, p.aversion), (0, 0, 0));
    assert_eq!(
        (p.ephemeral_owner, p.data_length, p.num_children),
        (0, 0, 0)
    );
    let root = h.stat("/");
    assert_eq!(root.cversion, before.cversion + 1);
    assert_eq!(root.pzxid, h.zxid);
    assert_eq!(
        root.mzxid, before.mzxid,
        "a child create does not touch mzxid"
    );

    let a = h.write(create_with(
        OpCode::Create2,
        "/p/a",
        b"hello",
        open_acl_unsafe(),
        0,
    ));
    assert_eq!(
        a.events,
        vec![
            ("/p/a".to_owned(), EventType::NodeCreated),
            ("/p".to_owned(), EventType::NodeChildrenChanged)
        ]
    );
    match a.body {
        Some(Response::Create2 { path, stat }) => {
            assert_eq!(path, "/p/a");
            assert_eq!(stat.data_length, 5);
        }
        other => panic!("{other:?}"),
    }
    // Plain create (opcode 1) answers with the path only.
    let b = h.write(create_with(
        OpCode::Create,
        "/p/b",
        b"",
        open_acl_unsafe(),
        0,
    ));
    assert_eq!(
        b.body,
        Some(Response::Create {
            path: "/p/b".into()
        })
    );
    let p = h.stat("/p");
    assert_eq!((p.cversion, p.num_children, p.pzxid), (2, 2, h.zxid));
}

#[test]
fn cversion_and_pzxid_move_on_delete_too() {
    let mut h = Harness::with_sessions();
    h.mk("/p");
    h.mk("/p/a");
    assert_eq!(err(&h.write(delete("/p/a", -1))), None);
    let p = h.stat("/p");
    assert_eq!((p.cversion, p.pzxid, p.num_children), (2, h.zxid, 0));
}

#[test]
fn sequence_counts_children_ever_created_not_cversion() {
    // ZooKeeper 3.8.0: create /p, /p/a, delete /p/a, create -s /p/x → /p/x0000000001
    // (the visible cversion was 2 at that point).
    let mut h = Harness::with_sessions();
    h.mk("/p");
    h.mk("/p/a");
    h.write(delete("/p/a", -1));
    assert_eq!(created_path(&h.write(create("/p/x", 2))), "/p/x0000000001");
    assert_eq!(h.stat("/p").cversion, 3);
    assert_eq!(created_path(&h.write(create("/p/x", 2))), "/p/x0000000002");
    h.mk("/p/b");
    assert_eq!(created_path(&h.write(create("/p/x", 2))), "/p/x0000000004");
    // A sequential create may end in '/': the name is just the number.
    assert_eq!(created_path(&h.write(create("/p/", 2))), "/p/0000000005");
    // "/" sequential creates under the root; the root already had /zookeeper (cversion 0
    // persisted) and /p.
    assert_eq!(created_path(&h.write(create("/", 2))), "/0000000001");
    // Failed creates do not consume numbers.
    assert_eq!(err(&h.write(create("/p/x0000000006", 0))), None);
    assert_eq!(
        err(&h.write(create("/p/x0000000006", 0))),
        Some(ErrorCode::NodeExists)
    );
    assert_eq!(created_path(&h.write(create("/p/x", 2))), "/p/x0000000007");
}

#[test]
fn create_path_errors() {
    let mut h = Harness::with_sessions();
    h.mk("/v");
    let cases = [
        ("", ErrorCode::BadArguments),
        ("v", ErrorCode::BadArguments),
        ("/", ErrorCode::NodeExists),
        ("/v/", ErrorCode::BadArguments),
        ("/v//a", ErrorCode::NoNode),
        ("/v/./a", ErrorCode::NoNode),
        ("/v/.", ErrorCode::BadArguments),
        ("/v/..", ErrorCode::BadArguments),
        ("/v/a\0b", ErrorCode::BadArguments),
        ("/v/a\u{1}", ErrorCode::BadArguments),
        ("/v/a\u{f000}", ErrorCode::BadArguments),
        ("/v/a\u{fff0}", ErrorCode::BadArguments),
        ("/missing/", ErrorCode::NoNode),
        ("/missing//a", ErrorCode::NoNode),
        ("//", ErrorCode::BadArguments),
    ];
    for (path, want) in cases {
        let a = h.write(create(path, 0));
        assert_eq!(err(&a), Some(want), "create {path:?}");
        assert_eq!(a.body, None);
        assert!(a.events.is_empty());
    }
    for path in ["/v/...", "/v/.a", "/v/a\u{ff}", "/zookeeper/x"] {
        assert_eq!(err(&h.write(create(path, 0))), None, "create {path:?}");
    }
    // Sequential: "/v//" still has a missing parent; "/v/." becomes "/v/.0000000004".
    assert_eq!(err(&h.write(create("/v//", 2))), Some(ErrorCode::NoNode));
    assert_eq!(created_path(&h.write(create("/v/.", 2))), "/v/.0000000003");
}

#[test]
fn create_error_precedence() {
    let mut h = Harness::with_sessions();
    h.mk("/v");
    h.write(create("/v/e", 1));
    // Bad flags win over everything.
    for path in ["/v/q", "/missing/q", "q"] {
        assert_eq!(
            err(&h.write(create(path, 7))),
            Some(ErrorCode::BadArguments)
        );
    }
    // A bad ACL wins over a missing parent and over an existing node.
    let bad = vec![acl(31, "world", "nobody")];
    let a = h.write(create_with(
        OpCode::Create2,
        "/missing/a",
        b"",
        bad.clone(),
        0,
    ));
    assert_eq!(err(&a), Some(ErrorCode::InvalidAcl));
    let a = h.write(create_with(OpCode::Create2, "/v/e", b"", vec![], 0));
    assert_eq!(err(&a), Some(ErrorCode::InvalidAcl));
    // NodeExists wins over NoChildrenForEphemerals.
    assert_eq!(
        err(&h.write(create("/v/e", 0))),
        Some(ErrorCode::NodeExists)
    );
    assert_eq!(
        err(&h.write(create("/v/e/x", 0))),
        Some(ErrorCode::NoChildrenForEphemerals)
    );
    assert_eq!(
        err(&h.write(create("/v/e/", 2))),
        Some(ErrorCode::NoChildrenForEphemerals)
    );
    // NoAuth on the parent wins over NodeExists and over a bad final path.
    h.write(create_with(
        OpCode::Create2,
        "/ro",
        b"",
        vec![acl(1, "world", "anyone")],
        0,
    ));
    h.write(create_with(
        OpCode::Create2,
        "/ro2",
        b"",
        open_acl_unsafe(),
        0,
    ));
    assert_eq!(err(&h.write(create("/ro/x", 0))), Some(ErrorCode::NoAuth));
    assert_eq!(err(&h.write(create("/ro/", 0))), Some(ErrorCode::NoAuth));
}

#[test]
fn ephemerals_record_their_owner() {
    let mut h = Harness::with_sessions();
    let a = h.write_as(2, &[], create("/e", 1));
    match a.body {
        Some(Response::Create2 { stat, .. }) => assert_eq!(stat.ephemeral_owner, 2),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        created_path(&h.write_as(2, &[], create("/e-", 3))),
        "/e-0000000001"
    );
    assert_eq!(h.sm.ephemeral_count(), 2);
}

#[test]
fn container_and_ttl_modes() {
    let mut h = Harness::with_sessions();
    h.mk("/v");
    // createContainer makes a container whatever the flags; ephemeralOwner reads 0.
    for (path, flags) in [("/v/c", 4), ("/v/c0", 0), ("/v/c4", 1)] {
        let a = h.write(create_with(
            OpCode::CreateContainer,
            path,
            b"",
            open_acl_unsafe(),
            flags,
        ));
        match a.body {
            Some(Response::Create2 { stat, .. }) => assert_eq!(stat.ephemeral_owner, 0),
            other => panic!("{path}: {other:?}"),
        }
    }
    let a = h.write(create_with(
        OpCode::CreateContainer,
        "/v/c3",
        b"",
        open_acl_unsafe(),
        2,
    ));
    assert_eq!(created_path(&a), "/v/c30000000003");
    // create2 with container flags makes a plain persistent node (3.8.0).
    h.write(create_with(
        OpCode::Create2,
        "/v/c1",
        b"",
        open_acl_unsafe(),
        4,
    ));
    for p in ["/v/c", "/v/c0", "/v/c4", "/v/c1"] {
        h.mk(&format!("{p}/k"));
        h.write(delete(&format!("{p}/k"), -1));
    }
    assert_eq!(h.sm.containers_to_reap(), vec!["/v/c", "/v/c0", "/v/c4"]);

    // TTL bounds and opcode/flag combinations.
    let max = (1i64 << 40) - 1;
    for ttl in [0, -1, max + 1] {
        assert_eq!(
            err(&h.write(create_ttl("/v/q", 5, ttl))),
            Some(ErrorCode::BadArguments)
        );
    }
    assert_eq!(
        err(&h.write(create_ttl("/v/q", 0, 100))),
        Some(ErrorCode::BadArguments)
    );
    assert_eq!(
        err(&h.write(create_ttl("/v/q", 0, -1))),
        Some(ErrorCode::BadArguments)
    );
    assert_eq!(
        err(&h.write(create("/v/q", 5))),
        Some(ErrorCode::BadArguments)
    );
    assert_eq!(
        err(&h.write(create_with(
            OpCode::Create,
            "/v/q",
            b"",
            open_acl_unsafe(),
            5
        ))),
        Some(ErrorCode::BadArguments)
    );
    assert_eq!(err(&h.write(create_ttl("/v/qmax", 5, max))), None);
    let a = h.write(create_ttl("/v/ttls", 6, 1000));
    assert_eq!(created_path(&a), "/v/ttls0000000006");
    assert_eq!(h.stat("/v/ttls0000000006").ephemeral_owner, 0);
}

#[test]
fn containers_are_reaped_only_when_empty_after_use() {
    let mut h = Harness::with_sessions();
    h.write(create_with(
        OpCode::CreateContainer,
        "/c",
        b"",
        open_acl_unsafe(),
        4,
    ));
    h.write(create_with(
        OpCode::CreateContainer,
        "/fresh",
        b"",
        open_acl_unsafe(),
        4,
    ));
    assert!(
        h.sm.containers_to_reap().is_empty(),
        "never-used containers stay"
    );
    h.mk("/c/x");
    assert!(
        h.sm.containers_to_reap().is_empty(),
        "non-empty containers stay"
    );
    // Reaping a container that has a child refuses.
    let a = h.apply(
        0,
        baton_machine::CommandKind::ReapContainer { path: "/c".into() },
    );
    assert_eq!(err(&a), Some(ErrorCode::NotEmpty));
    h.write(delete("/c/x", -1));
    assert_eq!(h.sm.containers_to_reap(), vec!["/c"]);
    let a = h.apply(
        0,
        baton_machine::CommandKind::ReapContainer { path: "/c".into() },
    );
    assert_eq!(err(&a), None);
    assert_eq!(
        a.events,
        vec![
            ("/c".into(), EventType::NodeDeleted),
            ("/".into(), EventType::NodeChildrenChanged)
        ]
    );
    assert!(h.sm.stat("/c").is_none());
    // Not a container (or never used, or gone): refused, nothing changes.
    for path in ["/fresh", "/zookeeper", "/c"] {
        let a = h.apply(
            0,
            baton_machine::CommandKind::ReapContainer { path: path.into() },
        );
        assert!(err(&a).is_some(), "{path}");
        assert!(a.events.is_empty());
    }
}

#[test]
fn ttl_nodes_expire_when_childless_and_untouched() {
    let mut h = Harness::with_sessions();
    h.write(create_ttl("/t", 5, 100));
    h.write(create_ttl("/t2", 5, 100));
    h.mk("/t2/child");
    let mtime = h.stat("/t").mtime;
    assert!(
        h.sm.expired_ttl_nodes(mtime + 100).is_empty(),
        "exactly ttl is not expired"
    );
    assert_eq!(h.sm.expired_ttl_nodes(mtime + 101), vec!["/t"]);
    // The expiry is re-checked against the entry's time at apply.
    h.now = mtime + 50;
    let a = h.apply(
        0,
        baton_machine::CommandKind::ExpireTtl { path: "/t".into() },
    );
    assert!(err(&a).is_some());
    // setData moves mtime and so postpones expiry.
    h.write(set_data("/t", b"x", -1));
    let mtime = h.stat("/t").mtime;
    assert!(h.sm.expired_ttl_nodes(mtime + 100).is_empty());
    h.now = mtime + 200;
    let a = h.apply(
        0,
        baton_machine::CommandKind::ExpireTtl { path: "/t".into() },
    );
    assert_eq!(err(&a), None);
    assert!(h.sm.stat("/t").is_none());
    let a = h.apply(
        0,
        baton_machine::CommandKind::ExpireTtl { path: "/t2".into() },
    );
    assert_eq!(err(&a), Some(ErrorCode::NotEmpty));
}
