//! multi (all-or-nothing, result shapes) and sessions (ephemeral cleanup, expired sessions),
//! as ZooKeeper 3.8.0 answers them.

mod common;

use baton_machine::CommandKind;
use baton_proto::{ErrorCode, EventType, MultiResult, OpCode, Request, Response};
use common::*;

fn results(a: &baton_machine::Applied) -> Vec<MultiResult> {
    assert_eq!(a.err, 0, "a multi's header err is 0 even when it fails");
    match &a.body {
        Some(Response::Multi(r)) => r.clone(),
        other => panic!("{other:?}"),
    }
}

fn errs(codes: &[i32]) -> Vec<MultiResult> {
    codes
        .iter()
        .map(|&err| MultiResult::Error { err })
        .collect()
}

#[test]
fn failed_multi_changes_nothing() {
    let mut h = Harness::with_sessions();
    h.mk("/t");
    let before = h.sm.snapshot();
    let a = h.write(Request::Multi(vec![
        m_create(OpCode::Create, "/t/a", 0),
        m_create(OpCode::Create, "/t/a", 0),
        m_create(OpCode::Create, "/t/b", 0),
    ]));
    assert_eq!(results(&a), errs(&[0, -110, -2]));
    assert!(a.events.is_empty());
    let a = h.write(Request::Multi(vec![
        m_create(OpCode::Create, "/t/a", 0),
        m_delete("/t/zz", -1),
        m_set("/t", b"x", -1),
    ]));
    assert_eq!(results(&a), errs(&[0, -101, -2]));
    // Only last_applied moved.
    let mut restored = baton_machine::StateMachine::restore(&before).expect("restore");
    restored.apply(
        h.zxid,
        &baton_machine::Command {
            session_id: 0,
            xid: 0,
            time_ms: 0,
            kind: CommandKind::Noop,
        },
    );
    assert_eq!(restored.snapshot(), h.sm.snapshot());
}

#[test]
fn ops_see_earlier_ops() {
    let mut h = Harness::with_sessions();
    h.mk("/t");
    let a = h.write(Request::Multi(vec![
        m_create(OpCode::Create, "/t/a", 0),
        m_create(OpCode::Create2, "/t/b", 0),
        m_set("/t/a", b"x", -1),
        m_check("/t/a", 1),
        m_delete("/t/b", -1),
    ]));
    let r = results(&a);
    assert_eq!(
        r[0],
        MultiResult::Create {
            path: "/t/a".into()
        }
    );
    assert_eq!(
        r[1],
        MultiResult::Create {
            path: "/t/b".into()
        },
        "create2 in a multi is a bare create"
    );
    let MultiResult::SetData { stat } = &r[2] else {
        panic!("{r:?}")
    };
    assert_eq!((stat.version, stat.czxid, stat.mzxid), (1, h.zxid, h.zxid));
    assert_eq!(&r[3..], &[MultiResult::Check, MultiResult::Delete]);
    assert_eq!(
        a.events,
        vec![
            ("/t/a".into(), EventType::NodeCreated),
            ("/t".into(), EventType::NodeChildrenChanged),
            ("/t/b".into(), EventType::NodeCreated),
            ("/t".into(), EventType::NodeChildrenChanged),
            ("/t/a".into(), EventType::NodeDataChanged),
            ("/t/b".into(), EventType::NodeDeleted),
            ("/t".into(), EventType::NodeChildrenChanged),
        ]
    );
    let t = h.stat("/t");
    assert_eq!((t.cversion, t.num_children, t.pzxid), (3, 1, h.zxid));

    // Versions advance within the transaction.
    let a = h.write(Request::Multi(vec![
        m_set("/t/a", b"a", 1),
        m_set("/t/a", b"b", 2),
        m_check("/t/a", 3),
    ]));
    assert!(matches!(
        results(&a).as_slice(),
        [
            MultiResult::SetData { .. },
            MultiResult::SetData { .. },
            MultiResult::Check
        ]
    ));
    let a = h.write(Request::Multi(vec![
        m_set("/t/a", b"a", 3),
        m_set("/t/a", b"b", 3),
    ]));
    assert_eq!(results(&a), errs(&[0, -103]));
    // A node created earlier in the multi has children; deleting a parent fails.
    let a = h.write(Request::Multi(vec![
        m_create(OpCode::Create, "/t/p", 0),
        m_create(OpCode::Create, "/t/p/c", 0),
        m_delete("/t/p", -1),
    ]));
    assert_eq!(results(&a), errs(&[0, 0, -111]));
    let a = h.write(Request::Multi(vec![
        m_create(OpCode::Create, "/t/p", 0),
        m_delete("/t/p", -1),
        m_create(OpCode::Create, "/t/p/c", 0),
    ]));
    assert_eq!(results(&a), errs(&[0, 0, -101]));
}

