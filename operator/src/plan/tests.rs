//! The planner's decisions, step by step.

use super::*;
use crate::ensemble::MemberStatus;

/// A view in which `voters` follow `leader`, all caught up; `down` did not answer.
fn view(voters: &[u64], leader: u64, down: &[u64]) -> EnsembleView {
    let mut v = EnsembleView::default();
    for &id in voters.iter().filter(|id| !down.contains(id)) {
        v.statuses.insert(
            id,
            MemberStatus {
                id,
                role: if id == leader { "leader" } else { "follower" }.into(),
                leader_id: leader,
                term: 2,
                commit_index: 7,
                applied_index: 7,
                members: voters.to_vec(),
                learners: Vec::new(),
                cluster_id: "prod.zk".into(),
                settings: None,
                levels: Default::default(),
            },
        );
    }
    v
}

fn observed(replicas: i32, bootstrap: i32, ensemble: EnsembleView) -> Observed {
    Observed {
        statefulset: Some(ObservedStatefulSet {
            replicas,
            generation: Some(1),
            observed_generation: Some(1),
            update_revision: Some("r1".into()),
        }),
        stored: Some(StoredMembership {
            replicas,
            bootstrap,
        }),
        pods: (1..=replicas as u64)
            .map(|id| ObservedPod {
                id,
                revision: Some("r1".into()),
                terminating: false,
                ready: true,
            })
            .collect(),
        ensemble,
        volumes: Vec::new(),
    }
}

fn membership(step: MembershipStep) -> Option<Action> {
    Some(Action::Membership(step))
}

#[test]
fn a_new_ensemble_is_created_at_its_size_and_bootstraps_whole() {
    let p = plan(3, &Observed::default());
    assert_eq!(
        p.membership,
        StoredMembership {
            replicas: 3,
            bootstrap: 3
        }
    );
    assert_eq!(p.phase, Phase::Creating);
    assert_eq!(p.action, None);
}

#[test]
fn a_deleted_statefulset_comes_back_at_the_recorded_size() {
    let o = Observed {
        stored: Some(StoredMembership {
            replicas: 5,
            bootstrap: 3,
        }),
        ..Observed::default()
    };
    let p = plan(3, &o);
    assert_eq!(
        p.membership,
        StoredMembership {
            replicas: 5,
            bootstrap: 3
        }
    );
    assert_eq!(p.phase, Phase::Recreating);
}

#[test]
fn scale_up_raises_replicas_by_one_and_adds_that_member() {
    let p = plan(5, &observed(3, 3, view(&[1, 2, 3], 2, &[])));
    assert_eq!(
        p.membership,
        StoredMembership {
            replicas: 4,
            bootstrap: 3
        }
    );
    assert_eq!(
        p.action,
        membership(MembershipStep::Add { leader: 2, id: 4 })
    );
    // The added member has not caught up yet: wait, change nothing.
    let mut v = view(&[1, 2, 3, 4], 2, &[4]);
    let p = plan(5, &observed(4, 3, v.clone()));
    assert!(matches!(p.phase, Phase::Waiting(_)), "{p:?}");
    assert_eq!(p.membership.replicas, 4);
    // A lost add is sent again.
    v = view(&[1, 2, 3], 2, &[]);
    let p = plan(5, &observed(4, 3, v));
    assert_eq!(
        p.action,
        membership(MembershipStep::Add { leader: 2, id: 4 })
    );
    assert_eq!(p.membership.replicas, 4);
}

#[test]
fn scale_down_moves_leadership_then_removes_then_lowers_replicas() {
    let p = plan(3, &observed(5, 5, view(&[1, 2, 3, 4, 5], 5, &[])));
    assert_eq!(
        p.action,
        membership(MembershipStep::Transfer {
            leader: 5,
            to: Some(1)
        })
    );
    assert_eq!(p.membership.replicas, 5);
    let p = plan(3, &observed(5, 5, view(&[1, 2, 3, 4, 5], 1, &[])));
    assert_eq!(
        p.action,
        membership(MembershipStep::Remove { leader: 1, id: 5 })
    );
    assert_eq!(
        p.membership.replicas, 5,
        "the pod stays until Raft dropped it"
    );
    let p = plan(3, &observed(5, 5, view(&[1, 2, 3, 4], 1, &[])));
    assert_eq!(p.action, None);
    assert_eq!(
        p.membership,
        StoredMembership {
            replicas: 4,
            bootstrap: 4
        }
    );
}

#[test]
fn nothing_moves_without_a_healthy_quorum() {
    let p = plan(5, &observed(3, 3, view(&[1, 2, 3], 1, &[3])));
    assert!(matches!(p.phase, Phase::Waiting(_)));
    assert_eq!(p.action, None);
    let p = plan(3, &observed(5, 5, view(&[1, 2, 3, 4, 5], 1, &[2, 3, 4])));
    assert!(matches!(p.phase, Phase::Waiting(_)));
    let p = plan(3, &observed(3, 3, EnsembleView::default()));
    assert_eq!(p.phase, Phase::Waiting("no member reports a leader".into()));
}

#[test]
fn rolling_update_restarts_followers_first_and_the_leader_after_a_transfer() {
    let mut o = observed(3, 3, view(&[1, 2, 3], 1, &[]));
    for pod in &mut o.pods {
        pod.revision = Some("r0".into());
    }
    assert_eq!(plan(3, &o).action, Some(Action::RestartMember { id: 2 }));
    o.pods[1].revision = Some("r1".into());
    assert_eq!(plan(3, &o).action, Some(Action::RestartMember { id: 3 }));
    o.pods[2].revision = Some("r1".into());
    assert_eq!(
        plan(3, &o).action,
        membership(MembershipStep::Transfer {
            leader: 1,
            to: Some(2)
        })
    );
    o.ensemble = view(&[1, 2, 3], 2, &[]);
    assert_eq!(plan(3, &o).action, Some(Action::RestartMember { id: 1 }));
    o.pods[0].terminating = true;
    assert!(matches!(plan(3, &o).phase, Phase::Waiting(_)));
    o.pods[0] = ObservedPod {
        id: 1,
        revision: Some("r1".into()),
        terminating: false,
        ready: true,
    };
    assert_eq!(plan(3, &o).phase, Phase::Stable);
    assert_eq!(plan(3, &o).describe(), None);
}

