//! Tuning knobs and counters of a [`crate::RaftLog`].

/// How a log is laid out and how hard it tries to be durable.
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// A new segment file is started once the active one reaches this size.
    pub segment_bytes: u64,
    /// After a snapshot at index `i`, entries up to `i - keep_entries` are discarded; the rest stay
    /// so a follower slightly behind can catch up from the log instead of a full snapshot.
    pub keep_entries: u64,
    /// `false` skips every fsync: a crash can then lose acknowledged writes. Tests and benchmarks only.
    pub sync: bool,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 64 * 1024 * 1024,
            keep_entries: 5_000,
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
}
