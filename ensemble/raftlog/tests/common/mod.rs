//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::Path;

use baton_raftlog::{LogError, LogOptions, RaftLog};
use raft::GetEntriesContext;
use raft::Storage;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};

pub const MEMBER: u64 = 1;
pub const CLUSTER: &str = "test-cluster";

pub fn entry(index: u64, term: u64) -> Entry {
    Entry {
        index,
        term,
        ..Default::default()
    }
}

pub fn entry_with_data(index: u64, term: u64, data: &[u8]) -> Entry {
    Entry {
        data: data.to_vec().into(),
        ..entry(index, term)
    }
}

pub fn hard_state(term: u64, vote: u64, commit: u64) -> HardState {
    HardState {
        term,
        vote,
        commit,
        ..Default::default()
    }
}

pub fn voters(ids: &[u64]) -> ConfState {
    ConfState {
        voters: ids.to_vec(),
        ..Default::default()
    }
}

pub fn snapshot(index: u64, term: u64, ids: &[u64], data: &[u8]) -> Snapshot {
    let mut s = Snapshot::default();
    s.mut_metadata().index = index;
    s.mut_metadata().term = term;
    s.mut_metadata().set_conf_state(voters(ids));
    s.data = data.to_vec().into();
    s
}

/// Options for tests: no fsync unless a test is about durability, nothing kept after snapshots.
pub fn opts(sync: bool) -> LogOptions {
    LogOptions {
        sync,
        keep_entries: 0,
        ..LogOptions::default()
    }
}

pub fn open(dir: &Path, opts: LogOptions) -> Result<RaftLog, LogError> {
    RaftLog::open(dir, MEMBER, Some(CLUSTER), opts)
}

/// (index, term) of every entry the log serves.
pub fn all_entries(log: &RaftLog) -> Vec<(u64, u64)> {
    let (first, last) = (
        log.first_index().unwrap_or(0),
        log.last_index().unwrap_or(0),
    );
    log.entries(first, last + 1, None, GetEntriesContext::empty(false))
        .unwrap_or_default()
        .iter()
        .map(|e| (e.index, e.term))
        .collect()
}

pub fn pairs(entries: &[Entry]) -> Vec<(u64, u64)> {
    entries.iter().map(|e| (e.index, e.term)).collect()
}

/// Where the records of segment `path` end, read with the framing alone
/// (`[len u32][kind u8][crc u32][header crc u32][payload]` after an 8-byte magic): the newest
/// segment's blocks are allocated ahead of its records, so its size says nothing.
pub fn records_end(path: &Path) -> u64 {
    const MAGIC: usize = 8;
    const HEADER: usize = 13;
    let bytes = std::fs::read(path).expect("read segment");
    let mut at = MAGIC;
    while let Some(header) = bytes.get(at..at + HEADER) {
        if header.iter().all(|&b| b == 0) {
            break;
        }
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        at += HEADER + len;
    }
    at.min(bytes.len()) as u64
}
