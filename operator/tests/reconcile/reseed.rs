//! Reseeding a member (annotation `baton.dev/reseed-member`): removed from Raft, its volume claim
//! and pod deleted, added back as a learner, the annotation removed; refused while that would
//! cost the quorum or the annotation names no member.

use http::Method;
use serde_json::{Value, json};

use super::api_server::{CE, NS, VOLUMES_CREATED, World, body, lines};
use super::condition;
use super::resume::play_statefulset_controller;
use super::running;

fn annotate(world: &mut World, value: &str) {
    world.ce["metadata"]["annotations"] = json!({ "baton.dev/reseed-member": value });
}

fn annotation(world: &World) -> &Value {
    &world.ce["metadata"]["annotations"]["baton.dev/reseed-member"]
}

/// Reconciles (playing the StatefulSet controller between rounds) until the annotation is gone;
/// returns every request line. A member whose volume was replaced comes back up.
async fn reseed_until_done(world: &mut World) -> Vec<String> {
    let mut all = Vec::new();
    for _ in 0..10 {
        let seen = world.reconcile().await;
        all.extend(lines(&seen));
        play_statefulset_controller(world);
        let replaced: Vec<u64> = world
            .volumes
            .iter()
            .filter(|(_, (created, _))| created != VOLUMES_CREATED)
            .map(|(id, _)| *id)
            .collect();
        world
            .ensemble
            .model()
            .down
            .retain(|id| !replaced.contains(id));
        if annotation(world).is_null() && world.ce["status"]["membershipOperation"].is_null() {
            return all;
        }
    }
    panic!(
        "the reseed did not finish: status {}, requests {all:?}",
        world.ce["status"]
    );
}

fn position(lines: &[String], line: &str) -> usize {
    lines
        .iter()
        .position(|l| l == line)
        .unwrap_or_else(|| panic!("no {line} in {lines:?}"))
}

#[tokio::test]
async fn a_broken_member_is_removed_its_volume_replaced_and_it_is_added_back() {
    let mut world = running("{replicas: 3}", 3, 1).await;
    // Member 2 refuses to start: its data cannot be recovered.
    world.ensemble.model().down.insert(2);
    world.ensemble.take_calls();
    annotate(&mut world, "2");
    let seen = reseed_until_done(&mut world).await;

    assert_eq!(
        world.ensemble.take_calls(),
        [
            "remove 2 via 1",
            "add 2 (zk-1.zk-peers.prod.svc:2888) via 1"
        ]
    );
    // The claim first (the pod holds it until it goes), then the pod; each once.
    let claim = format!("DELETE {NS}/persistentvolumeclaims/data-zk-1");
    let pod = format!("DELETE {NS}/pods/zk-1");
    assert_eq!(seen.iter().filter(|l| **l == claim).count(), 1, "{seen:?}");
    assert!(position(&seen, &claim) < position(&seen, &pod));
    assert_eq!(
        seen.iter().filter(|l| l.starts_with("DELETE")).count(),
        2,
        "nothing else deleted: {seen:?}"
    );
    // The new pod joins instead of bootstrapping: the ConfigMap says so before it starts.
    let config = world.config_map.as_ref().expect("config map");
    assert_eq!(config["data"]["BATON_BOOTSTRAP_REPLICAS"], "1");
    assert_eq!(world.replicas(), 3, "the replicas never change");

    let m = world.ensemble.model();
    assert_eq!(m.voters.iter().copied().collect::<Vec<_>>(), [1, 2, 3]);
    assert!(m.learners.is_empty() && m.violations.is_empty(), "{m:?}");
    let records: Vec<String> = m
        .journal
        .iter()
        .filter_map(|e| match e {
            super::fake_ensemble::Entry::Recorded(Some(r)) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        records,
        [
            "reseed 2 remove-member",
            "reseed 2 delete-volume",
            "reseed 2 await-pod",
            "reseed 2 add-learner",
        ]
    );
    drop(m);
    assert!(annotation(&world).is_null());
    let status = &world.ce["status"];
    assert_eq!(condition(status, "Degraded")["status"], "False");
    assert!(
        world
            .events
            .iter()
            .any(|e| e == "Normal Reseeding: reseed member 2: remove member 2"),
        "{:?}",
        world.events
    );
}

#[tokio::test]
async fn reseeding_the_leader_moves_leadership_first() {
    let mut world = running("{replicas: 3}", 3, 2).await;
    world.ensemble.take_calls();
    annotate(&mut world, "2");
    reseed_until_done(&mut world).await;
    assert_eq!(
        world.ensemble.take_calls(),
        [
            "transfer to 1 via 2",
            "remove 2 via 1",
            "add 2 (zk-1.zk-peers.prod.svc:2888) via 1"
        ]
    );
    assert!(world.ensemble.model().violations.is_empty());
}

#[tokio::test]
async fn a_reseed_that_would_cost_the_quorum_or_names_no_member_is_refused() {
    let mut world = running("{replicas: 3}", 3, 1).await;
    world.ensemble.take_calls();
    // Member 3 is down too: without member 2 only member 1 of [1, 3] would be ready.
    world.ensemble.model().down.insert(3);
    for (value, why) in [
        (
            "2",
            "reseed of member 2 refused: removing it would lose the quorum (ready voters [1] of the remaining [1, 3])",
        ),
        (
            "4",
            "reseed of member 4 refused: it is not a member id of this ensemble (members 1..=3)",
        ),
        (
            "two",
            "reseed refused: baton.dev/reseed-member is \"two\", not a member id",
        ),
    ] {
        annotate(&mut world, value);
        world.events.clear();
        let seen = world.reconcile().await;
        assert!(world.ensemble.take_calls().is_empty());
        assert!(
            !lines(&seen).iter().any(|l| l.starts_with("DELETE")),
            "{seen:?}"
        );
        assert_eq!(world.events, [format!("Warning ReseedRefused: {why}")]);
        let status = body(&seen, Method::PATCH, &format!("{CE}/status"));
        let degraded = condition(&status["status"], "Degraded");
        assert_eq!(
            (
                &degraded["status"],
                &degraded["reason"],
                &degraded["message"]
            ),
            (&json!("True"), &json!("ReseedRefused"), &json!(why))
        );
        assert!(status["status"]["membershipOperation"].is_null());
        assert_eq!(annotation(&world), value, "kept until it can be acted on");
    }
    // Member 3 is back: the reseed goes ahead.
    world.ensemble.model().down.clear();
    annotate(&mut world, "2");
    reseed_until_done(&mut world).await;
    assert_eq!(world.ensemble.take_calls().len(), 2);
}
