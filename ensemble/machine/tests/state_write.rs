//! delete, setData, setACL and check: stats, versions, and which error wins (ZooKeeper 3.8.0).

mod common;

use baton_proto::{ErrorCode, EventType, Response, open_acl_unsafe};
use common::*;

#[test]
fn delete_errors_and_precedence() {
    let mut h = Harness::with_sessions();
    h.mk("/v");
    h.mk("/ne");
    h.mk("/ne/c");
    let cases = [
        ("", ErrorCode::BadArguments),
        ("v", ErrorCode::BadArguments),
        ("/", ErrorCode::BadArguments),
        ("/zookeeper", ErrorCode::BadArguments),
        ("/zookeeper/quota", ErrorCode::BadArguments),
        ("/zookeeper/config", ErrorCode::BadArguments),
        // Delete does not validate the path: these are simply missing.
        ("/v/", ErrorCode::NoNode),
        ("/v//a", ErrorCode::NoNode),
        ("/v/.", ErrorCode::NoNode),
        ("/missing/a", ErrorCode::NoNode),
        ("/v/a\0", ErrorCode::BadArguments),
        ("/v/nope", ErrorCode::NoNode),
    ];
    for (path, want) in cases {
        let a = h.write(delete(path, -1));
        assert_eq!(err(&a), Some(want), "delete {path:?}");
        assert!(a.events.is_empty());
    }
    // BadVersion wins over NotEmpty.
    assert_eq!(err(&h.write(delete("/ne", 5))), Some(ErrorCode::BadVersion));
    assert_eq!(err(&h.write(delete("/ne", 0))), Some(ErrorCode::NotEmpty));
    // NoAuth (DELETE on the parent) wins over NoNode of the child.
    h.write(create_with(
        baton_proto::OpCode::Create2,
        "/ro",
        b"",
        vec![acl(1, "world", "anyone")],
        0,
    ));
    assert_eq!(err(&h.write(delete("/ro/zz", -1))), Some(ErrorCode::NoAuth));
    // Success: empty body, two events.
    let a = h.write(delete("/ne/c", 0));
    assert_eq!((err(&a), a.body), (None, Some(Response::Empty)));
    assert_eq!(
        a.events,
        vec![
            ("/ne/c".into(), EventType::NodeDeleted),
            ("/ne".into(), EventType::NodeChildrenChanged)
        ]
    );
}

#[test]
fn set_data_versions_and_stat() {
    let mut h = Harness::with_sessions();
    let created = h.mk("/d");
    let a = h.write(set_data("/d", b"hi", -1));
    let Some(Response::Stat(stat)) = a.body else {
        panic!("{a:?}")
    };
    assert_eq!(
        (stat.version, stat.data_length, stat.mzxid, stat.mtime),
        (1, 2, h.zxid, h.now)
    );
    assert_eq!(
        (stat.czxid, stat.ctime, stat.pzxid),
        (created.czxid, created.ctime, created.pzxid)
    );
    assert_eq!(a.events, vec![("/d".into(), EventType::NodeDataChanged)]);
    assert_eq!(err(&h.write(set_data("/d", b"x", 1))), None);
    assert_eq!(
        err(&h.write(set_data("/d", b"x", 1))),
        Some(ErrorCode::BadVersion)
    );
    assert_eq!(h.stat("/d").version, 2);
    // Paths are validated for setData; the root and /zookeeper are writable.
    for (path, want) in [
        ("", Some(ErrorCode::BadArguments)),
        ("v", Some(ErrorCode::BadArguments)),
        ("/d/", Some(ErrorCode::BadArguments)),
        ("/d//a", Some(ErrorCode::BadArguments)),
        ("/missing/a", Some(ErrorCode::NoNode)),
        ("/", None),
        ("/zookeeper", None),
        ("/zookeeper/config", Some(ErrorCode::NoAuth)),
    ] {
        assert_eq!(
            err(&h.write(set_data(path, b"", -1))),
            want,
            "setData {path:?}"
        );
    }
    // NoAuth wins over BadVersion.
    h.write(create_with(
        baton_proto::OpCode::Create2,
        "/w",
        b"",
        vec![acl(1, "world", "anyone")],
        0,
    ));
    assert_eq!(
        err(&h.write(set_data("/w", b"", 7))),
        Some(ErrorCode::NoAuth)
    );
    assert!(h.sm.approximate_data_size() > 0);
}

#[test]
fn set_acl_versions_and_errors() {
    let mut h = Harness::with_sessions();
    h.mk("/a");
    h.write(set_data("/a", b"xy", -1));
    let a = h.write(set_acl("/a", vec![acl(31, "world", "anyone")], 5));
    assert_eq!(err(&a), Some(ErrorCode::BadVersion));
    let a = h.write(set_acl("/a", vec![acl(31, "world", "anyone")], 0));
    let Some(Response::Stat(stat)) = a.body else {
        panic!("{a:?}")
    };
    assert_eq!((stat.aversion, stat.version, stat.data_length), (1, 1, 2));
    assert!(a.events.is_empty(), "setACL fires no watch");
    assert_eq!(
        err(&h.write(set_acl("/a/", open_acl_unsafe(), 0))),
        Some(ErrorCode::BadArguments)
    );
    // InvalidAcl wins over NoNode; NoNode over NoAuth; NoAuth over BadVersion.
    assert_eq!(
        err(&h.write(set_acl("/nope", vec![], 0))),
        Some(ErrorCode::InvalidAcl)
    );
    assert_eq!(
        err(&h.write(set_acl("/nope", open_acl_unsafe(), 0))),
        Some(ErrorCode::NoNode)
    );
    h.write(set_acl("/a", vec![acl(1, "world", "anyone")], -1));
    assert_eq!(
        err(&h.write(set_acl("/a", open_acl_unsafe(), 9))),
        Some(ErrorCode::NoAuth)
    );
    assert_eq!(
        err(&h.write(set_acl("/zookeeper/config", open_acl_unsafe(), -1))),
        Some(ErrorCode::NoAuth)
    );
}

#[test]
fn check_alone() {
    let mut h = Harness::with_sessions();
    h.mk("/c");
    assert_eq!(h.write(check("/c", 0)).body, Some(Response::Empty));
    assert_eq!(err(&h.write(check("/c", -1))), None);
    assert_eq!(err(&h.write(check("/c", 3))), Some(ErrorCode::BadVersion));
    assert_eq!(
        err(&h.write(check("/c/", 3))),
        Some(ErrorCode::BadArguments)
    );
    assert_eq!(err(&h.write(check("/nope", 3))), Some(ErrorCode::NoNode));
    h.write(create_with(
        baton_proto::OpCode::Create2,
        "/wo",
        b"",
        vec![acl(2, "world", "anyone")],
        0,
    ));
    assert_eq!(err(&h.write(check("/wo", 5))), Some(ErrorCode::NoAuth));
}

#[test]
fn stale_entries_are_ignored() {
    let mut h = Harness::with_sessions();
    h.mk("/a");
    let cmd = baton_machine::Command {
        session_id: 1,
        xid: 9,
        time_ms: 0,
        kind: baton_machine::CommandKind::Write {
            auth: vec![],
            request: create("/b", 0),
        },
    };
    let before = h.sm.snapshot();
    let a = h.sm.apply(h.zxid, &cmd);
    assert_eq!(err(&a), Some(ErrorCode::SystemError));
    assert_eq!(h.sm.snapshot(), before);
}
