//! Snapshots written without stopping the core. The core takes an O(1) copy of the state
//! (`StateMachine::freeze`, exactly the state at the applied index), and a thread of its own
//! serializes it, checksums it and makes the file durable (`RaftLog::create_snapshot`), which
//! is also what hands it to raft-rs: `Storage::snapshot` serves the newest file's contents. A
//! million znodes took the core 1.6 s of serializing before; the copy takes microseconds.
//!
//! One snapshot at a time: the core starts the next only once it has collected the last. In
//! the simulation (the default here) the work is done on the core thread at once, so runs stay
//! deterministic; the server turns the thread on (`Core::snapshot_off_thread`).

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use baton_machine::FrozenState;
use baton_raftlog::{LogError, RaftLog};
use raft::eraftpb::ConfState;
use tokio::sync::oneshot;

use super::backup::{BackupRefused, BackupSnapshot};

/// A snapshot made durable.
#[derive(Debug)]
pub(super) struct Written {
    pub index: u64,
    pub bytes: usize,
    /// From the copy to the durable file.
    pub elapsed: Duration,
}

type Outcome = Result<Written, LogError>;

#[derive(Debug, Default)]
pub(super) struct Snapshotter {
    off_thread: bool,
    running: Option<JoinHandle<Outcome>>,
    /// Done on the core thread, waiting to be collected.
    done: Option<Outcome>,
}

impl Snapshotter {
    pub(super) fn set_off_thread(&mut self, on: bool) {
        self.off_thread = on;
    }

    pub(super) fn is_off_thread(&self) -> bool {
        self.off_thread
    }

    /// A snapshot is being written or waits to be collected.
    pub(super) fn busy(&self) -> bool {
        self.running.is_some() || self.done.is_some()
    }

    /// Writes `frozen` as the snapshot at its index, with the conf state of that index.
    /// `false` if no thread could be had: nothing was written, the caller tries again later.
    pub(super) fn start(
        &mut self,
        frozen: FrozenState,
        conf_state: ConfState,
        log: RaftLog,
    ) -> bool {
        let started = Instant::now();
        let work = move || write(frozen, conf_state, &log, started);
        if !self.off_thread {
            self.done = Some(work());
            return true;
        }
        match std::thread::Builder::new()
            .name("baton-snapshot".into())
            .spawn(work)
        {
            Ok(handle) => {
                self.running = Some(handle);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "no thread to write a snapshot; trying again later");
                false
            }
        }
    }

    /// The finished snapshot, if one finished since the last call.
    pub(super) fn collect(&mut self) -> Option<Outcome> {
        if let Some(done) = self.done.take() {
            return Some(done);
        }
        if !self.running.as_ref()?.is_finished() {
            return None;
        }
        self.running.take().map(join)
    }
}

impl Drop for Snapshotter {
    /// The thread holds the log (and so the data directory's lock): a member reopened in the
    /// same process must find it released.
    fn drop(&mut self) {
        if let Some(handle) = self.running.take() {
            let _ = join(handle);
        }
    }
}

fn join(handle: JoinHandle<Outcome>) -> Outcome {
    handle.join().unwrap_or_else(|_| {
        Err(LogError::InvalidRequest {
            dir: Default::default(),
            reason: "the snapshot thread panicked".into(),
        })
    })
}

fn write(frozen: FrozenState, conf_state: ConfState, log: &RaftLog, started: Instant) -> Outcome {
    let index = frozen.last_applied() as u64;
    let data = frozen.to_bytes();
    // The copy's nodes are freed here, off the core, as the live tree has moved on.
    drop(frozen);
    let bytes = data.len();
    log.create_snapshot(index, conf_state, data)?;
    Ok(Written {
        index,
        bytes,
        elapsed: started.elapsed(),
    })
}

/// Serializes `frozen` for the backups in `replies`, on a thread of its own when `off_thread`.
pub(super) fn serve_backups(
    frozen: FrozenState,
    term: u64,
    replies: Vec<oneshot::Sender<Result<BackupSnapshot, BackupRefused>>>,
    off_thread: bool,
) {
    let work = move || {
        let index = frozen.last_applied() as u64;
        let started = Instant::now();
        let data = frozen.to_bytes();
        drop(frozen);
        tracing::info!(
            index,
            term,
            bytes = data.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "snapshot taken for a backup"
        );
        let mut replies = replies;
        let last = replies.pop();
        for reply in replies {
            let _ = reply.send(Ok(BackupSnapshot {
                index,
                term,
                data: data.clone(),
            }));
        }
        if let Some(reply) = last {
            let _ = reply.send(Ok(BackupSnapshot { index, term, data }));
        }
    };
    if !off_thread {
        work();
        return;
    }
    if let Err(e) = std::thread::Builder::new()
        .name("baton-backup".into())
        .spawn(work)
    {
        // The replies went with the closure; their callers see the channel closed and retry.
        tracing::warn!(error = %e, "no thread to serialize a backup");
    }
}
