//! One simulated member: the real `Core` (Raft, state machine, sessions) over a real
//! `RaftLog` in a directory, with the simulation's clock and network in place of the
//! system's. A crash drops the core between two steps; a restart reopens the directory.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_ensemble::core::{
    Clock, Core, CoreConfig, CoreError, CoreMsg, DeliberateBugs, ManualClock, PeerLinks,
};
use baton_ensemble::metrics::Metrics;
use baton_raftlog::{LogOptions, RaftLog};
use bytes::Bytes;
use raft::eraftpb::Message;
use tokio::sync::watch;

use crate::time::Micros;

/// Something a core queued for another member.
#[derive(Debug)]
pub enum Outgoing {
    Raft(Message),
    Control { to: u64, payload: Bytes },
}

/// The core's `PeerLinks`: it only queues; the world moves what was queued after each step.
struct SimLinks {
    outbox: Arc<Mutex<Vec<Outgoing>>>,
}

impl SimLinks {
    fn push(&self, out: Outgoing) -> bool {
        self.outbox
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(out);
        true
    }
}

impl PeerLinks for SimLinks {
    fn send(&self, msg: Message) -> bool {
        self.push(Outgoing::Raft(msg))
    }

    fn send_control(&self, to: u64, payload: Bytes) -> bool {
        self.push(Outgoing::Control { to, payload })
    }

    fn add_peer(&self, _id: u64, _addr: String) {}

    fn remove_peer(&self, _id: u64) {}
}

/// Settings every member of a run shares.
#[derive(Debug, Clone)]
pub struct MemberSettings {
    pub members: Vec<(u64, String)>,
    pub tick: Duration,
    pub snapshot_entries: u64,
    pub bugs: DeliberateBugs,
    /// `false` runs the log without fsync (`--unsafe-no-fsync`): a crash then keeps nothing.
    pub fsync: bool,
}

pub struct Member {
    pub id: u64,
    dir: PathBuf,
    /// `None` while crashed.
    pub core: Option<Core>,
    /// Bumped by every crash: messages and connections of an earlier life are dropped.
    pub incarnation: u64,
    outbox: Arc<Mutex<Vec<Outgoing>>>,
    /// A slow disk: the member handles nothing before this time.
    pub stalled_until: Micros,
    /// `--max-feature-level`: `Some(1)` plays the previous release until the member is
    /// "upgraded" (restarted with `None`, this build's newest level).
    pub max_level: Option<u32>,
}

impl Member {
    pub fn new(id: u64, dir: PathBuf) -> Member {
        Member {
            id,
            dir,
            core: None,
            incarnation: 0,
            outbox: Arc::default(),
            stalled_until: 0,
            max_level: None,
        }
    }

    /// Opens (or reopens after a crash) the member's core from its directory.
    pub fn start(
        &mut self,
        settings: &MemberSettings,
        clock: Arc<ManualClock>,
        election_ticks: usize,
    ) -> Result<(), CoreError> {
        let log = RaftLog::open(
            &self.dir,
            self.id,
            Some("sim"),
            // With the crash model on, fsyncs are recorded rather than made, and a crash keeps
            // only what they covered.
            LogOptions {
                sync: settings.fsync,
                ..LogOptions::default()
            },
        )?;
        let cfg = CoreConfig {
            id: self.id,
            min_session_timeout_ms: 400,
            max_session_timeout_ms: 60_000,
            snapshot_entries: settings.snapshot_entries,
            tick: settings.tick,
            reap_interval: Duration::from_secs(1),
            join: false,
            fixed_election_ticks: Some(election_ticks),
            handshake_timeout: baton_ensemble::core::HANDSHAKE_TIMEOUT,
            bugs: settings.bugs,
        };
        let links = SimLinks {
            outbox: self.outbox.clone(),
        };
        let (status, _) = watch::channel(Default::default());
        let clock: Arc<dyn Clock> = clock;
        let core = Core::new(
            cfg,
            log,
            &settings.members,
            Arc::new(Metrics::new()),
            status,
            Some(Box::new(links)),
            clock,
        )?;
        let mut core = core;
        if let Some(max) = self.max_level {
            core.set_max_feature_level(max)?;
        }
        core.set_disk_watermark(baton_ensemble::core::settings::DiskWatermark {
            min_free_bytes: crate::world::SIM_MIN_FREE_DISK,
            hysteresis_bytes: crate::world::SIM_MIN_FREE_DISK,
        });
        self.core = Some(core);
        Ok(())
    }

    /// Kills the member between two steps: its core, connections and queued output are gone,
    /// and its directory keeps only what was fsynced (the power went out).
    pub fn crash(&mut self) -> std::io::Result<()> {
        self.stop();
        baton_raftlog::crash_model::crash(&self.dir)
    }

    /// Stops the member cleanly (a rolling upgrade's pod going down): everything it wrote
    /// stays on disk, but its connections and queued output are gone.
    pub fn stop(&mut self) {
        self.core = None;
        self.incarnation += 1;
        self.stalled_until = 0;
        self.take_outgoing();
    }

    /// The highest feature level the member supports, as its hellos say (`None` while down).
    pub fn supported_level(&self) -> Option<u32> {
        self.core.as_ref().map(|c| c.max_feature_level())
    }

    pub fn is_up(&self) -> bool {
        self.core.is_some()
    }

    /// Hands `msgs` to the core as one batch; a crashed member ignores them.
    pub fn step(&mut self, msgs: Vec<CoreMsg>) -> Result<(), CoreError> {
        if let Some(core) = &mut self.core {
            core.step(msgs)?;
        }
        Ok(())
    }

    /// What the core queued for other members since the last call.
    pub fn take_outgoing(&self) -> Vec<Outgoing> {
        std::mem::take(&mut *self.outbox.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
