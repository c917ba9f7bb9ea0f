//! The heart of the reconciler, pure: from what was observed (StatefulSet, pods, the
//! ensemble's own statuses) to the one next step. One step per reconcile, each only from a
//! healthy ensemble, in the order that never costs the quorum:
//!
//! - scale up: raise replicas by one, then add that member through the leader (it joins as a
//!   learner and is promoted once caught up);
//! - scale down: move leadership off the highest member if it leads, remove it from Raft, and
//!   only once every remaining member has dropped it, lower replicas (the pod goes last);
//! - rolling update (`OnDelete` StatefulSet): restart outdated followers one at a time, lowest
//!   ordinal first; the leader last, after moving leadership to an updated member.
//!
//! A scale-up or roll step is taken only once every member is healthy in the ensemble and the
//! pod of each at the current revision is Ready (the member replaced or added last included).

use k8s_openapi::jiff::Timestamp;

use crate::build::StoredMembership;
use crate::ensemble::{EnsembleView, MembershipStep};

/// The StatefulSet as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedStatefulSet {
    pub replicas: i32,
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    /// The revision new pods get (`status.updateRevision`).
    pub update_revision: Option<String>,
}

/// A member pod as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedPod {
    pub id: u64,
    /// Its `controller-revision-hash` label.
    pub revision: Option<String>,
    /// Has a deletion timestamp.
    pub terminating: bool,
    /// Its Ready condition is True (the kubelet's view of `/readyz`).
    pub ready: bool,
}

/// A member's data volume (its PersistentVolumeClaim) as observed; read only for a reseed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedVolume {
    pub id: u64,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// Has a deletion timestamp (held by its pod until the pod goes).
    pub terminating: bool,
}

/// Everything `plan` decides from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    pub statefulset: Option<ObservedStatefulSet>,
    /// What the ConfigMap recorded, if it exists.
    pub stored: Option<StoredMembership>,
    pub pods: Vec<ObservedPod>,
    pub ensemble: EnsembleView,
    /// The volume of the member being reseeded, if one is and its claim exists.
    pub volumes: Vec<ObservedVolume>,
}

/// Something to do after the objects are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A change sent to the ensemble's leader.
    Membership(MembershipStep),
    /// Delete member `id`'s pod so the StatefulSet re-creates it at the new revision.
    RestartMember { id: u64 },
    /// Delete member `id`'s PersistentVolumeClaim, then its pod: the StatefulSet re-creates
    /// both, and the member starts empty (a reseed).
    ReplaceVolume { id: u64 },
}

/// Where the ensemble stands, for the status conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Objects created for the first time.
    Creating,
    /// The StatefulSet was gone and is re-created from the recorded membership.
    Recreating,
    ScalingUp,
    ScalingDown,
    Rolling,
    /// Voters the pods do not account for are being removed.
    Repairing,
    /// Member `0` is rebuilt from the ensemble (`baton.dev/reseed-member`).
    Reseeding(u64),
    /// Nothing can be done until the ensemble is healthy again; the reason says why.
    Waiting(String),
    /// Desired size, every member up to date and healthy.
    Stable,
}

/// The decision of one reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Replicas and bootstrap count to apply (StatefulSet and ConfigMap).
    pub membership: StoredMembership,
    pub action: Option<Action>,
    pub phase: Phase,
}

impl Plan {
    /// A one-line account of the step, `None` when stable (the status's `step`).
    pub fn describe(&self) -> Option<String> {
        let action = match self.action {
            Some(Action::Membership(step)) => format!(": {step}"),
            Some(Action::RestartMember { id }) => format!(": restart member {id}"),
            Some(Action::ReplaceVolume { id }) => {
                format!(": replace the volume of member {id}")
            }
            None => String::new(),
        };
        let phase = match &self.phase {
            Phase::Stable => return None,
            Phase::Creating => "Creating".to_string(),
            Phase::Recreating => "Recreating the StatefulSet".to_string(),
            Phase::ScalingUp => "ScalingUp".to_string(),
            Phase::ScalingDown => "ScalingDown".to_string(),
            Phase::Rolling => "RollingUpdate".to_string(),
            Phase::Repairing => "Repairing".to_string(),
            Phase::Reseeding(id) => format!("Reseeding member {id}"),
            Phase::Waiting(why) => format!("Waiting: {why}"),
        };
        Some(format!("{phase}{action}"))
    }
}

