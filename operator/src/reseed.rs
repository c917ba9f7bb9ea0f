//! Reseeding a member: the annotation `baton.dev/reseed-member: "N"` on a `CoordinationEnsemble`
//! rebuilds member N from the ensemble, for a member whose own data cannot bring it back (it
//! refuses to start, exit status 65, naming the damage). The `reseed` operation
//! (`status.membershipOperation`) removes N from Raft (moving leadership off it first), deletes
//! its PersistentVolumeClaim and pod (the StatefulSet re-creates both, empty), and adds it back
//! as a learner, which the leader promotes once it has caught up; then the annotation goes.
//!
//! Meanwhile the ConfigMap's bootstrap count stays below N, so the empty member starts with
//! `--join` and waits to be added instead of bootstrapping an ensemble of its own.
//!
//! Refused, with a Warning Event and the Degraded condition saying why, while N is not a member
//! id of the ensemble or removing it would cost the quorum; the annotation then stays until it
//! can be acted on or is removed.

use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use crate::apply::WriteError;
use crate::build::StoredMembership;
use crate::crd::{CoordinationEnsemble, MembershipOperation, OperationStep};
use crate::ensemble::MembershipStep;
use crate::finalizer::patch_ensemble;
use crate::names::RESEED_ANNOTATION;
use crate::operation;
use crate::plan::{self, Action, Observed, Phase, Plan};

/// The member the ensemble's annotation asks to reseed: `None` without the annotation, `Err`
/// when its value is not a member id.
pub fn requested(ce: &CoordinationEnsemble) -> Option<Result<u64, String>> {
    let value = ce.metadata.annotations.as_ref()?.get(RESEED_ANNOTATION)?;
    Some(
        value
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|id| *id > 0)
            .ok_or_else(|| {
                format!("reseed refused: {RESEED_ANNOTATION} is {value:?}, not a member id")
            }),
    )
}

/// The plan while member `id` is reseeded (`base`, the plan without the reseed, once it is
/// done or while the StatefulSet controller catches up); `Err` with the reason when refused.
pub fn plan(
    id: u64,
    recorded: Option<&MembershipOperation>,
    observed: &Observed,
    base: Plan,
    now: Timestamp,
) -> Result<Plan, String> {
    let refuse = |why: String| Err(format!("reseed of member {id} refused: {why}"));
    let Some(sts) = &observed.statefulset else {
        return refuse("the ensemble has no members yet".into());
    };
    if sts.observed_generation < sts.generation {
        return Ok(base);
    }
    let replicas = sts.replicas.max(0) as u64;
    if id > replicas {
        return refuse(format!(
            "it is not a member id of this ensemble (members 1..={replicas})"
        ));
    }
    let Some(step) = operation::reseed_step(recorded, id, observed, now) else {
        return Ok(base);
    };
    let current = plan::current(sts, observed.stored);
    let membership = StoredMembership {
        replicas: current.replicas,
        bootstrap: current
            .bootstrap
            .min(i32::try_from(id - 1).unwrap_or(i32::MAX)),
    };
    let reseeding = |action: Option<Action>| Plan {
        membership,
        action,
        phase: Phase::Reseeding(id),
    };
    let view = &observed.ensemble;
    let membership_step = |step: MembershipStep| Some(Action::Membership(step));
    match step {
        OperationStep::RemoveMember => {
            let Some(leader) = view.leader() else {
                return refuse(
                    "no member reports a leader: it cannot be removed from Raft without a quorum"
                        .into(),
                );
            };
            let voters = view.voters();
            let ready = view.ready_voters();
            let remaining: Vec<u64> = voters.iter().copied().filter(|v| *v != id).collect();
            let ready_remaining: Vec<u64> = ready
                .iter()
                .copied()
                .filter(|v| remaining.contains(v))
                .collect();
            if voters.contains(&id) && ready_remaining.len() <= remaining.len() / 2 {
                return refuse(format!(
                    "removing it would lose the quorum (ready voters {ready_remaining:?} of the \
                     remaining {remaining:?})"
                ));
            }
            if leader == id {
                // Leadership moves to a ready voter first (one exists: the check above).
                let to = ready_remaining.first().copied();
                return Ok(reseeding(membership_step(MembershipStep::Transfer {
                    leader,
                    to,
                })));
            }
            Ok(reseeding(membership_step(MembershipStep::Remove {
                leader,
                id,
            })))
        }
        OperationStep::DeleteVolume => Ok(reseeding(Some(Action::ReplaceVolume { id }))),
        OperationStep::AddLearner => match view.leader() {
            Some(leader) => Ok(reseeding(membership_step(MembershipStep::Add {
                leader,
                id,
            }))),
            None => Ok(Plan {
                phase: Phase::Waiting(format!(
                    "reseed of member {id}: no member reports a leader to add it back through"
                )),
                ..reseeding(None)
            }),
        },
        // Await steps (and steps no reseed has): nothing to take.
        _ => Ok(reseeding(None)),
    }
}

