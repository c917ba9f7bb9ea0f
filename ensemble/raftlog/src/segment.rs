//! Segment files `log-<seq:020>.wal`: a magic number, then records (see `record.rs`). The
//! newest segment's blocks are allocated ahead of its records (`wal.rs`), so it may end in
//! zeros: space never written, which replay takes for the end of the log. A segment is cut to
//! its last record before a newer one follows it, so only the newest may end so.
//!
//! Segments are named by a sequence number rather than by first index because a conflicting
//! suffix rewrite can make a newer segment start at a lower index than an older one; replay order
//! must be write order. Each segment opens with a checkpoint batch (hard state, conf state and
//! compaction point), so older segments can be deleted without losing state that rarely changes.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use crate::batch::{self, BatchWriter, KIND_BATCH, Op};
use crate::error::LogError;
use crate::fsutil::{Durability, TEMP_SUFFIX};
use crate::memlog::MemLog;
use crate::record;

const MAGIC: &[u8; 8] = b"BTNWAL01";

/// What we know about one segment file.
#[derive(Debug, Clone)]
pub(crate) struct SegmentMeta {
    pub seq: u64,
    pub path: PathBuf,
    pub bytes: u64,
    /// Highest entry index written in this segment that replay could still act on; a segment whose
    /// `max_index` is at or below the compaction point contributes nothing and can be deleted.
    pub max_index: u64,
}

/// File name of segment `seq`.
pub(crate) fn file_name(seq: u64) -> String {
    format!("log-{seq:020}.wal")
}

/// Parses a segment file name back to its sequence number.
pub(crate) fn parse_name(name: &str) -> Option<u64> {
    name.strip_prefix("log-")?
        .strip_suffix(".wal")?
        .parse()
        .ok()
}

/// Updates `max_index` bookkeeping for ops just written to (or replayed from) the last segment.
pub(crate) fn note_ops(segments: &mut [SegmentMeta], ops: &[Op]) {
    for op in ops {
        match op {
            Op::Entry(e) => {
                if let Some(active) = segments.last_mut() {
                    active.max_index = active.max_index.max(e.index);
                }
            }
            // Everything written before a reset is superseded, whatever its index.
            Op::Reset { .. } => segments.iter_mut().for_each(|s| s.max_index = 0),
            Op::HardState(_) | Op::ConfState(_) | Op::Compact { .. } => {}
        }
    }
}

/// The checkpoint that opens a segment: the state as of the end of the previous segment.
pub(crate) fn checkpoint(mem: &MemLog) -> Vec<Op> {
    let (index, term) = mem.anchor();
    vec![
        Op::HardState(mem.hard_state.clone()),
        Op::ConfState(mem.conf_state.clone()),
        Op::Compact { index, term },
    ]
}

/// Encodes `ops` as one framed record.
pub(crate) fn encode_record(ops: &[Op], dir: &Path) -> Result<Vec<u8>, LogError> {
    let mut batch = BatchWriter::default();
    for op in ops {
        batch.push(op).map_err(|e| LogError::InvalidRequest {
            dir: dir.to_path_buf(),
            reason: format!("cannot encode log record: {e}"),
        })?;
    }
    if batch.payload().len() > record::MAX_PAYLOAD {
        return Err(LogError::InvalidRequest {
            dir: dir.to_path_buf(),
            reason: format!(
                "batch of {} bytes exceeds the record limit of {} bytes",
                batch.payload().len(),
                record::MAX_PAYLOAD
            ),
        });
    }
    let mut out = Vec::with_capacity(record::HEADER_LEN + batch.payload().len());
    record::encode(KIND_BATCH, batch.payload(), &mut out);
    Ok(out)
}

/// Creates segment `seq` holding the checkpoint of `mem`, atomically and durably, and opens it
/// for appending.
pub(crate) fn create(
    dir: &Path,
    seq: u64,
    mem: &MemLog,
    durability: Durability,
) -> Result<(File, SegmentMeta), LogError> {
    let mut contents = MAGIC.to_vec();
    contents.extend_from_slice(&encode_record(&checkpoint(mem), dir)?);
    let path = durability.write_atomically(dir, &file_name(seq), &contents)?;
    let file = open_for_writing(&path)?;
    let meta = SegmentMeta {
        seq,
        path,
        bytes: contents.len() as u64,
        max_index: 0,
    };
    Ok((file, meta))
}