/// The next step towards `desired` members, all up to date.
pub fn plan(desired: i32, observed: &Observed) -> Plan {
    let Some(sts) = &observed.statefulset else {
        return match observed.stored {
            Some(stored) => Plan {
                membership: stored,
                action: None,
                phase: Phase::Recreating,
            },
            None => Plan {
                membership: StoredMembership {
                    replicas: desired,
                    bootstrap: desired,
                },
                action: None,
                phase: Phase::Creating,
            },
        };
    };
    let r = sts.replicas.max(0);
    let current = current(sts, observed.stored);
    let step = |action: Option<Action>, phase: Phase| Plan {
        membership: current,
        action,
        phase,
    };
    let wait = |why: String| step(None, Phase::Waiting(why));
    if sts.observed_generation < sts.generation {
        return wait("the StatefulSet controller has not caught up with the StatefulSet".into());
    }
    let view = &observed.ensemble;
    // A rollout that fixes broken members (a bad image, a crash loop) cannot wait for a healthy
    // quorum: an outdated member that serves nothing is restarted at once, one at a time.
    if let Some(id) = broken_outdated_member(sts, &observed.pods, view) {
        return step(Some(Action::RestartMember { id }), Phase::Rolling);
    }
    let Some(leader) = view.leader() else {
        return wait("no member reports a leader".into());
    };
    let voters = view.voters();
    let learners = view.learners();
    let expected: Vec<u64> = (1..=r as u64).collect();
    let membership = |step: MembershipStep| Some(Action::Membership(step));
    if !learners.is_empty() {
        // A learner beyond the desired size (its pod never came up, and the user scaled back):
        // removing a learner never touches the quorum.
        if let Some(&learner) = learners.iter().filter(|id| **id > desired as u64).max() {
            return step(
                membership(MembershipStep::Remove {
                    leader,
                    id: learner,
                }),
                Phase::ScalingDown,
            );
        }
        return wait(format!("learner(s) {learners:?} catching up"));
    }

    // A scale-down step whose member Raft has dropped: now the pod may go.
    if r > desired && voters == expected[..expected.len().saturating_sub(1)] {
        let replicas = r - 1;
        return Plan {
            membership: StoredMembership {
                replicas,
                bootstrap: current.bootstrap.min(replicas),
            },
            action: None,
            phase: Phase::ScalingDown,
        };
    }
    if !view.has_quorum() {
        return wait(format!(
            "no quorum: ready voters {:?} of {voters:?}",
            view.ready_voters()
        ));
    }
    // Voters without a pod (a StatefulSet shrunk behind the operator's back): remove them.
    if let Some(&extra) = voters.iter().filter(|id| **id > r as u64).max() {
        let action = if extra == leader {
            MembershipStep::Transfer {
                leader,
                to: lowest_other(&view.ready_voters(), leader, r as u64),
            }
        } else {
            MembershipStep::Remove { leader, id: extra }
        };
        return step(membership(action), Phase::Repairing);
    }
    // Pods without a vote: the add of a scale-up step not (yet) done, or a lost answer. Only
    // members that are wanted: a pod beyond the desired size goes rather than joins.
    if let Some(&missing) = expected
        .iter()
        .find(|id| **id <= desired as u64 && !voters.contains(id))
    {
        return step(
            membership(MembershipStep::Add {
                leader,
                id: missing,
            }),
            Phase::ScalingUp,
        );
    }
    // Scale down: the highest member goes first. It need not be ready itself (it may be the
    // reason to scale down), but every member that stays must be.
    let ready = view.ready_voters();
    if r > desired
        && expected[..expected.len() - 1]
            .iter()
            .all(|id| ready.contains(id))
    {
        let id = r as u64;
        let action = if leader == id {
            MembershipStep::Transfer {
                leader,
                to: lowest_other(&voters, leader, desired as u64),
            }
        } else {
            MembershipStep::Remove { leader, id }
        };
        return step(membership(action), Phase::ScalingDown);
    }
    if !view.is_healthy(&expected) {
        let not_ready: Vec<u64> = expected
            .iter()
            .copied()
            .filter(|id| !ready.contains(id))
            .collect();
        return wait(format!("members {not_ready:?} not ready"));
    }
    // The ensemble's word is not enough before taking the next member down: the pod of a member
    // replaced (or added) at the current revision must be Ready too, as a StatefulSet's own
    // rolling update waits. The kubelet's probe lags the member catching up by up to a period;
    // without this, two member pods would be unready at once, the client Service would have
    // one endpoint and the PodDisruptionBudget's at most one unavailable would not hold. An
    // outdated pod is not waited for: the roll may be what fixes its readiness.
    let unready_pods: Vec<u64> = observed
        .pods
        .iter()
        .filter(|p| expected.contains(&p.id) && !p.terminating && !p.ready)
        .filter(|p| {
            sts.update_revision
                .as_ref()
                .is_none_or(|r| p.revision.as_ref() == Some(r))
        })
        .map(|p| p.id)
        .collect();
    if !unready_pods.is_empty() {
        return wait(format!("member pods {unready_pods:?} not Ready"));
    }
    if r < desired {
        let id = r as u64 + 1;
        return Plan {
            membership: StoredMembership {
                replicas: r + 1,
                bootstrap: current.bootstrap,
            },
            action: membership(MembershipStep::Add { leader, id }),
            phase: Phase::ScalingUp,
        };
    }
    rolling(sts, &observed.pods, leader, &expected, current)
}

