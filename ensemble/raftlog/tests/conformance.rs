//! The `raft::Storage` contract, mirroring the cases of raft-rs's `MemStorage` tests
//! (src/storage.rs): term, entries, first/last index, compaction, append with conflict, snapshot.
//!
//! `MemStorage` treats its first entry as a dummy that marks the compaction point; here the
//! compaction point is explicit, so each fixture installs a snapshot at (2, 2) and then appends
//! 3..: the first index is 3 and the term of 2 is still known, as raft requires.

mod common;

use baton_raftlog::{LogError, RaftLog};
use common::*;
use protobuf::Message as _;
use raft::eraftpb::Entry;
use raft::{Error as RaftError, GetEntriesContext, Storage, StorageError};

fn fixture(entries: &[(u64, u64)]) -> (tempfile::TempDir, RaftLog) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), opts(false)).expect("open");
    log.apply_snapshot(&snapshot(2, 2, &[1, 2, 3], b""))
        .expect("apply snapshot");
    let ents: Vec<Entry> = entries.iter().map(|&(i, t)| entry(i, t)).collect();
    log.persist(&ents, None).expect("persist");
    (dir, log)
}

fn size_of(e: &Entry) -> u64 {
    u64::from(e.compute_size())
}

#[test]
fn term() {
    let (_dir, log) = fixture(&[(3, 3), (4, 4), (5, 5)]);
    assert_eq!(log.term(1), Err(RaftError::Store(StorageError::Compacted)));
    assert_eq!(
        log.term(2),
        Ok(2),
        "term of the entry before the first index is retained"
    );
    assert_eq!(log.term(3), Ok(3));
    assert_eq!(log.term(4), Ok(4));
    assert_eq!(log.term(5), Ok(5));
    assert_eq!(
        log.term(6),
        Err(RaftError::Store(StorageError::Unavailable))
    );
}

#[test]
fn entries_with_size_limits() {
    let ents = [entry(3, 3), entry(4, 4), entry(5, 5), entry(6, 6)];
    let (_dir, log) = fixture(&pairs(&ents));
    let (e4, e5, e6) = (size_of(&ents[1]), size_of(&ents[2]), size_of(&ents[3]));
    type Case = (u64, u64, u64, Result<Vec<(u64, u64)>, RaftError>);
    let cases: Vec<Case> = vec![
        (
            2,
            6,
            u64::MAX,
            Err(RaftError::Store(StorageError::Compacted)),
        ),
        (3, 4, u64::MAX, Ok(vec![(3, 3)])),
        (4, 5, u64::MAX, Ok(vec![(4, 4)])),
        (4, 6, u64::MAX, Ok(vec![(4, 4), (5, 5)])),
        (4, 7, u64::MAX, Ok(vec![(4, 4), (5, 5), (6, 6)])),
        // Even if max_size is zero, the first entry is returned.
        (4, 7, 0, Ok(vec![(4, 4)])),
        (4, 7, e4 + e5, Ok(vec![(4, 4), (5, 5)])),
        (4, 7, e4 + e5 + e6 / 2, Ok(vec![(4, 4), (5, 5)])),
        (4, 7, e4 + e5 + e6 - 1, Ok(vec![(4, 4), (5, 5)])),
        (4, 7, e4 + e5 + e6, Ok(vec![(4, 4), (5, 5), (6, 6)])),
        (5, 5, u64::MAX, Ok(vec![])),
        // MemStorage panics here; we must not.
        (
            4,
            8,
            u64::MAX,
            Err(RaftError::Store(StorageError::Unavailable)),
        ),
    ];
    for (i, (lo, hi, max, want)) in cases.into_iter().enumerate() {
        let got = log
            .entries(lo, hi, max, GetEntriesContext::empty(false))
            .map(|v| pairs(&v));
        assert_eq!(got, want, "case #{i}: entries({lo}, {hi}, {max})");
    }
}

#[test]
fn entries_limit_matches_raft_limit_size_exactly() {
    let ents: Vec<Entry> = (3..40)
        .map(|i| entry_with_data(i, 3, &vec![7u8; (i as usize * 37) % 300]))
        .collect();
    let (_dir, log) = fixture(&[]);
    log.persist(&ents, None).expect("persist");
    for max in [0, 1, 100, 250, 1000, 4096, u64::MAX] {
        let mut want = ents.clone();
        raft::util::limit_size(&mut want, Some(max));
        let got = log
            .entries(3, 40, max, GetEntriesContext::empty(false))
            .expect("entries");
        assert_eq!(got, want, "max_size {max}");
    }
}