#[test]
fn sequential_names_within_a_multi() {
    let mut h = Harness::with_sessions();
    h.mk("/w");
    h.mk("/w/a");
    let a = h.write(Request::Multi(vec![
        m_create(OpCode::Create, "/w/s", 2),
        m_create(OpCode::Create, "/w/s", 2),
        m_delete("/w/a", -1),
        m_create(OpCode::Create, "/w/s", 2),
    ]));
    let names: Vec<_> = results(&a)
        .into_iter()
        .filter_map(|r| match r {
            MultiResult::Create { path } => Some(path),
            _ => None,
        })
        .collect();
    assert_eq!(
        names,
        vec!["/w/s0000000001", "/w/s0000000002", "/w/s0000000003"]
    );
}

#[test]
fn multi_create_kinds_follow_flags() {
    let mut h = Harness::with_sessions();
    h.mk("/w");
    // Container flags on a plain create op: a container, answered with a Stat.
    let a = h.write(Request::Multi(vec![m_create(OpCode::Create, "/w/mc", 4)]));
    assert!(matches!(
        results(&a).as_slice(),
        [MultiResult::Create2 { .. }]
    ));
    // createContainer opcode with persistent flags inside a multi: a persistent node.
    let a = h.write(Request::Multi(vec![m_create(
        OpCode::CreateContainer,
        "/w/mc2",
        0,
    )]));
    assert_eq!(
        results(&a),
        vec![MultiResult::Create {
            path: "/w/mc2".into()
        }]
    );
    for p in ["/w/mc", "/w/mc2"] {
        h.mk(&format!("{p}/x"));
        h.write(delete(&format!("{p}/x"), -1));
    }
    assert_eq!(h.sm.containers_to_reap(), vec!["/w/mc"]);
    // TTL: createTTL with a ttl works and answers with a Stat.
    let mut ttl_op = m_create(OpCode::CreateTtl, "/w/mt", 5);
    if let baton_proto::MultiOp::Create { req, .. } = &mut ttl_op {
        req.ttl = Some(5000);
    }
    let a = h.write(Request::Multi(vec![ttl_op.clone()]));
    assert!(
        matches!(results(&a).as_slice(), [MultiResult::Create2 { path, .. }] if path == "/w/mt")
    );
    // A bad ttl is an ordinary op failure.
    if let baton_proto::MultiOp::Create { req, .. } = &mut ttl_op {
        req.ttl = Some(0);
        req.path = "/w/mt2".into();
    }
    assert_eq!(results(&h.write(Request::Multi(vec![ttl_op]))), errs(&[-8]));
    // TTL flags on an op that carries no TTL: the whole request is unreadable.
    let a = h.write(Request::Multi(vec![
        m_create(OpCode::Create, "/w/ok", 0),
        m_create(OpCode::Create, "/w/mt3", 5),
    ]));
    assert_eq!((err(&a), a.body), (Some(ErrorCode::MarshallingError), None));
    assert!(h.sm.stat("/w/ok").is_none());
    // Bad flags, bad paths and special paths fail in place.
    assert_eq!(
        results(&h.write(Request::Multi(vec![m_create(OpCode::Create, "/w/q", 9)]))),
        errs(&[-8])
    );
    let a = h.write(Request::Multi(vec![
        m_create(OpCode::Create, "/w/q", 0),
        m_create(OpCode::Create, "w", 0),
        m_set("/w", b"", -1),
    ]));
    assert_eq!(results(&a), errs(&[0, -8, -2]));
    assert_eq!(
        results(&h.write(Request::Multi(vec![m_delete("/", -1)]))),
        errs(&[-8])
    );
    assert_eq!(
        results(&h.write(Request::Multi(vec![m_check("/w", 3)]))),
        errs(&[-103])
    );
    assert_eq!(
        results(&h.write(Request::Multi(vec![m_check("/w/nope", 3)]))),
        errs(&[-101])
    );
    assert_eq!(results(&h.write(Request::Multi(vec![]))), vec![]);
}

