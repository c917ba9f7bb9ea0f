//! The `SidecarsMissing` condition: present while the audit lists pods of the ensemble
//! running without the sidecar, gone once there are none.

use std::collections::BTreeMap;

use http::Method;

use crate::api_server::{CE, body};
use crate::{condition, running};

#[tokio::test]
async fn pods_missing_the_sidecar_show_as_a_condition_until_fixed() {
    let mut world = running("{replicas: 3}", 3, 1).await;
    let seen = world.reconcile().await;
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert!(
        status["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().all(|c| c["type"] != "SidecarsMissing")),
        "no condition without such pods: {status}"
    );

    let pods: Vec<String> = (1..=7).map(|i| format!("prod/app-{i}")).collect();
    world.missing_sidecars.replace(BTreeMap::from([
        ("prod/zk".to_string(), pods),
        ("prod/other".to_string(), vec!["prod/x".to_string()]),
    ]));
    let seen = world.reconcile().await;
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    let missing = condition(status, "SidecarsMissing");
    assert_eq!(missing["status"], "True");
    assert_eq!(missing["reason"], "PodsWithoutSidecar");
    let message = missing["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("7 pod(s)"), "{message}");
    assert!(message.contains("prod/app-1, prod/app-2"), "{message}");
    assert!(message.contains("and 2 more"), "{message}");
    assert!(
        !message.contains("prod/x"),
        "another ensemble's pod: {message}"
    );
    assert!(message.contains("delete them"), "{message}");
    assert_eq!(condition(status, "Available")["status"], "True");

    world.missing_sidecars.replace(BTreeMap::new());
    let seen = world.reconcile().await;
    let status = &body(&seen, Method::PATCH, &format!("{CE}/status"))["status"];
    assert!(
        status["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().all(|c| c["type"] != "SidecarsMissing")),
        "gone once fixed: {status}"
    );
}
