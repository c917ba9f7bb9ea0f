//! What a power loss would keep of a log directory, for the deterministic simulation.
//!
//! Off unless [`enable`] is called on the current thread (the simulation runs every member on
//! one thread). While on, each fsync the log asks for is recorded instead of performed: a
//! file's data is durable up to the length it had at its last `fdatasync`, and a directory's
//! entries are durable as they were at its last `fsync`. [`crash`] then rewinds a directory to
//! exactly that: names never made durable disappear, and files shrink to their synced length.
//! A log opened with `sync: false` records nothing, so a crash keeps nothing it wrote.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, Default)]
struct Durable {
    /// File path → bytes durable.
    lengths: BTreeMap<PathBuf, u64>,
    /// Directory → names durable in it.
    names: BTreeMap<PathBuf, BTreeSet<String>>,
}

thread_local! {
    static MODEL: RefCell<Option<Durable>> = const { RefCell::new(None) };
}

/// Starts recording on this thread, forgetting anything recorded before.
pub fn enable() {
    MODEL.with(|m| *m.borrow_mut() = Some(Durable::default()));
}

/// Whether fsyncs on this thread are recorded rather than performed.
pub(crate) fn is_enabled() -> bool {
    MODEL.with(|m| m.borrow().is_some())
}

pub(crate) fn synced_data(path: &Path, len: u64) {
    MODEL.with(|m| {
        if let Some(d) = m.borrow_mut().as_mut() {
            d.lengths.insert(path.to_path_buf(), len);
        }
    });
}

pub(crate) fn synced_dir(dir: &Path) -> io::Result<()> {
    let names = list(dir)?;
    MODEL.with(|m| {
        if let Some(d) = m.borrow_mut().as_mut() {
            d.names.insert(dir.to_path_buf(), names);
        }
    });
    Ok(())
}

/// `from` was renamed to `to`: its synced data moves with it (the name itself becomes durable
/// only when the directory is synced).
pub(crate) fn renamed(from: &Path, to: &Path) {
    MODEL.with(|m| {
        if let Some(d) = m.borrow_mut().as_mut()
            && let Some(len) = d.lengths.remove(from)
        {
            d.lengths.insert(to.to_path_buf(), len);
        }
    });
}

/// Rewinds `dir` to what a power loss would have kept. The log must be closed.
pub fn crash(dir: &Path) -> io::Result<()> {
    let (names, lengths) = MODEL.with(|m| {
        let m = m.borrow();
        let d = m.as_ref();
        let names = d
            .and_then(|d| d.names.get(dir).cloned())
            .unwrap_or_default();
        let lengths: BTreeMap<PathBuf, u64> = d
            .map(|d| {
                d.lengths
                    .iter()
                    .filter(|(p, _)| p.parent() == Some(dir))
                    .map(|(p, l)| (p.clone(), *l))
                    .collect()
            })
            .unwrap_or_default();
        (names, lengths)
    });
    for name in list(dir)? {
        let path = dir.join(&name);
        if !names.contains(&name) {
            fs::remove_file(&path)?;
            continue;
        }
        let durable = lengths.get(&path).copied().unwrap_or(0);
        let file = OpenOptions::new().write(true).open(&path)?;
        if file.metadata()?.len() > durable {
            file.set_len(durable)?;
        }
    }
    Ok(())
}

