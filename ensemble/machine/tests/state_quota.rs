//! Quotas, the disk alarm and the replicated settings at apply: refusals (`ErrorCode::REFUSED`),
//! what stays allowed, and their survival through snapshots (old-format ones included).

mod common;

use baton_machine::{
    AlarmKind, Command, CommandKind, QuotaRefusal, Setting, StateMachine, quota::pool_of,
};
use baton_proto::{
    CreateRequest, DeleteRequest, ErrorCode, MultiOp, MultiResult, OpCode, Request, Response,
    open_acl_unsafe,
};
use common::*;

fn settings(h: &mut Harness, changes: Vec<Setting>) {
    let a = h.apply(
        0,
        CommandKind::SetSettings {
            initial: false,
            changes,
        },
    );
    assert!(a.settings_changed);
}

fn create_data(path: &str, data: &[u8], flags: i32) -> Request {
    Request::Create {
        op: OpCode::Create,
        req: CreateRequest {
            path: path.to_owned(),
            data: Some(data.to_vec()),
            acl: open_acl_unsafe(),
            flags,
            ttl: None,
        },
    }
}

fn mcreate(path: &str, data: &[u8]) -> MultiOp {
    MultiOp::Create {
        op: OpCode::Create,
        req: CreateRequest {
            path: path.to_owned(),
            data: Some(data.to_vec()),
            acl: open_acl_unsafe(),
            flags: 0,
            ttl: None,
        },
    }
}

fn alarm(h: &mut Harness, member: u64, raised: bool) -> bool {
    h.apply(
        0,
        CommandKind::Alarm {
            member,
            kind: AlarmKind::NoSpace,
            raised,
        },
    )
    .settings_changed
}

#[test]
fn a_namespace_past_its_znode_quota_gets_quota_exceeded_and_others_go_on() {
    let mut h = Harness::with_sessions();
    h.mk("/baton");
    h.mk("/baton/a");
    h.mk("/baton/b");
    let used = h.sm.tree().usage().get(Some("a")).znodes;
    assert_eq!(used, 1);
    settings(&mut h, vec![Setting::NamespaceZnodes(3)]);
    h.mk("/baton/a/x");
    h.mk("/baton/a/y");
    let a = h.write(create("/baton/a/z", 0));
    assert_eq!(err(&a), Some(ErrorCode::REFUSED));
    assert_eq!(a.quota_refusal, Some(QuotaRefusal::NamespaceZnodes));
    assert!(h.sm.stat("/baton/a/z").is_none());
    // Another namespace and the shared pool are not charged for it.
    h.mk("/baton/b/x");
    h.mk("/elsewhere");
    // The check comes after ZooKeeper's own: a create that exists anyway says so.
    assert_eq!(
        err(&h.write(create("/baton/a/x", 0))),
        Some(ErrorCode::NodeExists)
    );
    // Deleting makes room again.
    assert_eq!(err(&h.write(delete("/baton/a/y", -1))), None);
    h.mk("/baton/a/z");
}

#[test]
fn bytes_count_path_and_data_and_shrinking_is_always_allowed() {
    let mut h = Harness::with_sessions();
    h.mk("/baton");
    h.mk("/baton/a");
    settings(&mut h, vec![Setting::NamespaceBytes(100)]);
    let before = h.sm.tree().usage().get(Some("a")).bytes;
    assert_eq!(before, "/baton/a".len() as u64);
    let a = h.write(create_data("/baton/a/n", &[7; 60], 0));
    assert_eq!(err(&a), None);
    assert_eq!(
        h.sm.tree().usage().get(Some("a")).bytes,
        before + "/baton/a/n".len() as u64 + 60
    );
    let a = h.write(set_data("/baton/a/n", &[7; 90], -1));
    assert_eq!(err(&a), Some(ErrorCode::REFUSED));
    assert_eq!(a.quota_refusal, Some(QuotaRefusal::NamespaceBytes));
    // Lowering the quota below the usage still lets the tenant shrink and delete.
    settings(&mut h, vec![Setting::NamespaceBytes(10)]);
    assert_eq!(err(&h.write(set_data("/baton/a/n", &[1; 10], -1))), None);
    assert_eq!(
        err(&h.write(set_data("/baton/a/n", &[1; 11], -1))),
        Some(ErrorCode::REFUSED)
    );
    assert_eq!(err(&h.write(delete("/baton/a/n", -1))), None);
}

