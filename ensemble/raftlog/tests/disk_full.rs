//! A real ENOSPC: needs a small filesystem, so it is ignored by default. To run it (as root):
//!
//! ```text
//! mkdir -p /tmp/small && mount -t tmpfs -o size=4m tmpfs /tmp/small
//! BATON_SMALL_FS=/tmp/small cargo test -p baton-raftlog --test disk_full -- --ignored
//! umount /tmp/small
//! ```
//!
//! A full volume refuses a write cleanly (nothing of it kept, the log still writable), and the
//! space reserved for a snapshot lets the log compact and take writes again without a restart.

mod common;

use std::path::PathBuf;

use baton_raftlog::{LogError, LogOptions, RaftLog};
use common::*;
use raft::Storage;

const SNAPSHOT: usize = 256 * 1024;

/// Each test fills the one small filesystem: they take turns.
static SMALL_FS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn small_fs_dir() -> tempfile::TempDir {
    let root = PathBuf::from(std::env::var("BATON_SMALL_FS").expect("BATON_SMALL_FS is set"));
    tempfile::tempdir_in(&root).expect("tempdir on the small filesystem")
}

fn options(reserve_space: bool) -> LogOptions {
    LogOptions {
        segment_bytes: 256 * 1024,
        reserve_space,
        ..opts(true)
    }
}

/// Appends 16 KiB entries until the volume refuses one, with a snapshot after the first MiB
/// (the one the compaction on a full volume will compact to). Returns the last acknowledged
/// index and the refusal.
fn fill(log: &RaftLog) -> (u64, LogError) {
    let payload = vec![0x5au8; 16 * 1024];
    let mut acknowledged = 0;
    loop {
        let index = acknowledged + 1;
        match log.persist(&[entry_with_data(index, 1, &payload)], None) {
            Ok(_) => acknowledged = index,
            Err(e) => return (acknowledged, e),
        }
        if acknowledged == 64 {
            log.create_snapshot(acknowledged, voters(&[MEMBER]), vec![1u8; SNAPSHOT])
                .expect("snapshot before the volume is full");
        }
        assert!(acknowledged < 100_000, "the filesystem never filled up");
    }
}

#[test]
#[ignore = "needs BATON_SMALL_FS pointing at a small, empty filesystem"]
fn disk_full_is_a_clean_refusal_and_the_reserve_lets_the_log_compact() {
    let _turn = SMALL_FS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = small_fs_dir();
    let log = open(dir.path(), options(true)).expect("open");
    let (acknowledged, failure) = fill(&log);
    assert!(
        acknowledged > 64,
        "the volume filled before the first snapshot"
    );
    assert!(
        matches!(failure, LogError::NoSpace { .. }),
        "a full volume is a clean refusal: {failure}"
    );
    assert!(
        failure
            .to_string()
            .contains(&dir.path().display().to_string()),
        "{failure}"
    );
    assert_eq!(
        log.last_index(),
        Ok(acknowledged),
        "nothing unacknowledged is visible"
    );
    let stats = log.stats();
    assert!(!stats.poisoned, "a clean refusal leaves the log writable");
    assert!(stats.no_space_errors >= 1);

    // Still full: the same write is refused again, and again cleanly.
    let again = log.persist(
        &[entry_with_data(acknowledged + 1, 1, &[0u8; 16 * 1024])],
        None,
    );
    assert!(matches!(again, Err(LogError::NoSpace { .. })), "{again:?}");

    // A snapshot on the full volume: written in the reserved space, it compacts the log to the
    // first snapshot, which frees segments, and the log takes writes again, with no restart.
    log.create_snapshot(acknowledged, voters(&[MEMBER]), vec![2u8; SNAPSHOT])
        .expect("a snapshot on a full volume, in the reserved space");
    assert_eq!(log.first_index(), Ok(65), "compacted to the older snapshot");
    let mut more = acknowledged;
    for _ in 0..8 {
        more += 1;
        log.persist(&[entry_with_data(more, 1, &[3u8; 16 * 1024])], None)
            .expect("writable again after the compaction");
    }
    assert!(log.stats().reserved_bytes > 0, "the reserve is held again");
    drop(log);

    let log = open(dir.path(), options(true)).expect("reopen");
    assert_eq!(
        log.last_index(),
        Ok(more),
        "every acknowledged entry survived"
    );
    assert_eq!(
        log.latest_snapshot().map(|s| s.get_metadata().index),
        Some(acknowledged)
    );
}

#[test]
#[ignore = "needs BATON_SMALL_FS pointing at a small, empty filesystem"]
fn without_the_reserve_a_full_volume_cannot_compact() {
    let _turn = SMALL_FS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // What the reserve is for: the same volume, filled the same way, with none.
    let dir = small_fs_dir();
    let log = open(dir.path(), options(false)).expect("open");
    let (acknowledged, failure) = fill(&log);
    assert!(matches!(failure, LogError::NoSpace { .. }), "{failure}");
    let snap = log.create_snapshot(acknowledged, voters(&[MEMBER]), vec![2u8; SNAPSHOT]);
    assert!(matches!(snap, Err(LogError::NoSpace { .. })), "{snap:?}");
    assert!(!log.stats().poisoned, "a refused snapshot changes nothing");
    assert_eq!(log.last_index(), Ok(acknowledged));
    drop(log);
    let log = open(dir.path(), options(false)).expect("reopen");
    assert_eq!(log.last_index(), Ok(acknowledged));
}

#[test]
#[ignore = "needs BATON_SMALL_FS pointing at a small, empty filesystem"]
fn a_volume_without_room_to_allocate_ahead_still_takes_writes() {
    let _turn = SMALL_FS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = small_fs_dir();
    // The default segment size allocates 4 MiB ahead of the records, more than the whole
    // 4 MiB volume: every write must fall back to allocating just its own room.
    let log = open(dir.path(), opts(true)).expect("open");
    for index in 1..=20 {
        log.persist(&[entry_with_data(index, 1, &[7u8; 1024])], None)
            .unwrap_or_else(|e| panic!("write {index}: {e}"));
    }
    let segment = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "wal"))
        .expect("a segment");
    let size = std::fs::metadata(&segment).expect("stat").len();
    assert_eq!(
        size,
        records_end(&segment),
        "nothing allocated past the records"
    );
    drop(log);
    let log = open(dir.path(), opts(true)).expect("reopen");
    assert_eq!(log.last_index(), Ok(20));
}
