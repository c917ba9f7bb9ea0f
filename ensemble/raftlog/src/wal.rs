//! The write-ahead log writer: appends batches to the active segment, rotates, deletes old segments.

use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::batch::Op;
use crate::error::LogError;
use crate::fsutil::{self, Durability};
use crate::memlog::MemLog;
use crate::segment::{self, SegmentMeta};

/// Blocks allocated at a time ahead of the active segment's records (at most the segment's
/// size): about one write in four thousand of 1 KiB grows the file.
const ALLOCATE_AHEAD_BYTES: u64 = 4 << 20;

/// Counters of the log's fsync behaviour since open.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SyncStats {
    pub fsyncs: u64,
    pub last_fsync_micros: u64,
    pub total_fsync_micros: u64,
}

/// Owner of the segment files. Any failed write or fsync poisons it: after a failed fdatasync the
/// kernel may have dropped the dirty pages, so neither "it is on disk" nor "it is not" can be
/// claimed, and appending more records after a possibly partial one would turn a torn tail into
/// mid-log corruption. Reopening replays what really reached the disk.
#[derive(Debug)]
pub(crate) struct Wal {
    dir: PathBuf,
    durability: Durability,
    segment_bytes: u64,
    /// Oldest first; never empty; the last one is the active segment.
    segments: Vec<SegmentMeta>,
    active: File,
    /// The active segment's size on disk: its records, then blocks allocated for more.
    allocated: u64,
    poisoned: Option<String>,
    /// The active segment has records no fsync has covered yet (see `append`).
    unsynced: bool,
    pub sync_stats: SyncStats,
    /// Appends refused for a full volume (nothing written) since open.
    pub no_space_errors: u64,
}

impl Wal {
    /// Replays every segment in `dir` (creating the first one for a new log) and opens the last
    /// for appending.
    pub fn open(
        dir: &Path,
        durability: Durability,
        segment_bytes: u64,
    ) -> Result<(Wal, MemLog), LogError> {
        let names = fsutil::list_dir(dir)?;
        let mut segments = segment::list(dir, &names);
        let mut mem = MemLog::default();
        let active = if segments.is_empty() {
            let (file, meta) = segment::create(dir, 1, &mem, durability)?;
            segments.push(meta);
            file
        } else {
            let count = segments.len();
            for i in 0..count {
                segment::replay(&mut segments[..=i], i + 1 == count, &mut mem, durability)?;
            }
            let last = &segments[count - 1].path;
            segment::open_for_writing(last)?
        };
        let allocated = active
            .metadata()
            .map_err(|e| LogError::io("stat segment", &segments[segments.len() - 1].path, e))?
            .len();
        mem.check().map_err(|reason| {
            LogError::corrupt(
                dir,
                0,
                format!("log segments do not fit together: {reason}"),
            )
        })?;
        let wal = Wal {
            dir: dir.to_path_buf(),
            durability,
            segment_bytes,
            segments,
            active,
            allocated,
            poisoned: None,
            unsynced: false,
            sync_stats: SyncStats::default(),
            no_space_errors: 0,
        };
        Ok((wal, mem))
    }