#[test]
fn closing_a_session_deletes_its_ephemerals() {
    let mut h = Harness::with_sessions();
    h.mk("/s");
    h.mk("/s/x");
    for p in ["/s/e1", "/s/x/e3", "/sx"] {
        h.write(create(p, 1));
    }
    h.write(create("/s/e2", 3));
    h.write_as(2, &[], create("/s/keep", 1));
    assert_eq!(h.sm.ephemeral_count(), 5);
    let a = h.close(1);
    assert_eq!(
        (err(&a), a.closed_session, a.body.clone()),
        (None, Some(1), Some(Response::Empty))
    );
    assert_eq!(
        a.events,
        vec![
            ("/s/e1".into(), EventType::NodeDeleted),
            ("/s".into(), EventType::NodeChildrenChanged),
            ("/s/e20000000002".into(), EventType::NodeDeleted),
            ("/s".into(), EventType::NodeChildrenChanged),
            ("/s/x/e3".into(), EventType::NodeDeleted),
            ("/s/x".into(), EventType::NodeChildrenChanged),
            ("/sx".into(), EventType::NodeDeleted),
            ("/".into(), EventType::NodeChildrenChanged),
        ]
    );
    assert_eq!(h.children("/s"), vec!["keep", "x"]);
    let s = h.stat("/s");
    assert_eq!((s.cversion, s.pzxid), (6, h.zxid));
    assert!(h.sm.session(1).is_none());
    assert_eq!(h.sm.sessions().map(|s| s.id).collect::<Vec<_>>(), vec![2]);
    assert_eq!(h.sm.ephemeral_count(), 1);

    // Anything from the closed session now fails as a whole.
    let a = h.write(create("/late", 0));
    assert_eq!((err(&a), a.body), (Some(ErrorCode::SessionExpired), None));
    let a = h.write(Request::Multi(vec![m_create(OpCode::Create, "/late", 0)]));
    assert_eq!((err(&a), a.body), (Some(ErrorCode::SessionExpired), None));
    let a = h.close(1);
    assert_eq!(
        (err(&a), a.closed_session),
        (Some(ErrorCode::SessionExpired), None)
    );
    assert!(h.sm.stat("/late").is_none());

    // An expiry works like a close; so does closeSession sent as a request.
    let a = h.apply(2, CommandKind::CloseSession { expired: true });
    assert_eq!(a.closed_session, Some(2));
    assert!(h.sm.stat("/s/keep").is_none());
    h.open(3);
    h.write_as(3, &[], create("/e3", 1));
    let a = h.write_as(3, &[], Request::CloseSession);
    assert_eq!(a.closed_session, Some(3));
    assert!(h.sm.stat("/e3").is_none());
    assert_eq!(h.sm.ephemeral_count(), 0);
}

#[test]
fn sessions_keep_password_and_timeout() {
    let mut h = Harness::new();
    let a = h.apply(
        7,
        CommandKind::CreateSession {
            timeout_ms: 4000,
            passwd: vec![9; 16],
        },
    );
    assert_eq!((a.err, a.body, a.closed_session), (0, None, None));
    let s = h.sm.session(7).expect("session");
    assert_eq!(
        (s.id, s.timeout_ms, s.passwd.clone()),
        (7, 4000, vec![9; 16])
    );
    let a = h.apply(0, CommandKind::Noop);
    assert_eq!((a.err, a.body), (0, None));
}
