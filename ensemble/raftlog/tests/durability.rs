//! What survives a close and reopen on a real disk: entries, hard and conf state, truncations,
//! snapshots; torn tails are repaired, corruption and foreign directories are refused.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use baton_raftlog::{LogError, LogOptions, RaftLog};
use common::*;
use raft::Storage;
use raft::eraftpb::Entry;

fn files_with(dir: &Path, prefix: &str, suffix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with(prefix) && name.ends_with(suffix)
        })
        .collect();
    found.sort();
    found
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    files_with(dir, "log-", ".wal")
}

fn last_segment(dir: &Path) -> PathBuf {
    segments(dir).pop().expect("a segment")
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).expect("read dir") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        // Temp files are leftovers startup deletes (a retired segment may be vanishing now).
        if name != "LOCK" && !name.ends_with(".tmp") {
            fs::copy(&path, to.join(path.file_name().expect("name"))).expect("copy");
        }
    }
}

fn batch(range: std::ops::RangeInclusive<u64>, term: u64) -> Vec<Entry> {
    range
        .map(|i| entry_with_data(i, term, format!("entry {i}").as_bytes()))
        .collect()
}

#[test]
fn entries_and_state_survive_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let written = batch(1..=20, 1);
    {
        let log = open(dir.path(), opts(true)).expect("open");
        log.set_conf_state(&voters(&[1, 2, 3])).expect("conf state");
        log.persist(&written[..10], Some(&hard_state(1, 1, 5)))
            .expect("persist");
        log.persist(&written[10..], Some(&hard_state(1, 1, 15)))
            .expect("persist");
        assert_eq!(log.stats().fsyncs, 3);
    }
    let log = open(dir.path(), opts(true)).expect("reopen");
    let state = log.initial_state().expect("state");
    assert_eq!(state.hard_state, hard_state(1, 1, 15));
    assert_eq!(state.conf_state, voters(&[1, 2, 3]));
    let read = log
        .entries(1, 21, None, raft::GetEntriesContext::empty(false))
        .expect("entries");
    assert_eq!(read, written);
}

#[test]
fn conflict_truncation_survives_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = open(dir.path(), opts(true)).expect("open");
        log.persist(&batch(1..=10, 1), None).expect("persist");
        log.persist(&batch(6..=7, 2), None)
            .expect("overwrite suffix");
        assert_eq!(log.last_index(), Ok(7));
    }
    let log = open(dir.path(), opts(true)).expect("reopen");
    let want: Vec<(u64, u64)> = (1..=5).map(|i| (i, 1)).chain([(6, 2), (7, 2)]).collect();
    assert_eq!(all_entries(&log), want);
    log.persist(&batch(8..=8, 2), None)
        .expect("append after reopen");
    assert_eq!(log.last_index(), Ok(8));
}

#[test]
fn torn_tail_at_every_byte_is_truncated_to_the_prefix() {
    let original = tempfile::tempdir().expect("tempdir");
    let tail_start;
    {
        let log = open(original.path(), opts(false)).expect("open");
        log.persist(&batch(1..=3, 1), Some(&hard_state(1, 1, 2)))
            .expect("persist");
        tail_start = records_end(&last_segment(original.path()));
        log.persist(&batch(4..=6, 2), Some(&hard_state(2, 1, 5)))
            .expect("persist");
    }
    let full = fs::read(last_segment(original.path())).expect("read");
    for cut in tail_start..records_end(&last_segment(original.path())) {
        let dir = tempfile::tempdir().expect("tempdir");
        copy_dir(original.path(), dir.path());
        let seg = last_segment(dir.path());
        fs::write(&seg, &full[..cut as usize]).expect("write torn segment");

        let log = open(dir.path(), opts(false)).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert_eq!(
            all_entries(&log),
            vec![(1, 1), (2, 1), (3, 1)],
            "cut at {cut}"
        );
        assert_eq!(log.hard_state(), hard_state(1, 1, 2), "cut at {cut}");
        assert_eq!(
            fs::metadata(&seg).expect("stat").len(),
            tail_start,
            "cut at {cut}"
        );
        // The repaired log takes new writes and they survive another reopen.
        log.persist(&batch(4..=4, 3), None).expect("persist");
        drop(log);
        let log = open(dir.path(), opts(false)).expect("reopen");
        assert_eq!(log.last_index(), Ok(4), "cut at {cut}");
        assert_eq!(log.term(4), Ok(3), "cut at {cut}");
    }
}

