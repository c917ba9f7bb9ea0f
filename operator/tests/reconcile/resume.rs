//! The durable membership plan: a scale-up (3→5), a scale-down (5→3), a rolling upgrade and a
//! reseed, each run once for every write that records or takes a step (status, StatefulSet, pod
//! deletion, membership call) with the operator stopped right after that write. Fresh
//! operators, knowing only the objects as persisted (status included), then run until the
//! ensemble has converged. Every run must take each step exactly once, in order, each after its
//! record, never cost the quorum, carry on with the recorded operation (not start it anew), and
//! end with `status.membershipOperation` cleared.

use serde_json::{Value, json};

use super::api_server::{CE, STOPPED, World, now};
use super::fake_ensemble::Entry;
use super::running;

/// When an interrupted operation started, as the next operator finds it recorded.
const EARLIER: &str = "2026-11-23T11:00:00Z";

struct Scenario {
    spec: &'static str,
    members: u64,
    leader: u64,
    change: fn(&mut World),
    /// Members at the end.
    target: u64,
    /// The steps taken, each as the record that must precede it.
    steps: &'static [&'static str],
}

/// Plays the StatefulSet controller: pods for members 1..=replicas at the update revision
/// (deleted ones re-created, with a new volume claim if theirs is gone), none beyond; a removed
/// member leaves with its pod.
pub fn play_statefulset_controller(world: &mut World) {
    let replicas = world.replicas().max(0) as u64;
    world.pods.retain(|(id, _)| *id <= replicas);
    world.volumes.retain(|id, _| *id <= replicas);
    for id in 1..=replicas {
        if !world.pods.iter().any(|(p, _)| *p == id) {
            let revision = world.update_revision.clone();
            world.pods.push((id, revision));
            world
                .volumes
                .entry(id)
                .or_insert_with(|| (now().to_string(), false));
        }
    }
    world.ensemble.model().removed.retain(|id| *id <= replicas);
}

/// The ensemble is the target size, up to date, and the operator says it is done.
fn converged(world: &World, target: u64) -> bool {
    let status = &world.ce["status"];
    let stable = status["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Progressing" && c["status"] == "False")
    });
    let m = world.ensemble.model();
    let reseed_asked = world.ce["metadata"]["annotations"]
        .get("baton.dev/reseed-member")
        .is_some();
    stable
        && !reseed_asked
        && status.get("membershipOperation").is_none()
        && world.replicas() == target as i64
        && m.voters.iter().copied().eq(1..=target)
        && m.learners.is_empty()
        && world.pods.len() as u64 == target
        && world.pods.iter().all(|(_, r)| *r == world.update_revision)
}

/// Runs `scenario` with the operator stopped after its `stop_after`-th step write; false when
/// it made fewer writes than that (nothing was stopped).
async fn run(scenario: &Scenario, stop_after: usize) -> bool {
    let mut world = running(scenario.spec, scenario.members, scenario.leader).await;
    world.ensemble.take_calls();
    world.ensemble.model().journal.clear();
    (scenario.change)(&mut world);
    world.ensemble.model().writes_before_stop = Some(stop_after);
    let mut stopped = false;
    let mut done = false;
    // The operation in flight when the operator stopped, as (kind, memberId).
    let mut interrupted: Option<(Value, Value)> = None;
    for _ in 0..12 {
        let (seen, result) = world.try_reconcile().await;
        for s in seen.iter().filter(|s| s.path == format!("{CE}/status")) {
            let op = &s.body["status"]["membershipOperation"];
            if interrupted == Some((op["kind"].clone(), op["memberId"].clone())) {
                assert_eq!(
                    op["startedAt"], EARLIER,
                    "the operation was started anew: {op}"
                );
            }
        }
        match result {
            Err(e) if e == STOPPED => {
                stopped = true;
                // Time passes before the next operator starts: the record tells its start.
                let op = &mut world.ce["status"]["membershipOperation"];
                if op.is_object() {
                    op["startedAt"] = json!(EARLIER);
                    interrupted = Some((op["kind"].clone(), op["memberId"].clone()));
                }
            }
            Err(e) => panic!("stopped after write {stop_after}: reconcile failed: {e}"),
            Ok(()) => {}
        }
        play_statefulset_controller(&mut world);
        if converged(&world, scenario.target) {
            done = true;
            break;
        }
    }
    let m = world.ensemble.model();
    let context = format!(
        "stopped after write {stop_after}: journal {:?}, status {}",
        m.journal, world.ce["status"]
    );
    assert!(done, "not converged; {context}");
    assert!(m.violations.is_empty(), "{:?}; {context}", m.violations);
    let mut record = None;
    let mut taken = Vec::new();
    for entry in &m.journal {
        match entry {
            Entry::Recorded(r) => record = r.clone(),
            Entry::Took(step) => {
                assert_eq!(record.as_ref(), Some(step), "not recorded first; {context}");
                taken.push(step.as_str());
            }
        }
    }
    assert_eq!(taken, scenario.steps, "{context}");
    stopped
}

