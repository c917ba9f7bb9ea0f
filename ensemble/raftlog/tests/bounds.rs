//! The log is bounded by bytes: a snapshot is due once the entries after the last one pass a
//! byte bound however few they are, and what the log holds in memory and on disk stays within
//! the bound ARCHITECTURE.md gives ("What bounds the log"), for large and small entries alike.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use baton_raftlog::{LogOptions, RaftLog};
use common::*;
use raft::Storage;

const FLOOR: u64 = 256 * 1024;
const SEGMENT: u64 = 64 * 1024;

fn small_opts() -> LogOptions {
    LogOptions {
        sync: false,
        segment_bytes: SEGMENT,
        snapshot_floor_bytes: FLOOR,
        ..LogOptions::default()
    }
}

/// Bytes of the files in `dir`, but for retired segments: those are renamed out of the log
/// and unlinked by a background thread right after the compaction that retired them.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| {
            let e = e.ok()?;
            let retired = e.file_name().to_string_lossy().ends_with(".obsolete.tmp");
            // A retired file can vanish between the listing and this.
            (!retired)
                .then(|| e.metadata().ok().map(|m| m.len()))
                .flatten()
        })
        .sum()
}

/// Writes `count` entries of `entry_bytes`, snapshotting a tree of `tree_bytes` whenever the
/// log says one is due (as the core does), and checks the bounds after every write.
fn write_and_check(entry_bytes: usize, count: u64, tree_bytes: usize) -> u64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = small_opts();
    let log = open(dir.path(), opts.clone()).expect("open");
    let payload = vec![7u8; entry_bytes];
    let tree = vec![1u8; tree_bytes];
    let bound = opts.snapshot_bytes(tree_bytes as u64);
    // One entry's encoding beyond its data, and one record's framing.
    let entry_max = entry_bytes as u64 + 64;
    let mut snapshots = 0;
    for index in 1..=count {
        log.persist(&[entry_with_data(index, 1, &payload)], None)
            .expect("persist");
        if log.snapshot_due() {
            log.create_snapshot(index, voters(&[1]), tree.clone())
                .expect("snapshot");
            snapshots += 1;
        }
        // Memory: the entries between the two kept snapshots and after the newest, each run
        // at most the bound plus the entry that passed it.
        let memory = log.memory_bytes();
        assert!(
            memory <= 2 * (bound + entry_max),
            "entry {index}: {memory} bytes in memory, bound {}",
            2 * (bound + entry_max)
        );
        // Disk: that, plus a segment not yet wholly obsolete and the active one (each up to a
        // segment and a record), two snapshots, the reserve (a snapshot and a quarter plus
        // 1 MiB) and small files.
        let disk = dir_bytes(dir.path());
        let limit = 2 * (bound + entry_max)
            + 2 * (SEGMENT + entry_max)
            + 2 * tree_bytes as u64
            + (tree_bytes as u64 + tree_bytes as u64 / 4 + (1 << 20))
            + 64 * 1024;
        assert!(
            disk <= limit,
            "entry {index}: {disk} bytes on disk, bound {limit}"
        );
    }
    snapshots
}

#[test]
fn large_entries_rewriting_a_small_tree_stay_bounded() {
    // The attack, scaled down: one small tree, rewritten with entries far larger than
    // a thousandth of the floor. Before the byte trigger no snapshot came for 1,000 entries.
    let snapshots = write_and_check(64 * 1024, 300, 64 * 1024);
    assert!(snapshots >= 300 * 64 / 256 - 1, "{snapshots} snapshots");
}

#[test]
fn small_entries_stay_bounded() {
    write_and_check(100, 20_000, 10 * 1024);
}

#[test]
fn a_large_tree_is_snapshotted_per_half_a_tree_of_log_not_per_floor() {
    let snapshots = write_and_check(16 * 1024, 200, 2 << 20);
    // 3.2 MiB of log over a 2 MiB tree: one snapshot per MiB, not one per 256 KiB.
    assert!((2..=4).contains(&snapshots), "{snapshots} snapshots");
}

