//! Tuning knobs and counters of a [`crate::RaftLog`].

/// How a log is laid out and how hard it tries to be durable.
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// A new segment file is started once the active one reaches this size. Segments are
    /// deleted whole, so the disk holds up to about this much more than the entries kept.
    pub segment_bytes: u64,
    /// After a snapshot at index `i`, entries up to `i - keep_entries` are discarded; the rest stay
    /// so a follower slightly behind can catch up from the log instead of a full snapshot. The
    /// tail kept this way also stays within the snapshot byte bound (see
    /// [`LogOptions::snapshot_bytes`]) and 16 MiB, so large entries never make it large.
    pub keep_entries: u64,
    /// A snapshot is due once the entries after the newest one pass
    /// `max(snapshot_floor_bytes, newest snapshot's size / snapshot_tree_divisor)` bytes,
    /// however few they are. The floor keeps a small tree from being snapshotted every few
    /// writes; the share of the tree keeps a large one from being rewritten every few MiB
    /// (each snapshot costs a write of the whole tree).
    pub snapshot_floor_bytes: u64,
    /// See [`LogOptions::snapshot_floor_bytes`]; 2: a snapshot per half a tree of log, so the
    /// snapshots write at most twice what the log does.
    pub snapshot_tree_divisor: u64,
    /// Keep a file of the last snapshot's size (plus a margin) allocated in the data directory,
    /// released to write a snapshot when the volume is full, so that a full volume can still
    /// compact. Tests that fill a tiny filesystem on purpose may turn it off.
    pub reserve_space: bool,
    /// `false` skips every fsync: a crash can then lose acknowledged writes. Tests and benchmarks only.
    pub sync: bool,
}

impl LogOptions {
    /// The byte bound after which a snapshot is due, for a newest snapshot of
    /// `snapshot_bytes` bytes (0 if none).
    pub fn snapshot_bytes(&self, snapshot_bytes: u64) -> u64 {
        self.snapshot_floor_bytes
            .max(snapshot_bytes / self.snapshot_tree_divisor.max(1))
    }
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 16 * 1024 * 1024,
            keep_entries: 5_000,
            snapshot_floor_bytes: 32 * 1024 * 1024,
            snapshot_tree_divisor: 2,
            reserve_space: true,
            sync: true,
        }
    }
}

/// A point-in-time view of the log for metrics and status pages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Segment files on disk.
    pub segments: u64,
    /// Bytes in those segment files.
    pub segment_bytes: u64,
    /// Entries held (everything after the compaction point).
    pub entries: u64,
    /// Encoded size of those entries.
    pub entry_bytes: u64,
    /// First index raft may read (compaction point + 1).
    pub first_index: u64,
    /// Index of the last durable entry.
    pub last_index: u64,
    /// Index of the latest snapshot file, 0 if none.
    pub snapshot_index: u64,
    /// Log fdatasyncs since open (one per `persist`/`set_conf_state`/compaction).
    pub fsyncs: u64,
    /// Duration of the most recent log fdatasync.
    pub last_fsync_micros: u64,
    /// Sum of all log fdatasync durations since open.
    pub total_fsync_micros: u64,
    /// Whether a failed write has made the log refuse further writes.
    pub poisoned: bool,
    /// Bytes of the newest snapshot's data (0 if none).
    pub snapshot_bytes: u64,
    /// Bytes held back for the next snapshot in the data directory's reserve file.
    pub reserved_bytes: u64,
    /// Writes refused for lack of space (nothing written, the log still writable) since open.
    pub no_space_errors: u64,
}
