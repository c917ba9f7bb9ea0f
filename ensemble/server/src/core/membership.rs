//! Membership and leadership commands from the admin API, executed on the core thread.
//!
//! New members join as learners (they receive the log but do not vote) and the leader promotes
//! them once they have caught up, so adding a member never costs the ensemble its quorum.
//! A removal that would leave fewer live voters than a quorum is refused.

use raft::eraftpb::{ConfChangeSingle, ConfChangeType, ConfChangeV2};
use serde_json::json;
use tokio::sync::oneshot;

use super::Core;

/// How far (in entries) a learner may trail the leader's log and still be promoted.
const PROMOTION_LAG: u64 = 64;
/// How many heartbeat intervals of silence make a member count as not live for the safety
/// checks of membership changes: followers answer every heartbeat, so three missed answers
/// are a dead or cut-off member, not a slow one.
const LIVENESS_HEARTBEATS: u32 = 3;

/// A command from the admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminCommand {
    AddMember {
        id: u64,
        peer_addr: String,
    },
    RemoveMember {
        id: u64,
    },
    /// To `to`, or to the most caught-up voter when `None`.
    TransferLeader {
        to: Option<u64>,
    },
    /// Test-only (`--unsafe-testing-raw-proposals`): append `data` to the log unchecked.
    #[cfg(feature = "testing")]
    RawProposal {
        data: Vec<u8>,
    },
    /// `PUT /v1/settings`: change the replicated settings; answered once applied.
    ChangeSettings {
        changes: Vec<baton_machine::Setting>,
    },
}

/// Why an admin command was not carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    #[error("this member does not lead; ask the leader (member {leader_id}, 0 = none known)")]
    NotLeader { leader_id: u64 },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    BadRequest(String),
}

type Reply = oneshot::Sender<Result<serde_json::Value, AdminError>>;

impl Core {
    pub(super) fn on_admin(&mut self, command: AdminCommand, reply: Reply) {
        match command {
            // Answered later, once its entry applies.
            AdminCommand::ChangeSettings { changes } => self.on_change_settings(changes, reply),
            command => {
                let _ = reply.send(self.run_admin(command));
            }
        }
    }

    fn run_admin(&mut self, command: AdminCommand) -> Result<serde_json::Value, AdminError> {
        if !self.is_leader() {
            return Err(AdminError::NotLeader {
                leader_id: self.node.raft.leader_id,
            });
        }
        match command {
            AdminCommand::AddMember { id, peer_addr } => {
                if id == 0 {
                    return Err(AdminError::BadRequest("member id 0 is reserved".into()));
                }
                if self.conf_state.voters.contains(&id) || self.conf_state.learners.contains(&id) {
                    return Err(AdminError::Conflict(format!(
                        "member {id} is already in the ensemble"
                    )));
                }
                self.propose_membership(ConfChangeType::AddLearnerNode, id, peer_addr.as_bytes())?;
                // Start sending to it now so it catches up while the change commits.
                if let Some(t) = &self.transport {
                    t.add_peer(id, peer_addr.clone());
                }
                tracing::info!(member = id, %peer_addr, "adding a member as a learner");
                Ok(
                    json!({ "status": "proposed", "id": id, "peerAddr": peer_addr, "as": "learner" }),
                )
            }
            AdminCommand::RemoveMember { id } => {
                let is_voter = self.conf_state.voters.contains(&id);
                if !is_voter && !self.conf_state.learners.contains(&id) {
                    return Err(AdminError::Conflict(format!(
                        "member {id} is not in the ensemble"
                    )));
                }
                if is_voter {
                    self.check_removal_keeps_quorum(id)?;
                }
                self.propose_membership(ConfChangeType::RemoveNode, id, &[])?;
                tracing::info!(member = id, "removing a member");
                Ok(json!({ "status": "proposed", "id": id }))
            }
            AdminCommand::TransferLeader { to } => {
                let me = self.cfg.id;
                let target = match to {
                    Some(id) if id == me => {
                        return Ok(json!({ "status": "already leader", "leaderId": me }));
                    }
                    Some(id) if !self.conf_state.voters.contains(&id) => {
                        return Err(AdminError::BadRequest(format!(
                            "member {id} is not a voter"
                        )));
                    }
                    Some(id) => id,
                    None => self.most_caught_up_follower().ok_or_else(|| {
                        AdminError::Conflict("no other voter to transfer leadership to".into())
                    })?,
                };
                self.node.transfer_leader(target);
                tracing::info!(to = target, "transferring leadership");
                Ok(json!({ "status": "transferring", "to": target }))
            }
            #[cfg(feature = "testing")]
            AdminCommand::RawProposal { data } => {
                tracing::warn!(
                    bytes = data.len(),
                    "test-only raw proposal: appending unchecked bytes to the log"
                );
                self.node
                    .propose(vec![], data)
                    .map_err(|e| AdminError::Conflict(format!("cannot propose: {e}")))?;
                Ok(json!({ "status": "proposed" }))
            }
            // `on_admin` sends these to `on_change_settings`.
            AdminCommand::ChangeSettings { .. } => Err(AdminError::BadRequest(
                "a settings change is not a membership command".into(),
            )),
        }
    }

