//! `spec.limits`: the quotas a new ensemble starts with (the ConfigMap's env), kept on a running
//! one with `PUT /v1/settings` at its leader (no member restarted), and the NOSPACE alarm
//! reported as the condition `DiskAlarm` with an Event when it rises and when it clears.

use baton_operator::ensemble::{Alarm, SettingsValues};
use http::Method;
use serde_json::json;

use crate::api_server::{APPS, CE, NS, World, body};
use crate::condition;
use crate::fake_ensemble::FakeEnsemble;

/// The ensemble's built-in settings, identities not checked (an ensemble made before the
/// operator turned the policy into a setting).
fn built_in() -> SettingsValues {
    SettingsValues {
        check_identities: false,
        namespace_znodes: 100_000,
        namespace_bytes: 64 << 20,
        shared_znodes: 2_000_000,
        shared_bytes: 256 << 20,
        ephemerals_per_session: 10_000,
    }
}

/// A healthy three-member ensemble led by `leader` that reports `settings`; the objects and
/// pods exist.
async fn running_with(spec: &str, leader: u64, settings: SettingsValues) -> World {
    let fake = FakeEnsemble::new(&[1, 2, 3], leader);
    fake.model().settings = Some(settings);
    let mut world = World::new(spec, fake);
    world.reconcile().await;
    world.run_pods(3, "r1");
    world.reconcile().await;
    world.events.clear();
    world.ensemble.take_calls();
    world
}