#[test]
fn bootstrap_count_only_ever_goes_down() {
    // Scaled 3 → 1 → 3: members 2 and 3 must join, never bootstrap a second ensemble.
    let p = plan(1, &observed(2, 3, view(&[1], 1, &[])));
    assert_eq!(
        p.membership,
        StoredMembership {
            replicas: 1,
            bootstrap: 1
        }
    );
    let p = plan(3, &observed(1, 1, view(&[1], 1, &[])));
    assert_eq!(
        p.membership,
        StoredMembership {
            replicas: 2,
            bootstrap: 1
        }
    );
}

#[test]
fn scaling_back_removes_a_learner_that_never_caught_up() {
    let mut v = view(&[1, 2, 3], 1, &[]);
    for status in v.statuses.values_mut() {
        status.members.push(4);
        status.learners.push(4);
    }
    // Still wanted: wait for it.
    assert!(matches!(
        plan(5, &observed(4, 3, v.clone())).phase,
        Phase::Waiting(_)
    ));
    // No longer wanted: remove it, then the replicas fall.
    let p = plan(3, &observed(4, 3, v));
    assert_eq!(
        p.action,
        membership(MembershipStep::Remove { leader: 1, id: 4 })
    );
    let p = plan(3, &observed(4, 3, view(&[1, 2, 3], 1, &[])));
    assert_eq!(p.membership.replicas, 3);
}

#[test]
fn scaling_back_removes_a_member_that_never_became_ready() {
    // Member 4 was promoted but is down; the other three are ready.
    let p = plan(3, &observed(4, 3, view(&[1, 2, 3, 4], 2, &[4])));
    assert_eq!(
        p.action,
        membership(MembershipStep::Remove { leader: 2, id: 4 })
    );
    // But not while a member that stays is down.
    let p = plan(3, &observed(4, 3, view(&[1, 2, 3, 4], 2, &[3])));
    assert!(matches!(p.phase, Phase::Waiting(_)), "{p:?}");
}

#[test]
fn a_rollout_replaces_broken_members_without_waiting_for_a_quorum() {
    // A bad image: no member runs, so there is no leader; the fixed template is at r1.
    let mut o = observed(3, 3, EnsembleView::default());
    for pod in &mut o.pods {
        pod.revision = Some("r0".into());
        pod.ready = false;
    }
    assert_eq!(plan(3, &o).action, Some(Action::RestartMember { id: 1 }));
    o.pods[0].terminating = true;
    assert!(
        matches!(plan(3, &o).phase, Phase::Waiting(_)),
        "one at a time"
    );
    o.pods[0] = ObservedPod {
        id: 1,
        revision: Some("r1".into()),
        terminating: false,
        ready: false,
    };
    assert_eq!(plan(3, &o).action, Some(Action::RestartMember { id: 2 }));
    // A member that serves is never restarted this way, even when its pod is not Ready.
    let mut o = observed(3, 3, view(&[1, 2, 3], 1, &[]));
    for pod in &mut o.pods {
        pod.revision = Some("r0".into());
        pod.ready = false;
    }
    assert_eq!(
        plan(3, &o).action,
        Some(Action::RestartMember { id: 2 }),
        "followers first"
    );
}

#[test]
fn a_statefulset_scaled_behind_our_back_comes_back_to_the_spec() {
    // Raised by hand: the extra pod is not added to Raft, the replicas just come back down.
    let p = plan(3, &observed(4, 3, view(&[1, 2, 3], 1, &[])));
    assert_eq!(p.action, None);
    assert_eq!(p.membership.replicas, 3);
    // Lowered by hand: the voter without a pod is removed first (its vote could cost the
    // quorum), then it is added back as the spec asks.
    let p = plan(3, &observed(2, 2, view(&[1, 2, 3], 1, &[3])));
    assert_eq!(
        p.action,
        membership(MembershipStep::Remove { leader: 1, id: 3 })
    );
}

#[test]
fn a_roll_or_scale_up_waits_for_the_replaced_members_pod_to_be_ready() {
    // Member 1 was restarted at r2 and the ensemble has it back, but the kubelet has not yet
    // probed its new pod: taking member 2 down now would leave two pods unready.
    let mut o = observed(3, 3, view(&[1, 2, 3], 3, &[]));
    if let Some(s) = o.statefulset.as_mut() {
        s.update_revision = Some("r2".into());
    }
    o.pods[0].revision = Some("r2".into());
    o.pods[0].ready = false;
    let p = plan(3, &o);
    assert_eq!(p.action, None);
    assert_eq!(p.phase, Phase::Waiting("member pods [1] not Ready".into()));
    o.pods[0].ready = true;
    assert_eq!(plan(3, &o).action, Some(Action::RestartMember { id: 2 }));

    // Likewise the next member of a scale-up is added only once the last one's pod is Ready.
    let mut o = observed(4, 3, view(&[1, 2, 3, 4], 1, &[]));
    o.pods[3].ready = false;
    assert_eq!(plan(5, &o).action, None);
    o.pods[3].ready = true;
    assert_eq!(
        plan(5, &o).action,
        membership(MembershipStep::Add { leader: 1, id: 5 })
    );
}
