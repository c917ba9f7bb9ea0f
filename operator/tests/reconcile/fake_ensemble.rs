//! A scripted ensemble behind the `EnsembleAdmin` seam: membership calls change it at once (an
//! added member is a learner until it first answers, then a ready voter), and every such call
//! is logged. It also keeps what the resume scenarios check: the journal of recorded and taken
//! steps, what could have cost the quorum, and when to stop the operator.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use baton_operator::ensemble::{
    AdminConnector, AdminError, Alarm, EnsembleAdmin, EnsembleSettings, MemberLevels, MemberStatus,
    SettingsValues,
};
use baton_operator::pki::AdminCredentials;
use baton_tls::{Identity, client_config_from_pem};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// `status.membershipOperation` written, as `kind memberId step` (`None`: cleared).
    Recorded(Option<String>),
    /// A step taken, as the record that must be in place before it: `add 4 add-learner`.
    Took(String),
}

/// The ensemble as the fake sees it.
#[derive(Debug, Default)]
pub struct Model {
    pub voters: BTreeSet<u64>,
    /// Added, not yet promoted (promoted when they first answer: they have caught up).
    pub learners: BTreeSet<u64>,
    pub leader: u64,
    /// Members whose admin API does not answer.
    pub down: BTreeSet<u64>,
    /// Members removed from Raft whose pods still run.
    pub removed: BTreeSet<u64>,
    /// Membership calls, in order: `add 4 (zk-3.zk-peers.prod.svc:2888) via 1`, ...
    pub calls: Vec<String>,
    /// The admin certificates the operator connected with, in order.
    pub admin_certs: Vec<String>,
    /// Operation records and steps taken, by the fake and the API server, in order.
    pub journal: Vec<Entry>,
    /// Steps taken that could have cost the quorum.
    pub violations: Vec<String>,
    /// Writes (status, StatefulSet, pod deletions, membership calls) the operator makes before
    /// it is stopped; `None`: it is not.
    pub writes_before_stop: Option<usize>,
    /// The replicated settings; `None`: members that predate them (nothing reported).
    pub settings: Option<SettingsValues>,
    /// Members' alarms in the replicated state.
    pub alarms: Vec<Alarm>,
    /// Leadership moves to this member just before the next settings change arrives (an
    /// election the operator has not seen yet).
    pub leader_before_settings: Option<u64>,
    /// The replicated feature level; 0: members that predate it (nothing reported).
    pub feature_level: u32,
    /// The level each member supports (its build, or `--max-feature-level`); 2 if not here.
    pub max_levels: BTreeMap<u64, u32>,
}

/// Cheap to clone; clones share the model.
#[derive(Debug, Clone, Default)]
pub struct FakeEnsemble {
    model: Arc<Mutex<Model>>,
    /// Notified when a membership call stops the operator.
    stopped: Arc<Notify>,
}

impl FakeEnsemble {
    /// An ensemble of `voters` led by `leader`.
    pub fn new(voters: &[u64], leader: u64) -> Self {
        let fake = FakeEnsemble::default();
        {
            let mut m = fake.model();
            m.voters = voters.iter().copied().collect();
            m.leader = leader;
        }
        fake
    }

    /// The shared model.
    pub fn model(&self) -> MutexGuard<'_, Model> {
        self.model
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts one write; true when it is the last before the operator is stopped.
    pub fn spend_write(&self) -> bool {
        let mut m = self.model();
        match m.writes_before_stop {
            Some(n) if n <= 1 => {
                m.writes_before_stop = None;
                true
            }
            Some(n) => {
                m.writes_before_stop = Some(n - 1);
                false
            }
            None => false,
        }
    }

    /// Completes when a membership call has stopped the operator.
    pub async fn stopped(&self) {
        self.stopped.notified().await;
    }

    /// After a membership call took effect: if it was the last write, the operator never
    /// hears back.
    async fn maybe_stop(&self) {
        if self.spend_write() {
            self.stopped.notify_one();
            std::future::pending::<()>().await;
        }
    }