#[tokio::test]
async fn limits_are_the_first_values_and_then_put_at_the_leader_without_a_restart() {
    let fake = FakeEnsemble::new(&[1, 2, 3], 1);
    fake.model().settings = Some(built_in());
    let mut world = World::new("{replicas: 3, limits: {namespaceBytes: 2097152}}", fake);
    let seen = world.reconcile().await;
    // A new ensemble's members start with the limits: quotas in the ConfigMap's env (read at
    // start), the watermark on each member's command line.
    let cm = body(&seen, Method::PATCH, &format!("{NS}/configmaps/zk-config"));
    assert_eq!(cm["data"]["BATON_QUOTA_NAMESPACE_BYTES"], "2097152");
    assert_eq!(cm["data"]["BATON_QUOTA_NAMESPACE_ZNODES"], "100000");
    assert_eq!(cm["data"]["BATON_QUOTA_SHARED_ZNODES"], "2000000");
    assert_eq!(cm["data"]["BATON_QUOTA_SHARED_BYTES"], "268435456");
    assert_eq!(cm["data"]["BATON_MAX_EPHEMERALS_PER_SESSION"], "10000");
    let sts = body(&seen, Method::PATCH, &format!("{APPS}/statefulsets/zk"));
    let args = &sts["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array()
            .is_some_and(|a| a.contains(&json!("--min-free-disk-bytes=67108864"))),
        "{args}"
    );
    // Once the members run, they report the built-in settings (the fake's members ignore
    // their env): the differing ones go to the leader.
    assert!(world.ensemble.take_calls().is_empty(), "no members yet");
    world.run_pods(3, "r1");
    world.reconcile().await;
    assert_eq!(
        world.ensemble.take_calls(),
        vec![r#"settings {"checkIdentities":true,"namespaceBytes":2097152} via 1"#]
    );
    let status = &world.ce["status"];
    assert_eq!(
        status["settings"],
        json!({"checkIdentities": true, "namespaceZnodes": 100000, "namespaceBytes": 2097152,
               "sharedZnodes": 2000000, "sharedBytes": 268435456, "ephemeralsPerSession": 10000})
    );
    assert_eq!(condition(status, "DiskAlarm")["status"], "False");
    assert_eq!(
        world.events.last().map(String::as_str),
        Some(
            r#"Normal SettingsChanged: PUT /v1/settings {"checkIdentities":true,"namespaceBytes":2097152}: applied"#
        )
    );

    // Once they match, nothing is sent.
    world.reconcile().await;
    assert!(world.ensemble.take_calls().is_empty());

    // A quota changed on a running ensemble: a PUT, and no member restarted (the StatefulSet's
    // template is the same; only the ConfigMap, read at start, changes).
    let template_before = world
        .statefulset
        .as_ref()
        .map(|s| s["spec"]["template"].clone());
    world.set_spec(
        "limits",
        json!({"namespaceBytes": 2097152, "sharedZnodes": 5000, "ephemeralsPerSession": 50}),
    );
    let seen = world.reconcile().await;
    assert_eq!(
        world.ensemble.take_calls(),
        vec![r#"settings {"ephemeralsPerSession":50,"sharedZnodes":5000} via 1"#]
    );
    assert_eq!(
        world
            .statefulset
            .as_ref()
            .map(|s| s["spec"]["template"].clone()),
        template_before
    );
    assert!(
        !seen
            .iter()
            .any(|s| s.method == Method::DELETE && s.path.contains("/pods/")),
        "no member restarted"
    );
    let cm = body(&seen, Method::PATCH, &format!("{NS}/configmaps/zk-config"));
    assert_eq!(cm["data"]["BATON_QUOTA_SHARED_ZNODES"], "5000");
    assert_eq!(world.ce["status"]["settings"]["sharedZnodes"], 5000);
    assert_eq!(world.ce["status"]["settings"]["ephemeralsPerSession"], 50);
}

#[tokio::test]
async fn a_change_follows_not_leader_to_the_member_that_leads_now() {
    let mut world = running_with("{replicas: 3}", 1, built_in()).await;
    // The operator's view says 1 leads; by the time the change arrives, 3 does.
    world.ensemble.model().leader_before_settings = Some(3);
    world.set_spec("limits", json!({"namespaceZnodes": 500}));
    world.reconcile().await;
    // Member 1 answered NotLeader (logged by nobody: refused before the call counts), and the
    // change went to 3.
    assert_eq!(
        world.ensemble.take_calls(),
        vec![r#"settings {"namespaceZnodes":500} via 3"#]
    );
    assert_eq!(world.ce["status"]["settings"]["namespaceZnodes"], 500);
}

#[tokio::test]
async fn members_that_predate_the_settings_are_left_alone() {
    let mut world = running_with("{replicas: 3}", 1, built_in()).await;
    world.ensemble.model().settings = None;
    world.set_spec("limits", json!({"namespaceZnodes": 500}));
    world.reconcile().await;
    assert!(world.ensemble.take_calls().is_empty());
    // The last settings seen stay in the status.
    assert_eq!(world.ce["status"]["settings"]["namespaceZnodes"], 100000);
}

#[tokio::test]
async fn the_disk_alarm_is_a_condition_and_an_event_when_it_rises_and_clears() {
    let settings = SettingsValues {
        check_identities: true,
        ..built_in()
    };
    let mut world = running_with("{replicas: 3}", 1, settings).await;
    assert_eq!(
        condition(&world.ce["status"], "DiskAlarm")["reason"],
        "NoAlarm"
    );
    world.ensemble.model().alarms = vec![Alarm {
        member: 2,
        kind: "nospace".into(),
    }];
    world.reconcile().await;
    let status = world.ce["status"].clone();
    let alarm = condition(&status, "DiskAlarm");
    assert_eq!(alarm["status"], "True");
    assert_eq!(alarm["reason"], "NoSpace");
    assert!(
        alarm["message"].as_str().is_some_and(|m| m.contains("[2]")),
        "{alarm}"
    );
    assert_eq!(
        status["settings"]["alarms"],
        json!([{"member": 2, "kind": "nospace"}])
    );
    assert_eq!(world.events.len(), 1, "{:?}", world.events);
    assert!(world.events[0].starts_with("Warning DiskAlarm: members [2]"));
    assert!(
        world.ensemble.take_calls().is_empty(),
        "an alarm changes no setting"
    );

    // Still up: no second Event.
    world.reconcile().await;
    assert_eq!(world.events.len(), 1, "{:?}", world.events);

    world.ensemble.model().alarms.clear();
    let seen = world.reconcile().await;
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert_eq!(condition(status, "DiskAlarm")["status"], "False");
    assert!(status["settings"].get("alarms").is_none(), "{status}");
    assert_eq!(world.events.len(), 2, "{:?}", world.events);
    assert!(world.events[1].starts_with("Normal DiskAlarmCleared"));
}