/// Opens an existing segment for writing records at its end (positioned writes: the file
/// may be longer than its records). Readable too: where the file system cannot allocate
/// (FUSE), glibc's `posix_fallocate` writes the blocks itself and reads them first.
pub(crate) fn open_for_writing(path: &Path) -> Result<File, LogError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| LogError::io("open segment for writing", path, e))
}

/// Replays the last of `segments` (the earlier ones already replayed) into `mem`. In the last
/// segment of the log a damaged record with nothing valid after it is a torn write from a crash: it was never
/// acknowledged, so the file is truncated there. Any other damage is corruption.
pub(crate) fn replay(
    segments: &mut [SegmentMeta],
    is_last: bool,
    mem: &mut MemLog,
    durability: Durability,
) -> Result<(), LogError> {
    let Some(path) = segments.last().map(|s| s.path.clone()) else {
        return Ok(());
    };
    let buf = fs::read(&path).map_err(|e| LogError::io("read segment", &path, e))?;
    if buf.get(..MAGIC.len()) != Some(&MAGIC[..]) {
        return Err(LogError::corrupt(&path, 0, "not a log segment (bad magic)"));
    }
    let (records, damage) = record::decode_all(&buf, MAGIC.len());
    for rec in &records {
        let corrupt = |reason: String| LogError::corrupt(&path, rec.offset as u64, reason);
        if rec.kind != KIND_BATCH {
            return Err(corrupt(format!(
                "unknown record kind {} (written by a newer version?)",
                rec.kind
            )));
        }
        let ops = batch::decode(rec.payload).map_err(|e| corrupt(e.to_string()))?;
        note_ops(segments, &ops);
        for op in ops {
            mem.apply(op).map_err(|e| corrupt(e.to_string()))?;
        }
    }
    let mut valid_len = buf.len();
    if let Some(damage) = &damage
        && is_last
        && buf[damage.offset..].iter().all(|&b| b == 0)
    {
        // Allocated, never written: the end of the log, not damage.
        valid_len = damage.offset;
    } else if let Some(damage) = damage {
        let offset = damage.offset as u64;
        if !is_last {
            return Err(LogError::corrupt(
                &path,
                offset,
                format!("{} in a sealed segment", damage.reason),
            ));
        }
        if let Some(next) = record::valid_record_after(&buf, damage.offset) {
            return Err(LogError::corrupt(
                &path,
                offset,
                format!(
                    "{}, but a valid record follows at byte {next}: acknowledged data is damaged",
                    damage.reason
                ),
            ));
        }
        tracing::warn!(
            path = %path.display(),
            offset,
            dropped_bytes = buf.len() - damage.offset,
            reason = %damage.reason,
            "truncating the damaged tail of the last log segment: a write a crash interrupted was never acknowledged; if this record was acknowledged (bit rot), this member stops once the leader counts on it, and must be reseeded"
        );
        let file = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| LogError::io("open segment to truncate torn tail", &path, e))?;
        file.set_len(offset)
            .map_err(|e| LogError::io("truncate torn tail", &path, e))?;
        durability.sync_data(&file, &path)?;
        valid_len = damage.offset;
    }
    if let Some(meta) = segments.last_mut() {
        meta.bytes = valid_len as u64;
    }
    Ok(())
}

/// Segments in `dir`, oldest first.
pub(crate) fn list(dir: &Path, names: &[String]) -> Vec<SegmentMeta> {
    let mut segments: Vec<SegmentMeta> = names
        .iter()
        .filter(|name| !name.ends_with(TEMP_SUFFIX))
        .filter_map(|name| {
            parse_name(name).map(|seq| SegmentMeta {
                seq,
                path: dir.join(name),
                bytes: 0,
                max_index: 0,
            })
        })
        .collect();
    segments.sort_by_key(|s| s.seq);
    segments
}
