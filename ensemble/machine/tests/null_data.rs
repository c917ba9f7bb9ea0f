//! Null znode data (jute length -1) stays apart from empty data, as in ZooKeeper, from
//! feature level 2 on (`feature.rs`): through apply, reads, multi and multiRead, the log
//! encoding and snapshots. Below level 2, every member stores it as empty data, as releases
//! before the change did. Log entries and snapshots written before null was kept apart still
//! decode to what they always meant.
//!
//! The fixtures in `tests/fixtures/` were written by the encoders of commit f45191d, the last
//! one that read null data as empty:
//! - `snapshot-v1-before-null-data.bin`: sessions 1 and 2; /a (create2, empty data, then
//!   setData empty), /a/b (create, "payload"), /a/e (ephemeral of session 1, empty data);
//! - `commands-before-null-data.bin`: four `Write` commands, each a 4-byte big-endian length
//!   then `Command::encode`'s bytes (see `old_commands`).

mod common;

use baton_machine::{Command, CommandKind, FeatureLevel, Setting, StateMachine};
use baton_proto::{
    CreateRequest, MultiOp, MultiReadOp, MultiReadResult, MultiResult, OpCode, Request, Response,
    SetDataRequest, open_acl_unsafe,
};
use common::*;

const OLD_SNAPSHOT: &[u8] = include_bytes!("fixtures/snapshot-v1-before-null-data.bin");
const OLD_COMMANDS: &[u8] = include_bytes!("fixtures/commands-before-null-data.bin");

fn create_null(op: OpCode, path: &str) -> Request {
    Request::Create {
        op,
        req: CreateRequest {
            data: None,
            ..create_full(path, b"", open_acl_unsafe(), 0, None)
        },
    }
}

fn set_null(path: &str) -> SetDataRequest {
    SetDataRequest {
        path: path.into(),
        data: None,
        version: -1,
    }
}

/// Sessions 1 and 2 open, at the feature level that keeps null data apart.
fn at_level_2() -> Harness {
    let mut h = Harness::with_sessions();
    raise_to_2(&mut h);
    h
}

/// The entry the leader proposes once every member supports level 2.
fn raise_to_2(h: &mut Harness) {
    h.apply(
        0,
        CommandKind::SetSettings {
            initial: false,
            changes: vec![Setting::FeatureLevel(2)],
        },
    );
    assert_eq!(h.sm.settings().feature_level, FeatureLevel(2));
}

/// getData's data and dataLength.
fn data_of(h: &Harness, path: &str) -> (Option<Vec<u8>>, i32) {
    match h.read(Request::GetData(pw(path))) {
        Ok(Response::GetData { data, stat }) => (data, stat.data_length),
        other => panic!("getData {path}: {other:?}"),
    }
}

#[test]
fn null_and_empty_data_are_answered_apart() {
    let mut h = at_level_2();
    assert_eq!(h.write(create_null(OpCode::Create, "/n")).err, 0);
    h.mk("/e");
    assert_eq!(data_of(&h, "/n"), (None, 0));
    assert_eq!(data_of(&h, "/e"), (Some(vec![]), 0));
    // The fresh tree's nodes hold empty data, not null, as in ZooKeeper.
    assert_eq!(data_of(&h, "/").0, Some(vec![]));

    h.write(set_data("/n", b"", -1));
    assert_eq!(data_of(&h, "/n"), (Some(vec![]), 0));
    h.write(Request::SetData(set_null("/n")));
    assert_eq!(data_of(&h, "/n"), (None, 0));
    h.write(set_data("/n", b"xyz", -1));
    assert_eq!(data_of(&h, "/n"), (Some(b"xyz".to_vec()), 3));
    let size = h.sm.approximate_data_size();
    h.write(Request::SetData(set_null("/n")));
    assert_eq!(h.sm.approximate_data_size(), size - 3);
}

