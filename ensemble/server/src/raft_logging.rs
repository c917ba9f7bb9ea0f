//! Routes raft-rs's `slog` records into `tracing` under the `raft` target, keeping key-values
//! such as `raft_id` so a 3 a.m. reader sees which member said what.

use std::fmt::{self, Write as _};

use slog::{Drain, KV, Key, OwnedKVList, Record, Serializer};

/// A slog drain that emits every record as a tracing event.
pub struct TracingDrain;

struct KvLine(String);

impl Serializer for KvLine {
    fn emit_arguments(&mut self, key: Key, val: &fmt::Arguments) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record, values: &OwnedKVList) -> Result<(), slog::Never> {
        let mut kv = KvLine(String::new());
        let _ = record.kv().serialize(record, &mut kv);
        let _ = values.serialize(record, &mut kv);
        let msg = record.msg();
        match record.level() {
            slog::Level::Critical | slog::Level::Error => {
                tracing::error!(target: "raft", "{msg}{}", kv.0)
            }
            slog::Level::Warning => tracing::warn!(target: "raft", "{msg}{}", kv.0),
            slog::Level::Info => tracing::info!(target: "raft", "{msg}{}", kv.0),
            slog::Level::Debug => tracing::debug!(target: "raft", "{msg}{}", kv.0),
            slog::Level::Trace => tracing::trace!(target: "raft", "{msg}{}", kv.0),
        }
        Ok(())
    }
}

/// A logger for `RawNode::new` tagged with this member's id.
pub fn raft_logger(member_id: u64) -> slog::Logger {
    slog::Logger::root(TracingDrain.fuse(), slog::o!("raft_id" => member_id))
}