#[test]
fn zeroed_tail_is_truncated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tail_start;
    {
        let log = open(dir.path(), opts(false)).expect("open");
        log.persist(&batch(1..=3, 1), None).expect("persist");
        tail_start = records_end(&last_segment(dir.path()));
        log.persist(&batch(4..=6, 1), None).expect("persist");
    }
    let seg = last_segment(dir.path());
    let mut bytes = fs::read(&seg).expect("read");
    // A crash can leave the last write's blocks allocated but never written.
    bytes[tail_start as usize..].fill(0);
    bytes.extend_from_slice(&[0; 4096]);
    fs::write(&seg, bytes).expect("write");
    let log = open(dir.path(), opts(false)).expect("open");
    assert_eq!(log.last_index(), Ok(3));
}

#[test]
fn a_flipped_byte_before_the_tail_is_corruption() {
    let original = tempfile::tempdir().expect("tempdir");
    let (second_start, second_end);
    {
        let log = open(original.path(), opts(false)).expect("open");
        log.persist(&batch(1..=3, 1), None).expect("persist");
        second_start = records_end(&last_segment(original.path()));
        log.persist(&batch(4..=6, 1), None).expect("persist");
        second_end = records_end(&last_segment(original.path()));
        log.persist(&batch(7..=9, 1), None).expect("persist");
    }
    let full = fs::read(last_segment(original.path())).expect("read");
    // Every byte of the middle record: header (length, kind, checksums) and payload.
    for at in second_start..second_end {
        let dir = tempfile::tempdir().expect("tempdir");
        copy_dir(original.path(), dir.path());
        let seg = last_segment(dir.path());
        let mut bad = full.clone();
        bad[at as usize] ^= 0x10;
        fs::write(&seg, bad).expect("write");
        match open(dir.path(), opts(false)) {
            Err(LogError::Unrecoverable { reason, .. }) => {
                let want = format!("corrupt {} at byte {second_start}:", seg.display());
                assert!(reason.contains(&want), "flip at {at}: {reason}");
                assert!(
                    reason.contains("valid record follows"),
                    "flip at {at}: {reason}"
                );
            }
            other => panic!("flip at {at}: want Unrecoverable, got {other:?}"),
        }
    }
}

#[test]
fn damage_in_a_sealed_segment_is_corruption_even_at_its_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = LogOptions {
        segment_bytes: 1,
        ..opts(false)
    };
    {
        let log = open(dir.path(), o.clone()).expect("open");
        for i in 1..=3 {
            log.persist(&batch(i..=i, 1), None).expect("persist");
        }
        assert!(log.stats().segments >= 3);
    }
    let first = segments(dir.path()).remove(0);
    let len = fs::metadata(&first).expect("stat").len();
    let file = fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .expect("open");
    file.set_len(len - 1).expect("truncate");
    assert!(matches!(open(dir.path(), o),
        Err(LogError::Unrecoverable { reason, .. }) if reason.contains(&*first.to_string_lossy())));
}

#[test]
fn identity_is_recorded_and_enforced() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(RaftLog::open(dir.path(), 3, Some("blue"), opts(false)).expect("create"));
    match RaftLog::open(dir.path(), 4, Some("blue"), opts(false)) {
        Err(e @ LogError::IdentityMismatch { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("member 3") && msg.contains("member 4"),
                "{msg}"
            );
        }
        other => panic!("want IdentityMismatch, got {other:?}"),
    }
    match RaftLog::open(dir.path(), 3, Some("green"), opts(false)) {
        Err(e @ LogError::IdentityMismatch { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("blue") && msg.contains("green"), "{msg}");
        }
        other => panic!("want IdentityMismatch, got {other:?}"),
    }
    let log = RaftLog::open(dir.path(), 3, None, opts(false))
        .expect("no cluster id: accept the recorded one");
    assert_eq!(log.cluster_id(), "blue");
}

