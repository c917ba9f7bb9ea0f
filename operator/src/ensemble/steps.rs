//! Membership steps on a running ensemble: add a member, remove one, move leadership, and wait
//! for their effect. The operator and the loopback tests run exactly this code.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::{AdminError, EnsembleAdmin, EnsembleView};

/// Where each member's admin API and peer port are, by member id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roster {
    members: BTreeMap<u64, (String, String)>,
}

impl Roster {
    /// Adds member `id` with its admin `HOST:PORT` and peer `HOST:PORT`.
    pub fn insert(&mut self, id: u64, admin_addr: String, peer_addr: String) {
        self.members.insert(id, (admin_addr, peer_addr));
    }

    /// Every member id, in order.
    pub fn ids(&self) -> Vec<u64> {
        self.members.keys().copied().collect()
    }

    /// Admin API address of member `id`.
    pub fn admin_addr(&self, id: u64) -> Option<&str> {
        self.members.get(&id).map(|(a, _)| a.as_str())
    }

    /// Peer address of member `id`.
    pub fn peer_addr(&self, id: u64) -> Option<&str> {
        self.members.get(&id).map(|(_, p)| p.as_str())
    }
}

/// A change to the ensemble's membership or leadership, sent to its current leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembershipStep {
    /// Add `id` (as a learner; the leader promotes it once it has caught up).
    Add { leader: u64, id: u64 },
    /// Remove voter `id` (never the leader: move leadership first).
    Remove { leader: u64, id: u64 },
    /// Move leadership from `leader` to `to` (or to the most caught-up voter).
    Transfer { leader: u64, to: Option<u64> },
}

impl MembershipStep {
    /// Whether `view` shows the step done: an added member votes and is ready, a removed one
    /// is gone from every remaining member's configuration, leadership has moved.
    pub fn is_settled(&self, view: &EnsembleView) -> bool {
        match *self {
            MembershipStep::Add { id, .. } => {
                view.voters().contains(&id) && view.ready_voters().contains(&id)
            }
            MembershipStep::Remove { id, .. } => {
                view.leader().is_some()
                    && view
                        .statuses
                        .values()
                        .filter(|s| s.id != id)
                        .all(|s| !s.members.contains(&id))
            }
            MembershipStep::Transfer { leader, to } => view.leader().is_some_and(|now| {
                now != leader && to.is_none_or(|to| to == now) && view.has_quorum()
            }),
        }
    }
}

impl std::fmt::Display for MembershipStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MembershipStep::Add { id, .. } => write!(f, "add member {id}"),
            MembershipStep::Remove { id, .. } => write!(f, "remove member {id}"),
            MembershipStep::Transfer {
                leader,
                to: Some(to),
            } => {
                write!(f, "move leadership from member {leader} to member {to}")
            }
            MembershipStep::Transfer { leader, to: None } => {
                write!(f, "move leadership away from member {leader}")
            }
        }
    }
}

/// Why a step could not be carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    #[error("member {0} is not in the roster")]
    UnknownMember(u64),
    #[error("{step}: {source}")]
    Admin {
        step: String,
        #[source]
        source: AdminError,
    },
    #[error("{what}: not reached within {waited:?}")]
    Timeout { what: String, waited: Duration },
}

/// Sends `step` to its leader. Repeating a step already done is not an error (a reconcile
/// may repeat one whose answer it never saw).
pub async fn run_action<A: EnsembleAdmin>(
    admin: &A,
    roster: &Roster,
    step: MembershipStep,
) -> Result<(), StepError> {
    let addr = |id: u64| roster.admin_addr(id).ok_or(StepError::UnknownMember(id));
    let wrap = |source: AdminError| StepError::Admin {
        step: step.to_string(),
        source,
    };
    let result = match step {
        MembershipStep::Add { leader, id } => {
            let peer = roster.peer_addr(id).ok_or(StepError::UnknownMember(id))?;
            admin.add_member(addr(leader)?, id, peer).await
        }
        MembershipStep::Remove { leader, id } => admin.remove_member(addr(leader)?, id).await,
        MembershipStep::Transfer { leader, to } => admin.transfer_leader(addr(leader)?, to).await,
    };
    match result {
        Ok(()) => Ok(()),
        Err(AdminError::Conflict { message, .. })
            if matches!(step, MembershipStep::Add { .. })
                && message.contains("already in the ensemble")
                || matches!(step, MembershipStep::Remove { .. })
                    && message.contains("not in the ensemble") =>
        {
            Ok(())
        }
        Err(e) => Err(wrap(e)),
    }
}

/// Polls the roster's statuses (with a short backoff: the admin API has no push) until
/// `condition` holds, and returns that view; `Timeout` after `limit`.
pub async fn wait_until<A, F>(
    admin: &A,
    roster: &Roster,
    what: &str,
    limit: Duration,
    mut condition: F,
) -> Result<EnsembleView, StepError>
where
    A: EnsembleAdmin,
    F: FnMut(&EnsembleView) -> bool,
{
    let deadline = Instant::now() + limit;
    let mut backoff = Duration::from_millis(25);
    loop {
        let view = EnsembleView::observe(admin, roster).await;
        if condition(&view) {
            return Ok(view);
        }
        if Instant::now() + backoff > deadline {
            return Err(StepError::Timeout {
                what: what.to_string(),
                waited: limit,
            });
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
}
