//! What a power loss would keep of a log directory, for the deterministic simulation.
//!
//! Off unless [`enable`] is called on the current thread (the simulation runs every member on
//! one thread). While on, each fsync the log asks for is recorded instead of performed: a
//! file's data is durable up to the length it had at its last `fdatasync` (or, in a file
//! allocated ahead of its data, up to where the data ended), and a directory's entries are
//! durable as they were at its last `fsync`. [`crash`] then rewinds a directory to exactly
//! that: names never made durable disappear, files shrink to their synced size, and what was
//! written past a file's synced data is zeros again, as its allocation left it.
//! A log opened with `sync: false` records nothing, so a crash keeps nothing it wrote.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

#[derive(Debug, Default)]
struct Durable {
    /// File path → what its last fdatasync made durable.
    lengths: BTreeMap<PathBuf, Synced>,
    /// Directory → names durable in it.
    names: BTreeMap<PathBuf, BTreeSet<String>>,
}

/// One file as of its last fdatasync.
#[derive(Debug, Clone, Copy)]
struct Synced {
    /// Bytes of data durable.
    data: u64,
    /// The file's size: beyond `data`, blocks allocated and never written.
    size: u64,
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

pub(crate) fn synced_data(path: &Path, data: u64, size: u64) {
    MODEL.with(|m| {
        if let Some(d) = m.borrow_mut().as_mut() {
            d.lengths.insert(path.to_path_buf(), Synced { data, size });
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
        let lengths: BTreeMap<PathBuf, Synced> = d
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
        let synced = lengths
            .get(&path)
            .copied()
            .unwrap_or(Synced { data: 0, size: 0 });
        let file = OpenOptions::new().write(true).open(&path)?;
        let len = file.metadata()?.len();
        if len > synced.size {
            file.set_len(synced.size)?;
        }
        let written_past = len.min(synced.size);
        if written_past > synced.data {
            let zeros = vec![0u8; (written_past - synced.data) as usize];
            file.write_all_at(&zeros, synced.data)?;
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
    use raft::eraftpb::{Entry, HardState};

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

    #[test]
    fn a_record_written_without_fsync_into_allocated_space_is_lost() {
        super::enable();
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open(dir.path(), true);
        let synced = HardState {
            term: 1,
            commit: 1,
            ..Default::default()
        };
        log.persist(&[entry(1, 1), entry(2, 1)], Some(&synced))
            .expect("persist");
        // A commit index alone is written without an fsync, inside the blocks allocated
        // ahead: the file's size does not change, so only its data can be lost.
        let unsynced = HardState {
            commit: 2,
            ..synced.clone()
        };
        log.persist(&[], Some(&unsynced)).expect("commit index");
        drop(log);

        super::crash(dir.path()).expect("crash");

        let log = open(dir.path(), true);
        assert_eq!(log.last_index(), Ok(2), "synced entries survive");
        let state = log.initial_state().expect("state");
        assert_eq!(
            state.hard_state.commit, 1,
            "the unsynced commit index is gone"
        );
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