#[test]
fn a_generated_cluster_id_is_stable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let id = RaftLog::open(dir.path(), 1, None, opts(false))
        .expect("create")
        .cluster_id();
    let again = RaftLog::open(dir.path(), 1, None, opts(false)).expect("reopen");
    assert_eq!(again.cluster_id(), id);
    assert!(RaftLog::open(dir.path(), 1, Some("other"), opts(false)).is_err());
}

#[test]
fn a_missing_identity_file_is_refused_when_a_log_exists() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(open(dir.path(), opts(false)).expect("create"));
    fs::remove_file(dir.path().join("identity")).expect("remove");
    assert!(matches!(
        open(dir.path(), opts(false)),
        Err(LogError::Corrupt { .. })
    ));
}

#[test]
fn a_directory_is_opened_by_one_log_at_a_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), opts(false)).expect("open");
    assert!(matches!(
        open(dir.path(), opts(false)),
        Err(LogError::Locked { .. })
    ));
    drop(log);
    open(dir.path(), opts(false)).expect("reopen after close");
}

#[test]
fn segments_rotate_and_compaction_deletes_old_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = LogOptions {
        segment_bytes: 2048,
        keep_entries: 10,
        ..opts(true)
    };
    let payload = vec![0xabu8; 100];
    {
        let log = open(dir.path(), o.clone()).expect("open");
        for i in 1..=200 {
            log.persist(
                &[entry_with_data(i, 1, &payload)],
                Some(&hard_state(1, 1, i)),
            )
            .expect("persist");
        }
        let before = log.stats();
        assert!(before.segments > 5, "{before:?}");
        assert_eq!(segments(dir.path()).len() as u64, before.segments);

        log.create_snapshot(145, voters(&[1]), b"state".to_vec())
            .expect("snapshot");
        assert_eq!(
            log.stats().first_index,
            1,
            "no older snapshot to fall back on"
        );
        log.create_snapshot(150, voters(&[1]), b"state".to_vec())
            .expect("snapshot");
        let after = log.stats();
        assert_eq!(after.first_index, 141);
        assert!(after.segments < before.segments, "{before:?} -> {after:?}");
        assert_eq!(segments(dir.path()).len() as u64, after.segments);
        assert_eq!(after.entries, 60);
    }
    let log = open(dir.path(), o).expect("reopen");
    assert_eq!((log.first_index(), log.last_index()), (Ok(141), Ok(200)));
    assert_eq!(log.term(140), Ok(1));
    assert_eq!(log.hard_state(), hard_state(1, 1, 200));
    let read = log
        .entries(141, 201, None, raft::GetEntriesContext::empty(false))
        .expect("entries");
    assert!(read.iter().all(|e| e.data[..] == payload[..]));
}

#[test]
fn snapshots_survive_reopen_and_only_two_are_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = open(dir.path(), opts(true)).expect("open");
        log.persist(&batch(1..=30, 2), Some(&hard_state(2, 1, 30)))
            .expect("persist");
        for index in [10, 20, 30] {
            log.create_snapshot(
                index,
                voters(&[1, 2]),
                format!("state@{index}").into_bytes(),
            )
            .expect("snapshot");
        }
        assert_eq!(files_with(dir.path(), "snap-", ".snap").len(), 2);
    }
    let log = open(dir.path(), opts(true)).expect("reopen");
    assert_eq!(
        log.latest_snapshot(),
        Some(snapshot(30, 2, &[1, 2], b"state@30"))
    );
    assert_eq!(
        log.snapshot(0, 2),
        Ok(snapshot(30, 2, &[1, 2], b"state@30"))
    );
    // The entries after the older kept snapshot (20) stay, for a fallback.
    assert_eq!((log.first_index(), log.last_index()), (Ok(21), Ok(30)));
    assert_eq!(log.term(20), Ok(2));
}

