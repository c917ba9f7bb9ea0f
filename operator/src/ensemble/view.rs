//! One look at every member's `/v1/status`, and what it says about the ensemble as a whole.

use std::collections::BTreeMap;

use futures::future::join_all;

use super::{EnsembleAdmin, MemberStatus, Roster};

/// The statuses of the members that answered, and why the others did not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnsembleView {
    /// By member id.
    pub statuses: BTreeMap<u64, MemberStatus>,
    /// Members that did not answer, with the reason.
    pub unreachable: BTreeMap<u64, String>,
}

impl EnsembleView {
    /// Asks every member of `roster` for its status, all at once.
    pub async fn observe<A: EnsembleAdmin>(admin: &A, roster: &Roster) -> EnsembleView {
        let answers = join_all(
            roster
                .ids()
                .into_iter()
                .filter_map(|id| Some((id, roster.admin_addr(id)?.to_string())))
                .map(|(id, addr)| async move { (id, admin.status(&addr).await) }),
        )
        .await;
        let mut view = EnsembleView::default();
        for (id, answer) in answers {
            match answer {
                Ok(status) => {
                    view.statuses.insert(id, status);
                }
                Err(e) => {
                    view.unreachable.insert(id, e.to_string());
                }
            }
        }
        view
    }

    /// Every member of `roster` unreachable for `reason` (no way to ask them yet).
    pub fn unreachable(roster: &Roster, reason: &str) -> EnsembleView {
        EnsembleView {
            statuses: BTreeMap::new(),
            unreachable: roster
                .ids()
                .into_iter()
                .map(|id| (id, reason.to_string()))
                .collect(),
        }
    }

    /// The member that says it leads in the highest term (a deposed leader that has not
    /// heard of the new term yet loses to it).
    pub fn leader(&self) -> Option<u64> {
        self.statuses
            .values()
            .filter(|s| s.role == "leader" && s.leader_id == s.id)
            .max_by_key(|s| s.term)
            .map(|s| s.id)
    }

    /// The leader's status.
    fn leader_status(&self) -> Option<&MemberStatus> {
        self.statuses.get(&self.leader()?)
    }

    /// Voters as the leader knows them (empty when no leader answered).
    pub fn voters(&self) -> Vec<u64> {
        self.leader_status()
            .map(MemberStatus::voters)
            .unwrap_or_default()
    }

    /// Learners as the leader knows them.
    pub fn learners(&self) -> Vec<u64> {
        self.leader_status()
            .map(|s| s.learners.clone())
            .unwrap_or_default()
    }

    /// Whether `id` is a voter or a learner, as the leader knows.
    pub fn is_member(&self, id: u64) -> bool {
        self.leader_status()
            .is_some_and(|s| s.members.contains(&id))
    }

    /// Voters that answered, follow the leader, and are caught up.
    pub fn ready_voters(&self) -> Vec<u64> {
        let Some(leader) = self.leader() else {
            return Vec::new();
        };
        self.voters()
            .into_iter()
            .filter(|id| {
                self.statuses
                    .get(id)
                    .is_some_and(|s| s.is_ready() && s.leader_id == leader)
            })
            .collect()
    }

    /// The ensemble's feature level: the highest any member that answered has applied (the
    /// level only rises, so a member behind has not applied the raise yet). `None` when no
    /// member reports one (none answered, or all predate the feature level).
    pub fn feature_level(&self) -> Option<u32> {
        self.statuses
            .values()
            .filter_map(|s| s.levels.feature_level)
            .max()
    }

    /// The lowest level the members that answered support: what the level can rise to once
    /// they are all in the configuration (a member that predates the feature level supports 1).
    pub fn max_feature_level(&self) -> Option<u32> {
        self.statuses
            .values()
            .map(|s| s.levels.max_feature_level.unwrap_or(1))
            .min()
    }

    /// A leader and a majority of its voters ready: the ensemble serves writes.
    pub fn has_quorum(&self) -> bool {
        let voters = self.voters().len();
        voters > 0 && self.ready_voters().len() > voters / 2
    }

    /// Exactly `expected` are the voters, there are no learners, and every voter is ready and
    /// follows the one leader: the precondition of every membership or restart step.
    pub fn is_healthy(&self, expected: &[u64]) -> bool {
        let mut expected = expected.to_vec();
        expected.sort_unstable();
        self.leader().is_some()
            && self.voters() == expected
            && self.learners().is_empty()
            && self.ready_voters() == expected
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ensemble::MemberLevels;

    fn member(id: u64, leader: u64, term: u64, members: &[u64]) -> MemberStatus {
        MemberStatus {
            id,
            role: if id == leader { "leader" } else { "follower" }.into(),
            leader_id: leader,
            term,
            commit_index: 10,
            applied_index: 10,
            members: members.to_vec(),
            learners: Vec::new(),
            cluster_id: "c".into(),
            settings: None,
            levels: Default::default(),
        }
    }

    #[test]
    fn the_newest_leader_wins_and_health_needs_every_voter() {
        let mut view = EnsembleView::default();
        view.statuses.insert(1, member(1, 1, 3, &[1, 2, 3]));
        view.statuses.insert(2, member(2, 2, 4, &[1, 2, 3]));
        view.statuses.insert(3, member(3, 2, 4, &[1, 2, 3]));
        assert_eq!(view.leader(), Some(2));
        assert_eq!(view.ready_voters(), vec![2, 3]);
        assert!(view.has_quorum());
        assert!(!view.is_healthy(&[1, 2, 3]));
        view.statuses.insert(1, member(1, 2, 4, &[1, 2, 3]));
        assert!(view.is_healthy(&[3, 2, 1]));
        assert!(!view.is_healthy(&[1, 2]));
    }

    #[test]
    fn learners_and_lag_are_not_healthy() {
        let mut view = EnsembleView::default();
        let mut leader = member(1, 1, 2, &[1, 2]);
        leader.learners = vec![2];
        view.statuses.insert(1, leader);
        assert_eq!(view.voters(), vec![1]);
        assert!(!view.is_healthy(&[1]));
        let mut lagging = member(1, 1, 2, &[1]);
        lagging.applied_index = 9;
        view.statuses.insert(1, lagging);
        assert!(!view.has_quorum());
    }

    /// The level is the highest any member has applied (a member behind has not applied the
    /// raise yet); what it can rise to is the lowest any member supports, 1 for a member that
    /// predates the feature level.
    #[test]
    fn the_level_is_the_highest_applied_and_the_ceiling_the_lowest_supported() {
        let mut view = EnsembleView::default();
        assert_eq!(
            (view.feature_level(), view.max_feature_level()),
            (None, None)
        );
        for (id, level, max) in [(1, 2, 3), (2, 1, 2), (3, 2, 3)] {
            let mut m = member(id, 1, 2, &[1, 2, 3]);
            m.levels = MemberLevels {
                feature_level: Some(level),
                max_feature_level: Some(max),
            };
            view.statuses.insert(id, m);
        }
        assert_eq!(view.feature_level(), Some(2));
        assert_eq!(view.max_feature_level(), Some(2));
        view.statuses.insert(2, member(2, 1, 2, &[1, 2, 3]));
        assert_eq!(view.feature_level(), Some(2));
        assert_eq!(view.max_feature_level(), Some(1));
    }
}
