//! Snapshots are written in the format the feature level allows: a state at level 1
//! is written as format 2, exactly as this first release with levels writes it, so a member
//! of that release (or one capped with `--max-feature-level 1`) reads what a newer member
//! writes while the ensemble is at level 1; a state at level 2 is written as format 3, which a
//! member supporting only level 1 refuses with the data dir's own error, naming the level.
//!
//! `tests/fixtures/snapshot-v2-level-1.bin` was written by `level_1_state` with 0.1.0's
//! encoder (`BATON_WRITE_FIXTURES=1 cargo test -p baton-machine --test snapshot_levels`
//! rewrites it): the level-1 format is frozen from this release on.

mod common;

use baton_machine::feature::LevelTooHigh;
use baton_machine::snapshot::{SnapshotError, format_version};
use baton_machine::{CommandKind, FeatureLevel, Setting, StateMachine};
use baton_proto::{CreateRequest, OpCode, Request, open_acl_unsafe};
use common::*;

const LEVEL_1: &[u8] = include_bytes!("fixtures/snapshot-v2-level-1.bin");

/// Settings set (the policy on, a quota), sessions, an ephemeral, and a create with null data,
/// which level 1 stores as empty.
fn level_1_state() -> Harness {
    let mut h = Harness::with_sessions();
    h.set_check_identities(true);
    h.apply(
        0,
        CommandKind::SetSettings {
            initial: false,
            changes: vec![Setting::NamespaceZnodes(500)],
        },
    );
    h.mk("/a");
    h.write(create("/a/e", 1));
    h.write(set_data("/a", b"payload", -1));
    h.write(Request::Create {
        op: OpCode::Create,
        req: CreateRequest {
            data: None,
            ..create_full("/a/null", b"", open_acl_unsafe(), 0, None)
        },
    });
    h
}

fn raise_to_2(h: &mut Harness) {
    h.apply(
        0,
        CommandKind::SetSettings {
            initial: false,
            changes: vec![Setting::FeatureLevel(2)],
        },
    );
}

fn header_version(snap: &[u8]) -> u32 {
    u32::from_be_bytes([snap[8], snap[9], snap[10], snap[11]])
}

#[test]
fn a_level_1_state_is_written_as_this_release_writes_it_and_read_by_a_level_1_member() {
    let h = level_1_state();
    assert_eq!(h.sm.settings().feature_level, FeatureLevel(1));
    let snap = h.sm.snapshot();
    if std::env::var_os("BATON_WRITE_FIXTURES").is_some() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/snapshot-v2-level-1.bin"
        );
        std::fs::write(path, &snap).expect("fixture written");
    }
    assert_eq!(header_version(&snap), 2);
    assert_eq!(format_version(FeatureLevel(1)), 2);
    assert!(
        snap == LEVEL_1,
        "the level-1 format changed: a release that supports only level 1 could not read it"
    );
    // A member capped at level 1 reads it (and the fixture), state and settings whole.
    for bytes in [&snap[..], LEVEL_1] {
        let sm = StateMachine::restore_up_to(bytes, 1).expect("a level-1 member reads it");
        assert_eq!(sm.snapshot(), snap);
        assert!(sm.settings().set && sm.settings().tenancy.check_identities);
        assert_eq!(sm.settings().quotas.namespace_znodes, 500);
        let null = sm
            .tree()
            .get("/a/null")
            .map(|n| n.data().map(<[u8]>::to_vec));
        assert_eq!(
            null,
            Some(Some(vec![])),
            "null data stored as empty at level 1"
        );
    }
}

#[test]
fn a_level_2_state_is_written_as_format_3_and_refused_below_level_2_by_the_data_dir_error() {
    let mut h = level_1_state();
    raise_to_2(&mut h);
    let snap = h.sm.snapshot();
    assert_eq!(header_version(&snap), 3);
    let restored = StateMachine::restore_up_to(&snap, 2).expect("a level-2 member reads it");
    assert_eq!(restored.snapshot(), snap);
    let err = match StateMachine::restore_up_to(&snap, 1) {
        Err(SnapshotError::FeatureLevel(e)) => e,
        other => panic!("a level-1 member must refuse a level-2 snapshot: {other:?}"),
    };
    assert_eq!((err.level, err.max), (2, 1));
    let text = err.to_string();
    for part in [
        "this snapshot is at feature level 2",
        "supports feature levels up to 1 (capped by --max-feature-level)",
        "run a release that supports level 2",
        "restore a backup taken before the level was raised",
    ] {
        assert!(text.contains(part), "{text}");
    }
    // The data dir's refusal is the same sentence.
    let data_dir = LevelTooHigh {
        what: "this data dir",
        index: Some(7),
        ..err
    };
    assert_eq!(
        data_dir.to_string().replace(" (reached by index 7)", ""),
        text.replace("this snapshot", "this data dir")
    );
}

#[test]
fn a_future_format_names_the_level_it_needs_and_a_header_may_not_understate_it() {
    let snap = level_1_state().sm.snapshot();
    // The version is outside the body's checksum: a newer release's header, as it would be.
    let mut future = snap.clone();
    future[8..12].copy_from_slice(&9u32.to_be_bytes());
    match StateMachine::restore(&future) {
        Err(SnapshotError::FeatureLevel(e)) => {
            assert_eq!((e.level, e.max), (8, 2));
            assert!(
                e.to_string()
                    .contains("run a release that supports level 8")
            );
        }
        other => panic!("{other:?}"),
    }
    // A level-3 state under a level-2 header would be misread by a level-2 member.
    let mut h = level_1_state();
    h.apply(
        0,
        CommandKind::SetSettings {
            initial: false,
            changes: vec![Setting::FeatureLevel(3)],
        },
    );
    let mut understated = h.sm.snapshot();
    assert_eq!(header_version(&understated), 4);
    understated[8..12].copy_from_slice(&3u32.to_be_bytes());
    assert!(matches!(
        StateMachine::restore(&understated),
        Err(SnapshotError::Corrupt(_))
    ));
    // Format 2 at level 2, as development builds before 0.1.0 wrote every level, still loads
    // (the member then checks the level against what it supports).
    let mut h = level_1_state();
    raise_to_2(&mut h);
    let mut old = h.sm.snapshot();
    old[8..12].copy_from_slice(&2u32.to_be_bytes());
    let sm = StateMachine::restore(&old).expect("a pre-0.1.0 level-2 snapshot loads");
    assert_eq!(sm.settings().feature_level, FeatureLevel(2));
}
