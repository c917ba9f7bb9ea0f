//! The membership operation in flight, kept in `status.membershipOperation` so that an operator
//! that restarts between two steps (or another replica that takes over) carries on from where
//! the last one stopped instead of inferring it. Pure, like `plan`; the reconciler records the
//! operation before it takes each step.
//!
//! Every reconcile (`decide`):
//! - the recorded operation moves past each step whose effect is already visible (an added
//!   member in the leader's configuration, a deleted pod re-created, ...), so no step is taken
//!   twice; an await step whose action shows as lost (the leader no longer lists an added
//!   member) goes back to that action;
//! - the plan, from what it sees now, names the operation it would start. An action step is
//!   taken only when that is this very operation, so after a restart every check the plan makes
//!   holds again (a healthy quorum, never removing the leader). Another operation replaces the
//!   recorded one (the spec changed, or a broken member must be restarted first); while the plan
//!   waits, the operation waits;
//! - the StatefulSet's replicas change only at an operation's replica step.

use k8s_openapi::jiff::Timestamp;

use crate::crd::{MembershipOperation, OperationKind, OperationStep};
use crate::ensemble::MembershipStep;
use crate::plan::{self, Action, Observed, Phase, Plan};

/// What one reconcile does about membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The operation to record before its step is taken, and to carry on with.
    pub operation: Option<MembershipOperation>,
    /// The plan to carry out: the fresh one, its action and replicas held back while the
    /// operation is not at the step they belong to.
    pub plan: Plan,
}

/// Resumes the `recorded` operation or starts the one `plan` asks for.
pub fn decide(
    recorded: Option<&MembershipOperation>,
    plan: Plan,
    observed: &Observed,
    now: Timestamp,
) -> Decision {
    let wanted = start(&plan, observed, now);
    let resumed = recorded.cloned().and_then(|op| resume(op, observed));
    let operation = match (resumed, &wanted) {
        (Some(op), Some(wanted)) if !op.is_same(wanted) => {
            tracing::info!(abandoned = ?op, "the plan asks for another membership operation");
            resume(wanted.clone(), observed)
        }
        (Some(op), _) => Some(op),
        (None, wanted) => wanted.clone().and_then(|w| resume(w, observed)),
    };
    let Some(op) = &operation else {
        return Decision {
            operation,
            plan: Plan {
                action: None,
                ..plan
            },
        };
    };
    // The plan's action and replicas are this operation's (any other replaced it above), or
    // the plan waits and changes nothing; they are held while the operation is elsewhere.
    let held = observed
        .statefulset
        .as_ref()
        .map_or(plan.membership, |sts| plan::current(sts, observed.stored));
    let replica_step = matches!(
        op.step,
        OperationStep::RaiseReplicas | OperationStep::LowerReplicas
    );
    // A reseed keeps the replicas and lowers the bootstrap count below the member, so that its
    // new pod joins rather than bootstraps (see `reseed::plan`).
    let own_membership = replica_step || op.kind == OperationKind::Reseed;
    Decision {
        plan: Plan {
            membership: if own_membership {
                plan.membership
            } else {
                held
            },
            // At a replica step the action is the next step's, taken once the apply is done.
            action: if op.step.is_await() {
                None
            } else {
                plan.action
            },
            phase: plan.phase,
        },
        operation,
    }
}

impl OperationStep {
    /// Waits for the effect of the action before it; takes none itself.
    pub fn is_await(self) -> bool {
        matches!(
            self,
            OperationStep::AwaitPromotion
                | OperationStep::AwaitRemoval
                | OperationStep::AwaitLeader
                | OperationStep::AwaitPod
        )
    }
}

impl MembershipOperation {
    /// The member the operation is about.
    pub fn member(&self) -> u64 {
        u64::try_from(self.member_id).unwrap_or(0)
    }

    /// The same operation (its step aside).
    pub fn is_same(&self, other: &MembershipOperation) -> bool {
        self.kind == other.kind && self.member_id == other.member_id
    }