fn list(dir: &Path) -> io::Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file()
            && let Ok(name) = entry.file_name().into_string()
        {
            names.insert(name);
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use raft::Storage;
    use raft::eraftpb::Entry;

    use crate::{LogOptions, RaftLog};

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Default::default()
        }
    }

    fn open(dir: &std::path::Path, sync: bool) -> RaftLog {
        let opts = LogOptions {
            sync,
            ..LogOptions::default()
        };
        RaftLog::open(dir, 1, Some("c"), opts).expect("open")
    }

    #[test]
    fn a_crash_keeps_what_was_synced_and_drops_the_rest() {
        super::enable();
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open(dir.path(), true);
        log.persist(&[entry(1, 1), entry(2, 1)], None)
            .expect("persist");
        drop(log);
        // Bytes written after the last fdatasync, and a file never made durable in the
        // directory: a power loss takes both.
        let segment = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").path())
            .find(|p| p.extension().is_some_and(|x| x == "wal"))
            .expect("a segment");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&segment)
            .expect("open segment");
        file.write_all(b"written but never synced").expect("write");
        std::fs::write(dir.path().join("stray"), b"x").expect("write stray");

        super::crash(dir.path()).expect("crash");

        assert!(!dir.path().join("stray").exists());
        let log = open(dir.path(), true);
        assert_eq!(log.last_index(), Ok(2), "synced entries survive");
    }

    fn hard_state(term: u64, vote: u64, commit: u64) -> raft::eraftpb::HardState {
        raft::eraftpb::HardState {
            term,
            vote,
            commit,
            ..Default::default()
        }
    }

    /// A commit-only hard state costs no fdatasync: a crash may drop it (the commit is learnt
    /// again from the leader) but never the entries, term or vote synced before it, and the next
    /// synced record makes it durable too.
    #[test]
    fn a_commit_only_hard_state_is_written_without_waiting_for_the_disk() {
        super::enable();
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open(dir.path(), true);
        log.persist(&[entry(1, 1), entry(2, 1)], Some(&hard_state(1, 1, 0)))
            .expect("persist");
        let synced = log.stats().fsyncs;
        log.persist(&[], Some(&hard_state(1, 1, 2)))
            .expect("commit");
        assert_eq!(log.stats().fsyncs, synced, "no fdatasync for a commit");
        assert_eq!(log.initial_state().expect("state").hard_state.commit, 2);
        drop(log);

        super::crash(dir.path()).expect("crash");
        let log = open(dir.path(), true);
        let state = log.initial_state().expect("state").hard_state;
        assert_eq!((state.term, state.vote, state.commit), (1, 1, 0));
        assert_eq!(log.last_index(), Ok(2), "synced entries survive");

        // A vote is synced at once, and carries the commit written before it.
        let synced = log.stats().fsyncs;
        log.persist(&[], Some(&hard_state(1, 1, 2)))
            .expect("commit");
        log.persist(&[], Some(&hard_state(2, 3, 2))).expect("vote");
        assert_eq!(log.stats().fsyncs, synced + 1);
        drop(log);
        super::crash(dir.path()).expect("crash");
        let log = open(dir.path(), true);
        let state = log.initial_state().expect("state").hard_state;
        assert_eq!((state.term, state.vote, state.commit), (2, 3, 2));
    }

    /// A segment is never left behind with an unsynced record once a later one is written.
    #[test]
    fn rotation_syncs_an_unsynced_tail_first() {
        super::enable();
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = LogOptions {
            sync: true,
            segment_bytes: 1,
            ..LogOptions::default()
        };
        let log = RaftLog::open(dir.path(), 1, Some("c"), opts.clone()).expect("open");
        log.persist(&[entry(1, 1)], Some(&hard_state(1, 1, 0)))
            .expect("persist");
        log.persist(&[], Some(&hard_state(1, 1, 1)))
            .expect("commit");
        log.persist(&[entry(2, 1)], None).expect("persist");
        drop(log);

        let segments = || {
            let mut found: Vec<(std::path::PathBuf, u64)> = std::fs::read_dir(dir.path())
                .expect("list")
                .map(|e| e.expect("entry").path())
                .filter(|p| p.extension().is_some_and(|x| x == "wal"))
                .map(|p| {
                    let len = std::fs::metadata(&p).expect("stat").len();
                    (p, len)
                })
                .collect();
            found.sort();
            found
        };
        let before = segments();
        assert!(before.len() >= 3, "every append rotated: {before:?}");
        super::crash(dir.path()).expect("crash");
        let after = segments();
        // Only the last segment may lose a tail; a torn record anywhere else would be damage.
        assert_eq!(before[..before.len() - 1], after[..after.len() - 1]);
        let log = RaftLog::open(dir.path(), 1, Some("c"), opts).expect("open");
        assert_eq!(log.last_index(), Ok(2));
        assert_eq!(log.initial_state().expect("state").hard_state.commit, 1);
    }

    #[test]
    fn without_fsync_a_crash_keeps_nothing_the_log_wrote() {
        super::enable();
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        let log = open(&data, false);
        log.persist(&[entry(1, 1), entry(2, 1)], None)
            .expect("persist");
        drop(log);

        super::crash(&data).expect("crash");

        let log = open(&data, false);
        assert_eq!(log.last_index(), Ok(0), "nothing was ever durable");
    }
}