    /// Takes the membership calls logged so far.
    pub fn take_calls(&self) -> Vec<String> {
        std::mem::take(&mut self.model().calls)
    }

    fn member(addr: &str) -> u64 {
        // zk-ORDINAL.zk-peers.prod.svc:8080
        let pod = addr.split('.').next().unwrap_or_default();
        let ordinal: u64 = pod
            .rsplit('-')
            .next()
            .and_then(|o| o.parse().ok())
            .unwrap_or(999);
        ordinal + 1
    }

    fn leader_call(&self, addr: &str, log: String) -> Result<MutexGuard<'_, Model>, AdminError> {
        let mut m = self.model();
        let via = Self::member(addr);
        if via != m.leader {
            return Err(AdminError::NotLeader {
                addr: addr.into(),
                leader_id: m.leader,
            });
        }
        m.calls.push(format!("{log} via {via}"));
        Ok(m)
    }

    /// The operation a call about member `id` belongs to: `reseed` while the operation
    /// recorded last is that member's reseed, else `plain`.
    fn kind(m: &Model, id: u64, plain: &str) -> &'static str {
        let last = m.journal.iter().rev().find_map(|e| match e {
            Entry::Recorded(r) => Some(r.as_deref()),
            Entry::Took(_) => None,
        });
        match last.flatten() {
            Some(r) if r.starts_with(&format!("reseed {id} ")) => "reseed",
            _ if plain == "add" => "add",
            _ => "remove",
        }
    }

    /// What `settings` of `/v1/status` says.
    fn settings(m: &Model) -> Option<EnsembleSettings> {
        Some(EnsembleSettings {
            set: true,
            applied_index: 10,
            values: m.settings?,
            alarms: m.alarms.clone(),
        })
    }

    /// Voters and learners.
    fn configuration(m: &Model) -> Vec<u64> {
        m.voters.union(&m.learners).copied().collect()
    }
}

/// Accepts only what a member would: a usable TLS client configuration whose certificate is
/// the admin of cluster `prod.zk`.
impl AdminConnector for FakeEnsemble {
    type Admin = FakeEnsemble;

    fn connect(&self, credentials: &AdminCredentials) -> Result<FakeEnsemble, AdminError> {
        let refuse = |why: String| AdminError::Credentials(why);
        client_config_from_pem(
            &credentials.ca_pem,
            Some((&credentials.cert_pem, &credentials.key_pem)),
        )
        .map_err(|e| refuse(e.to_string()))?;
        let der = CertificateDer::from_pem_slice(credentials.cert_pem.as_bytes())
            .map_err(|e| refuse(e.to_string()))?;
        let identity = Identity::of_certificate(&der).map_err(|e| refuse(e.to_string()))?;
        if identity != Identity::admin("prod.zk") {
            return Err(refuse(format!("{identity} is not the admin of prod.zk")));
        }
        self.model().admin_certs.push(credentials.cert_pem.clone());
        Ok(self.clone())
    }
}

impl EnsembleAdmin for FakeEnsemble {
    async fn status(&self, addr: &str) -> Result<MemberStatus, AdminError> {
        let mut m = self.model();
        let id = Self::member(addr);
        let unreachable = AdminError::Unreachable {
            addr: addr.into(),
            reason: "no such pod".into(),
        };
        if m.down.contains(&id) {
            return Err(unreachable);
        }
        if m.removed.contains(&id) {
            // A removed member keeps running until its pod goes, knowing no leader.
            return Ok(MemberStatus {
                id,
                role: "follower".into(),
                leader_id: 0,
                term: 3,
                commit_index: 10,
                applied_index: 10,
                ..MemberStatus::default()
            });
        }
        if m.learners.remove(&id) {
            m.voters.insert(id);
        }
        if !m.voters.contains(&id) {
            return Err(unreachable);
        }
        let levels = if m.feature_level == 0 {
            MemberLevels::default()
        } else {
            // The leader raises the level once every voter supports it (as members do).
            let supported = |levels: &BTreeMap<u64, u32>, id: &u64| -> u32 {
                levels.get(id).copied().unwrap_or(2)
            };
            let lowest = m.voters.iter().map(|v| supported(&m.max_levels, v)).min();
            let own = supported(&m.max_levels, &id);
            m.feature_level = m.feature_level.max(lowest.unwrap_or(1));
            MemberLevels {
                feature_level: Some(m.feature_level),
                max_feature_level: Some(own),
            }
        };
        Ok(MemberStatus {
            id,
            role: if id == m.leader { "leader" } else { "follower" }.into(),
            leader_id: m.leader,
            term: 3,
            commit_index: 10,
            applied_index: 10,
            members: Self::configuration(&m),
            learners: m.learners.iter().copied().collect(),
            cluster_id: "prod.zk".into(),
            settings: Self::settings(&m),
            levels,
        })
    }

