//! A scripted ensemble behind the `EnsembleAdmin` seam: membership calls change it at once
//! (an added member is promoted and ready immediately), and every such call is logged.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use baton_operator::ensemble::{AdminConnector, AdminError, EnsembleAdmin, MemberStatus};
use baton_operator::pki::AdminCredentials;
use baton_tls::{Identity, client_config_from_pem};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The ensemble as the fake sees it.
#[derive(Debug, Default)]
pub struct Model {
    pub voters: BTreeSet<u64>,
    pub leader: u64,
    /// Members whose admin API does not answer.
    pub down: BTreeSet<u64>,
    /// Members removed from Raft whose pods still run.
    pub removed: BTreeSet<u64>,
    /// Membership calls, in order: `add 4 (zk-3.zk-peers.prod.svc:2888) via 1`, ...
    pub calls: Vec<String>,
    /// The admin certificates the operator connected with, in order.
    pub admin_certs: Vec<String>,
}

/// Cheap to clone; clones share the model.
#[derive(Debug, Clone, Default)]
pub struct FakeEnsemble(Arc<Mutex<Model>>);

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
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
        let m = self.model();
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
        if !m.voters.contains(&id) {
            return Err(unreachable);
        }
        Ok(MemberStatus {
            id,
            role: if id == m.leader { "leader" } else { "follower" }.into(),
            leader_id: m.leader,
            term: 3,
            commit_index: 10,
            applied_index: 10,
            members: m.voters.iter().copied().collect(),
            learners: Vec::new(),
            cluster_id: "prod.zk".into(),
        })
    }

    async fn add_member(&self, addr: &str, id: u64, peer_addr: &str) -> Result<(), AdminError> {
        let mut m = self.leader_call(addr, format!("add {id} ({peer_addr})"))?;
        m.voters.insert(id);
        m.removed.remove(&id);
        Ok(())
    }

    async fn remove_member(&self, addr: &str, id: u64) -> Result<(), AdminError> {
        let mut m = self.leader_call(addr, format!("remove {id}"))?;
        m.voters.remove(&id);
        m.removed.insert(id);
        Ok(())
    }

    async fn transfer_leader(&self, addr: &str, to: Option<u64>) -> Result<(), AdminError> {
        let label = to.map_or("any".to_string(), |t| t.to_string());
        let mut m = self.leader_call(addr, format!("transfer to {label}"))?;
        let current = m.leader;
        let next = to.or_else(|| m.voters.iter().copied().find(|v| *v != current));
        if let Some(next) = next {
            m.leader = next;
        }
        Ok(())
    }
}
