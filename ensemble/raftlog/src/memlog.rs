//! The in-memory view of the log: every entry since the compaction point, plus hard and conf state.
//!
//! Replay and live writes go through the same [`MemLog::apply`], so what a reopen rebuilds is by
//! construction what the running log held.

use std::collections::VecDeque;

use protobuf::Message as _;
use raft::StorageError;
use raft::eraftpb::{ConfState, Entry, HardState};

use crate::batch::Op;

/// An operation that cannot follow the log's current state, or a state that breaks its
/// invariant; the caller decides whether that is corruption (replay) or a bug (live write).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MemLogError {
    #[error("reset to index {index} is behind the compaction point {anchor}")]
    ResetBehindAnchor { index: u64, anchor: u64 },
    #[error("entry {index} is at or below the compaction point {anchor}")]
    EntryAtOrBelowAnchor { index: u64, anchor: u64 },
    #[error("entry {index} leaves a gap after the last entry {last}")]
    Gap { index: u64, last: u64 },
    #[error("compaction to index {index} names term {term} but the entry has term {held}")]
    CompactTermMismatch { index: u64, term: u64, held: u64 },
    #[error(
        "entries start at {first} but the log is compacted only to {anchor}: entries in between are missing"
    )]
    MissingEntries { first: u64, anchor: u64 },
}

/// Entries after the compaction point, the term at that point, and the latest hard/conf state.
#[derive(Debug, Clone, Default)]
pub(crate) struct MemLog {
    /// Index of the last discarded entry (0 for a fresh log): the durable compaction point,
    /// which segments record and replay restores.
    anchor_index: u64,
    anchor_term: u64,
    /// Index of the last entry dropped from memory (at or after the anchor); its term is kept
    /// for raft's matching. Entries between the anchor and here stay on disk only, for a
    /// fallback to the older snapshot at startup: raft, which has the newer one, never needs
    /// them. Replay holds them again until the next snapshot releases them.
    released_index: u64,
    released_term: u64,
    /// While the log is consistent, `entries[i].index == released_index + 1 + i`. Only a replay that
    /// starts at a segment after deleted ones may hold a run that starts later; [`MemLog::check`]
    /// rejects that if no later compaction closed the gap.
    entries: VecDeque<Entry>,
    /// Bytes of the entries' protobuf encoding, for stats.
    entry_bytes: u64,
    pub hard_state: HardState,
    pub conf_state: ConfState,
}

/// Compactions this large free their entries on a thread of their own: dropping ~95k entries
/// of 1 KiB took tens of ms, inside the snapshot the core thread waits for.
const DROP_ELSEWHERE_FROM: usize = 1_000;
/// ...and so do compactions of this many bytes, however few entries, so that the memory is
/// returned to the kernel after them too: 30 entries of 1 MiB each stayed in the process
/// (glibc keeps freed chunks of that size in its heap) until the next large compaction.
const DROP_ELSEWHERE_FROM_BYTES: u64 = 4 << 20;

fn drop_elsewhere(entries: Vec<Entry>, bytes: u64) {
    if entries.len() >= DROP_ELSEWHERE_FROM || bytes >= DROP_ELSEWHERE_FROM_BYTES {
        crate::background::run("baton-log-free", move || {
            drop(entries);
            // Here, after the free and on its thread: a trim started anywhere else could run
            // beside the free and return little of it.
            crate::background::return_freed_memory();
        });
    }
}

impl MemLog {
    /// The durable compaction point: index and term of the last entry discarded on disk.
    pub fn anchor(&self) -> (u64, u64) {
        (self.anchor_index, self.anchor_term)
    }

    /// First index `entries` may be asked for.
    pub fn first_index(&self) -> u64 {
        self.released_index + 1
    }

    /// Index of the last entry held, or the released point if none.
    pub fn last_index(&self) -> u64 {
        self.entries.back().map_or(self.released_index, |e| e.index)
    }

    /// Drops the entries through `index` from memory only (they stay on disk until a
    /// compaction): for entries that a snapshot covers and no follower is expected to need.
    /// Returns the bytes dropped.
    pub fn release(&mut self, index: u64) -> u64 {
        let Ok(term) = self.term(index) else {
            return 0;
        };
        if index <= self.released_index {
            return 0;
        }
        let count = self.entries.iter().take_while(|e| e.index <= index).count();
        let dropped: Vec<Entry> = self.entries.drain(..count).collect();
        let bytes: u64 = dropped.iter().map(|e| u64::from(e.compute_size())).sum();
        self.entry_bytes -= bytes;
        drop_elsewhere(dropped, bytes);
        self.released_index = index;
        self.released_term = term;
        bytes
    }

    /// Number of entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Encoded size of the entries held.
    pub fn entry_bytes(&self) -> u64 {
        self.entry_bytes
    }