    /// At the next step; `None` once the last is done.
    pub fn next(self) -> Option<MembershipOperation> {
        let steps = self.kind.steps();
        let at = steps.iter().position(|s| *s == self.step)?;
        let step = *steps.get(at + 1)?;
        Some(MembershipOperation { step, ..self })
    }

    /// Past its replica step once the StatefulSet was applied with `replicas`.
    pub fn after_apply(self, replicas: i32) -> Option<MembershipOperation> {
        match self.step {
            OperationStep::RaiseReplicas | OperationStep::LowerReplicas
                if self.replicas_reached(replicas) =>
            {
                self.next()
            }
            _ => Some(self),
        }
    }

    fn replicas_reached(&self, replicas: i32) -> bool {
        match self.step {
            OperationStep::RaiseReplicas => replicas >= self.target_replicas,
            _ => replicas <= self.target_replicas,
        }
    }

    fn back(self) -> MembershipOperation {
        let steps = self.kind.steps();
        let at = steps.iter().position(|s| *s == self.step).unwrap_or(0);
        MembershipOperation {
            step: steps[at.saturating_sub(1)],
            ..self
        }
    }
}

/// Where a reseed of member `id` stands: the `recorded` operation if it is that reseed, else
/// one starting `now`, moved past every step whose effect is visible; `None` once it is done.
pub fn reseed_step(
    recorded: Option<&MembershipOperation>,
    id: u64,
    observed: &Observed,
    now: Timestamp,
) -> Option<OperationStep> {
    let op = recorded
        .filter(|op| op.kind == OperationKind::Reseed && op.member() == id)
        .cloned()
        .unwrap_or_else(|| MembershipOperation {
            kind: OperationKind::Reseed,
            step: OperationKind::Reseed.steps()[0],
            member_id: i64::try_from(id).unwrap_or(i64::MAX),
            target_replicas: observed.statefulset.as_ref().map_or(0, |s| s.replicas),
            started_at: now.to_string(),
        });
    resume(op, observed).map(|op| op.step)
}

/// Whether `op`'s every step shows as done.
pub fn is_done(op: &MembershipOperation, observed: &Observed) -> bool {
    resume(op.clone(), observed).is_none()
}

/// The operation the plan's step starts, at its first step.
fn start(plan: &Plan, observed: &Observed, now: Timestamp) -> Option<MembershipOperation> {
    let replicas = observed.statefulset.as_ref()?.replicas;
    let transfer = matches!(
        plan.action,
        Some(Action::Membership(MembershipStep::Transfer { .. }))
    );
    // Every step of a reseed belongs to it, but moving leadership off the member first.
    let reseed = match plan.phase {
        Phase::Reseeding(id) if !transfer => Some(id),
        _ => None,
    };
    let (kind, id, target) = match plan.action {
        _ if reseed.is_some() => (OperationKind::Reseed, reseed.unwrap_or_default(), replicas),
        Some(Action::Membership(MembershipStep::Add { id, .. })) => {
            (OperationKind::Add, id, plan.membership.replicas)
        }
        // Removing the highest member lets its pod go; any other keeps the replicas.
        Some(Action::Membership(MembershipStep::Remove { id, .. })) => {
            let target = if id == replicas as u64 {
                replicas - 1
            } else {
                replicas
            };
            (OperationKind::Remove, id, target)
        }
        Some(Action::Membership(MembershipStep::Transfer { leader, .. })) => {
            (OperationKind::TransferLeader, leader, replicas)
        }
        Some(Action::RestartMember { id }) => (OperationKind::Restart, id, replicas),
        // Only a reseed replaces a volume.
        Some(Action::ReplaceVolume { id }) => (OperationKind::Reseed, id, replicas),
        // The plan lowers the replicas once Raft has dropped the highest member: a removal whose
        // record is gone. Resumed from its first step, it waits until every member dropped it.
        None if plan.membership.replicas < replicas => (
            OperationKind::Remove,
            replicas as u64,
            plan.membership.replicas,
        ),
        None => return None,
    };
    Some(MembershipOperation {
        kind,
        step: kind.steps()[0],
        member_id: i64::try_from(id).unwrap_or(i64::MAX),
        target_replicas: target,
        started_at: now.to_string(),
    })
}