    async fn put_settings(
        &self,
        addr: &str,
        changes: &serde_json::Value,
    ) -> Result<EnsembleSettings, AdminError> {
        {
            let mut m = self.model();
            if let Some(next) = m.leader_before_settings.take() {
                m.leader = next;
            }
        }
        let mut m = self.leader_call(addr, format!("settings {changes}"))?;
        let Some(current) = m.settings else {
            return Err(AdminError::Unexpected {
                addr: addr.into(),
                status: 404,
                body: "no such route".into(),
            });
        };
        // As the member does: the fields sent change, the others keep their value.
        let mut merged = serde_json::to_value(current).expect("settings serialize");
        for (k, v) in changes.as_object().into_iter().flatten() {
            merged[k] = v.clone();
        }
        m.settings = Some(
            serde_json::from_value(merged).map_err(|e| AdminError::Unexpected {
                addr: addr.into(),
                status: 400,
                body: e.to_string(),
            })?,
        );
        Self::settings(&m).ok_or_else(|| AdminError::Unexpected {
            addr: addr.into(),
            status: 500,
            body: "settings lost".into(),
        })
    }

    async fn add_member(&self, addr: &str, id: u64, peer_addr: &str) -> Result<(), AdminError> {
        {
            let mut m = self.leader_call(addr, format!("add {id} ({peer_addr})"))?;
            let kind = Self::kind(&m, id, "add");
            m.journal
                .push(Entry::Took(format!("{kind} {id} add-learner")));
            if Self::configuration(&m).contains(&id) {
                return Err(AdminError::Conflict {
                    addr: addr.into(),
                    message: format!("member {id} is already in the ensemble"),
                });
            }
            m.learners.insert(id);
            m.removed.remove(&id);
        }
        self.maybe_stop().await;
        Ok(())
    }

    async fn remove_member(&self, addr: &str, id: u64) -> Result<(), AdminError> {
        {
            let mut m = self.leader_call(addr, format!("remove {id}"))?;
            let kind = Self::kind(&m, id, "remove");
            m.journal
                .push(Entry::Took(format!("{kind} {id} remove-member")));
            let remaining: Vec<u64> = m.voters.iter().copied().filter(|v| *v != id).collect();
            let up = remaining.iter().filter(|v| !m.down.contains(v)).count();
            if id == m.leader || m.voters.contains(&id) && up <= remaining.len() / 2 {
                let violation = format!(
                    "removed member {id} of {:?} (leader {})",
                    m.voters, m.leader
                );
                m.violations.push(violation);
            }
            m.voters.remove(&id);
            m.learners.remove(&id);
            m.removed.insert(id);
        }
        self.maybe_stop().await;
        Ok(())
    }

    async fn transfer_leader(&self, addr: &str, to: Option<u64>) -> Result<(), AdminError> {
        {
            let label = to.map_or("any".to_string(), |t| t.to_string());
            let mut m = self.leader_call(addr, format!("transfer to {label}"))?;
            let current = m.leader;
            let took = format!("transfer-leader {current} transfer-leader");
            m.journal.push(Entry::Took(took));
            let next = to.or_else(|| m.voters.iter().copied().find(|v| *v != current));
            if let Some(next) = next {
                m.leader = next;
            }
        }
        self.maybe_stop().await;
        Ok(())
    }
}