    /// Fails if an earlier write failed.
    pub fn check_writable(&self) -> Result<(), LogError> {
        match &self.poisoned {
            Some(first_failure) => Err(LogError::Poisoned {
                dir: self.dir.clone(),
                first_failure: first_failure.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Makes every later write fail; for when memory and disk may have diverged.
    pub fn poison(&mut self, reason: String) {
        tracing::error!(dir = %self.dir.display(), %reason, "raft log refuses further writes until reopened");
        self.poisoned.get_or_insert(reason);
    }

    /// Whether a failed write has made the log refuse further writes.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    /// Appends `ops` as one record and, with `sync`, returns once it is durable (and with it
    /// every record before it). Without `sync` the record is written but may be lost to a
    /// power failure until the next synced one: for what Raft need not keep (a commit index,
    /// which the leader tells again). `mem` is the state before `ops`; it becomes the
    /// checkpoint if a new segment is started.
    pub fn append(&mut self, ops: &[Op], mem: &MemLog, sync: bool) -> Result<(), LogError> {
        self.check_writable()?;
        let record = segment::encode_record(ops, &self.dir)?;
        let result = self.write_record(&record, mem, sync);
        match &result {
            Ok(()) => segment::note_ops(&mut self.segments, ops),
            // Nothing of the record is left: the log is as it was, and writable.
            Err(e) if e.is_no_space() => self.no_space_errors += 1,
            Err(e) => self.poison(e.to_string()),
        }
        result
    }

    fn write_record(&mut self, record: &[u8], mem: &MemLog, sync: bool) -> Result<(), LogError> {
        if self.active_meta().bytes >= self.segment_bytes {
            // A segment is finished durable and cut to its last record: replay accepts a torn
            // record, or space never written, only at the very end of the log, never at the
            // end of a segment that a newer one follows.
            let bytes = self.active_meta().bytes;
            if self.allocated > bytes {
                let path = &self.active_meta().path;
                self.active
                    .set_len(bytes)
                    .map_err(|e| LogError::io("cut segment to its records", path, e))?;
                self.allocated = bytes;
                self.unsynced = true;
            }
            if self.unsynced {
                self.sync_active()?;
            }
            // A new segment that could not be made is removed whole (`write_atomically`).
            self.rotate(mem).map_err(LogError::into_no_space)?;
        }
        let path = self.active_meta().path.clone();
        let at = self.active_meta().bytes;
        self.allocate_for(at + record.len() as u64)?;
        if let Err(e) = self.active.write_all_at(record, at) {
            let e = LogError::io("append to segment", &path, e);
            return Err(self.undo_partial_write(e));
        }
        if let Some(active) = self.segments.last_mut() {
            active.bytes += record.len() as u64;
        }
        if sync {
            self.sync_active()
        } else {
            self.unsynced = true;
            Ok(())
        }
    }

    /// Makes the active segment's blocks reach `end` at least, allocating up to
    /// [`ALLOCATE_AHEAD_BYTES`] more while the segment is not full, or just enough on a volume
    /// without room for more. What a failed allocation took is cut off again: a full volume
    /// refuses the write with nothing written.
    fn allocate_for(&mut self, end: u64) -> Result<(), LogError> {
        if end <= self.allocated {
            return Ok(());
        }
        let ahead = (self.allocated + ALLOCATE_AHEAD_BYTES).min(self.segment_bytes);
        let mut result = self.allocate_to(end.max(ahead));
        if ahead > end && result.as_ref().is_err_and(LogError::is_space_io) {
            result = self.allocate_to(end);
        }
        result.map_err(LogError::into_no_space)
    }

    fn allocate_to(&mut self, target: u64) -> Result<(), LogError> {
        let path = &self.segments[self.segments.len() - 1].path;
        match fsutil::allocate(&self.active, self.allocated, target) {
            Ok(()) => {
                self.allocated = target;
                self.unsynced = true;
                Ok(())
            }
            Err(e) => {
                let e = LogError::io("allocate segment space", path, e);
                self.active
                    .set_len(self.allocated)
                    .map_err(|cut| LogError::io("cut a failed allocation off", path, cut))?;
                Err(e)
            }
        }
    }

    /// After a failed append: a full volume is survivable if what the append left is cut off
    /// again (the file back to its last record), which turns the error into
    /// [`LogError::NoSpace`]. Any other failure, or a failed cut, stays an error that poisons.
    /// The records before are untouched, so what an earlier fsync made durable still is.
    fn undo_partial_write(&mut self, e: LogError) -> LogError {
        if !e.is_space_io() {
            return e;
        }
        let meta = self.active_meta();
        match self.active.set_len(meta.bytes) {
            Ok(()) => {
                self.allocated = meta.bytes;
                e.into_no_space()
            }
            Err(cut) => {
                tracing::error!(path = %meta.path.display(), error = %cut, "could not cut a partial record off the log after a full volume");
                e
            }
        }
    }

    fn sync_active(&mut self) -> Result<(), LogError> {
        let started = Instant::now();
        let meta = self.active_meta();
        self.durability
            .sync_data_to(&self.active, &meta.path, Some(meta.bytes))?;
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.unsynced = false;
        self.sync_stats.fsyncs += 1;
        self.sync_stats.last_fsync_micros = micros;
        self.sync_stats.total_fsync_micros =
            self.sync_stats.total_fsync_micros.saturating_add(micros);
        Ok(())
    }

    fn rotate(&mut self, mem: &MemLog) -> Result<(), LogError> {
        let seq = self.active_meta().seq + 1;
        let (file, meta) = segment::create(&self.dir, seq, mem, self.durability)?;
        tracing::debug!(path = %meta.path.display(), "started new log segment");
        self.allocated = meta.bytes;
        self.segments.push(meta);
        self.active = file;
        Ok(())
    }

    fn active_meta(&self) -> &SegmentMeta {
        // `segments` is never empty: open creates or finds at least one and nothing removes the last.
        &self.segments[self.segments.len() - 1]
    }

    /// Deletes the oldest segments while everything they hold is at or below `compacted_to`,
    /// oldest first so a crash midway leaves a suffix that still replays. The active segment stays.
    /// Only call this once a record establishing `compacted_to` is durable.
    ///
    /// Each segment is renamed out of the log (a temp name, which startup removes) and unlinked
    /// on a thread of its own: freeing a 64 MiB file's blocks took ext4 86-260 ms here, and the
    /// caller is the core thread, which then answered nobody (a p999 stall in the benchmarks).
    pub fn delete_obsolete(&mut self, compacted_to: u64) -> Result<usize, LogError> {
        self.delete_obsolete_now_or_later(compacted_to, false)
    }

    /// [`Wal::delete_obsolete`]; with `now`, the files are unlinked before returning: for a
    /// volume short of space, where the space is wanted at once (the snapshot reserve).
    pub fn delete_obsolete_now_or_later(
        &mut self,
        compacted_to: u64,
        now: bool,
    ) -> Result<usize, LogError> {
        let mut obsolete = Vec::new();
        let mut result = Ok(());
        while self.segments.len() > 1 && self.segments[0].max_index <= compacted_to {
            let path = self.segments[0].path.clone();
            let mut name = path.file_name().unwrap_or_default().to_os_string();
            name.push(OBSOLETE_SUFFIX);
            let trash = path.with_file_name(name);
            if let Err(e) = fs::rename(&path, &trash) {
                result = Err(LogError::io("retire compacted segment", &path, e));
                break;
            }
            self.segments.remove(0);
            obsolete.push(trash);
        }
        let deleted = obsolete.len();
        if deleted > 0 {
            self.durability.sync_dir(&self.dir)?;
            tracing::debug!(dir = %self.dir.display(), deleted, compacted_to, "retired compacted log segments");
            if now {
                unlink(obsolete);
            } else {
                unlink_in_background(obsolete);
            }
        }
        result.map(|()| deleted)
    }

    /// Swaps the active segment's handle for a read-only one so the next write fails like a
    /// broken disk would.
    #[cfg(test)]
    pub fn break_active_for_test(&mut self) -> std::io::Result<()> {
        self.active = File::open(&self.active_meta().path)?;
        Ok(())
    }

    /// The segments, oldest first.
    pub fn segments(&self) -> &[SegmentMeta] {
        &self.segments
    }
}

/// Appended to a retired segment's name: ends in the temp suffix, so replay never reads it and
/// startup deletes it if the process died before the background unlink.
const OBSOLETE_SUFFIX: &str = ".obsolete.tmp";

fn unlink_in_background(paths: Vec<PathBuf>) {
    crate::background::run("baton-log-reclaim", move || unlink(paths));
}

fn unlink(paths: Vec<PathBuf>) {
    for path in paths {
        if let Err(e) = fs::remove_file(&path) {
            tracing::warn!(path = %path.display(), error = %e, "could not delete a retired log segment; startup will retry");
        }
    }
}
