//! The replicated settings check: every member that has applied index `i` holds the same
//! settings, alarms and quota usage there. They decide at apply which writes a quota or the
//! disk alarm refuses, so members that disagreed at one index would diverge for good (what a
//! per-member `--check-identities` did during a rolling change). Usage is counted as nodes come
//! and go, and recomputed from the tree when a snapshot is installed or a member restarts: a
//! difference in either shows here.

use std::collections::BTreeMap;

use baton_machine::StateMachine;
use baton_machine::quota::Usage;
use baton_machine::settings::ClusterSettings;

/// What decides quotas and the alarm at one index.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decisive {
    settings: ClusterSettings,
    shared: Usage,
    namespaces: Vec<(String, Usage)>,
}

/// Each applied index seen, with what the first member seen there held.
#[derive(Default)]
pub struct SettingsView {
    at: BTreeMap<u64, (u64, Decisive)>,
}

impl SettingsView {
    /// Records member `id` at `applied`; an error when another member held something else there.
    pub fn observe(&mut self, id: u64, applied: u64, sm: &StateMachine) -> Result<(), String> {
        let usage = sm.tree().usage();
        let now = Decisive {
            settings: sm.settings().clone(),
            shared: usage.get(None),
            namespaces: usage
                .namespaces()
                .into_iter()
                .map(|(ns, u)| (ns.to_owned(), u))
                .collect(),
        };
        match self.at.get(&applied) {
            Some((first, seen)) if *seen != now => Err(format!(
                "members disagree on the settings or quota usage at index {applied}: member \
                 {first} had {seen:?}, member {id} has {now:?}"
            )),
            Some(_) => Ok(()),
            None => {
                self.at.insert(applied, (id, now));
                Ok(())
            }
        }
    }

    /// Times the applied tenancy policy (`checkIdentities`) changed during the run.
    pub fn policy_changes(&self) -> usize {
        let policies: Vec<bool> = self
            .at
            .values()
            .map(|(_, d)| d.settings.tenancy.check_identities)
            .collect();
        policies.windows(2).filter(|w| w[0] != w[1]).count()
    }

    /// Alarms seen raised during the run (for the run's summary).
    pub fn alarms_seen(&self) -> usize {
        let mut raised = 0;
        let mut up = false;
        for (_, d) in self.at.values() {
            let now = d.settings.alarmed();
            if now && !up {
                raised += 1;
            }
            up = now;
        }
        raised
    }
}