#[test]
fn last_index() {
    let (_dir, log) = fixture(&[(3, 3), (4, 4), (5, 5)]);
    assert_eq!(log.last_index(), Ok(5));
    log.persist(&[entry(6, 5)], None).expect("persist");
    assert_eq!(log.last_index(), Ok(6));
}

#[test]
fn first_index() {
    let (_dir, log) = fixture(&[(3, 3), (4, 4), (5, 5)]);
    assert_eq!(log.first_index(), Ok(3));
    log.create_snapshot(3, voters(&[1]), Vec::new())
        .expect("snapshot");
    // The entries after the snapshot before it (the installed one at 2) stay for a fallback.
    assert_eq!(log.first_index(), Ok(3));
    log.create_snapshot(4, voters(&[1]), Vec::new())
        .expect("snapshot");
    assert_eq!(log.first_index(), Ok(4));
}

#[test]
fn compact_through_snapshots() {
    // Compaction reaches the snapshot before the newest: a snapshot at `index`, then one at 6.
    // (snapshot index, want first index, want term of first, want entries left)
    let cases = [(3, 4, 4, 3), (4, 5, 5, 2), (5, 6, 6, 1)];
    for (i, (index, want_first, want_term, want_len)) in cases.into_iter().enumerate() {
        let (_dir, log) = fixture(&[(3, 3), (4, 4), (5, 5), (6, 6)]);
        log.create_snapshot(index, voters(&[1]), Vec::new())
            .expect("snapshot");
        log.create_snapshot(6, voters(&[1]), Vec::new())
            .expect("snapshot");
        let first = log.first_index().expect("first");
        assert_eq!(first, want_first, "case #{i}");
        let term = log
            .entries(first, first + 1, 1, GetEntriesContext::empty(false))
            .ok()
            .and_then(|v| v.first().map(|e| e.term))
            .unwrap_or(0);
        assert_eq!(term, want_term, "case #{i}");
        assert_eq!(
            log.term(index),
            Ok(index),
            "case #{i}: term at the compaction point"
        );
        assert_eq!(all_entries(&log).len(), want_len, "case #{i}");
    }
}

#[test]
fn snapshot_at_the_current_point_is_a_no_op_and_older_is_refused() {
    let (_dir, log) = fixture(&[(3, 3), (4, 4), (5, 5)]);
    log.create_snapshot(2, voters(&[1]), Vec::new())
        .expect("same index as the installed snapshot");
    assert_eq!(log.first_index(), Ok(3));
    log.create_snapshot(4, voters(&[1]), Vec::new())
        .expect("snapshot");
    assert!(matches!(
        log.create_snapshot(3, voters(&[1]), Vec::new()),
        Err(LogError::SnapshotOutOfDate { .. })
    ));
    assert!(matches!(
        log.create_snapshot(9, voters(&[1]), Vec::new()),
        Err(LogError::InvalidRequest { .. })
    ));
}

#[test]
fn keep_entries_leaves_a_tail_for_slow_followers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut o = opts(false);
    o.keep_entries = 2;
    let log = open(dir.path(), o).expect("open");
    let ents: Vec<Entry> = (1..=10).map(|i| entry(i, 1)).collect();
    log.persist(&ents, None).expect("persist");
    log.create_snapshot(7, voters(&[1]), Vec::new())
        .expect("snapshot");
    assert_eq!(
        log.first_index(),
        Ok(1),
        "no older snapshot: the whole log stays for a fallback"
    );
    log.create_snapshot(8, voters(&[1]), Vec::new())
        .expect("snapshot");
    assert_eq!(log.first_index(), Ok(7));
    assert_eq!(log.term(6), Ok(1));
    assert_eq!(log.term(5), Err(RaftError::Store(StorageError::Compacted)));
}

#[test]
fn snapshot_serves_the_latest_file() {
    let (_dir, log) = fixture(&[(3, 3), (4, 4), (5, 5)]);
    let unavailable = Err(RaftError::Store(
        StorageError::SnapshotTemporarilyUnavailable,
    ));
    // The fixture's installed snapshot is at 2.
    assert_eq!(log.snapshot(0, 2).map(|s| s.get_metadata().index), Ok(2));
    log.create_snapshot(4, voters(&[1, 2, 3]), b"state".to_vec())
        .expect("snapshot");
    let want = snapshot(4, 4, &[1, 2, 3], b"state");
    assert_eq!(log.snapshot(0, 2), Ok(want.clone()));
    assert_eq!(log.snapshot(4, 2), Ok(want));
    assert_eq!(log.snapshot(5, 2), unavailable);
}