#[test]
fn multi_and_multi_read_carry_null_data() {
    let mut h = at_level_2();
    h.mk("/e");
    let a = h.write(Request::Multi(vec![
        MultiOp::Create {
            op: OpCode::Create,
            req: CreateRequest {
                data: None,
                ..create_full("/m", b"", open_acl_unsafe(), 0, None)
            },
        },
        MultiOp::SetData(set_null("/e")),
    ]));
    assert!(
        matches!(
            a.body.as_ref(),
            Some(Response::Multi(r)) if matches!(r[..], [MultiResult::Create { .. }, MultiResult::SetData { .. }])
        ),
        "{a:?}"
    );
    let reads = Request::MultiRead(vec![
        MultiReadOp::GetData(pw("/m")),
        MultiReadOp::GetData(pw("/e")),
        MultiReadOp::GetData(pw("/")),
    ]);
    let Ok(Response::MultiRead(results)) = h.read(reads) else {
        panic!("multiRead failed");
    };
    let data: Vec<_> = results
        .iter()
        .map(|r| match r {
            MultiReadResult::GetData { data, stat } => (data.clone(), stat.data_length),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(data, [(None, 0), (None, 0), (Some(vec![]), 0)]);
}

#[test]
fn snapshots_keep_null_data() {
    let mut h = at_level_2();
    h.write(create_null(OpCode::Create2, "/n"));
    h.mk("/e");
    let snap = h.sm.snapshot();
    let restored = StateMachine::restore(&snap).expect("restore");
    assert_eq!(restored.snapshot(), snap);
    let node = |path: &str| {
        restored
            .tree()
            .get(path)
            .map(|n| n.data().map(<[u8]>::to_vec))
    };
    assert_eq!(node("/n"), Some(None));
    assert_eq!(node("/e"), Some(Some(vec![])));
}

#[test]
fn a_snapshot_written_before_null_data_still_loads() {
    let sm = StateMachine::restore(OLD_SNAPSHOT).expect("old snapshot restores");
    let data = |path: &str| sm.tree().get(path).map(|n| n.data().map(<[u8]>::to_vec));
    assert_eq!(data("/a"), Some(Some(vec![])));
    assert_eq!(data("/a/b"), Some(Some(b"payload".to_vec())));
    assert_eq!(data("/a/e"), Some(Some(vec![])));
    assert_eq!(data("/"), Some(Some(vec![])));
    assert_eq!(sm.stat("/a").map(|s| s.version), Some(1));
    assert_eq!(sm.sessions().count(), 2);
    // Without null data the body is unchanged: the same state gives the same bytes, followed
    // since format 2 by the settings (never set: a bool, six settings, no alarms).
    let now = sm.snapshot();
    assert_eq!(
        &now[24..now.len() - (1 + 4 + 6 * 12 + 4)],
        &OLD_SNAPSHOT[24..]
    );
}

#[test]
fn null_data_is_stored_as_empty_until_the_level_entry_and_apart_from_it() {
    let mut h = Harness::with_sessions();
    assert_eq!(h.sm.settings().feature_level, FeatureLevel(1));
    h.write(create_null(OpCode::Create, "/before"));
    h.mk("/set");
    h.write(Request::SetData(set_null("/set")));
    h.write(Request::Multi(vec![MultiOp::Create {
        op: OpCode::Create,
        req: CreateRequest {
            data: None,
            ..create_full("/multi", b"", open_acl_unsafe(), 0, None)
        },
    }]));
    for path in ["/before", "/set", "/multi"] {
        assert_eq!(data_of(&h, path), (Some(vec![]), 0), "{path} at level 1");
    }
    // A replica that joins from a snapshot taken at level 1 and applies the same entries
    // after it reaches the same bytes.
    let mut replica = Harness {
        sm: StateMachine::restore(&h.sm.snapshot()).expect("restore"),
        zxid: h.zxid,
        now: h.now,
    };
    for h in [&mut h, &mut replica] {
        raise_to_2(h);
        h.write(create_null(OpCode::Create, "/after"));
        h.write(Request::SetData(set_null("/set")));
    }
    assert_eq!(data_of(&h, "/after"), (None, 0));
    assert_eq!(data_of(&h, "/set"), (None, 0));
    assert_eq!(data_of(&h, "/before"), (Some(vec![]), 0), "kept as applied");
    assert_eq!(h.sm.snapshot(), replica.sm.snapshot());
    // The level survives a snapshot, so a restored member goes on keeping null data.
    let mut restored = Harness {
        sm: StateMachine::restore(&h.sm.snapshot()).expect("restore"),
        zxid: h.zxid,
        now: h.now,
    };
    assert_eq!(restored.sm.settings().feature_level, FeatureLevel(2));
    restored.write(create_null(OpCode::Create, "/later"));
    assert_eq!(data_of(&restored, "/later"), (None, 0));
}

/// The commands the fixture holds, as they decode today.
fn old_commands() -> Vec<Request> {
    vec![
        create_with(OpCode::Create, "/old/empty", b"", open_acl_unsafe(), 0),
        create_with(OpCode::Create2, "/old/full", b"abc", open_acl_unsafe(), 0),
        set_data("/old/empty", b"", 3),
        Request::Multi(vec![
            MultiOp::Create {
                op: OpCode::Create,
                req: create_full("/old/m", b"", open_acl_unsafe(), 0, None),
            },
            m_set("/old/full", b"", -1),
            m_set("/old/m", b"xy", -1),
        ]),
    ]
}

#[test]
fn log_entries_written_before_null_data_still_decode() {
    let mut rest = OLD_COMMANDS;
    let mut decoded = Vec::new();
    while let Some((len, tail)) = rest.split_first_chunk::<4>() {
        let (entry, tail) = tail.split_at(u32::from_be_bytes(*len) as usize);
        let cmd = Command::decode(entry).expect("old entry decodes");
        // Empty data was always written with length 0, so it re-encodes to the same bytes.
        assert_eq!(cmd.encode(), entry);
        decoded.push(cmd);
        rest = tail;
    }
    let want: Vec<Command> = old_commands()
        .into_iter()
        .enumerate()
        .map(|(i, request)| Command {
            session_id: 0x0100_0000_0000_0001,
            xid: i as i32 + 1,
            time_ms: START_MS,
            kind: CommandKind::Write {
                auth: vec![],
                request,
            },
        })
        .collect();
    assert_eq!(decoded, want);
}

#[test]
fn log_entries_carry_null_data() {
    for request in [
        create_null(OpCode::Create, "/n"),
        Request::SetData(set_null("/n")),
        Request::Multi(vec![MultiOp::SetData(set_null("/n"))]),
    ] {
        let cmd = Command {
            session_id: 1,
            xid: 2,
            time_ms: START_MS,
            kind: CommandKind::Write {
                auth: vec![],
                request,
            },
        };
        let bytes = cmd.encode();
        // The path, then jute's null buffer (length -1): what a Baton from before null data
        // read as empty data, and what no entry it wrote contains.
        let path_then_null = [0, 0, 0, 2, b'/', b'n', 0xff, 0xff, 0xff, 0xff];
        assert!(
            bytes.windows(10).any(|w| w == path_then_null),
            "{bytes:02x?}"
        );
        assert_eq!(Command::decode(&bytes), Ok(cmd));
    }
}