/// The membership the StatefulSet has now (the bootstrap count never above its replicas).
pub fn current(sts: &ObservedStatefulSet, stored: Option<StoredMembership>) -> StoredMembership {
    let replicas = sts.replicas.max(0);
    StoredMembership {
        replicas,
        bootstrap: stored.map_or(replicas, |s| s.bootstrap.min(replicas)),
    }
}

/// The rolling-update step of a healthy ensemble at its desired size.
fn rolling(
    sts: &ObservedStatefulSet,
    pods: &[ObservedPod],
    leader: u64,
    expected: &[u64],
    current: StoredMembership,
) -> Plan {
    let step = |action: Option<Action>, phase: Phase| Plan {
        membership: current,
        action,
        phase,
    };
    let Some(revision) = &sts.update_revision else {
        return step(None, Phase::Stable);
    };
    if pods.iter().any(|p| p.terminating)
        || expected.iter().any(|id| !pods.iter().any(|p| p.id == *id))
    {
        return step(
            None,
            Phase::Waiting("a member pod is being replaced".into()),
        );
    }
    let mut outdated: Vec<u64> = pods
        .iter()
        .filter(|p| p.revision.as_ref() != Some(revision))
        .map(|p| p.id)
        .collect();
    outdated.sort_unstable();
    if outdated.is_empty() {
        return step(None, Phase::Stable);
    }
    if let Some(&follower) = outdated.iter().find(|id| **id != leader) {
        return step(Some(Action::RestartMember { id: follower }), Phase::Rolling);
    }
    // Only the leader is left: hand leadership to an updated member first.
    let updated: Vec<u64> = expected
        .iter()
        .copied()
        .filter(|id| !outdated.contains(id))
        .collect();
    let action = match updated.first() {
        Some(&to) => Action::Membership(MembershipStep::Transfer {
            leader,
            to: Some(to),
        }),
        // A one-member ensemble has nobody to hand over to: restart it in place.
        None => Action::RestartMember { id: leader },
    };
    step(Some(action), Phase::Rolling)
}

/// The lowest outdated member that is neither Ready nor a ready voter, if no pod is being
/// replaced already.
fn broken_outdated_member(
    sts: &ObservedStatefulSet,
    pods: &[ObservedPod],
    view: &EnsembleView,
) -> Option<u64> {
    let revision = sts.update_revision.as_ref()?;
    if pods.iter().any(|p| p.terminating) {
        return None;
    }
    let serving = view.ready_voters();
    pods.iter()
        .filter(|p| p.revision.as_ref() != Some(revision) && !p.ready && !serving.contains(&p.id))
        .map(|p| p.id)
        .min()
}

/// The lowest id in `candidates` other than `leader` and at most `max`.
fn lowest_other(candidates: &[u64], leader: u64, max: u64) -> Option<u64> {
    candidates
        .iter()
        .copied()
        .filter(|id| *id != leader && *id <= max)
        .min()
}

#[cfg(test)]
mod tests;
