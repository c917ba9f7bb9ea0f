//! Durable raft-rs `Storage`: a segmented write-ahead log and snapshot files.
//!
//! Layout of a data directory:
//! - `identity`: member id and cluster id, so a stale volume never rejoins as someone else;
//! - `LOCK`: held while a process has the log open;
//! - `log-<seq>.wal`: append-only segments of checksummed records, one record per `persist` call
//!   (group commit: one fdatasync per batch however many entries it holds); the newest segment's
//!   blocks are allocated ahead of its records, so that a sync makes no new file size durable;
//! - `snap-<term>-<index>.snap`: the newest two snapshots of the state machine. The log keeps the
//!   entries after the older one, so a newest snapshot found damaged at startup is set aside
//!   (`*.snap.corrupt`) and the older one plus the log used instead, losing nothing; damage with
//!   no way back is [`LogError::Unrecoverable`] (the member must be reseeded).
//!
//! - `reserve`: space held for the next snapshot, given up to write one on a full volume
//!   (`reserve.rs`).
//!
//! Every file is 0600 in a 0700 directory: entries and snapshots hold session passwords.
//!
//! `Storage` is served from memory: the entries after the newest snapshot and a short tail
//! before it (the entries back to the older snapshot stay on disk only); the newest snapshot is
//! read from its file when raft sends it. A snapshot is due by bytes
//! ([`LogOptions::snapshot_bytes`]), which bounds both; ARCHITECTURE.md ("What bounds the log")
//! has the table. A full volume is [`LogError::NoSpace`]: nothing written, the log writable. See
//! `record.rs` for how torn writes are told apart from corruption.

pub mod background;
mod batch;
pub mod crash_model;
mod error;
mod fsutil;
mod identity;
mod log;
mod memlog;
mod options;
mod record;
mod reserve;
mod segment;
mod snapfile;
mod storage;
mod wal;

#[cfg(test)]
mod write_failure_tests;

pub use error::LogError;
pub use identity::is_initialized;
pub use log::RaftLog;
pub use options::{LogOptions, LogStats};