#[test]
fn snapshot_unavailable_before_any_exists() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), opts(false)).expect("open");
    assert_eq!(
        log.snapshot(0, 2),
        Err(RaftError::Store(
            StorageError::SnapshotTemporarilyUnavailable
        ))
    );
}

#[test]
fn append_with_conflicts() {
    type Case = (Vec<(u64, u64)>, Option<Vec<(u64, u64)>>);
    let cases: Vec<Case> = vec![
        (
            vec![(3, 3), (4, 4), (5, 5)],
            Some(vec![(3, 3), (4, 4), (5, 5)]),
        ),
        (
            vec![(3, 3), (4, 6), (5, 6)],
            Some(vec![(3, 3), (4, 6), (5, 6)]),
        ),
        (
            vec![(3, 3), (4, 4), (5, 5), (6, 5)],
            Some(vec![(3, 3), (4, 4), (5, 5), (6, 5)]),
        ),
        // Overwriting compacted entries is refused.
        (vec![(2, 3), (3, 3), (4, 5)], None),
        // Truncate the existing entries and append.
        (vec![(4, 5)], Some(vec![(3, 3), (4, 5)])),
        // Direct append.
        (vec![(6, 6)], Some(vec![(3, 3), (4, 4), (5, 5), (6, 6)])),
        // A gap, non-consecutive entries, and a term going backwards are refused.
        (vec![(7, 7)], None),
        (vec![(6, 6), (8, 6)], None),
        (vec![(4, 2)], None),
    ];
    for (i, (append, want)) in cases.into_iter().enumerate() {
        let (_dir, log) = fixture(&[(3, 3), (4, 4), (5, 5)]);
        let ents: Vec<Entry> = append.iter().map(|&(i, t)| entry(i, t)).collect();
        let res = log.persist(&ents, None);
        match want {
            Some(want) => {
                res.expect("persist");
                assert_eq!(all_entries(&log), want, "case #{i}");
            }
            None => {
                assert!(
                    matches!(res, Err(LogError::InvalidRequest { .. })),
                    "case #{i}: {res:?}"
                );
                assert_eq!(
                    all_entries(&log),
                    vec![(3, 3), (4, 4), (5, 5)],
                    "case #{i}: unchanged"
                );
                log.persist(&[entry(6, 6)], None)
                    .expect("a refused request does not poison the log");
            }
        }
    }
}

#[test]
fn apply_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), opts(false)).expect("open");
    log.persist(&[entry(1, 1), entry(2, 1)], Some(&hard_state(1, 1, 2)))
        .expect("persist");
    log.apply_snapshot(&snapshot(4, 4, &[1, 2, 3], b"s"))
        .expect("apply");
    assert_eq!((log.first_index(), log.last_index()), (Ok(5), Ok(4)));
    assert_eq!(log.term(4), Ok(4));
    let state = log.initial_state().expect("state");
    assert_eq!(state.hard_state, hard_state(4, 1, 4));
    assert_eq!(state.conf_state, voters(&[1, 2, 3]));
    assert!(matches!(
        log.apply_snapshot(&snapshot(3, 3, &[1, 2, 3], b"")),
        Err(LogError::SnapshotOutOfDate { .. })
    ));
}

#[test]
fn initial_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), opts(false)).expect("open");
    let fresh = log.initial_state().expect("state");
    assert!(!fresh.initialized());
    log.set_conf_state(&voters(&[1, 2, 3])).expect("conf state");
    log.persist(&[entry(1, 1)], Some(&hard_state(1, 2, 1)))
        .expect("persist");
    let state = log.initial_state().expect("state");
    assert_eq!(state.hard_state, hard_state(1, 2, 1));
    assert_eq!(state.conf_state, voters(&[1, 2, 3]));
}

#[test]
fn initial_commit_is_never_below_the_latest_snapshot() {
    // An applied-but-unpersisted commit index, then a snapshot past it (raft would refuse to
    // start with Config::applied = 4 and a commit of 2).
    let dir = tempfile::tempdir().expect("tempdir");
    let mut o = opts(false);
    o.keep_entries = 2;
    let log = open(dir.path(), o).expect("open");
    let ents: Vec<Entry> = (1..=5).map(|i| entry(i, 1)).collect();
    log.persist(&ents, Some(&hard_state(1, 1, 2)))
        .expect("persist");
    log.create_snapshot(4, voters(&[1]), Vec::new())
        .expect("snapshot");
    assert_eq!(log.initial_state().expect("state").hard_state.commit, 4);
}
