//! Reconcile scenarios against a mocked API server and a scripted ensemble: each asserts the
//! requests made (method, path, body) in order and the admin calls in order.

mod api_server;
mod backup;
mod fake_ensemble;
mod reseed;
mod resume;
mod settings;
mod sidecars_missing;

use api_server::{
    ALL_CONFIG_MAPS, APPS, CE, CRON_JOB, EVENTS, NETWORKING, NS, POLICY, World, apply_lines, body,
    identity_lines, lines, now, operator_pods,
};
use baton_operator::build::{StoredMembership, build};
use baton_operator::crd::CoordinationEnsemble;
use baton_operator::dereference::admin_credentials;
use baton_operator::pki::{self, secrets};
use baton_operator::validate::validate;
use fake_ensemble::FakeEnsemble;
use http::Method;
use k8s_openapi::api::core::v1::Secret;
use serde_json::{Value, json};

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"))
}

/// A Secret of the world, typed.
fn secret(world: &World, name: &str) -> Secret {
    serde_json::from_value(world.secrets.get(name).cloned().unwrap_or(Value::Null))
        .unwrap_or_else(|e| panic!("Secret {name} in the world: {e}"))
}

/// The PKI the world's Secrets hold (it must be whole and need nothing at `now`).
fn stored_pki(world: &World, members: &[u64]) -> pki::Pki {
    let stored = secrets::stored(
        Some(&secret(world, "zk-ca-key")),
        Some(&secret(world, "zk-tls")),
        Some(&secret(world, "zk-admin")),
    );
    let plan = pki::plan(&stored, members, now());
    assert!(plan.is_empty(), "the stored PKI needs {plan}");
    pki::issue(
        &stored,
        &plan,
        &baton_operator::names::EnsembleNames::new("zk", "prod"),
        now(),
    )
    .expect("the stored PKI")
}

/// The objects `build` makes for the world's ensemble at `replicas`/`bootstrap` with the
/// world's certificates, as JSON, in the order they are applied after the Secrets.
fn expected_objects(world: &World, replicas: i32, bootstrap: i32) -> Vec<Value> {
    let ce: CoordinationEnsemble = serde_json::from_value(world.ce.clone()).expect("ce");
    let spec = validate(&ce, "baton:1").expect("valid");
    let ids: Vec<u64> = (1..=replicas.max(spec.replicas) as u64).collect();
    let built = build(
        &ce,
        &spec,
        StoredMembership {
            replicas,
            bootstrap,
        },
        &stored_pki(world, &ids),
        &operator_pods(),
        None,
    )
    .expect("built");
    let json = |v: &dyn erased::Ser| v.to_json();
    vec![
        json(&built.ca_config_map),
        json(&built.config_map),
        json(&built.peer_service),
        json(&built.client_service),
        json(&built.pdb.expect("pdb")),
        json(&built.network_policy),
        json(&built.statefulset),
    ]
}

/// The member ids whose certificates the members' Secret holds.
fn certified_members(world: &World) -> Vec<u64> {
    secrets::stored(None, Some(&secret(world, "zk-tls")), None)
        .members
        .keys()
        .copied()
        .collect()
}