/// Removes the annotation once the reseed it asked for is done; the JSON patch tests its value
/// first, so a member named meanwhile is not dropped unseen.
pub async fn remove_annotation(
    client: &kube::Client,
    ce: &CoordinationEnsemble,
) -> Result<(), WriteError> {
    let Some(value) = ce
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RESEED_ANNOTATION))
    else {
        return Ok(());
    };
    let path = format!(
        "/metadata/annotations/{}",
        RESEED_ANNOTATION.replace('~', "~0").replace('/', "~1")
    );
    let ops = json!([
        {"op": "test", "path": path, "value": value},
        {"op": "remove", "path": path},
    ]);
    patch_ensemble(client, ce, ops, "remove the reseed annotation from").await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::OperationKind;
    use crate::ensemble::{EnsembleView, MemberStatus};
    use crate::plan::{ObservedPod, ObservedStatefulSet, ObservedVolume};

    /// `voters` as the members that answer (`up`) report them, led by `leader`.
    fn observed(voters: &[u64], up: &[u64], leader: u64) -> Observed {
        let mut view = EnsembleView::default();
        for &id in up {
            view.statuses.insert(
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
        let replicas = voters.len() as i32;
        Observed {
            statefulset: Some(ObservedStatefulSet {
                replicas,
                generation: Some(1),
                observed_generation: Some(1),
                update_revision: Some("r1".into()),
            }),
            stored: Some(StoredMembership {
                replicas,
                bootstrap: replicas,
            }),
            pods: voters
                .iter()
                .map(|&id| ObservedPod {
                    id,
                    revision: Some("r1".into()),
                    terminating: false,
                    ready: up.contains(&id),
                })
                .collect(),
            ensemble: view,
            volumes: vec![ObservedVolume {
                id: 2,
                created: "2026-01-01T00:00:00Z".parse().ok(),
                terminating: false,
            }],
        }
    }

    fn now() -> Timestamp {
        "2026-11-23T12:00:00Z"
            .parse()
            .unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn reseed(id: u64, o: &Observed) -> Result<Plan, String> {
        plan(id, None, o, plan::plan(3, o), now())
    }

    #[test]
    fn a_down_follower_is_removed_first_and_later_members_join() {
        let o = observed(&[1, 2, 3], &[1, 3], 1);
        let p = reseed(2, &o).expect("not refused");
        assert_eq!(
            p.action,
            Some(Action::Membership(MembershipStep::Remove {
                leader: 1,
                id: 2
            }))
        );
        assert_eq!(p.phase, Phase::Reseeding(2));
        assert_eq!(
            p.membership,
            StoredMembership {
                replicas: 3,
                bootstrap: 1
            }
        );
    }

    #[test]
    fn the_leader_hands_over_before_it_is_removed() {
        let o = observed(&[1, 2, 3], &[1, 2, 3], 2);
        let p = reseed(2, &o).expect("not refused");
        assert_eq!(
            p.action,
            Some(Action::Membership(MembershipStep::Transfer {
                leader: 2,
                to: Some(1)
            }))
        );
    }

    #[test]
    fn refused_when_it_would_cost_the_quorum_or_is_no_member() {
        let o = observed(&[1, 2, 3], &[1, 2], 1);
        let why = reseed(2, &o).expect_err("refused");
        assert!(why.contains("would lose the quorum"), "{why}");
        assert!(
            why.contains("ready voters [1] of the remaining [1, 3]"),
            "{why}"
        );
        let why = reseed(4, &o).expect_err("refused");
        assert!(why.contains("not a member id"), "{why}");
        let alone = observed(&[1], &[1], 1);
        assert!(reseed(1, &alone).is_err());
    }

    #[test]
    fn after_the_removal_the_volume_goes_then_the_member_is_added_back() {
        // Removed: the leader no longer lists member 2.
        let mut o = observed(&[1, 3], &[1, 3], 1);
        if let Some(s) = &mut o.statefulset {
            s.replicas = 3;
        }
        o.pods.push(ObservedPod {
            id: 2,
            revision: Some("r1".into()),
            terminating: false,
            ready: false,
        });
        let p = reseed(2, &o).expect("not refused");
        assert_eq!(p.action, Some(Action::ReplaceVolume { id: 2 }));
        // Replaced: a new claim and a running pod.
        let recorded = MembershipOperation {
            kind: OperationKind::Reseed,
            step: OperationStep::AwaitPod,
            member_id: 2,
            target_replicas: 3,
            started_at: "2026-11-23T11:00:00Z".into(),
        };
        o.volumes[0].created = Some(now());
        let p = plan(2, Some(&recorded), &o, plan::plan(3, &o), now()).expect("not refused");
        assert_eq!(
            p.action,
            Some(Action::Membership(MembershipStep::Add { leader: 1, id: 2 }))
        );
        // Back on its old claim, still going: the pod goes again.
        o.volumes[0].terminating = true;
        let p = plan(2, Some(&recorded), &o, plan::plan(3, &o), now()).expect("not refused");
        assert_eq!(p.action, Some(Action::ReplaceVolume { id: 2 }));
    }
}
