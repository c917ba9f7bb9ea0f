//! Space held back for the next snapshot, so that a full volume can still compact.
//!
//! Only a snapshot lets the log drop entries and delete segments, and writing one needs room
//! for a whole copy of the tree. On a volume the log has filled there is none, so without this
//! a full volume stays full. The file `reserve` in the data directory keeps that room
//! allocated (the last snapshot's size, a quarter more for growth, and 1 MiB for the
//! compaction record and a new segment). When a snapshot or a compaction record meets a full
//! volume, the file is deleted and the write tried again; after the next compaction frees
//! segments, it is allocated again.

use std::fs;
use std::path::{Path, PathBuf};

use crate::fsutil;

/// The reserve file's name in the data directory.
pub(crate) const RESERVE_FILE: &str = "reserve";

/// Room beyond the snapshot itself: the compaction record, a new segment's checkpoint, the
/// directory's own blocks.
const MARGIN_BYTES: u64 = 1 << 20;

/// What is held for a newest snapshot of `snapshot_bytes` (the next one is written beside it).
pub(crate) fn wanted(snapshot_bytes: u64) -> u64 {
    snapshot_bytes + snapshot_bytes / 4 + MARGIN_BYTES
}

/// The reserve file of one data directory.
#[derive(Debug)]
pub(crate) struct Reserve {
    path: PathBuf,
    enabled: bool,
    /// Bytes allocated to the file now.
    held: u64,
    /// Bytes it should hold (what the last resize asked for).
    target: u64,
}

impl Reserve {
    /// The reserve of `dir`, as found on disk (a crash may have left any size).
    pub fn open(dir: &Path, enabled: bool) -> Reserve {
        let path = dir.join(RESERVE_FILE);
        let held = fs::metadata(&path).map_or(0, |m| m.len());
        Reserve {
            path,
            enabled,
            held,
            target: 0,
        }
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Whether less is held than the last resize asked for: the volume was short of space.
    pub fn is_short(&self) -> bool {
        self.enabled && self.held < self.target
    }

    /// Makes the file hold [`wanted`]`(snapshot_bytes)`. A volume too full to grow it is
    /// logged and left for the next snapshot to try again: the reserve is a safety margin,
    /// never a reason to fail a write.
    pub fn resize(&mut self, snapshot_bytes: u64) {
        if !self.enabled {
            return;
        }
        let want = wanted(snapshot_bytes);
        self.target = want;
        // Shrinking only once it is well past what is needed saves a syscall per snapshot.
        if self.held >= want && self.held <= want + want / 2 {
            return;
        }
        match self.allocate(want) {
            Ok(()) => self.held = want,
            Err(e) => {
                self.held = fs::metadata(&self.path).map_or(0, |m| m.len());
                tracing::warn!(
                    path = %self.path.display(), wanted = want, held = self.held, error = %e,
                    "could not reserve space for the next snapshot; trying again after the next one"
                );
            }
        }
    }

    fn allocate(&self, len: u64) -> std::io::Result<()> {
        let file = fsutil::private_file()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)?;
        if len <= self.held {
            return file.set_len(len);
        }
        let result = fsutil::allocate(&file, 0, len);
        if result.is_err() {
            // What a failed allocation took is given back: a short reserve is no use to the
            // rest of the log either.
            let _ = file.set_len(self.held);
        }
        result
    }

    /// Deletes the file so that a snapshot or compaction can use its space; `false` if it
    /// held nothing. It is allocated again by the next [`Reserve::resize`].
    pub fn release(&mut self) -> bool {
        if self.held == 0 {
            return false;
        }
        match fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::error!(path = %self.path.display(), error = %e, "could not release the space reserved for a snapshot");
                return false;
            }
        }
        tracing::warn!(
            path = %self.path.display(), bytes = self.held,
            "the volume is full: released the space reserved for a snapshot, to compact the log"
        );
        self.held = 0;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resize_holds_the_snapshot_and_a_margin_and_release_frees_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = Reserve::open(dir.path(), true);
        r.resize(4 << 20);
        let want = wanted(4 << 20);
        assert_eq!(want, (5 << 20) + MARGIN_BYTES);
        assert_eq!(r.held(), want);
        let meta = fs::metadata(dir.path().join(RESERVE_FILE)).expect("reserve file");
        assert_eq!(meta.len(), want);
        use std::os::unix::fs::MetadataExt;
        assert!(meta.blocks() * 512 >= want, "the blocks are allocated");
        assert!(r.release());
        assert!(!dir.path().join(RESERVE_FILE).exists());
        assert!(r.is_short());
        assert!(!r.release());
        // A much smaller snapshot shrinks it.
        r.resize(40 << 20);
        r.resize(0);
        assert_eq!(r.held(), MARGIN_BYTES);
    }

    #[test]
    fn disabled_holds_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = Reserve::open(dir.path(), false);
        r.resize(1 << 20);
        assert_eq!(r.held(), 0);
        assert!(!dir.path().join(RESERVE_FILE).exists());
    }
}
