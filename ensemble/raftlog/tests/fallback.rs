//! Snapshot fallback: a damaged newest snapshot is set aside and the member starts from the one
//! before it plus the log, losing nothing it acknowledged; damage that leaves no way back is one
//! `Unrecoverable` error, with nothing changed on disk.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use baton_raftlog::{LogError, RaftLog};
use common::*;
use protobuf::Message as _;
use raft::eraftpb::Entry;
use raft::{GetEntriesContext, Storage};

/// A toy state machine: the state is the list of applied entries' payloads, so "older snapshot
/// plus the replayed log" can be compared with what the member had applied.
fn apply(state: &mut Vec<u8>, entries: &[Entry]) {
    for e in entries {
        state.extend_from_slice(&e.data);
        state.push(b';');
    }
}

fn batch(range: std::ops::RangeInclusive<u64>, term: u64) -> Vec<Entry> {
    range
        .map(|i| entry_with_data(i, term, format!("e{i}").as_bytes()))
        .collect()
}

fn snap_files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("snap-") && name.ends_with(suffix)
        })
        .collect();
    found.sort();
    found
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).expect("read dir") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name != "LOCK" && !name.ends_with(".tmp") {
            fs::copy(&path, to.join(name)).expect("copy");
        }
    }
}

/// A member's history: entries 1..=45 (term 2), all committed and applied; snapshots at 10, 20
/// and 30 (so 20 and 30 are kept), the log compacted to 20. Returns the state applied through 45.
fn history(dir: &Path) -> Vec<u8> {
    let log = open(dir, opts(true)).expect("open");
    let mut state = Vec::new();
    for (range, snap_at) in [(1..=10, 10), (11..=20, 20), (21..=30, 30)] {
        let ents = batch(range, 2);
        log.persist(&ents, Some(&hard_state(2, 1, snap_at)))
            .expect("persist");
        apply(&mut state, &ents);
        log.create_snapshot(snap_at, voters(&[1, 2, 3]), state.clone())
            .expect("snapshot");
    }
    assert!(log.memory_bytes() > 0, "entries 21..=30 are held");
    assert_eq!(log.bytes_since_snapshot(), 0);
    let tail = batch(31..=45, 2);
    log.persist(&tail, Some(&hard_state(2, 1, 45)))
        .expect("persist");
    apply(&mut state, &tail);
    assert_eq!(
        log.first_index(),
        Ok(21),
        "compacted only to the older snapshot"
    );
    let tail_bytes: u64 = tail.iter().map(|e| u64::from(e.compute_size())).sum();
    assert_eq!(log.bytes_since_snapshot(), tail_bytes);
    drop(log);
    let log = open(dir, opts(true)).expect("reopen");
    assert_eq!(log.bytes_since_snapshot(), tail_bytes);
    state
}

/// What a member restarting on `log` rebuilds: its snapshot, then the committed entries after it.
fn rebuilt_state(log: &RaftLog) -> Vec<u8> {
    let raft_state = log.initial_state().expect("initial state");
    let (mut state, from) = match log.latest_snapshot() {
        Some(s) => (s.get_data().to_vec(), s.get_metadata().index + 1),
        None => (Vec::new(), 1),
    };
    let commit = raft_state.hard_state.commit;
    let ents = log
        .entries(from, commit + 1, None, GetEntriesContext::empty(false))
        .expect("entries after the snapshot");
    apply(&mut state, &ents);
    state
}

#[test]
fn a_damaged_newest_snapshot_falls_back_to_the_older_one_and_the_log() {
    let original = tempfile::tempdir().expect("tempdir");
    let applied = history(original.path());
    let newest = snap_files(original.path(), ".snap")
        .pop()
        .expect("newest snapshot");
    assert!(
        newest
            .to_string_lossy()
            .ends_with("00000000000000000030.snap")
    );
    let good = fs::read(&newest).expect("read");
    // Every byte of the file: magic, lengths, checksum, metadata, data.
    for at in 0..good.len() {
        let dir = tempfile::tempdir().expect("tempdir");
        copy_dir(original.path(), dir.path());
        let damaged = dir.path().join(newest.file_name().expect("name"));
        let mut bad = good.clone();
        bad[at] ^= 0x20;
        fs::write(&damaged, &bad).expect("write");

        let log = open(dir.path(), opts(true)).unwrap_or_else(|e| panic!("flip at {at}: {e}"));
        let snap = log.latest_snapshot().expect("the older snapshot");
        assert_eq!(snap.get_metadata().index, 20, "flip at {at}");
        assert_eq!(log.snapshot(0, 2).map(|s| s.get_metadata().index), Ok(20));
        assert_eq!((log.first_index(), log.last_index()), (Ok(21), Ok(45)));
        assert_eq!(log.hard_state(), hard_state(2, 1, 45), "flip at {at}");
        assert_eq!(rebuilt_state(&log), applied, "flip at {at}: state lost");
        // Set aside, not deleted; the older one stays.
        assert!(!damaged.exists(), "flip at {at}");
        assert_eq!(
            fs::read(format!("{}.corrupt", damaged.display())).expect("set aside"),
            bad
        );
        assert_eq!(snap_files(dir.path(), ".snap").len(), 1);
    }
}