/// Runs `scenario` stopped after every one of its step writes in turn.
async fn stop_after_every_write(scenario: &Scenario) {
    let mut stop_after = 1;
    while run(scenario, stop_after).await {
        stop_after += 1;
    }
    // Each stopped run adds at least one reconcile; a handful of writes would mean no steps.
    assert!(stop_after > 8, "only {} writes", stop_after - 1);
}

#[tokio::test]
async fn a_scale_up_resumes_after_a_stop_between_any_two_steps() {
    stop_after_every_write(&Scenario {
        spec: "{replicas: 3}",
        members: 3,
        leader: 1,
        change: |w| w.set_spec("replicas", json!(5)),
        target: 5,
        steps: &[
            "add 4 raise-replicas",
            "add 4 add-learner",
            "add 5 raise-replicas",
            "add 5 add-learner",
        ],
    })
    .await;
}

#[tokio::test]
async fn a_scale_down_resumes_after_a_stop_between_any_two_steps() {
    stop_after_every_write(&Scenario {
        spec: "{replicas: 5}",
        members: 5,
        leader: 5,
        change: |w| w.set_spec("replicas", json!(3)),
        target: 3,
        steps: &[
            "transfer-leader 5 transfer-leader",
            "remove 5 remove-member",
            "remove 5 lower-replicas",
            "remove 4 remove-member",
            "remove 4 lower-replicas",
        ],
    })
    .await;
}

#[tokio::test]
async fn a_rolling_upgrade_resumes_after_a_stop_between_any_two_steps() {
    stop_after_every_write(&Scenario {
        spec: "{replicas: 3}",
        members: 3,
        leader: 2,
        change: |w| {
            w.set_spec("image", json!("baton:2"));
            w.update_revision = "r2".into();
        },
        target: 3,
        steps: &[
            "restart 1 delete-pod",
            "restart 3 delete-pod",
            "transfer-leader 2 transfer-leader",
            "restart 2 delete-pod",
        ],
    })
    .await;
}

#[tokio::test]
async fn a_reseed_resumes_after_a_stop_between_any_two_steps() {
    stop_after_every_write(&Scenario {
        spec: "{replicas: 3}",
        members: 3,
        leader: 1,
        change: |w| w.ce["metadata"]["annotations"] = json!({"baton.dev/reseed-member": "2"}),
        target: 3,
        steps: &[
            "reseed 2 remove-member",
            "reseed 2 delete-volume",
            "reseed 2 add-learner",
        ],
    })
    .await;
}

#[tokio::test]
async fn a_recorded_removal_waits_while_it_would_cost_the_quorum() {
    let mut world = running("{replicas: 5}", 5, 1).await;
    world.set_spec("replicas", json!(3));
    // Stopped right after recording the removal of member 5, before sending it.
    world.ensemble.model().writes_before_stop = Some(1);
    let (_, result) = world.try_reconcile().await;
    assert_eq!(result, Err(STOPPED.to_string()));
    let recorded = world.ce["status"]["membershipOperation"].clone();
    assert_eq!(
        (&recorded["kind"], &recorded["memberId"]),
        (&json!("remove"), &json!(5))
    );
    // Members 2 and 3 went down meanwhile: removing 5 now would leave 2 live voters of 4.
    world.ensemble.model().down.extend([2, 3]);
    world.reconcile().await;
    assert!(world.ensemble.take_calls().is_empty());
    assert_eq!(
        world.ce["status"]["membershipOperation"], recorded,
        "still to do"
    );
    world.ensemble.model().down.clear();
    for _ in 0..6 {
        world.reconcile().await;
        play_statefulset_controller(&mut world);
    }
    assert!(converged(&world, 3), "{}", world.ce["status"]);
    assert_eq!(
        world.ensemble.take_calls(),
        ["remove 5 via 1", "remove 4 via 1"]
    );
    assert!(world.ensemble.model().violations.is_empty());
}
