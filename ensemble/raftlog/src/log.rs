//! [`RaftLog`]: the durable raft log of one member, its snapshots and its identity.

use std::fs::File;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};

use crate::batch::Op;
use crate::error::LogError;
use crate::fsutil::{self, Durability};
use crate::memlog::MemLog;
use crate::options::{LogOptions, LogStats};
use crate::reserve::Reserve;
use crate::wal::Wal;
use crate::{identity, segment, snapfile};

/// Snapshot files kept: the newest, and the one before it to fall back on if the newest is found
/// damaged at startup. Compaction keeps the log entries after the older one (see
/// [`RaftLog::create_snapshot`]), so falling back loses nothing.
const SNAPSHOTS_KEPT: usize = 2;

/// At most this many bytes of entries before the newest snapshot are kept for followers a
/// little behind (and never more than the snapshot byte bound).
const FOLLOWER_TAIL_BYTES: u64 = 16 << 20;

/// Entries before the tail kept for followers leave memory (not the disk) once they hold
/// this much.
const RELEASE_FROM_BYTES: u64 = 4 << 20;

/// The durable raft log of one member. Cheap to clone; all clones share one log.
///
/// Every mutating method returns only once its change is on disk, and the in-memory view (what
/// [`raft::Storage`] serves) changes only after that. Writers are serialized; `Storage` reads
/// proceed during an fsync.
#[derive(Clone, Debug)]
pub struct RaftLog {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    cluster_id: String,
    opts: LogOptions,
    durability: Durability,
    /// Lock order: `wal`, then `state`. Holding `wal` for a whole mutation keeps the validation
    /// done under a read lock of `state` true until the write lock applies the change.
    wal: Mutex<Wal>,
    state: RwLock<State>,
    /// Space held for the next snapshot. Taken alone, or after `wal` (never with `state`).
    reserve: Mutex<Reserve>,
    /// Snapshot writes that met a full volume since open.
    snapshot_no_space: std::sync::atomic::AtomicU64,
    /// Held for the lifetime of the log so no other process opens the same directory.
    _dir_lock: File,
}

#[derive(Debug)]
pub(crate) struct State {
    pub mem: MemLog,
    /// The newest snapshot's metadata; its data stays in its file (read when raft sends it
    /// to a follower, or at startup) rather than in memory beside the tree it copies.
    pub snapshot: Option<Snapshot>,
    /// Bytes of the newest snapshot's data.
    pub snapshot_size: u64,
    /// Encoded bytes of the held entries the newest snapshot covers (kept for a fallback).
    pub covered_bytes: u64,
}