#[test]
fn after_a_fallback_the_log_keeps_working_and_reopens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut applied = history(dir.path());
    let newest = snap_files(dir.path(), ".snap").pop().expect("newest");
    fs::write(&newest, b"garbage").expect("damage");
    {
        let log = open(dir.path(), opts(true)).expect("fall back");
        let more = batch(46..=50, 3);
        log.persist(&more, Some(&hard_state(3, 1, 50)))
            .expect("persist");
        apply(&mut applied, &more);
        // The member snapshots again at the index the damaged file had, and later.
        assert_eq!(rebuilt_state(&log), applied);
        log.create_snapshot(30, voters(&[1, 2, 3]), state_through(&applied, 30))
            .expect("snapshot at 30 again");
        log.create_snapshot(50, voters(&[1, 2, 3]), applied.clone())
            .expect("snapshot at 50");
        assert_eq!(log.first_index(), Ok(31));
    }
    let log = open(dir.path(), opts(true)).expect("reopen");
    assert_eq!(
        log.latest_snapshot().map(|s| s.get_metadata().index),
        Some(50)
    );
    assert_eq!(rebuilt_state(&log), applied);
    assert_eq!(snap_files(dir.path(), ".snap.corrupt").len(), 1);
}

/// The prefix of `state` made of its first `n` entries.
fn state_through(state: &[u8], n: usize) -> Vec<u8> {
    let end = state
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b';')
        .nth(n - 1)
        .map_or(state.len(), |(i, _)| i + 1);
    state[..end].to_vec()
}

#[test]
fn both_snapshots_damaged_is_unrecoverable_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    history(dir.path());
    let snaps = snap_files(dir.path(), ".snap");
    assert_eq!(snaps.len(), 2);
    for snap in &snaps {
        let mut bytes = fs::read(snap).expect("read");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(snap, bytes).expect("write");
    }
    for _ in 0..2 {
        match open(dir.path(), opts(true)) {
            Err(e @ LogError::Unrecoverable { .. }) => {
                let msg = e.to_string();
                for snap in &snaps {
                    assert!(msg.contains(&*snap.to_string_lossy()), "{msg}");
                }
                assert!(msg.contains("checksum mismatch"), "{msg}");
                assert!(
                    msg.contains(
                        "no intact snapshot file is left and the log is compacted through index 20"
                    ),
                    "{msg}"
                );
                assert!(msg.contains("reseed"), "{msg}");
                assert!(msg.contains("baton.dev/reseed-member"), "{msg}");
            }
            other => panic!("want Unrecoverable, got {other:?}"),
        }
        assert_eq!(snap_files(dir.path(), ".snap"), snaps, "nothing renamed");
    }
}

#[test]
fn an_older_snapshot_the_log_does_not_reach_is_no_fallback() {
    // The member installed a leader's snapshot at 40 (the log now starts after it); its own
    // snapshot at 10 predates that, so a damaged 40 leaves no way back.
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = open(dir.path(), opts(true)).expect("open");
        log.persist(&batch(1..=10, 1), Some(&hard_state(1, 1, 10)))
            .expect("persist");
        log.create_snapshot(10, voters(&[1, 2]), b"s10".to_vec())
            .expect("snapshot");
        log.apply_snapshot(&snapshot(40, 2, &[1, 2], b"s40"))
            .expect("install");
        log.persist(&batch(41..=42, 2), None).expect("persist");
    }
    let newest = snap_files(dir.path(), ".snap").pop().expect("newest");
    fs::write(&newest, b"BTNSNAP1 but truncated").expect("damage");
    match open(dir.path(), opts(true)) {
        Err(LogError::Unrecoverable { reason, .. }) => {
            assert!(
                reason.contains(
                    "the newest intact snapshot (index 10) is older than the log's compaction point 40"
                ),
                "{reason}"
            );
            assert!(reason.contains(&*newest.to_string_lossy()), "{reason}");
        }
        other => panic!("want Unrecoverable, got {other:?}"),
    }
    assert!(newest.exists());
}