    /// Encoded size of the entries held at or below `index`.
    pub fn bytes_through(&self, index: u64) -> u64 {
        self.entries
            .iter()
            .take_while(|e| e.index <= index)
            .map(|e| u64::from(e.compute_size()))
            .sum()
    }

    /// The lowest index `i` such that the entries after `i` up to `through` hold at most
    /// `bytes` (`through` itself if even the entry there would not fit).
    pub fn tail_start(&self, through: u64, bytes: u64) -> u64 {
        let mut start = through;
        let mut sum = 0u64;
        for e in self.entries.iter().rev().skip_while(|e| e.index > through) {
            sum = sum.saturating_add(u64::from(e.compute_size()));
            if sum > bytes {
                break;
            }
            start = e.index - 1;
        }
        start.max(self.released_index)
    }

    /// Term of the entry at `index`, per the `raft::Storage::term` contract.
    pub fn term(&self, index: u64) -> Result<u64, StorageError> {
        if index == self.released_index {
            return Ok(self.released_term);
        }
        if index < self.released_index {
            return Err(StorageError::Compacted);
        }
        self.get(index)
            .map(|e| e.term)
            .ok_or(StorageError::Unavailable)
    }

    /// Entries in `[low, high)`, the first always included, then as many as fit in `max_size`
    /// bytes (the exact rule of `raft::util::limit_size`).
    pub fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: Option<u64>,
    ) -> Result<Vec<Entry>, StorageError> {
        if low <= self.released_index {
            return Err(StorageError::Compacted);
        }
        if high > self.last_index() + 1 || low > high {
            return Err(StorageError::Unavailable);
        }
        let start = (low - self.first_index()) as usize;
        let end = (high - self.first_index()) as usize;
        let limit = max_size.unwrap_or(u64::MAX);
        let mut out = Vec::with_capacity(end - start);
        let mut size = 0u64;
        for entry in self.entries.range(start..end) {
            size = size.saturating_add(u64::from(entry.compute_size()));
            if !out.is_empty() && size > limit {
                break;
            }
            out.push(entry.clone());
        }
        Ok(out)
    }

    fn get(&self, index: u64) -> Option<&Entry> {
        let first = self.entries.front()?.index;
        let offset = index.checked_sub(first)?;
        self.entries.get(usize::try_from(offset).ok()?)
    }

    /// Applies one durable operation; fails on an operation that cannot follow the current state.
    pub fn apply(&mut self, op: Op) -> Result<(), MemLogError> {
        match op {
            Op::Entry(entry) => self.write_entry(entry),
            Op::HardState(hs) => {
                self.hard_state = hs;
                Ok(())
            }
            Op::ConfState(cs) => {
                self.conf_state = cs;
                Ok(())
            }
            Op::Compact { index, term } => self.compact(index, term),
            Op::Reset { index, term } => {
                if index < self.anchor_index {
                    return Err(MemLogError::ResetBehindAnchor {
                        index,
                        anchor: self.anchor_index,
                    });
                }
                self.truncate_from(0);
                self.anchor_index = index;
                self.anchor_term = term;
                self.released_index = index;
                self.released_term = term;
                Ok(())
            }
        }
    }

    fn write_entry(&mut self, entry: Entry) -> Result<(), MemLogError> {
        let index = entry.index;
        // Released entries are committed and covered by a snapshot: raft never rewrites them.
        if index <= self.released_index {
            return Err(MemLogError::EntryAtOrBelowAnchor {
                index,
                anchor: self.released_index,
            });
        }
        match self.entries.front().map(|e| e.index) {
            // Raft's append semantics: an entry at `index` replaces everything from `index` on.
            Some(first) if index >= first && index <= self.last_index() + 1 => {
                self.truncate_from((index - first) as usize);
            }
            Some(_) if index > self.last_index() + 1 => {
                return Err(MemLogError::Gap {
                    index,
                    last: self.last_index(),
                });
            }
            // Empty, or overwriting below the first held entry: the new entry starts the run.
            _ => self.truncate_from(0),
        }
        self.entry_bytes += u64::from(entry.compute_size());
        self.entries.push_back(entry);
        Ok(())
    }

    fn compact(&mut self, index: u64, term: u64) -> Result<(), MemLogError> {
        if index <= self.anchor_index {
            // An older compaction point, e.g. the checkpoint at the start of a later segment.
            return Ok(());
        }
        if let Some(held) = self.get(index)
            && held.term != term
        {
            return Err(MemLogError::CompactTermMismatch {
                index,
                term,
                held: held.term,
            });
        }
        let compacted = self.entries.iter().take_while(|e| e.index <= index).count();
        let dropped: Vec<Entry> = self.entries.drain(..compacted).collect();
        let bytes: u64 = dropped.iter().map(|e| u64::from(e.compute_size())).sum();
        self.entry_bytes -= bytes;
        drop_elsewhere(dropped, bytes);
        self.anchor_index = index;
        self.anchor_term = term;
        if index > self.released_index {
            self.released_index = index;
            self.released_term = term;
        }
        Ok(())
    }

    fn truncate_from(&mut self, keep: usize) {
        for e in self.entries.drain(keep..) {
            self.entry_bytes -= u64::from(e.compute_size());
        }
    }

    /// Verifies the invariant live operations maintain: the entries start right after the anchor.
    pub fn check(&self) -> Result<(), MemLogError> {
        match self.entries.front() {
            Some(first) if first.index != self.released_index + 1 => {
                Err(MemLogError::MissingEntries {
                    first: first.index,
                    anchor: self.released_index,
                })
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Default::default()
        }
    }

    fn log_of(entries: &[(u64, u64)]) -> MemLog {
        let mut log = MemLog::default();
        for &(i, t) in entries {
            log.apply(Op::Entry(entry(i, t))).expect("append");
        }
        log
    }

    fn terms(log: &MemLog) -> Vec<(u64, u64)> {
        log.entries.iter().map(|e| (e.index, e.term)).collect()
    }

    #[test]
    fn an_entry_replaces_the_suffix_from_its_index() {
        let mut log = log_of(&[(1, 1), (2, 1), (3, 1)]);
        log.apply(Op::Entry(entry(2, 2))).expect("overwrite");
        assert_eq!(terms(&log), vec![(1, 1), (2, 2)]);
        assert_eq!(
            log.entry_bytes(),
            log.entries
                .iter()
                .map(|e| u64::from(e.compute_size()))
                .sum::<u64>()
        );
    }

    #[test]
    fn the_tail_is_bounded_by_bytes() {
        let mut log = MemLog::default();
        for i in 1..=10 {
            let e = Entry {
                data: vec![0; 1000].into(),
                ..entry(i, 1)
            };
            log.apply(Op::Entry(e)).expect("append");
        }
        let one = u64::from(log.get(1).expect("entry").compute_size());
        // Entries 8, 9 and 10 fit in three entries' bytes: the tail starts after 7.
        assert_eq!(log.tail_start(10, 3 * one), 7);
        assert_eq!(log.tail_start(10, 3 * one + 1), 7);
        assert_eq!(log.tail_start(8, 2 * one), 6);
        assert_eq!(log.tail_start(10, 0), 10);
        assert_eq!(log.tail_start(10, u64::MAX), 0);
    }

    #[test]
    fn release_drops_from_memory_but_keeps_the_durable_anchor() {
        let mut log = log_of(&[(1, 1), (2, 1), (3, 2), (4, 2)]);
        log.apply(Op::Compact { index: 1, term: 1 })
            .expect("compact");
        assert!(log.release(3) > 0);
        assert_eq!(log.anchor(), (1, 1), "the durable point is unchanged");
        assert_eq!(log.first_index(), 4);
        assert_eq!(log.term(3), Ok(2));
        assert_eq!(log.term(2), Err(StorageError::Compacted));
        assert_eq!(terms(&log), vec![(4, 2)]);
        assert_eq!(log.check(), Ok(()));
        assert!(log.apply(Op::Entry(entry(3, 3))).is_err());
        // A later compaction below the released point moves only the durable anchor.
        log.apply(Op::Compact { index: 2, term: 1 })
            .expect("compact");
        assert_eq!((log.anchor(), log.first_index()), ((2, 1), 4));
        assert_eq!(log.release(2), 0);
    }

    #[test]
    fn a_gap_is_refused() {
        let mut log = log_of(&[(1, 1)]);
        assert!(log.apply(Op::Entry(entry(3, 1))).is_err());
        assert_eq!(log.last_index(), 1);
    }

    #[test]
    fn compaction_keeps_the_anchor_term_and_checks_it() {
        let mut log = log_of(&[(1, 1), (2, 2), (3, 3)]);
        assert!(log.apply(Op::Compact { index: 2, term: 9 }).is_err());
        log.apply(Op::Compact { index: 2, term: 2 })
            .expect("compact");
        assert_eq!(log.term(2), Ok(2));
        assert_eq!(log.term(1), Err(StorageError::Compacted));
        assert_eq!(log.first_index(), 3);
        assert!(log.apply(Op::Entry(entry(2, 5))).is_err());
        assert_eq!(log.check(), Ok(()));
    }

    #[test]
    fn a_run_that_starts_after_the_anchor_fails_the_check() {
        let mut log = MemLog::default();
        log.apply(Op::Entry(entry(5, 1))).expect("append");
        assert!(log.check().is_err());
        log.apply(Op::Compact { index: 4, term: 1 })
            .expect("compact");
        assert_eq!(log.check(), Ok(()));
    }
}