#[test]
fn the_shared_pool_holds_everything_outside_namespaces() {
    assert_eq!(pool_of("/baton"), None);
    assert_eq!(pool_of("/app/x"), None);
    assert_eq!(pool_of("/baton/ns/x/y"), Some("ns"));
    let mut h = Harness::with_sessions();
    let fresh = h.sm.tree().usage().get(None).znodes;
    assert_eq!(fresh as usize, h.sm.node_count());
    settings(&mut h, vec![Setting::SharedZnodes(fresh + 2)]);
    h.mk("/baton");
    h.mk("/app");
    let a = h.write(create("/app/x", 0));
    assert_eq!(a.quota_refusal, Some(QuotaRefusal::SharedZnodes));
    // A namespace has its own quota.
    h.mk("/baton/a");
}

#[test]
fn a_multi_is_refused_at_the_op_that_passes_the_quota_and_applies_nothing() {
    let mut h = Harness::with_sessions();
    h.mk("/baton");
    h.mk("/baton/a");
    settings(&mut h, vec![Setting::NamespaceZnodes(3)]);
    let ops = vec![
        mcreate("/baton/a/1", b""),
        mcreate("/baton/a/2", b""),
        mcreate("/baton/a/3", b""),
    ];
    let a = h.write(Request::Multi(ops));
    let expected = vec![
        MultiResult::Error { err: 0 },
        MultiResult::Error { err: 0 },
        MultiResult::Error {
            err: ErrorCode::REFUSED.code(),
        },
    ];
    assert_eq!(a.body, Some(Response::Multi(expected)));
    assert!(h.sm.stat("/baton/a/1").is_none());
    // A delete before the create in the same multi makes the room it needs.
    h.mk("/baton/a/1");
    h.mk("/baton/a/2");
    let ops = vec![
        MultiOp::Delete(DeleteRequest {
            path: "/baton/a/1".into(),
            version: -1,
        }),
        mcreate("/baton/a/3", b""),
    ];
    let a = h.write(Request::Multi(ops));
    assert_eq!(a.quota_refusal, None, "{:?}", a.body);
    assert!(h.sm.stat("/baton/a/3").is_some());
}

#[test]
fn a_session_may_own_only_so_many_ephemerals() {
    let mut h = Harness::with_sessions();
    settings(&mut h, vec![Setting::EphemeralsPerSession(2)]);
    assert_eq!(err(&h.write(create("/e1", 1))), None);
    assert_eq!(err(&h.write(create("/e2", 1))), None);
    let a = h.write(create("/e3", 1));
    assert_eq!(a.quota_refusal, Some(QuotaRefusal::Ephemerals));
    // Another session has its own count; persistent nodes are not ephemerals.
    assert_eq!(err(&h.write_as(2, &[], create("/e3", 1))), None);
    assert_eq!(err(&h.write(create("/p", 0))), None);
}

#[test]
fn while_an_alarm_is_up_writes_that_add_data_are_refused_and_the_rest_goes_on() {
    let mut h = Harness::with_sessions();
    h.mk("/a");
    h.mk("/b");
    assert!(alarm(&mut h, 2, true));
    assert!(!alarm(&mut h, 2, true), "raising twice changes nothing");
    for request in [
        create("/c", 0),
        set_data("/a", b"x", -1),
        set_acl("/a", open_acl_unsafe(), -1),
        Request::Multi(vec![mcreate("/d", b"")]),
    ] {
        let a = h.write(request.clone());
        assert_eq!(a.quota_refusal, Some(QuotaRefusal::Alarm), "{request:?}");
    }
    // Shrinking data adds nothing.
    assert_eq!(err(&h.write(set_data("/a", b"", -1))), None);
    assert_eq!(err(&h.write(delete("/b", -1))), None);
    assert!(h.read(Request::Exists(pw("/a"))).is_ok());
    assert_eq!(err(&h.open(9)), None, "sessions still open");
    assert_eq!(err(&h.close(9)), None);
    // The member that raised it clears it; or it leaves the ensemble.
    assert!(alarm(&mut h, 2, false));
    h.mk("/c");
    assert!(alarm(&mut h, 3, true));
    h.sm.remove_member(3);
    h.mk("/d");
}