/// Serializing differently-typed objects through one function.
mod erased {
    pub trait Ser {
        fn to_json(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Ser for T {
        fn to_json(&self) -> serde_json::Value {
            serde_json::to_value(self).expect("serializes")
        }
    }
}

/// An existing, healthy ensemble of `n` members at revision r1, led by `leader`.
async fn running(spec: &str, n: u64, leader: u64) -> World {
    let voters: Vec<u64> = (1..=n).collect();
    let mut world = World::new(spec, FakeEnsemble::new(&voters, leader));
    // The first reconcile creates the objects, as for any new ensemble.
    world.reconcile().await;
    world.run_pods(n, "r1");
    world.events.clear();
    world.ensemble.model().admin_certs.clear();
    world
}

#[tokio::test]
async fn a_new_ensemble_gets_every_object_applied_in_order() {
    let mut world = World::new("{replicas: 3}", FakeEnsemble::default());
    let seen = world.reconcile().await;
    let mut expected = vec![
        // The finalizer first: nothing outside the namespace is written without it.
        format!("PATCH {CE}"),
        format!("GET {NS}/secrets/zk-ca-key"),
        format!("GET {NS}/secrets/zk-tls"),
        format!("GET {NS}/secrets/zk-admin"),
        format!("GET {NS}/secrets/zk-super"),
        format!("GET {NS}/configmaps/zk-config"),
        format!("GET {APPS}/statefulsets/zk"),
        format!("GET {CRON_JOB}"),
        format!("PATCH {NS}/secrets/zk-ca-key"),
        format!("PATCH {NS}/secrets/zk-tls"),
        format!("PATCH {NS}/secrets/zk-admin"),
        format!("POST {NS}/secrets"),
    ];
    expected.extend(identity_lines());
    expected.extend([
        format!("PATCH {NS}/configmaps/zk-ca"),
        format!("GET {ALL_CONFIG_MAPS}"),
        format!("PATCH {NS}/configmaps/zk-config"),
        format!("PATCH {NS}/services/zk-peers"),
        format!("PATCH {NS}/services/zk-client"),
        format!("PATCH {POLICY}/poddisruptionbudgets/zk"),
        format!("PATCH {NETWORKING}/networkpolicies/zk-members"),
        format!("PATCH {APPS}/statefulsets/zk"),
        format!("POST {EVENTS}"),
        format!("PATCH {CE}/status"),
    ]);
    assert_eq!(lines(&seen), expected);
    assert_eq!(
        world.ce["metadata"]["finalizers"],
        json!(["baton.dev/cleanup"])
    );
    // Server-side apply with our field manager, forced.
    for s in seen
        .iter()
        .filter(|s| s.method == Method::PATCH && s.path != CE)
    {
        assert!(
            s.query.contains("fieldManager=baton-operator"),
            "{}",
            s.query
        );
        assert!(s.query.contains("force=true"), "{}", s.query);
    }
    // A CA, a certificate per bootstrapping member and the admin's, in three Secrets.
    assert_eq!(certified_members(&world), [1, 2, 3]);
    assert_eq!(
        world.events,
        vec!["Normal Certificates: new CA; issue member 1, member 2, member 3, admin"]
    );
    let ca_key = secret(&world, "zk-ca-key");
    assert_eq!(
        ca_key.metadata.owner_references.as_ref().map(Vec::len),
        Some(1)
    );
    // Exactly the built objects, the whole ensemble bootstrapping together.
    let first_object = seen
        .iter()
        .position(|s| s.path == format!("{NS}/configmaps/zk-ca"))
        .expect("the CA ConfigMap");
    let bodies: Vec<Value> = seen[first_object..]
        .iter()
        .filter(|s| s.method == Method::PATCH && s.path != CE && !s.path.ends_with("/status"))
        .map(|s| s.body.clone())
        .collect();
    assert_eq!(bodies, expected_objects(&world, 3, 3));
    assert_eq!(
        bodies[0]["data"]["ca.crt"],
        json!(secrets::text(&ca_key, "ca.crt")),
        "the CA ConfigMap publishes the CA certificate"
    );
    assert_eq!(bodies[1]["data"]["BATON_BOOTSTRAP_REPLICAS"], "3");
    assert_eq!(bodies[6]["spec"]["replicas"], 3);
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert_eq!(status["observedGeneration"], 2);
    assert_eq!(condition(status, "Available")["status"], "False");
    assert_eq!(condition(status, "Progressing")["status"], "True");
    assert_eq!(condition(status, "Progressing")["reason"], "Creating");
    assert_eq!(condition(status, "Degraded")["status"], "False");
    assert_eq!(status["secureClientEndpoint"], "zk-client.prod.svc:2281");
    assert!(status.get("clientEndpoint").is_none(), "no plain port");
    assert!(world.ensemble.take_calls().is_empty());

    // The super identity: made once, with a random password and ZooKeeper's digest of it.
    let super_secret = secret(&world, "zk-super");
    let password = secrets::text(&super_secret, "password").expect("a password");
    assert!(password.len() >= 40, "{password}");
    let digest = secrets::text(&super_secret, "digest").expect("a digest");
    assert!(
        digest.starts_with("super:") && digest.ends_with('='),
        "{digest}"
    );
    assert_eq!(
        super_secret
            .metadata
            .owner_references
            .as_ref()
            .map(Vec::len),
        Some(1)
    );
    // The members run as their own ServiceAccount, bound to TokenReview.
    let sa = body(&seen, Method::PATCH, &format!("{NS}/serviceaccounts/zk"));
    assert_eq!(sa["metadata"]["ownerReferences"][0]["uid"], "7d1b");
    let crb = &world.bindings["baton.dev:ensemble:prod:zk"];
    assert_eq!(crb["roleRef"]["name"], "system:auth-delegator");
    assert_eq!(
        crb["subjects"],
        json!([{"kind": "ServiceAccount", "name": "zk", "namespace": "prod"}])
    );
    let sts = body(&seen, Method::PATCH, &format!("{APPS}/statefulsets/zk"));
    assert_eq!(sts["spec"]["template"]["spec"]["serviceAccountName"], "zk");

    // The next reconcile finds the PKI whole and writes no Secret.
    world.run_pods(3, "r1");
    let seen = world.reconcile().await;
    let mut expected = apply_lines(true, &[]);
    expected.push(format!("PATCH {CE}/status"));
    assert_eq!(lines(&seen), expected);
}

#[tokio::test]
async fn scale_up_three_to_five_adds_one_member_per_step() {
    let mut world = running("{replicas: 3}", 3, 1).await;
    world.set_spec("replicas", json!(5));

    let seen = world.reconcile().await;
    // The operation is recorded before the StatefulSet grows, and its add step before the add.
    // Certificates for both new members come first, in the members' Secret alone.
    let mut expected = apply_lines(true, &["zk-tls"]);
    expected.insert(8, format!("PATCH {CE}/status"));
    expected.push(format!("POST {EVENTS}"));
    expected.push(format!("PATCH {CE}/status"));
    expected.push(format!("POST {EVENTS}"));
    expected.push(format!("PATCH {CE}/status"));
    assert_eq!(lines(&seen), expected);
    let records: Vec<&Value> = seen
        .iter()
        .filter(|s| s.path == format!("{CE}/status"))
        .map(|s| &s.body["status"]["membershipOperation"])
        .collect();
    assert_eq!(
        records,
        [
            &json!({"kind": "add", "step": "raise-replicas", "memberId": 4, "targetReplicas": 4,
                    "startedAt": "2026-11-23T12:00:00Z"}),
            &json!({"kind": "add", "step": "add-learner", "memberId": 4, "targetReplicas": 4,
                    "startedAt": "2026-11-23T12:00:00Z"}),
            // Promoted within the reconcile: done.
            &Value::Null,
        ]
    );
    assert_eq!(
        world.events,
        vec![
            "Normal Certificates: issue member 4, member 5",
            "Normal ScalingUp: add member 4"
        ]
    );
    assert_eq!(certified_members(&world), [1, 2, 3, 4, 5]);
    let cm = body(&seen, Method::PATCH, &format!("{NS}/configmaps/zk-config"));
    assert_eq!(cm["data"]["BATON_REPLICAS"], "4");
    assert_eq!(
        cm["data"]["BATON_BOOTSTRAP_REPLICAS"], "3",
        "member 4 must join"
    );
    assert_eq!(world.replicas(), 4);
    assert_eq!(
        world.ensemble.take_calls(),
        vec!["add 4 (zk-3.zk-peers.prod.svc:2888) via 1"]
    );
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert_eq!(condition(status, "Progressing")["reason"], "ScalingUp");
    assert_eq!(status["members"], json!([1, 2, 3, 4]));

    world.run_pods(4, "r1");
    world.reconcile().await;
    assert_eq!(world.replicas(), 5);
    assert_eq!(
        world.ensemble.take_calls(),
        vec!["add 5 (zk-4.zk-peers.prod.svc:2888) via 1"]
    );

    world.run_pods(5, "r1");
    let seen = world.reconcile().await;
    assert_eq!(world.replicas(), 5);
    assert!(world.ensemble.take_calls().is_empty());
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert_eq!(condition(status, "Progressing")["status"], "False");
    assert_eq!(condition(status, "Available")["status"], "True");
    assert_eq!(status["readyReplicas"], 5);
}

#[tokio::test]
async fn scale_down_five_to_three_removes_from_raft_before_the_pod_goes() {
    let mut world = running("{replicas: 5}", 5, 5).await;
    world.set_spec("replicas", json!(3));
    let mut replicas = Vec::new();
    let mut calls = Vec::new();
    for _ in 0..5 {
        world.reconcile().await;
        replicas.push(world.replicas());
        calls.extend(world.ensemble.take_calls());
        // The StatefulSet controller deletes pods beyond the replicas.
        let n = world.replicas() as u64;
        world.pods.retain(|(id, _)| *id <= n);
        let gone: Vec<u64> = world
            .ensemble
            .model()
            .removed
            .iter()
            .copied()
            .filter(|id| *id > n)
            .collect();
        for id in gone {
            world.ensemble.model().removed.remove(&id);
        }
    }
    assert_eq!(
        calls,
        vec!["transfer to 1 via 5", "remove 5 via 1", "remove 4 via 1"]
    );
    // A member's certificate goes once its pod has (not while it still runs).
    let (certificates, steps): (Vec<String>, Vec<String>) = world
        .events
        .iter()
        .cloned()
        .partition(|e| e.starts_with("Normal Certificates"));
    assert_eq!(certificates, vec!["Normal Certificates: drop member 5"]);
    assert_eq!(
        steps,
        vec![
            "Normal LeaderTransfer: move leadership from member 5 to member 1",
            "Normal ScalingDown: remove member 5",
            "Normal ScalingDown: remove member 4",
        ]
    );
    // The replicas fall only after Raft has dropped the member.
    assert_eq!(replicas, vec![5, 5, 4, 4, 3]);
    let cm = world.config_map.clone().expect("config map");
    assert_eq!(cm["data"]["BATON_REPLICAS"], "3");
    assert_eq!(cm["data"]["BATON_BOOTSTRAP_REPLICAS"], "3");
    let seen = world.reconcile().await;
    assert_eq!(certified_members(&world), [1, 2, 3]);
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert_eq!(condition(status, "Progressing")["status"], "False");
    assert_eq!(status["members"], json!([1, 2, 3]));
}

#[tokio::test]
async fn an_image_change_restarts_followers_first_and_the_leader_last() {
    let mut world = running("{replicas: 3}", 3, 2).await;
    world.set_spec("image", json!("baton:2"));
    world.update_revision = "r2".into();
    let mut deleted = Vec::new();
    let mut calls = Vec::new();
    for _ in 0..5 {
        let seen = world.reconcile().await;
        let sts = body(&seen, Method::PATCH, &format!("{APPS}/statefulsets/zk"));
        assert_eq!(
            sts["spec"]["template"]["spec"]["containers"][0]["image"],
            "baton:2"
        );
        for s in seen.iter().filter(|s| s.method == Method::DELETE) {
            deleted.push(
                s.path
                    .trim_start_matches(&format!("{NS}/pods/"))
                    .to_string(),
            );
        }
        calls.extend(world.ensemble.take_calls());
        // The StatefulSet controller re-creates deleted pods at the new revision.
        for id in 1..=3u64 {
            if !world.pods.iter().any(|(p, _)| *p == id) {
                world.pods.push((id, "r2".into()));
            }
        }
    }
    assert_eq!(deleted, vec!["zk-0", "zk-2", "zk-1"]);
    assert_eq!(calls, vec!["transfer to 1 via 2"]);
    assert_eq!(
        world.events,
        vec![
            "Normal RollingUpdate: restart member 1 at the new revision",
            "Normal RollingUpdate: restart member 3 at the new revision",
            "Normal LeaderTransfer: move leadership from member 2 to member 1",
            "Normal RollingUpdate: restart member 2 at the new revision",
        ]
    );
    assert!(world.pods.iter().all(|(_, rev)| rev == "r2"));
}

/// The pods a reconcile deleted, by name.
fn deleted_pods(seen: &[api_server::Seen]) -> Vec<String> {
    seen.iter()
        .filter(|s| s.method == Method::DELETE)
        .map(|s| {
            s.path
                .trim_start_matches(&format!("{NS}/pods/"))
                .to_string()
        })
        .collect()
}

/// The ensemble has the restarted member back before the kubelet's probe has found its new pod
/// Ready: the roll waits for Ready (else two member pods would be unready at once), then goes
/// on.
#[tokio::test]
async fn a_roll_waits_for_the_restarted_members_pod_to_be_ready() {
    let mut world = running("{replicas: 3}", 3, 2).await;
    world.set_spec("image", json!("baton:2"));
    world.update_revision = "r2".into();
    let seen = world.reconcile().await;
    assert_eq!(deleted_pods(&seen), ["zk-0"]);
    // Re-created at the new revision; its member answers, its pod is not Ready yet.
    world.pods.push((1, "r2".into()));
    world.unready_pods = vec![1];
    for _ in 0..2 {
        let seen = world.reconcile().await;
        assert_eq!(
            deleted_pods(&seen),
            Vec::<String>::new(),
            "a member's pod went while member 1's was not Ready"
        );
        let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
        assert_eq!(
            status["step"]["description"],
            "Waiting: member pods [1] not Ready"
        );
    }
    world.unready_pods.clear();
    let seen = world.reconcile().await;
    assert_eq!(deleted_pods(&seen), ["zk-2"]);
    assert!(world.ensemble.take_calls().is_empty());
}

/// A rolling upgrade from the previous release (members supporting feature level 1) to this
/// one: while any member still runs the old build the status shows the level held at 1 (and the
/// lowest supported level, 1); once the last one restarted at the new revision the level rises
/// to 2 and the status says so.
#[tokio::test]
async fn a_roll_holds_the_feature_level_until_every_member_runs_the_new_release() {
    let mut world = running("{replicas: 3}", 3, 2).await;
    {
        let mut m = world.ensemble.model();
        m.feature_level = 1;
        m.max_levels = (1..=3).map(|id| (id, 1)).collect();
    }
    world.set_spec("image", json!("baton:2"));
    world.update_revision = "r2".into();
    let mut seen_levels = Vec::new();
    for _ in 0..5 {
        let upgraded = world.pods.iter().filter(|(_, rev)| rev == "r2").count();
        let seen = world.reconcile().await;
        let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
        seen_levels.push((
            upgraded,
            status["featureLevel"].clone(),
            status["maxFeatureLevel"].clone(),
        ));
        // The StatefulSet controller re-creates deleted pods at the new revision, which
        // supports level 2.
        for id in 1..=3u64 {
            if !world.pods.iter().any(|(p, _)| *p == id) {
                world.pods.push((id, "r2".into()));
                world.ensemble.model().max_levels.insert(id, 2);
            }
        }
    }
    assert!(world.pods.iter().all(|(_, rev)| rev == "r2"));
    let seen = world.reconcile().await;
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    seen_levels.push((
        3,
        status["featureLevel"].clone(),
        status["maxFeatureLevel"].clone(),
    ));
    let during: Vec<_> = seen_levels.iter().filter(|(up, _, _)| *up < 3).collect();
    assert!(
        during.len() >= 3,
        "the roll took one reconcile per member: {seen_levels:?}"
    );
    for (upgraded, level, max) in &during {
        assert_eq!(
            (level, max),
            (&json!(1), &json!(1)),
            "with {upgraded} of 3 members upgraded: {seen_levels:?}"
        );
    }
    assert_eq!(
        seen_levels.last().map(|(_, l, m)| (l, m)),
        Some((&json!(2), &json!(2))),
        "after the roll: {seen_levels:?}"
    );
}

#[tokio::test]
async fn status_reports_members_leader_and_a_stuck_step() {
    let mut world = running("{replicas: 3}", 3, 3).await;
    let seen = world.reconcile().await;
    let status = body(&seen, Method::PATCH, &format!("{CE}/status"))["status"].clone();
    assert_eq!(status["members"], json!([1, 2, 3]));
    assert_eq!(status["leader"], 3);
    assert_eq!(status["readyReplicas"], 3);
    assert_eq!(status["observedGeneration"], 2);
    assert_eq!(
        status["selector"],
        "app.kubernetes.io/instance=zk,app.kubernetes.io/name=baton-ensemble"
    );
    assert_eq!(condition(&status, "Available")["reason"], "QuorumReady");
    assert_eq!(condition(&status, "Degraded")["status"], "False");
    assert!(status.get("step").is_none());

    // Member 2 stops answering and stays away: a step waits, and once it has waited longer
    // than the limit the ensemble is reported Degraded (not a silent loop).
    world.ensemble.model().down.insert(2);
    world.set_spec("replicas", json!(5));
    let seen = world.reconcile().await;
    let status = body(&seen, Method::PATCH, &format!("{CE}/status"))["status"].clone();
    assert_eq!(
        condition(&status, "Progressing")["reason"],
        "WaitingForHealthyQuorum"
    );
    assert_eq!(condition(&status, "Degraded")["status"], "False");
    assert_eq!(status["readyReplicas"], 2);
    assert!(
        world.ensemble.take_calls().is_empty(),
        "no step without a healthy quorum"
    );
    let description = status["step"]["description"].clone();
    world.ce["status"]["step"] =
        json!({"description": description, "since": "2026-11-23T11:40:00Z"});
    let seen = world.reconcile().await;
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert_eq!(condition(status, "Degraded")["status"], "True");
    assert_eq!(condition(status, "Degraded")["reason"], "StepStuck");
    assert_eq!(status["step"]["since"], "2026-11-23T11:40:00Z");
    // Available did not change: its transition time is kept.
    assert_eq!(
        condition(status, "Available")["lastTransitionTime"],
        "2026-11-23T12:00:00Z"
    );
}

#[tokio::test]
async fn a_refused_apply_is_reported_in_the_status_and_retried() {
    let mut world = running("{replicas: 3}", 3, 1).await;
    world.set_spec("storage", json!({"size": "5Gi"}));
    world.refuse_statefulset = true;
    let (seen, result) = world.try_reconcile().await;
    let error = result.expect_err("the reconcile fails, so the controller backs off");
    assert!(error.contains("StatefulSet zk"), "{error}");
    assert_eq!(
        lines(&seen).last(),
        Some(&format!("PATCH {CE}/status")),
        "{:?}",
        lines(&seen)
    );
    assert!(
        world
            .events
            .iter()
            .any(|e| e.starts_with("Warning ApplyFailed: apply StatefulSet zk")),
        "{:?}",
        world.events
    );
    let status = &seen.last().expect("a request").body["status"];
    assert_eq!(condition(status, "Degraded")["status"], "True");
    assert_eq!(condition(status, "Degraded")["reason"], "StepFailed");
    assert!(
        condition(status, "Degraded")["message"]
            .as_str()
            .is_some_and(|m| m.contains("Forbidden"))
    );
}

#[tokio::test]
async fn a_fixed_image_replaces_broken_members_without_a_quorum() {
    let mut world = running("{replicas: 3, image: 'baton:typo'}", 3, 1).await;
    // The image never ran: no member answers, no pod is Ready.
    world.ensemble.model().down.extend([1, 2, 3]);
    world.unready_pods = vec![1, 2, 3];
    world.set_spec("image", json!("baton:2"));
    world.update_revision = "r2".into();
    let mut deleted = Vec::new();
    for _ in 0..3 {
        let seen = world.reconcile().await;
        for s in seen.iter().filter(|s| s.method == Method::DELETE) {
            deleted.push(
                s.path
                    .trim_start_matches(&format!("{NS}/pods/"))
                    .to_string(),
            );
        }
        for id in 1..=3u64 {
            if !world.pods.iter().any(|(p, _)| *p == id) {
                world.pods.push((id, "r2".into()));
            }
        }
    }
    assert_eq!(deleted, vec!["zk-0", "zk-1", "zk-2"]);
    assert!(world.ensemble.take_calls().is_empty());
}

#[tokio::test]
async fn the_admin_api_is_called_with_the_admin_certificate_of_the_secret() {
    let mut world = running("{replicas: 3}", 3, 1).await;
    world.reconcile().await;
    let stored = admin_credentials(&secret(&world, "zk-admin")).expect("admin credentials");
    let used = world.ensemble.model().admin_certs.clone();
    assert!(!used.is_empty(), "the members were asked");
    assert!(
        used.iter().all(|c| *c == stored.cert_pem),
        "only the stored admin certificate"
    );
}

#[tokio::test]
async fn without_an_admin_certificate_no_member_is_asked_and_it_is_issued_again() {
    let mut world = running("{replicas: 3}", 3, 1).await;
    world.secrets.remove("zk-admin");
    world.set_spec("replicas", json!(5));
    let seen = world.reconcile().await;
    let mut expected = apply_lines(true, &["zk-tls", "zk-admin"]);
    expected.push(format!("POST {EVENTS}"));
    expected.push(format!("PATCH {CE}/status"));
    assert_eq!(lines(&seen), expected);
    assert!(world.ensemble.take_calls().is_empty(), "no step blind");
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert_eq!(status["readyReplicas"], 0);
    // The next round has the new admin certificate and takes the step.
    world.reconcile().await;
    assert_eq!(
        world.ensemble.take_calls(),
        vec!["add 4 (zk-3.zk-peers.prod.svc:2888) via 1"]
    );
}

#[tokio::test]
async fn an_expiring_member_certificate_is_renewed_without_restarting_anything() {
    let mut world = running("{replicas: 3}", 3, 1).await;
    let before = secret(&world, "zk-tls");
    let sts_before = world.statefulset.clone();
    // Member 2's certificate ends in ten days.
    let annotation = "baton.dev/certificates";
    let mut records: Value = serde_json::from_str(
        world.secrets["zk-tls"]["metadata"]["annotations"][annotation]
            .as_str()
            .expect("annotation"),
    )
    .expect("records");
    records["member-2"]["notAfter"] = json!("2026-12-03T12:00:00Z");
    world.secrets.get_mut("zk-tls").expect("zk-tls")["metadata"]["annotations"][annotation] =
        json!(records.to_string());

    let seen = world.reconcile().await;
    let mut expected = apply_lines(true, &["zk-tls"]);
    expected.push(format!("POST {EVENTS}"));
    expected.push(format!("PATCH {CE}/status"));
    assert_eq!(lines(&seen), expected);
    assert_eq!(world.events, vec!["Normal Certificates: issue member 2"]);
    let after = secret(&world, "zk-tls");
    let data = |s: &Secret, key: &str| secrets::text(s, key);
    assert_ne!(data(&after, "member-2.crt"), data(&before, "member-2.crt"));
    assert_eq!(data(&after, "member-1.crt"), data(&before, "member-1.crt"));
    assert_eq!(data(&after, "ca.crt"), data(&before, "ca.crt"));
    // Same pod template: the kubelet refreshes the mounted files, nothing restarts.
    assert_eq!(world.statefulset, sts_before);
    assert!(seen.iter().all(|s| s.method != Method::DELETE));
}

#[tokio::test]
async fn allowed_namespaces_get_the_ca_and_the_client_port_and_lose_them_when_dropped() {
    let mut world = World::new(
        "{replicas: 3, allowedNamespaces: [web, batch, not-yet]}",
        FakeEnsemble::default(),
    );
    // A ConfigMap of another ensemble in web: never listed as ours, never touched.
    world.foreign_config_maps.insert(
        "web/other.zk-ca".into(),
        json!({"metadata": {"name": "other.zk-ca", "namespace": "web",
               "labels": {"baton.dev/ensemble-namespace": "other", "baton.dev/ensemble-name": "zk"}}}),
    );
    let seen = world.reconcile().await;
    let published = |ns: &str| format!("PATCH /api/v1/namespaces/{ns}/configmaps/prod.zk-ca");
    let read = |ns: &str| format!("GET /api/v1/namespaces/{ns}/configmaps/prod.zk-ca");
    let all = lines(&seen);
    let at = |line: &str| {
        all.iter()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("no {line} in {all:?}"))
    };
    // After the own CA, before the members start; sorted; a missing namespace is skipped;
    // each read first (someone else's ConfigMap of that name is left alone).
    let own = at(&format!("PATCH {NS}/configmaps/zk-ca"));
    assert_eq!(
        all[own + 1..own + 8],
        [
            read("batch"),
            published("batch"),
            read("not-yet"),
            published("not-yet"),
            read("web"),
            published("web"),
            format!("GET {ALL_CONFIG_MAPS}"),
        ]
    );
    assert!(at(&format!("PATCH {APPS}/statefulsets/zk")) > own + 7);
    let list = &seen[own + 7];
    assert!(
        list.query.contains(
            "labelSelector=baton.dev%2Fensemble-namespace%3Dprod%2Cbaton.dev%2Fensemble-name%3Dzk"
        ),
        "{}",
        list.query
    );
    // Published without force: a ConfigMap someone else manages is never taken over.
    let publish = body(
        &seen,
        Method::PATCH,
        "/api/v1/namespaces/web/configmaps/prod.zk-ca",
    );
    assert!(
        !seen[own + 6].query.contains("force=true"),
        "{}",
        seen[own + 6].query
    );
    let own_ca = body(&seen, Method::PATCH, &format!("{NS}/configmaps/zk-ca"));
    assert_eq!(publish["data"], own_ca["data"], "the same CA certificate");
    assert!(publish["metadata"].get("ownerReferences").is_none());
    assert_eq!(
        publish["metadata"]["labels"]["baton.dev/ensemble-namespace"],
        "prod"
    );
    let mut kept: Vec<&String> = world.foreign_config_maps.keys().collect();
    kept.sort();
    assert_eq!(
        kept,
        ["batch/prod.zk-ca", "web/other.zk-ca", "web/prod.zk-ca"]
    );
    // The client port is open to the ensemble's own namespace and every allowed one.
    let policy = body(
        &seen,
        Method::PATCH,
        &format!("{NETWORKING}/networkpolicies/zk-members"),
    );
    assert_eq!(
        policy["spec"]["ingress"][2]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["batch", "not-yet", "prod", "web"])
    );