impl RaftLog {
    /// Opens or creates the log in `dir` for `member_id` of `cluster_id` (`None`: whatever the
    /// directory records; a new directory then gets a fresh random id). Refuses a directory that
    /// belongs to another member or cluster. A torn final record is truncated. A damaged newest
    /// snapshot is set aside (renamed `*.corrupt`) and the one before it used with the log after
    /// it; damage that leaves no way back to the state this member had acknowledged is a
    /// [`LogError::Unrecoverable`] error, with nothing changed on disk.
    pub fn open(
        dir: &Path,
        member_id: u64,
        cluster_id: Option<&str>,
        opts: LogOptions,
    ) -> Result<Self, LogError> {
        let durability = Durability { sync: opts.sync };
        if !opts.sync {
            tracing::warn!(
                dir = %dir.display(),
                "RAFT LOG FSYNC IS DISABLED: a crash or power loss can lose acknowledged writes. \
                 Use only for tests and benchmarks."
            );
        }
        if opts.segment_bytes == 0 {
            return Err(LogError::InvalidRequest {
                dir: dir.to_path_buf(),
                reason: "segment_bytes must be positive".to_string(),
            });
        }
        create_dir(dir, durability)?;
        fsutil::make_private(dir)?;
        let dir_lock = identity::lock_dir(dir)?;
        fsutil::remove_temp_files(dir)?;
        let first_use = segment::list(dir, &fsutil::list_dir(dir)?).is_empty();
        let cluster_id =
            identity::check_or_record(dir, member_id, cluster_id, first_use, durability)?;
        let (mut wal, mut mem) =
            Wal::open(dir, durability, opts.segment_bytes).map_err(|e| match e {
                LogError::Corrupt { .. } => LogError::Unrecoverable {
                    dir: dir.to_path_buf(),
                    reason: format!("the log is damaged beyond a torn final write: {e}"),
                },
                e => e,
            })?;
        let snapshot = recover_snapshot(dir, durability, &mut wal, &mut mem)?;
        let (first, last) = (mem.first_index(), mem.last_index());
        let mut reserve = Reserve::open(dir, opts.reserve_space);
        reserve.resize(snapshot_bytes(snapshot.as_ref()));
        tracing::info!(
            dir = %dir.display(), member_id, cluster_id = %cluster_id, first_index = first, last_index = last,
            snapshot_index = snapshot.as_ref().map_or(0, |s| s.get_metadata().index),
            segments = wal.segments().len(), "opened raft log"
        );
        Ok(RaftLog {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                cluster_id,
                opts,
                durability,
                wal: Mutex::new(wal),
                reserve: Mutex::new(reserve),
                snapshot_no_space: Default::default(),
                state: RwLock::new(State {
                    covered_bytes: mem.bytes_through(snapshot_index(snapshot.as_ref())),
                    mem,
                    snapshot_size: snapshot_bytes(snapshot.as_ref()),
                    snapshot: snapshot.as_ref().map(metadata_only),
                }),
                _dir_lock: dir_lock,
            }),
        })
    }

    /// The cluster this directory belongs to.
    pub fn cluster_id(&self) -> String {
        self.inner.cluster_id.clone()
    }

    /// The directory holding the log.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Durably writes `entries` (an entry at index `i` replaces any held entries from `i` on, as
    /// raft requires) and the hard state, with a single fdatasync; a hard state that moves only
    /// the commit index, with no entries, is written without one (see below). Returns whether
    /// it synced. On error nothing of this call is visible through `Storage`, and the log
    /// refuses further writes if the disk state is unknown.
    pub fn persist(
        &self,
        entries: &[Entry],
        hard_state: Option<&HardState>,
    ) -> Result<bool, LogError> {
        if entries.is_empty() && hard_state.is_none() {
            return Ok(false);
        }
        let mut wal = self.lock_wal();
        wal.check_writable()?;
        self.check_append(&self.read_state().mem, entries)?;
        // What Raft needs durable before a message goes out: entries, the term and the vote.
        // A hard state that only moves the commit index is written but not synced (raft-rs's
        // own `Ready::must_sync` is false for it, as etcd's `MustSync` is): a member that loses
        // it learns the commit index again from the leader, and `initial_state` never reports
        // less than the snapshot's index. It saves each member an fsync per write, one that
        // followed every commit on the same disk the next write's entries wait for.
        let sync = !entries.is_empty()
            || hard_state.is_some_and(|hs| {
                // The last one written; its term and vote were synced when they changed.
                let last = &self.read_state().mem.hard_state;
                hs.term != last.term || hs.vote != last.vote
            });
        let mut ops: Vec<Op> = entries.iter().cloned().map(Op::Entry).collect();
        ops.extend(hard_state.cloned().map(Op::HardState));
        self.write(&mut wal, ops, sync)?;
        Ok(sync)
    }

    /// Durably records the conf state (raft's membership after applying a conf change).
    pub fn set_conf_state(&self, cs: &ConfState) -> Result<(), LogError> {
        let mut wal = self.lock_wal();
        self.commit(&mut wal, vec![Op::ConfState(cs.clone())])
    }

    /// Installs a snapshot received from the leader: the snapshot file becomes durable first, then
    /// the log is durably replaced by it (conf state from the snapshot, commit at its index).
    pub fn apply_snapshot(&self, snap: &Snapshot) -> Result<(), LogError> {
        let meta = snap.get_metadata();
        if meta.index == 0 {
            return Err(self.invalid("cannot apply an empty snapshot (index 0)".to_string()));
        }
        let mut wal = self.lock_wal();
        wal.check_writable()?;
        let first_index = self.read_state().mem.first_index();
        if meta.index < first_index {
            return Err(LogError::SnapshotOutOfDate {
                dir: self.inner.dir.clone(),
                snapshot_index: meta.index,
                first_index,
            });
        }
        self.write_snapshot_file(snap)?;
        let ops = install_ops(&self.read_state().mem, meta);
        self.commit(&mut wal, ops)?;
        {
            let mut state = self.write_state();
            state.snapshot = Some(metadata_only(snap));
            state.snapshot_size = snap.data.len() as u64;
            state.covered_bytes = 0;
        }
        tracing::info!(dir = %self.inner.dir.display(), index = meta.index, term = meta.term, "installed snapshot from leader");
        self.reclaim(&mut wal, meta.index);
        drop(wal);
        self.lock_reserve().resize(snap.data.len() as u64);
        Ok(())
    }

    /// Stores a snapshot of the state machine as applied through `index` (which must be applied,
    /// hence committed), then discards the entries before the older kept snapshot, except a
    /// tail of at most `keep_entries` entries and [`LogOptions::snapshot_bytes`] bytes before
    /// `index`. The file is written without blocking `persist`. Returns once the snapshot file
    /// is durable. On a full volume the reserve is released to write it
    /// ([`LogError::NoSpace`] if even that is not enough: nothing changed).
    pub fn create_snapshot(
        &self,
        index: u64,
        conf_state: ConfState,
        data: Vec<u8>,
    ) -> Result<(), LogError> {
        if index == 0 {
            return Err(self.invalid("cannot snapshot at index 0".to_string()));
        }
        let term = {
            let state = self.read_state();
            let latest = state
                .snapshot
                .as_ref()
                .map_or(0, |s| s.get_metadata().index);
            if index == latest {
                drop(state);
                // Again at the same index: what is left to do is the compaction, which a
                // full volume may have refused the last time.
                return self.reclaim_space();
            }
            if index > state.mem.last_index() {
                return Err(self.invalid(format!(
                    "snapshot at {index} is beyond the last entry {}",
                    state.mem.last_index()
                )));
            }
            match state.mem.term(index) {
                Ok(term) if index > latest => term,
                _ => {
                    return Err(LogError::SnapshotOutOfDate {
                        dir: self.inner.dir.clone(),
                        snapshot_index: index,
                        first_index: state.mem.first_index(),
                    });
                }
            }
        };
        self.lock_wal().check_writable()?;
        let mut snap = Snapshot {
            data: data.into(),
            ..Default::default()
        };
        let meta = snap.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(conf_state);
        let size = snap.data.len() as u64;
        self.write_snapshot_file(&snap)?;

        let replaced = {
            let mut state = self.write_state();
            // A snapshot installed from the leader meanwhile may be newer; never go backwards.
            if state
                .snapshot
                .as_ref()
                .is_none_or(|s| s.get_metadata().index < index)
            {
                state.snapshot_size = size;
                state.snapshot.replace(metadata_only(&snap))
            } else {
                None
            }
        };
        // Freed outside the lock: unmapping a previous snapshot of a hundred MiB can take tens
        // of milliseconds, and the core's next `persist` and raft's reads wait on that lock.
        drop(replaced);
        let compact_to = self.compact_behind(index)?;
        tracing::debug!(dir = %self.inner.dir.display(), index, term, compact_to, "created snapshot");
        self.lock_reserve().resize(size);
        Ok(())
    }

    /// Compacts behind the newest snapshot again and deletes what that frees: for a caller
    /// whose write met a full volume (a compaction the volume refused after the last snapshot
    /// is retried here). A released reserve is allocated again by the next snapshot.
    pub fn reclaim_space(&self) -> Result<(), LogError> {
        let (index, size) = {
            let state = self.read_state();
            (snapshot_index(state.snapshot.as_ref()), state.snapshot_size)
        };
        if index > 0 {
            self.compact_behind(index)?;
        }
        // Topped up only when it holds nothing: a reserve released for a snapshot that did not
        // fit is not taken back from the writes waiting for that space.
        let mut reserve = self.lock_reserve();
        if reserve.held() > 0 {
            reserve.resize(size);
        }
        Ok(())
    }

    /// Whether the entries after the newest snapshot have passed the byte bound
    /// ([`LogOptions::snapshot_bytes`]): a snapshot is then due, however few they are.
    pub fn snapshot_due(&self) -> bool {
        self.snapshot_due_for_tree(u64::MAX)
    }

    /// [`RaftLog::snapshot_due`] for a tree now of about `tree_bytes`: once the tree has
    /// shrunk to under a quarter of the newest snapshot (a large delete), the bound is the
    /// one of the smaller tree, and a snapshot is also due when the log holds twice that in
    /// all, so that the entries of what was deleted leave memory soon after it.
    pub fn snapshot_due_for_tree(&self, tree_bytes: u64) -> bool {
        let state = self.read_state();
        let opts = &self.inner.opts;
        let since = state.mem.entry_bytes().saturating_sub(state.covered_bytes);
        if since == 0 {
            return false;
        }
        let shrunk = tree_bytes < state.snapshot_size / 4;
        let bound = if shrunk {
            opts.snapshot_bytes(tree_bytes.saturating_mul(2))
        } else {
            opts.snapshot_bytes(state.snapshot_size)
        };
        since >= bound || (shrunk && state.mem.entry_bytes() >= 2 * bound)
    }

    /// Writes a snapshot file; on a full volume, once more after releasing the reserve.
    fn write_snapshot_file(&self, snap: &Snapshot) -> Result<(), LogError> {
        let (dir, durability) = (&self.inner.dir, self.inner.durability);
        match snapfile::write(dir, durability, snap) {
            Ok(_) => Ok(()),
            // `write_atomically` removed what it wrote; the old files are untouched.
            Err(e) if e.is_space_io() => {
                self.note_no_space();
                if !self.lock_reserve().release() {
                    return Err(e.into_no_space());
                }
                durability.sync_dir(dir)?;
                snapfile::write(dir, durability, snap)
                    .map(drop)
                    .map_err(LogError::into_no_space)
            }
            Err(e) => Err(e),
        }
    }

    /// Discards what the snapshot at `index` makes obsolete: the entries before the older
    /// kept snapshot (the empty state at 0 if none), so that if the newest is found damaged at
    /// startup, that one plus the log still reaches everything this member acknowledged; but
    /// no further back than a tail of `keep_entries` entries or the snapshot byte bound before
    /// `index`, whichever is shorter. Then deletes the segments and snapshot files that frees.
    /// Returns the compaction point.
    fn compact_behind(&self, index: u64) -> Result<u64, LogError> {
        let mut wal = self.lock_wal();
        // Listed after the write: a leader's snapshot installed meanwhile counts too.
        let (fallback, fallback_term) = snapfile::list(&self.inner.dir)?
            .iter()
            .rev()
            .nth(SNAPSHOTS_KEPT - 1)
            .map_or((0, 0), |(older, term, _)| (*older, *term));
        let (compact, tail) = {
            let state = self.read_state();
            let mem = &state.mem;
            // Sending a follower further behind a snapshot instead costs about what sending it
            // that many entries would; and the tail is held in memory.
            let bound = self
                .inner
                .opts
                .snapshot_bytes(state.snapshot_size)
                .min(FOLLOWER_TAIL_BYTES);
            let tail = mem
                .tail_start(index.min(mem.last_index()), bound)
                .max(index.saturating_sub(self.inner.opts.keep_entries));
            let compact_to = tail.min(fallback);
            // The older snapshot's entry may be out of memory already (released below).
            let term = if compact_to == fallback {
                Ok(fallback_term)
            } else {
                mem.term(compact_to)
            };
            let compact = match term {
                Ok(term) if compact_to > mem.anchor().0 => Some(Op::Compact {
                    index: compact_to,
                    term,
                }),
                _ => None,
            };
            (compact, tail)
        };
        if let Some(op) = compact {
            match self.commit(&mut wal, vec![op.clone()]) {
                // The record is a few dozen bytes: the margin of the reserve is there for it.
                Err(e) if e.is_no_space() && self.lock_reserve().release() => {
                    self.inner.durability.sync_dir(&self.inner.dir)?;
                    self.commit(&mut wal, vec![op])?;
                }
                r => r?,
            }
        }
        let anchor = {
            let mut state = self.write_state();
            // Raft needs no entry before the tail: the ones between the older snapshot and it
            // stay on disk only (for a fallback at startup), not in memory too. Not worth it
            // for a few MiB.
            if state.mem.bytes_through(tail) >= RELEASE_FROM_BYTES {
                state.mem.release(tail);
            }
            state.covered_bytes = state
                .mem
                .bytes_through(snapshot_index(state.snapshot.as_ref()));
            state.mem.anchor().0
        };
        // Short of space: the reserve wants the space back at once, not after a background
        // unlink.
        let now = self.lock_reserve().is_short();
        if let Err(e) = wal.delete_obsolete_now_or_later(anchor, now) {
            tracing::warn!(error = %e, "could not delete compacted log segments; will retry at the next snapshot");
        }
        // Without the WAL's lock: unlinking a snapshot file of a hundred MiB and syncing the
        // directory must not hold up the next `persist`, which the core waits on.
        drop(wal);
        self.prune_snapshots();
        Ok(anchor)
    }

    /// The newest durable snapshot, read from its file: what the state machine restores from
    /// at startup. `None` also if the file cannot be read ([`RaftLog::load_latest_snapshot`]
    /// tells why).
    pub fn latest_snapshot(&self) -> Option<Snapshot> {
        self.load_latest_snapshot().ok().flatten()
    }

    /// The newest durable snapshot, read and verified from its file; `None` if there is none.
    pub fn load_latest_snapshot(&self) -> Result<Option<Snapshot>, LogError> {
        let Some((index, term)) = self
            .read_state()
            .snapshot
            .as_ref()
            .map(|s| (s.get_metadata().index, s.get_metadata().term))
        else {
            return Ok(None);
        };
        // Read without the lock: only files older than the two newest are ever deleted.
        let path = self.inner.dir.join(snapfile::file_name(term, index));
        snapfile::load(&path, index, term).map(Some)
    }

    /// The durable hard state.
    pub fn hard_state(&self) -> HardState {
        self.read_state().mem.hard_state.clone()
    }

    /// The durable conf state.
    pub fn conf_state(&self) -> ConfState {
        self.read_state().mem.conf_state.clone()
    }

    /// Encoded bytes of the entries held in memory (everything after the compaction point).
    pub fn memory_bytes(&self) -> u64 {
        self.read_state().mem.entry_bytes()
    }

    /// Encoded bytes of the entries held after the newest snapshot: what the next snapshot would
    /// let go of. The entries before it stay in memory too, back to the snapshot before, for a
    /// fallback; so the log holds about twice this at its peak.
    pub fn bytes_since_snapshot(&self) -> u64 {
        let state = self.read_state();
        state.mem.entry_bytes().saturating_sub(state.covered_bytes)
    }

    /// Sizes and fsync counters, for metrics.
    pub fn stats(&self) -> LogStats {
        let wal = self.lock_wal();
        let state = self.read_state();
        let segments = wal.segments();
        LogStats {
            segments: segments.len() as u64,
            segment_bytes: segments.iter().map(|s| s.bytes).sum(),
            entries: state.mem.len() as u64,
            entry_bytes: state.mem.entry_bytes(),
            first_index: state.mem.first_index(),
            last_index: state.mem.last_index(),
            snapshot_index: state
                .snapshot
                .as_ref()
                .map_or(0, |s| s.get_metadata().index),
            fsyncs: wal.sync_stats.fsyncs,
            last_fsync_micros: wal.sync_stats.last_fsync_micros,
            total_fsync_micros: wal.sync_stats.total_fsync_micros,
            poisoned: wal.is_poisoned(),
            snapshot_bytes: state.snapshot_size,
            reserved_bytes: self.lock_reserve().held(),
            no_space_errors: wal.no_space_errors
                + self
                    .inner
                    .snapshot_no_space
                    .load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    #[cfg(test)]
    pub(crate) fn break_disk_for_test(&self) -> std::io::Result<()> {
        self.lock_wal().break_active_for_test()
    }

    /// Writes `ops` durably, then applies them to the in-memory view.
    fn commit(&self, wal: &mut Wal, ops: Vec<Op>) -> Result<(), LogError> {
        self.write(wal, ops, true)
    }

    /// Writes `ops` as one record (durable before returning with `sync`), then applies them
    /// to the in-memory log.
    fn write(&self, wal: &mut Wal, ops: Vec<Op>, sync: bool) -> Result<(), LogError> {
        wal.append(&ops, &self.read_state().mem, sync)?;
        let mut state = self.write_state();
        for op in ops {
            if let Err(reason) = state.mem.apply(op) {
                // Validation should make this unreachable; if not, disk and memory now disagree.
                let reason = format!("durable record could not be applied in memory: {reason}");
                wal.poison(reason.clone());
                return Err(self.invalid(reason));
            }
        }
        Ok(())
    }

    fn check_append(&self, mem: &MemLog, entries: &[Entry]) -> Result<(), LogError> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        if first.index < mem.first_index() || first.index > mem.last_index() + 1 {
            return Err(self.invalid(format!(
                "entries starting at {} do not fit the log [{}, {}]",
                first.index,
                mem.first_index(),
                mem.last_index()
            )));
        }
        if let Ok(prev_term) = mem.term(first.index - 1)
            && first.term < prev_term
        {
            return Err(self.invalid(format!(
                "entry {} has term {} below the previous entry's term {prev_term}",
                first.index, first.term
            )));
        }
        for pair in entries.windows(2) {
            if pair[1].index != pair[0].index + 1 || pair[1].term < pair[0].term {
                return Err(self.invalid(format!(
                    "entries are not consecutive with non-decreasing terms at index {} (term {}) -> {} (term {})",
                    pair[0].index, pair[0].term, pair[1].index, pair[1].term
                )));
            }
        }
        Ok(())
    }

    /// Deletes segments and snapshot files made obsolete by a durable compaction point. Failure
    /// only costs disk space, so it is logged rather than reported: the durable change succeeded.
    fn reclaim(&self, wal: &mut Wal, compacted_to: u64) {
        self.retire_segments(wal, compacted_to);
        self.prune_snapshots();
    }

    fn retire_segments(&self, wal: &mut Wal, compacted_to: u64) {
        if let Err(e) = wal.delete_obsolete(compacted_to) {
            tracing::warn!(error = %e, "could not delete compacted log segments; will retry at the next snapshot");
        }
    }

    /// Keeps the newest `SNAPSHOTS_KEPT` files. Safe beside a snapshot being installed: that
    /// one is not listed until renamed into place, and only older ones are removed.
    fn prune_snapshots(&self) {
        if let Err(e) = snapfile::prune(&self.inner.dir, self.inner.durability, SNAPSHOTS_KEPT) {
            tracing::warn!(error = %e, "could not delete old snapshots; will retry at the next snapshot");
        }
    }

    fn invalid(&self, reason: String) -> LogError {
        LogError::InvalidRequest {
            dir: self.inner.dir.clone(),
            reason,
        }
    }

    fn lock_reserve(&self) -> MutexGuard<'_, Reserve> {
        self.inner
            .reserve
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a snapshot write that met a full volume (the WAL counts its own appends).
    fn note_no_space(&self) {
        self.inner
            .snapshot_no_space
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn lock_wal(&self) -> MutexGuard<'_, Wal> {
        // A panic while holding the lock cannot leave the Wal half-updated in a way that matters:
        // every failure path poisons it explicitly.
        self.inner
            .wal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn read_state(&self) -> RwLockReadGuard<'_, State> {
        self.inner
            .state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write_state(&self) -> RwLockWriteGuard<'_, State> {
        self.inner
            .state
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn snapshot_index(snap: Option<&Snapshot>) -> u64 {
    snap.map_or(0, |s| s.get_metadata().index)
}

fn snapshot_bytes(snap: Option<&Snapshot>) -> u64 {
    snap.map_or(0, |s| s.data.len() as u64)
}

/// `snap` without its data, which stays in its file.
fn metadata_only(snap: &Snapshot) -> Snapshot {
    Snapshot {
        metadata: snap.metadata.clone(),
        ..Default::default()
    }
}

/// The ops that replace the whole log by a snapshot.
fn install_ops(mem: &MemLog, meta: &SnapshotMetadata) -> Vec<Op> {
    let mut hs = mem.hard_state.clone();
    hs.term = hs.term.max(meta.term);
    hs.commit = meta.index;
    vec![
        Op::Reset {
            index: meta.index,
            term: meta.term,
        },
        Op::ConfState(meta.get_conf_state().clone()),
        Op::HardState(hs),
    ]
}

/// Picks the snapshot to start from, newest first: the first one whose file verifies and that the
/// log reaches back to (its index at or after the log's compaction point). Damaged newer files
/// are logged and set aside (renamed, not deleted) once a usable one is found; with none usable
/// the error says why and nothing on disk is changed. No snapshot at all is fine while the log
/// still starts at index 1: the state is then the log replayed from the start.
fn recover_snapshot(
    dir: &Path,
    durability: Durability,
    wal: &mut Wal,
    mem: &mut MemLog,
) -> Result<Option<Snapshot>, LogError> {
    let (anchor, _) = mem.anchor();
    let mut damaged: Vec<(PathBuf, String)> = Vec::new();
    let mut chosen = None;
    let mut too_old = None;
    for (index, term, path) in snapfile::list(dir)?.into_iter().rev() {
        match snapfile::load(&path, index, term) {
            Err(e @ LogError::Corrupt { .. }) => {
                tracing::error!(
                    path = %path.display(), error = %e,
                    "snapshot file is damaged; trying the one before it"
                );
                damaged.push((path, e.to_string()));
            }
            Err(e) => return Err(e),
            Ok(_) if index < anchor => {
                too_old = Some(index);
                break;
            }
            Ok(snap) => {
                chosen = Some(snap);
                break;
            }
        }
    }
    if chosen.is_none() && (anchor > 0 || too_old.is_some()) {
        let mut reason = match too_old {
            Some(index) => format!(
                "the newest intact snapshot (index {index}) is older than the log's compaction \
                 point {anchor}, so the entries in between are gone"
            ),
            None => format!(
                "no intact snapshot file is left and the log is compacted through index {anchor}"
            ),
        };
        for (path, why) in &damaged {
            reason.push_str(&format!("; damaged snapshot {}: {why}", path.display()));
        }
        return Err(LogError::Unrecoverable {
            dir: dir.to_path_buf(),
            reason,
        });
    }
    if let Some(snap) = &chosen {
        reconcile_with_snapshot(dir, wal, mem, snap)?;
    }
    for (path, _) in &damaged {
        let aside = snapfile::set_aside(dir, durability, path)?;
        tracing::error!(
            damaged = %path.display(), renamed_to = %aside.display(),
            fallback_index = chosen.as_ref().map_or(0, |s| s.get_metadata().index),
            "set aside a damaged snapshot; starting from the older snapshot (0: none) and the log after it"
        );
    }
    Ok(chosen)
}

/// Makes the log agree with the snapshot it starts from, which is at or after its compaction
/// point. A snapshot file is written before the log record that installs it, so a crash in
/// between leaves a log that does not contain the snapshot's entry; finishing the install is then
/// the only consistent choice.
fn reconcile_with_snapshot(
    dir: &Path,
    wal: &mut Wal,
    mem: &mut MemLog,
    snap: &Snapshot,
) -> Result<(), LogError> {
    let meta = snap.get_metadata();
    if mem.term(meta.index) == Ok(meta.term) {
        return Ok(());
    }
    tracing::warn!(
        dir = %dir.display(), snapshot_index = meta.index, snapshot_term = meta.term,
        "log does not contain the snapshot's entry: completing an interrupted snapshot install"
    );
    let ops = install_ops(mem, meta);
    wal.append(&ops, mem, true)?;
    for op in ops {
        mem.apply(op).map_err(|reason| {
            LogError::corrupt(dir, 0, format!("cannot install snapshot: {reason}"))
        })?;
    }
    if let Err(e) = wal.delete_obsolete(meta.index) {
        tracing::warn!(error = %e, "could not delete log segments replaced by the snapshot");
    }
    Ok(())
}

/// Creates the data directory, making its own directory entry durable when it is new.
fn create_dir(dir: &Path, durability: Durability) -> Result<(), LogError> {
    if dir.is_dir() {
        return Ok(());
    }
    // 0700 (`make_private` narrows one that already exists).
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(fsutil::DIR_MODE)
        .create(dir)
        .map_err(|e| LogError::io("create data directory", dir, e))?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        durability.sync_dir(parent)?;
    }
    Ok(())
}
