//! Snapshots: round trips with identical future behaviour, determinism across machines,
//! rejection of corrupt input, and log-entry (Command) round trips.

mod common;

use baton_machine::{Command, CommandKind, SnapshotError, StateMachine};
use common::*;
use proptest::prelude::*;

fn feed(
    sm: &mut StateMachine,
    first_zxid: i64,
    cmds: &[(i64, CommandKind)],
) -> Vec<baton_machine::Applied> {
    cmds.iter()
        .enumerate()
        .map(|(i, (session_id, kind))| {
            let zxid = first_zxid + i as i64;
            let cmd = Command {
                session_id: *session_id,
                xid: zxid as i32,
                time_ms: START_MS + zxid * 7,
                kind: kind.clone(),
            };
            sm.apply(zxid, &cmd)
        })
        .collect()
}

fn stream(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<(i64, CommandKind)>> {
    prop::collection::vec(arb::command(true), len)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn restore_gives_identical_state_and_future(prefix in stream(0..80), suffix in stream(0..40)) {
        let mut original = StateMachine::new();
        feed(&mut original, 1, &prefix);
        let snap = original.snapshot();
        let mut restored = StateMachine::restore(&snap).expect("restore");
        prop_assert_eq!(restored.snapshot(), snap.clone());
        prop_assert_eq!(restored.last_applied(), original.last_applied());
        prop_assert_eq!(restored.node_count(), original.node_count());
        prop_assert_eq!(restored.ephemeral_count(), original.ephemeral_count());
        prop_assert_eq!(restored.approximate_data_size(), original.approximate_data_size());
        prop_assert_eq!(restored.containers_to_reap(), original.containers_to_reap());
        prop_assert_eq!(restored.sessions().cloned().collect::<Vec<_>>(), original.sessions().cloned().collect::<Vec<_>>());
        let next = prefix.len() as i64 + 1;
        let a = feed(&mut original, next, &suffix);
        let b = feed(&mut restored, next, &suffix);
        prop_assert_eq!(a, b);
        prop_assert_eq!(original.snapshot(), restored.snapshot());
        prop_assert_eq!(original.tree().distinct_acls(), restored.tree().distinct_acls());
    }

    #[test]
    fn same_commands_give_byte_identical_snapshots(cmds in stream(0..120)) {
        let mut a = StateMachine::new();
        let mut b = StateMachine::new();
        let ra = feed(&mut a, 1, &cmds);
        let rb = feed(&mut b, 1, &cmds);
        prop_assert_eq!(ra, rb);
        prop_assert_eq!(a.snapshot(), b.snapshot());
    }

    #[test]
    fn commands_round_trip_through_the_log_encoding(cmds in stream(1..30)) {
        for (i, (session_id, kind)) in cmds.into_iter().enumerate() {
            let cmd = Command { session_id, xid: i as i32, time_ms: START_MS, kind };
            let decoded = Command::decode(&cmd.encode());
            prop_assert_eq!(decoded.as_ref(), Ok(&cmd));
        }
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        prop_assert!(StateMachine::restore(&bytes).is_err());
    }
}

fn sample_machine() -> StateMachine {
    let mut h = Harness::with_sessions();
    h.mk("/a");
    h.mk("/a/b");
    h.write(create("/a/e", 1));
    h.write(set_data("/a/b", b"payload", -1));
    h.sm
}

#[test]
fn every_single_byte_flip_is_rejected() {
    let snap = sample_machine().snapshot();
    for i in 0..snap.len() {
        let mut bad = snap.clone();
        bad[i] ^= 0x5a;
        assert!(StateMachine::restore(&bad).is_err(), "flip at {i} accepted");
    }
    for len in 0..snap.len() {
        assert!(
            StateMachine::restore(&snap[..len]).is_err(),
            "truncation to {len} accepted"
        );
    }
    let mut longer = snap.clone();
    longer.push(0);
    assert!(matches!(
        StateMachine::restore(&longer),
        Err(SnapshotError::LengthMismatch { .. })
    ));
    let mut magic = snap.clone();
    magic[0] = b'X';
    assert!(matches!(
        StateMachine::restore(&magic),
        Err(SnapshotError::BadMagic)
    ));
    let mut version = snap.clone();
    version[11] = 0;
    assert!(matches!(
        StateMachine::restore(&version),
        Err(SnapshotError::UnsupportedVersion(0))
    ));
    // A newer format names the feature level it needs (`snapshot_levels.rs`).
    version[11] = 9;
    assert!(matches!(
        StateMachine::restore(&version),
        Err(SnapshotError::FeatureLevel(_))
    ));
}

/// Rewrites the body and fixes the checksum, as a buggy writer (not a bad disk) would.
fn reseal(snap: &[u8], edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut body = snap[24..].to_vec();
    edit(&mut body);
    let mut out = snap[..12].to_vec();
    out.extend_from_slice(&(body.len() as u64).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

fn replace_first(body: &mut [u8], from: &[u8], to: &[u8]) {
    let at = body
        .windows(from.len())
        .position(|w| w == from)
        .expect("pattern present");
    body[at..at + to.len()].copy_from_slice(to);
}

#[test]
fn consistent_checksum_but_inconsistent_tree_is_rejected() {
    let snap = sample_machine().snapshot();
    assert!(StateMachine::restore(&reseal(&snap, |_| {})).is_ok());
    // Rename "/a" to "/x": "/a/b" loses its parent.
    let orphan = reseal(&snap, |b| {
        replace_first(b, b"\0\0\0\x02/a", b"\0\0\0\x02/x")
    });
    let err = StateMachine::restore(&orphan).expect_err("orphan accepted");
    assert!(matches!(err, SnapshotError::Corrupt(_)), "{err}");
    // Rename "/a/b" to "/a/e": a duplicate path.
    let dup = reseal(&snap, |b| {
        replace_first(b, b"\0\0\0\x04/a/b", b"\0\0\0\x04/a/e")
    });
    assert!(matches!(
        StateMachine::restore(&dup),
        Err(SnapshotError::Corrupt(_))
    ));
}

#[test]
fn restored_machine_keeps_sequence_counters() {
    let mut h = Harness::with_sessions();
    h.mk("/q");
    h.mk("/q/a");
    h.write(delete("/q/a", -1));
    let mut restored = StateMachine::restore(&h.sm.snapshot()).expect("restore");
    let cmd = Command {
        session_id: 1,
        xid: 1,
        time_ms: 0,
        kind: CommandKind::Write {
            auth: vec![],
            request: create("/q/x", 2),
        },
    };
    let a = restored.apply(h.zxid + 1, &cmd);
    assert_eq!(created_path(&a), "/q/x0000000001");
}

#[test]
fn dropping_every_session_takes_their_ephemerals_and_nothing_else() {
    let mut h = Harness::with_sessions();
    h.mk("/p");
    let kept = h.mk("/p/kept");
    h.write_as(1, &[], create("/p/e1", 1));
    h.write_as(2, &[], create("/p/e2", 1));
    h.write_as(2, &[], create("/e3", 1));
    let last = h.zxid;
    let before = h.stat("/p");
    let mut restored = StateMachine::restore(&h.sm.snapshot()).expect("restore");
    assert_eq!(restored.drop_all_sessions(), (2, 3));
    assert_eq!(restored.sessions().count(), 0);
    assert_eq!(restored.ephemeral_count(), 0);
    assert_eq!(restored.last_applied(), last, "no index is taken");
    assert!(restored.stat("/p/e1").is_none() && restored.stat("/e3").is_none());
    assert_eq!(restored.stat("/p/kept"), Some(kept));
    let after = restored.stat("/p").expect("/p");
    assert_eq!(after.num_children, 1);
    assert_eq!(
        (after.version, after.czxid, after.mzxid),
        (before.version, before.czxid, before.mzxid)
    );
    assert!(after.pzxid <= last);
    // What it leaves is a state like any other: it snapshots and restores.
    let again = StateMachine::restore(&restored.snapshot()).expect("restore again");
    assert_eq!(again.snapshot(), restored.snapshot());
}