#[test]
fn the_receiving_member_refuses_early_what_apply_would_refuse() {
    let mut h = Harness::with_sessions();
    h.mk("/a");
    assert_eq!(h.sm.refuses_early(1, &[], &create("/b", 0)), None);
    alarm(&mut h, 1, true);
    assert_eq!(
        h.sm.refuses_early(1, &[], &create("/b", 0)),
        Some(QuotaRefusal::Alarm)
    );
    // What fails anyway is left to apply, which answers ZooKeeper's own error.
    assert_eq!(h.sm.refuses_early(1, &[], &create("/a", 0)), None);
    assert_eq!(h.sm.refuses_early(1, &[], &delete("/a", -1)), None);
    alarm(&mut h, 1, false);
    // A full pool, and a session that owns all the ephemerals it may.
    let used = h.sm.tree().usage().get(None).znodes;
    settings(
        &mut h,
        vec![
            Setting::SharedZnodes(used + 1),
            Setting::EphemeralsPerSession(1),
        ],
    );
    assert_eq!(h.sm.refuses_early(1, &[], &create("/b", 1)), None);
    assert_eq!(err(&h.write(create("/b", 1))), None);
    assert_eq!(
        h.sm.refuses_early(1, &[], &create("/c", 0)),
        Some(QuotaRefusal::SharedZnodes)
    );
    settings(&mut h, vec![Setting::SharedZnodes(used + 10)]);
    assert_eq!(
        h.sm.refuses_early(1, &[], &create("/c", 1)),
        Some(QuotaRefusal::Ephemerals)
    );
    assert_eq!(h.sm.refuses_early(2, &[], &create("/c", 1)), None);
}

#[test]
fn an_initial_setting_is_ignored_once_anything_set_them() {
    let mut h = Harness::with_sessions();
    assert!(!h.sm.settings().set);
    assert!(!h.sm.tenancy().check_identities);
    let a = h.apply(
        0,
        CommandKind::SetSettings {
            initial: true,
            changes: vec![Setting::CheckIdentities(true)],
        },
    );
    assert!(a.settings_changed && h.sm.tenancy().check_identities);
    let a = h.apply(
        0,
        CommandKind::SetSettings {
            initial: true,
            changes: vec![Setting::CheckIdentities(false)],
        },
    );
    assert!(!a.settings_changed && h.sm.tenancy().check_identities);
}

#[test]
fn settings_alarms_and_usage_survive_a_snapshot() {
    let mut h = Harness::with_sessions();
    h.mk("/baton");
    h.mk("/baton/a");
    h.write(create_data("/baton/a/x", &[1; 30], 0));
    settings(
        &mut h,
        vec![
            Setting::CheckIdentities(true),
            Setting::NamespaceZnodes(2),
            Setting::SharedBytes(1 << 20),
        ],
    );
    alarm(&mut h, 2, true);
    let restored = StateMachine::restore(&h.sm.snapshot()).expect("restore");
    assert_eq!(restored.settings(), h.sm.settings());
    assert_eq!(restored.tree().usage(), h.sm.tree().usage());
    assert_eq!(restored.snapshot(), h.sm.snapshot());
}

#[test]
fn a_snapshot_of_the_format_before_settings_loads_with_settings_never_set() {
    let mut h = Harness::with_sessions();
    h.mk("/a");
    let snap = h.sm.snapshot();
    // Format 1 is format 2 without the settings section at the end: a bool, six settings of
    // (tag i32, value i64) after their count, and an empty alarm list.
    let settings_len = 1 + 4 + 6 * 12 + 4;
    let body = &snap[24..snap.len() - settings_len];
    let mut old = b"BATNSNAP".to_vec();
    old.extend_from_slice(&1u32.to_be_bytes());
    old.extend_from_slice(&(body.len() as u64).to_be_bytes());
    old.extend_from_slice(&crc32fast::hash(body).to_be_bytes());
    old.extend_from_slice(body);
    let restored = StateMachine::restore(&old).expect("a format 1 snapshot loads");
    assert!(!restored.settings().set);
    assert_eq!(restored.settings(), &Default::default());
    assert_eq!(restored.last_applied(), h.sm.last_applied());
    assert!(restored.stat("/a").is_some());
    // Written again, it is today's format with the same state.
    assert_eq!(restored.snapshot(), snap);
}

#[test]
fn entries_written_before_settings_existed_decode_as_before() {
    // session 7, xid 3, time 5, tag 6 (noop): bytes an older Baton wrote.
    let mut old = vec![0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 3];
    old.extend_from_slice(&5i64.to_be_bytes());
    old.extend_from_slice(&6i32.to_be_bytes());
    let cmd = Command::decode(&old).expect("decodes");
    assert_eq!(cmd.kind, CommandKind::Noop);
    assert_eq!((cmd.session_id, cmd.xid, cmd.time_ms), (7, 3, 5));
    for kind in [
        CommandKind::SetSettings {
            initial: true,
            changes: vec![Setting::CheckIdentities(true), Setting::SharedZnodes(9)],
        },
        CommandKind::Alarm {
            member: 3,
            kind: AlarmKind::NoSpace,
            raised: true,
        },
    ] {
        let cmd = Command {
            session_id: 0,
            xid: 0,
            time_ms: 1,
            kind,
        };
        assert_eq!(Command::decode(&cmd.encode()), Ok(cmd));
    }
}