#[test]
fn the_byte_trigger_ignores_the_entry_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), small_opts()).expect("open");
    log.persist(&[entry_with_data(1, 1, &vec![0u8; 200 * 1024])], None)
        .expect("persist");
    assert!(!log.snapshot_due());
    log.persist(&[entry_with_data(2, 1, &vec![0u8; 60 * 1024])], None)
        .expect("persist");
    assert!(log.snapshot_due(), "two entries past the byte floor");
    log.create_snapshot(2, voters(&[1]), vec![0u8; 10])
        .expect("snapshot");
    assert!(!log.snapshot_due());
}

#[test]
fn the_tail_kept_for_followers_is_bounded_by_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    // keep_entries would keep 5,000 entries of 64 KiB (312 MiB); the byte bound keeps 4.
    let log = open(dir.path(), small_opts()).expect("open");
    let payload = vec![0u8; 64 * 1024];
    for index in 1..=20 {
        log.persist(&[entry_with_data(index, 1, &payload)], None)
            .expect("persist");
        if index == 10 || index == 20 {
            log.create_snapshot(index, voters(&[1]), vec![1])
                .expect("snapshot");
        }
    }
    // Compacted to the older snapshot (10), not kept back 5,000 entries.
    assert_eq!(log.first_index(), Ok(11));
}

#[test]
fn files_are_private_to_the_member() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().join("data");
    let log = open(&dir, small_opts()).expect("open");
    log.persist(&[entry_with_data(1, 1, b"session password")], None)
        .expect("persist");
    log.create_snapshot(1, voters(&[1]), b"tree with passwords".to_vec())
        .expect("snapshot");
    let check = |dir: &Path| {
        let mode = std::fs::metadata(dir).expect("dir").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "data dir mode {mode:o}");
        let mut names = Vec::new();
        for e in std::fs::read_dir(dir).expect("read dir") {
            let e = e.expect("entry");
            let mode = e.metadata().expect("metadata").permissions().mode() & 0o777;
            let name = e.file_name().into_string().expect("name");
            assert_eq!(mode, 0o600, "{name} has mode {mode:o}");
            names.push(name);
        }
        names.sort();
        names
    };
    let names = check(&dir);
    for want in ["identity", "LOCK", "reserve"] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }
    assert!(names.iter().any(|n| n.ends_with(".wal")), "{names:?}");
    assert!(names.iter().any(|n| n.ends_with(".snap")), "{names:?}");
    drop(log);

    // A directory an older version left world-readable is narrowed when opened.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for name in &names {
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
    }
    let _log = RaftLog::open(&dir, MEMBER, Some(CLUSTER), small_opts()).expect("reopen");
    check(&dir);
}

#[test]
fn entries_released_from_memory_still_let_a_damaged_snapshot_fall_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = small_opts();
    let log = open(dir.path(), opts.clone()).expect("open");
    // 1 MiB entries: past the 4 MiB from which entries before the followers' tail leave memory.
    let payload = vec![9u8; 1 << 20];
    for index in 1..=24 {
        log.persist(&[entry_with_data(index, 1, &payload)], None)
            .expect("persist");
        if index % 8 == 0 {
            log.create_snapshot(index, voters(&[1]), vec![index as u8; 100])
                .expect("snapshot");
        }
    }
    // Raft is served from the followers' tail only, which here is empty: a 256 KiB floor
    // holds no 1 MiB entry...
    assert_eq!(log.first_index(), Ok(25));
    assert!(log.memory_bytes() < 2 << 20, "{}", log.memory_bytes());
    drop(log);
    // ...but the disk still holds everything after the older snapshot (16): damage the newest
    // and the member starts from the older one plus the log, losing nothing.
    let newest = std::fs::read_dir(dir.path())
        .expect("list")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with("024.snap"))
        .expect("the newest snapshot");
    let mut bytes = std::fs::read(&newest).expect("read");
    let at = bytes.len() - 1;
    bytes[at] ^= 0x40;
    std::fs::write(&newest, bytes).expect("damage");
    let log = open(dir.path(), opts).expect("reopen from the older snapshot");
    assert_eq!(
        log.latest_snapshot().map(|s| s.get_metadata().index),
        Some(16)
    );
    assert_eq!(log.first_index(), Ok(17));
    assert_eq!(log.last_index(), Ok(24));
}
