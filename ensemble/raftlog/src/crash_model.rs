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