#[test]
fn an_installed_snapshot_replaces_the_log_across_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = LogOptions {
        segment_bytes: 256,
        ..opts(true)
    };
    {
        let log = open(dir.path(), o.clone()).expect("open");
        log.persist(&batch(1..=20, 1), Some(&hard_state(1, 1, 3)))
            .expect("persist");
        log.apply_snapshot(&snapshot(100, 5, &[1, 2, 3], b"leader state"))
            .expect("apply");
        log.persist(&batch(101..=102, 5), None).expect("persist");
        assert_eq!(log.stats().segments, 1, "older segments are deleted");
    }
    let log = open(dir.path(), o).expect("reopen");
    assert_eq!(all_entries(&log), vec![(101, 5), (102, 5)]);
    assert_eq!(log.term(100), Ok(5));
    assert_eq!(log.hard_state().commit, 100);
    assert_eq!(log.conf_state(), voters(&[1, 2, 3]));
    assert_eq!(
        log.latest_snapshot().map(|s| s.data.to_vec()),
        Some(b"leader state".to_vec())
    );
}

#[test]
fn an_interrupted_snapshot_install_is_completed_at_open() {
    // A crash after the snapshot file became durable but before the log recorded the install.
    let leader = tempfile::tempdir().expect("tempdir");
    {
        let log = open(leader.path(), opts(false)).expect("open");
        log.apply_snapshot(&snapshot(50, 3, &[1, 2], b"s"))
            .expect("apply");
    }
    let follower = tempfile::tempdir().expect("tempdir");
    {
        let log = open(follower.path(), opts(false)).expect("open");
        log.persist(&batch(1..=10, 1), Some(&hard_state(1, 1, 10)))
            .expect("persist");
    }
    for snap in files_with(leader.path(), "snap-", ".snap") {
        fs::copy(&snap, follower.path().join(snap.file_name().expect("name"))).expect("copy");
    }
    let log = open(follower.path(), opts(false)).expect("open");
    assert_eq!((log.first_index(), log.last_index()), (Ok(51), Ok(50)));
    assert_eq!(log.hard_state(), hard_state(3, 1, 50));
    assert_eq!(log.conf_state(), voters(&[1, 2]));
}

#[test]
fn leftover_temp_files_are_ignored_and_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = open(dir.path(), opts(false)).expect("open");
        log.persist(&batch(1..=3, 1), None).expect("persist");
    }
    let junk = [
        "log-00000000000000000009.wal.tmp",
        "snap-00000000000000000009-00000000000000000009.snap.tmp",
    ];
    for name in junk {
        fs::write(dir.path().join(name), b"half written").expect("write junk");
    }
    let log = open(dir.path(), opts(false)).expect("open");
    assert_eq!(log.last_index(), Ok(3));
    assert_eq!(log.latest_snapshot(), None);
    for name in junk {
        assert!(!dir.path().join(name).exists(), "{name}");
    }
}

#[test]
fn a_damaged_only_snapshot_falls_back_to_the_whole_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = open(dir.path(), opts(false)).expect("open");
        log.persist(&batch(1..=3, 1), None).expect("persist");
        log.create_snapshot(3, voters(&[1]), b"state".to_vec())
            .expect("snapshot");
    }
    let snap = files_with(dir.path(), "snap-", ".snap")
        .pop()
        .expect("snapshot file");
    let mut bytes = fs::read(&snap).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    fs::write(&snap, bytes).expect("write");
    // Nothing was compacted (no older snapshot), so the log from index 1 is the state.
    let log = open(dir.path(), opts(false)).expect("open");
    assert_eq!(log.latest_snapshot(), None);
    assert_eq!(all_entries(&log), vec![(1, 1), (2, 1), (3, 1)]);
    assert!(!snap.exists());
    assert_eq!(
        files_with(dir.path(), "snap-", ".snap.corrupt"),
        vec![PathBuf::from(format!("{}.corrupt", snap.display()))]
    );
}