    // batch is dropped: its copy goes, the rest stays, the policy closes.
    world.run_pods(3, "r1");
    world.set_spec("allowedNamespaces", json!(["web"]));
    let seen = world.reconcile().await;
    let all = lines(&seen);
    let list = all
        .iter()
        .position(|l| *l == format!("GET {ALL_CONFIG_MAPS}"))
        .expect("the list");
    assert_eq!(
        all[list - 1..list + 2],
        [
            published("web"),
            format!("GET {ALL_CONFIG_MAPS}"),
            "DELETE /api/v1/namespaces/batch/configmaps/prod.zk-ca".to_string(),
        ]
    );
    let mut kept: Vec<&String> = world.foreign_config_maps.keys().collect();
    kept.sort();
    assert_eq!(kept, ["web/other.zk-ca", "web/prod.zk-ca"]);
    let policy = body(
        &seen,
        Method::PATCH,
        &format!("{NETWORKING}/networkpolicies/zk-members"),
    );
    assert_eq!(
        policy["spec"]["ingress"][2]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["prod", "web"])
    );
}

#[tokio::test]
async fn the_super_secret_is_made_once_and_never_rewritten() {
    let mut world = running("{replicas: 3}", 3, 1).await;
    let mut mine = world.secrets["zk-super"].clone();
    mine["data"]["password"] = json!("bWluZQ==");
    mine["data"]["digest"] = json!("c3VwZXI6eA==");
    world.secrets.insert("zk-super".into(), mine.clone());
    let seen = world.reconcile().await;
    assert!(
        !seen
            .iter()
            .any(|s| s.path.contains("zk-super") && s.method != Method::GET),
        "{:?}",
        lines(&seen)
    );
    assert!(!lines(&seen).contains(&format!("POST {NS}/secrets")));
    assert_eq!(world.secrets["zk-super"], mine);
    // The members read the digest from it, whatever it holds.
    let sts = world.statefulset.clone().expect("sts");
    let env = sts["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let digest = env
        .iter()
        .find(|e| e["name"] == "BATON_SUPER_DIGEST")
        .expect("BATON_SUPER_DIGEST");
    assert_eq!(
        digest["valueFrom"]["secretKeyRef"],
        json!({"name": "zk-super", "key": "digest", "optional": false})
    );
}