/// Where a step stands, as observed.
enum Progress {
    Done,
    Pending,
    /// An await step whose action did not take (e.g. an add lost with a leader change).
    Lost,
}

/// `op` moved past every step whose effect is visible; `None` once it is done.
fn resume(mut op: MembershipOperation, observed: &Observed) -> Option<MembershipOperation> {
    if !op.kind.steps().contains(&op.step) || op.member() == 0 {
        tracing::warn!(?op, "ignoring a malformed membership operation");
        return None;
    }
    loop {
        match progress(&op, observed) {
            Progress::Done => op = op.next()?,
            Progress::Pending => return Some(op),
            Progress::Lost => return Some(op.back()),
        }
    }
}

fn progress(op: &MembershipOperation, observed: &Observed) -> Progress {
    let view = &observed.ensemble;
    let id = op.member();
    let leader = view.leader();
    // In the leader's configuration, as a voter or a learner (nothing is known without a leader).
    let listed = view.is_member(id);
    let sts = observed.statefulset.as_ref();
    let pod = observed.pods.iter().find(|p| p.id == id);
    let volume = observed.volumes.iter().find(|v| v.id == id);
    // A claim made after the operation started: the StatefulSet's replacement.
    let new_volume = volume.is_some_and(|v| {
        !v.terminating
            && v.created
                .zip(op.started_at.parse::<Timestamp>().ok())
                .is_some_and(|(created, started)| created > started)
    });
    let pod_up = pod.is_some_and(|p| !p.terminating);
    let done = match op.step {
        OperationStep::RaiseReplicas | OperationStep::LowerReplicas => {
            op.replicas_reached(sts.map_or(0, |s| s.replicas))
        }
        OperationStep::AddLearner => listed,
        OperationStep::AwaitPromotion if leader.is_some() && !listed => return Progress::Lost,
        OperationStep::AwaitPromotion => view.voters().contains(&id),
        OperationStep::RemoveMember => leader.is_some() && !listed,
        OperationStep::AwaitRemoval if listed => return Progress::Lost,
        OperationStep::AwaitRemoval => MembershipStep::Remove { leader: 0, id }.is_settled(view),
        OperationStep::TransferLeader => leader.is_some_and(|l| l != id),
        OperationStep::AwaitLeader if leader == Some(id) => return Progress::Lost,
        OperationStep::AwaitLeader => view.has_quorum(),
        // Gone, going, or already at the new revision.
        OperationStep::DeletePod => {
            let new_revision = sts.and_then(|s| s.update_revision.as_ref());
            pod.is_none_or(|p| {
                p.terminating || new_revision.is_some() && p.revision.as_ref() == new_revision
            })
        }
        // Deleted (or going), or already replaced. A claim still in use is only marked for
        // deletion until its pod goes.
        OperationStep::DeleteVolume => {
            new_volume || volume.is_none_or(|v| v.terminating) && !pod_up
        }
        // A pod back on its old claim (still going) or on none: delete it again.
        OperationStep::AwaitPod
            if op.kind == OperationKind::Reseed
                && pod_up
                && volume.is_none_or(|v| v.terminating) =>
        {
            return Progress::Lost;
        }
        OperationStep::AwaitPod => pod_up,
    };
    if done {
        Progress::Done
    } else {
        Progress::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::StoredMembership;
    use crate::ensemble::{EnsembleView, MemberStatus};
    use crate::plan::{ObservedPod, ObservedStatefulSet, plan};

    /// `voters` and `learners` as every member reports them, led by `leader`, all caught up.
    fn observed(replicas: i32, voters: &[u64], learners: &[u64], leader: u64) -> Observed {
        let mut view = EnsembleView::default();
        for &id in voters.iter().chain(learners) {
            let status = MemberStatus {
                id,
                role: if id == leader { "leader" } else { "follower" }.into(),
                leader_id: leader,
                term: 2,
                commit_index: 7,
                applied_index: 7,
                members: voters.iter().chain(learners).copied().collect(),
                learners: learners.to_vec(),
                cluster_id: "prod.zk".into(),
                settings: None,
                levels: Default::default(),
            };
            view.statuses.insert(id, status);
        }
        Observed {
            statefulset: Some(ObservedStatefulSet {
                replicas,
                generation: Some(1),
                observed_generation: Some(1),
                update_revision: Some("r1".into()),
            }),
            stored: Some(StoredMembership {
                replicas,
                bootstrap: 3,
            }),
            pods: (1..=replicas as u64)
                .map(|id| ObservedPod {
                    id,
                    revision: Some("r1".into()),
                    terminating: false,
                    ready: true,
                })
                .collect(),
            ensemble: view,
            volumes: Vec::new(),
        }
    }

    fn now() -> Timestamp {
        "2026-11-23T12:00:00Z"
            .parse()
            .unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn recorded(
        kind: OperationKind,
        step: OperationStep,
        id: i64,
        target: i32,
    ) -> MembershipOperation {
        MembershipOperation {
            kind,
            step,
            member_id: id,
            target_replicas: target,
            started_at: "2026-11-23T11:59:00Z".into(),
        }
    }

    fn run(desired: i32, recorded: Option<&MembershipOperation>, o: &Observed) -> Decision {
        decide(recorded, plan(desired, o), o, now())
    }

    #[test]
    fn a_scale_up_starts_at_raising_the_replicas_and_takes_the_add_after_it() {
        let o = observed(3, &[1, 2, 3], &[], 1);
        let d = run(5, None, &o);
        let op = d.operation.clone().expect("an operation");
        assert_eq!(
            op,
            MembershipOperation {
                started_at: now().to_string(),
                ..recorded(OperationKind::Add, OperationStep::RaiseReplicas, 4, 4)
            }
        );
        assert_eq!(d.plan.membership.replicas, 4);
        assert!(matches!(
            d.plan.action,
            Some(Action::Membership(MembershipStep::Add { id: 4, .. }))
        ));
        let op = op.after_apply(4).expect("not done");
        assert_eq!(op.step, OperationStep::AddLearner);
        assert_eq!(
            op.clone().next().map(|o| o.step),
            Some(OperationStep::AwaitPromotion)
        );
        assert_eq!(op.next().and_then(MembershipOperation::next), None);
    }

    #[test]
    fn an_add_the_leader_already_lists_is_not_sent_again() {
        // Restarted after POST /v1/members: member 4 is a learner, catching up.
        let at_add = recorded(OperationKind::Add, OperationStep::AddLearner, 4, 4);
        let o = observed(4, &[1, 2, 3], &[4], 1);
        let d = run(5, Some(&at_add), &o);
        assert_eq!(
            d.operation.as_ref().map(|o| o.step),
            Some(OperationStep::AwaitPromotion)
        );
        assert_eq!(
            d.operation.as_ref().map(|o| o.started_at.as_str()),
            Some("2026-11-23T11:59:00Z")
        );
        assert_eq!(d.plan.action, None);
        // Promoted: the operation is done and the next one starts.
        let o = observed(4, &[1, 2, 3, 4], &[], 1);
        let d = run(5, d.operation.as_ref(), &o);
        assert_eq!(
            d.operation.as_ref().map(|o| (o.member_id, o.step)),
            Some((5, OperationStep::RaiseReplicas))
        );
        // Recorded but never sent (the leader does not list it): sent now.
        let o = observed(4, &[1, 2, 3], &[], 1);
        let d = run(5, Some(&at_add), &o);
        assert_eq!(
            d.operation.as_ref().map(|o| o.step),
            Some(OperationStep::AddLearner)
        );
        assert!(matches!(
            d.plan.action,
            Some(Action::Membership(MembershipStep::Add { id: 4, .. }))
        ));
    }

    #[test]
    fn a_removal_holds_the_replicas_until_every_member_dropped_the_member() {
        let removing = recorded(OperationKind::Remove, OperationStep::RemoveMember, 5, 4);
        let mut o = observed(5, &[1, 2, 3, 4], &[], 1);
        // Member 4 has not applied the removal yet.
        if let Some(s) = o.ensemble.statuses.get_mut(&4) {
            s.members.push(5);
        }
        let d = run(3, Some(&removing), &o);
        assert_eq!(
            d.operation.as_ref().map(|o| o.step),
            Some(OperationStep::AwaitRemoval)
        );
        assert_eq!(
            d.plan.membership.replicas, 5,
            "the plan alone would lower them"
        );
        let o = observed(5, &[1, 2, 3, 4], &[], 1);
        let d = run(3, d.operation.as_ref(), &o);
        assert_eq!(
            d.operation.as_ref().map(|o| o.step),
            Some(OperationStep::LowerReplicas)
        );
        assert_eq!(d.plan.membership.replicas, 4);
        assert_eq!(d.operation.and_then(|o| o.after_apply(4)), None);
    }

    #[test]
    fn a_recorded_removal_is_taken_only_while_the_plan_would_take_it() {
        let removing = recorded(OperationKind::Remove, OperationStep::RemoveMember, 5, 4);
        // Member 2 went down: the plan waits, and so does the removal.
        let mut o = observed(5, &[1, 2, 3, 4, 5], &[], 1);
        o.ensemble.statuses.remove(&2);
        let d = run(3, Some(&removing), &o);
        assert_eq!(d.operation.as_ref(), Some(&removing));
        assert_eq!(d.plan.action, None);
        // Member 5 leads now: leadership moves first, the removal is dropped.
        let o = observed(5, &[1, 2, 3, 4, 5], &[], 5);
        let d = run(3, Some(&removing), &o);
        let op = d.operation.expect("an operation");
        assert_eq!(
            (op.kind, op.member_id, op.step),
            (
                OperationKind::TransferLeader,
                5,
                OperationStep::TransferLeader
            )
        );
        assert!(matches!(
            d.plan.action,
            Some(Action::Membership(MembershipStep::Transfer {
                leader: 5,
                ..
            }))
        ));
    }

    #[test]
    fn a_restart_waits_for_its_pod_and_is_not_repeated() {
        let mut o = observed(3, &[1, 2, 3], &[], 2);
        if let Some(sts) = &mut o.statefulset {
            sts.update_revision = Some("r2".into());
        }
        let deleting = recorded(OperationKind::Restart, OperationStep::DeletePod, 1, 3);
        // Deleted before the restart: the pod is terminating.
        o.pods[0].terminating = true;
        let d = run(3, Some(&deleting), &o);
        assert_eq!(
            d.operation.as_ref().map(|o| o.step),
            Some(OperationStep::AwaitPod)
        );
        assert_eq!(d.plan.action, None);
        // Back at the new revision: done, and the next follower's restart starts.
        o.pods[0] = ObservedPod {
            id: 1,
            revision: Some("r2".into()),
            terminating: false,
            ready: true,
        };
        let d = run(3, Some(&deleting), &o);
        assert_eq!(
            d.operation.as_ref().map(|o| (o.member_id, o.step)),
            Some((3, OperationStep::DeletePod))
        );
        assert_eq!(d.plan.action, Some(Action::RestartMember { id: 3 }));
    }

    #[test]
    fn a_learner_the_spec_no_longer_wants_is_removed_instead_of_awaited() {
        let awaiting = recorded(OperationKind::Add, OperationStep::AwaitPromotion, 4, 4);
        let o = observed(4, &[1, 2, 3], &[4], 1);
        let d = run(3, Some(&awaiting), &o);
        let op = d.operation.expect("an operation");
        assert_eq!(
            (op.kind, op.member_id, op.target_replicas),
            (OperationKind::Remove, 4, 3)
        );
        assert!(matches!(
            d.plan.action,
            Some(Action::Membership(MembershipStep::Remove { id: 4, .. }))
        ));
    }
}