    fn propose_membership(
        &mut self,
        change: ConfChangeType,
        id: u64,
        context: &[u8],
    ) -> Result<(), AdminError> {
        if self.node.raft.has_pending_conf() {
            return Err(AdminError::Conflict(
                "another membership change is still in progress; retry".into(),
            ));
        }
        let mut single = ConfChangeSingle::default();
        single.set_change_type(change);
        single.node_id = id;
        let mut cc = ConfChangeV2::default();
        cc.mut_changes().push(single);
        cc.set_context(context.to_vec().into());
        self.node
            .propose_conf_change(vec![], cc)
            .map_err(|e| AdminError::Conflict(format!("raft refused the change: {e}")))
    }

    /// Refuses to remove voter `id` if the voters left could not form a quorum from the members
    /// that are answering the leader right now.
    fn check_removal_keeps_quorum(&self, id: u64) -> Result<(), AdminError> {
        let remaining: Vec<u64> = self
            .conf_state
            .voters
            .iter()
            .copied()
            .filter(|v| *v != id)
            .collect();
        if remaining.is_empty() {
            return Err(AdminError::Conflict("cannot remove the last voter".into()));
        }
        let live = remaining.iter().filter(|v| self.is_live(**v)).count();
        let quorum = remaining.len() / 2 + 1;
        if live < quorum {
            return Err(AdminError::Conflict(format!(
                "removing member {id} would leave {live} live voter(s) of {}, below a quorum of {quorum}",
                remaining.len()
            )));
        }
        Ok(())
    }

    /// Whether `id` answers the leader right now: raft-rs counts it active and a message
    /// from it arrived within [`LIVENESS_HEARTBEATS`] heartbeat intervals. `recent_active`
    /// alone stays true for up to an election timeout after a member dies, long enough to
    /// accept a removal that leaves no quorum.
    fn is_live(&self, id: u64) -> bool {
        if id == self.cfg.id {
            return true;
        }
        let window =
            self.cfg.tick * self.node.raft.heartbeat_timeout() as u32 * LIVENESS_HEARTBEATS;
        let heard = self
            .last_heard
            .get(&id)
            .is_some_and(|at| super::clock::since(self.now(), *at) <= window);
        heard
            && self
                .node
                .raft
                .prs()
                .get(id)
                .is_some_and(|p| p.recent_active)
    }

    fn most_caught_up_follower(&self) -> Option<u64> {
        let me = self.cfg.id;
        self.conf_state
            .voters
            .iter()
            .copied()
            .filter(|v| *v != me && self.is_live(*v))
            .max_by_key(|v| self.node.raft.prs().get(*v).map_or(0, |p| p.matched))
    }

    /// The leader promotes a learner once its log is within `PROMOTION_LAG` of its own.
    pub(super) fn promote_caught_up_learners(&mut self) {
        if self.conf_state.learners.is_empty() || self.node.raft.has_pending_conf() {
            return;
        }
        let last = self.node.raft.raft_log.last_index();
        let ready = self.conf_state.learners.iter().copied().find(|id| {
            self.node
                .raft
                .prs()
                .get(*id)
                .is_some_and(|p| p.matched + PROMOTION_LAG >= last && p.recent_active)
        });
        if let Some(id) = ready {
            tracing::info!(member = id, "learner caught up; promoting it to voter");
            if let Err(e) = self.propose_membership(ConfChangeType::AddNode, id, &[]) {
                tracing::warn!(member = id, error = %e, "could not promote the learner");
            }
        }
    }
}
