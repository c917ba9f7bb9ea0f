//! The ensemble's feature level as the core drives it (`baton_machine::feature`).
//!
//! Each member advertises the highest level it supports in every peer hello (this build's
//! newest, or `--max-feature-level`); the transport reports it as `PeerEvent::FeatureLevel`.
//! The leader raises the replicated level by a `SetSettings` entry only when every voter and
//! learner of the current configuration has advertised at least the new level (etcd's
//! capability model): a member not heard from yet, or one that advertises less, holds it back.
//! The entry is what switches the behaviour on, at the same index on every member.
//!
//! A member never applies a level above what it supports: it refuses to start on a data dir
//! at such a level, and stops if the log or a snapshot brings one (`CoreError::FeatureLevel`,
//! exit status [`crate::EXIT_FEATURE_LEVEL`]), since applying entries by rules it does not
//! know would make its replica differ from the others'.

use std::collections::HashMap;

use baton_machine::feature::SUPPORTED;
use baton_machine::{Command, CommandKind, Setting};

use super::{Core, CoreError};

/// What the core knows about the levels members support.
pub(super) struct FeatureLevels {
    /// The highest level this member supports (`--max-feature-level`, else this build's).
    max: u32,
    /// The highest level each peer advertised in its latest hello.
    peers: HashMap<u64, u32>,
    /// The (term, level) of the raise this member last proposed as leader: once per term is
    /// enough (a lost entry is proposed again by the next leader, or in the next term).
    proposed: Option<(u64, u32)>,
}

impl Default for FeatureLevels {
    fn default() -> Self {
        FeatureLevels {
            max: *SUPPORTED.end(),
            peers: HashMap::new(),
            proposed: None,
        }
    }
}

impl Core {
    /// Caps the level this member supports (`--max-feature-level`, so one build can play the
    /// previous release) and checks the restored state against it: a data dir already at a
    /// higher level is refused.
    pub fn set_max_feature_level(&mut self, max: u32) -> Result<(), CoreError> {
        self.levels.max = max;
        self.check_feature_level()
    }

    /// The highest level this member supports (what its hellos advertise).
    pub fn max_feature_level(&self) -> u32 {
        self.levels.max
    }

    /// Errs if the replicated level is above what this member supports.
    pub(super) fn check_feature_level(&self) -> Result<(), CoreError> {
        let level = self.sm.settings().feature_level.get();
        if level > self.levels.max {
            return Err(CoreError::FeatureLevel {
                level,
                max: self.levels.max,
                index: self.sm.last_applied(),
            });
        }
        Ok(())
    }

    /// A peer's hello said which level it supports.
    pub(super) fn on_peer_feature_level(&mut self, peer: u64, max: u32) {
        if self.levels.peers.insert(peer, max) != Some(max) {
            tracing::info!(
                peer,
                max_feature_level = max,
                "peer's supported feature level"
            );
        }
        self.maybe_raise_feature_level();
    }

    /// At the leader: proposes the highest level every voter and learner supports, if it is
    /// above the replicated one.
    pub(super) fn maybe_raise_feature_level(&mut self) {
        if !self.is_leader() {
            return;
        }
        let me = self.cfg.id;
        let conf = &self.conf_state;
        let mut target = self.levels.max;
        for id in conf
            .voters
            .iter()
            .chain(&conf.learners)
            .chain(&conf.voters_outgoing)
            .chain(&conf.learners_next)
        {
            if *id == me {
                continue;
            }
            match self.levels.peers.get(id) {
                Some(max) => target = target.min(*max),
                // Not heard from since this member started: it may run an older build.
                None => return,
            }
        }
        let current = self.sm.settings().feature_level.get();
        let term = self.term();
        if target <= current || self.levels.proposed == Some((term, target)) {
            return;
        }
        self.levels.proposed = Some((term, target));
        let cmd = Command {
            session_id: 0,
            xid: 0,
            time_ms: self.wall_ms(),
            kind: CommandKind::SetSettings {
                initial: false,
                changes: vec![Setting::FeatureLevel(target)],
            },
        };
        match self.node.propose(vec![], cmd.encode()) {
            Ok(()) => tracing::info!(
                from = current,
                to = target,
                "every member supports a higher feature level: proposing it"
            ),
            Err(e) => tracing::warn!(error = %e, "could not propose the feature level"),
        }
    }

    /// `baton_feature_level`: the replicated level.
    pub(super) fn publish_feature_level(&self) {
        self.metrics
            .feature_level
            .set(i64::from(self.sm.settings().feature_level.get()));
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;

    /// A one-member ensemble on `dir`, capped at `max`; stepped until it leads.
    fn member(dir: &tempfile::TempDir, max: u32) -> Result<Core, CoreError> {
        let (mut core, _) = super::super::tests::one_member_core(dir.path(), 100_000)?;
        core.set_max_feature_level(max)?;
        for _ in 0..3 {
            core.step(vec![])?;
        }
        Ok(core)
    }

    #[test]
    fn a_member_alone_raises_the_level_to_its_own_and_a_capped_one_refuses_a_raised_dir() {
        let capped = tempfile::tempdir().expect("dir");
        let core = member(&capped, 1).expect("starts");
        assert!(core.raft_view().is_leader);
        assert_eq!(core.state().settings().feature_level.get(), 1);
        drop(core);
        // Uncapped on the same dir: it leads, and raises the level at once.
        let core = member(&capped, 2).expect("starts on a level-1 dir");
        assert_eq!(core.state().settings().feature_level.get(), 2);
        drop(core);
        // Capped again: the entry that raised the level is replayed, and refused.
        match member(&capped, 1) {
            Err(CoreError::FeatureLevel {
                level: 2, max: 1, ..
            }) => {}
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("a member capped at 1 ran on a level-2 data dir"),
        }
    }
}