/// Raft needs entries, the term and the vote on disk before a message goes out; a commit index
/// it learns again from the leader. So a hard state that only moves the commit index costs no
/// fsync, and a power loss may take it (and only it) away.
#[test]
fn only_a_commit_index_is_written_without_an_fsync() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = open(dir.path(), opts(true)).expect("open");
        let synced = |entries: &[Entry], hs| log.persist(entries, Some(&hs)).expect("persist");
        assert!(synced(&batch(1..=3, 1), hard_state(1, 1, 1)));
        assert_eq!(log.stats().fsyncs, 1);
        assert!(!synced(&[], hard_state(1, 1, 3)), "commit only");
        assert_eq!(log.stats().fsyncs, 1, "a commit index alone is not synced");
        assert!(synced(&[], hard_state(2, 1, 3)), "term");
        assert_eq!(log.stats().fsyncs, 2, "a new term is synced");
        assert!(synced(&[], hard_state(2, 2, 3)), "vote");
        assert_eq!(log.stats().fsyncs, 3, "a vote is synced");
        assert!(synced(&batch(4..=4, 2), hard_state(2, 2, 4)));
        assert_eq!(log.stats().fsyncs, 4);
    }
    // Closed cleanly, the unsynced record was still written.
    let log = open(dir.path(), opts(true)).expect("reopen");
    assert_eq!(
        log.initial_state().expect("state").hard_state,
        hard_state(2, 2, 4)
    );
}

#[test]
fn a_power_loss_takes_only_an_unsynced_commit_index() {
    baton_raftlog::crash_model::enable();
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = open(dir.path(), opts(true)).expect("open");
        log.persist(&batch(1..=3, 1), Some(&hard_state(1, 1, 1)))
            .expect("entries");
        log.persist(&[], Some(&hard_state(1, 1, 3)))
            .expect("commit only");
    }
    baton_raftlog::crash_model::crash(dir.path()).expect("crash");
    let log = open(dir.path(), opts(true)).expect("reopen after the crash");
    assert_eq!(
        log.initial_state().expect("state").hard_state,
        hard_state(1, 1, 1),
        "the commit index falls back to the last synced one"
    );
    assert_eq!(all_entries(&log), vec![(1, 1), (2, 1), (3, 1)]);
}

/// A segment that a newer one follows must end durable: replay forgives a torn record only at
/// the very end of the log. So an unsynced commit index at a segment's end is synced before
/// the next segment starts.
#[test]
fn a_segment_ends_synced_even_after_an_unsynced_commit_index() {
    baton_raftlog::crash_model::enable();
    let dir = tempfile::tempdir().expect("tempdir");
    let options = LogOptions {
        segment_bytes: 1,
        ..opts(true)
    };
    {
        let log = open(dir.path(), options.clone()).expect("open");
        log.persist(&batch(1..=3, 1), Some(&hard_state(1, 1, 1)))
            .expect("entries");
        log.persist(&[], Some(&hard_state(1, 1, 3)))
            .expect("commit only");
        log.persist(&batch(4..=4, 1), None)
            .expect("entries in a new segment");
        assert!(segments(dir.path()).len() >= 2, "the log rotated");
    }
    let lengths = |dir: &Path| -> Vec<u64> {
        segments(dir)
            .iter()
            .map(|p| fs::metadata(p).expect("stat").len())
            .collect()
    };
    let before = lengths(dir.path());
    baton_raftlog::crash_model::crash(dir.path()).expect("crash");
    assert_eq!(lengths(dir.path()), before, "every segment was durable");
    let log = open(dir.path(), options).expect("reopen after the crash");
    assert_eq!(log.initial_state().expect("state").hard_state.commit, 3);
}
