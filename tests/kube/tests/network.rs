//! The members' NetworkPolicy, enforced (kube-router's firewall on the real node,
//! `tests/kube/src/node.rs`): who reaches which port of a member, tried from pods with busybox's
//! `nc`, through the members' DNS names.
//!
//! - a pod of another namespace reaches no port: not the peer port, not the admin port, not the
//!   client port (the ensemble does not serve that namespace);
//! - a pod of the ensemble's namespace (a documented client) reaches the client port, and
//!   neither the peer nor the admin port;
//! - the chart's metrics scraper (`app.kubernetes.io/name=prometheus` in `monitoring`, the
//!   chart's default) reaches the admin port, which serves `/metrics`, and not the peer port;
//! - the members reach each other's peer port and the operator their admin port: the ensemble
//!   is Available with a leader, which needs both.
//!
//! `#[ignore]`d: `tests/scripts/test.sh` runs it on the node it starts.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, ensure};
use baton_kube_tests::node::{self, wait_for};
use baton_kube_tests::{Kube, unique};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};

const CLIENT: u16 = 2281;
const PEER: u16 = 2888;
const ADMIN: u16 = 8080;

/// The scraper's namespace and labels, the chart's defaults (`monitoring.podMonitors.scraper`).
const SCRAPER_NAMESPACE: &str = "monitoring";

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a real node (root, the image): tests/scripts/test.sh runs it"]
async fn the_members_policy_admits_only_the_documented_sources() -> Result<()> {
    let kube = Kube::on_node("netpol").await?;
    node::chart(&kube, &[]).await?;
    let ns = kube.namespace.clone();
    kube.apply(
        json!({"apiVersion": "baton.dev/v1alpha1", "kind": "CoordinationEnsemble",
               "metadata": {"name": "demo"},
               "spec": {"replicas": 3, "storage": {"size": "1Gi"},
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}}}),
        false,
    )
    .await?;
    let ensembles = kube
        .api_for(
            &kube.client,
            &json!({"apiVersion": "baton.dev/v1alpha1", "kind": "CoordinationEnsemble"}),
        )
        .await?;
    wait_for(
        &kube,
        "demo Available with a leader",
        Duration::from_secs(240),
        || async {
            let ce: DynamicObject = ensembles.get("demo").await?;
            let status = ce.data.get("status").cloned().unwrap_or(Value::Null);
            let available = status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Available" && c["status"] == "True");
            ensure!(available && status["leader"].is_i64(), "status {status}");
            Ok(())
        },
    )
    .await?;

    // Every port of member demo-1, by its DNS name.
    let member = format!("demo-1.demo-peers.{ns}.svc.cluster.local");
    let target = |port: u16| format!("{member}:{port}");
    let all: Vec<String> = [CLIENT, PEER, ADMIN].into_iter().map(target).collect();
    let expect = |who: &str, reached: &BTreeMap<String, bool>, open: &[u16]| -> Result<()> {
        for port in [CLIENT, PEER, ADMIN] {
            let want = open.contains(&port);
            let got = reached.get(&target(port)).copied();
            ensure!(
                got == Some(want),
                "{who} -> port {port}: reached {got:?}, the policy says {want} (all: {reached:?})"
            );
        }
        Ok(())
    };

    // Three pods at once: a client of the ensemble's own namespace; a pod of another
    // namespace, with the labels of everything that is let in elsewhere; the chart's scraper.
    let other = format!("{ns}-other");
    let namespaces = Api::<Namespace>::all(kube.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": other,
                "labels": {baton_kube_tests::TEST_LABEL: "true"}}}))?,
        )
        .await?;
    if namespaces.get_opt(SCRAPER_NAMESPACE).await?.is_none() {
        let _ = namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": SCRAPER_NAMESPACE}}))?,
            )
            .await;
    }
    let scraper_name = unique("scraper");
    let tries = 10;
    let (client, outsider, scraper) = tokio::join!(
        node::reach(&kube, &ns, "client", json!({}), &all, tries),
        node::reach(
            &kube,
            &other,
            "outsider",
            json!({"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/instance": "demo"}),
            &all,
            tries
        ),
        node::reach(
            &kube,
            SCRAPER_NAMESPACE,
            &scraper_name,
            json!({"app.kubernetes.io/name": "prometheus"}),
            &all,
            tries,
        ),
    );
    let _ = namespaces.delete(&other, &DeleteParams::default()).await;
    let _ = Api::<Pod>::namespaced(kube.client.clone(), SCRAPER_NAMESPACE)
        .delete(&scraper_name, &DeleteParams::default())
        .await;
    expect("a pod of the ensemble's namespace", &client?, &[CLIENT])?;
    expect("a pod of another namespace", &outsider?, &[])?;
    expect("the metrics scraper", &scraper?, &[ADMIN])?;
    Ok(())
}
