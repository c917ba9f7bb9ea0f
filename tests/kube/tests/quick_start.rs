//! README's "Sidecar injection" quick start, followed on the real API server with the node agent
//! running the pods: the chart installed with exactly the `sidecarRbac` values the README passes
//! (the example Deployment's ServiceAccount `web` in the namespace), the two example files
//! applied as they are (`operator/examples/coordinationensemble.yaml`, three members, and
//! `operator/examples/injected-deployment.yaml`, three `web` pods), and then what
//! `kubectl get pods -l baton.dev/role=leader` shows: exactly one `web` pod, the others
//! labelled `candidate`, and the leader the only Ready one (its app's readiness probe asks the
//! sidecar's `/leader/ready`).
//!
//! The one departure from the README: the namespace is labelled for this test's webhook
//! ([`baton_kube_tests::agent::INJECTION_LABEL`]) rather than `baton.dev/injection=enabled`,
//! since tests run in parallel on one control plane.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use baton_kube_tests::agent::{
    EnsembleCleanup, Namespaces, NodeAgent, OperatorLock, install_operator_with,
    require_aggregator_routing, wait_for,
};
use baton_kube_tests::{Kube, parse_yaml, repo_root};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::Value;

/// Applies an example file of `operator/examples/` into `namespace`, unchanged otherwise.
async fn apply_example(kube: &Kube, file: &str, namespace: &str) -> Result<()> {
    let path = repo_root().join("operator/examples").join(file);
    let yaml = std::fs::read_to_string(&path).with_context(|| format!("read {path:?}"))?;
    for mut object in parse_yaml(&yaml)? {
        object["metadata"]["namespace"] = Value::from(namespace);
        kube.apply(object, false).await?;
    }
    Ok(())
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test(flavor = "multi_thread")]
async fn readme_quick_start_shows_the_leader_pod() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let kube = Kube::new("quick-start").await?;
    require_aggregator_routing(&kube)?;
    let extra = Namespaces::create(&kube, &["prod"]).await?;
    let prod = extra.names[0].clone();
    let agent = NodeAgent::start_for(&kube, &[&prod])?;
    // README: helm upgrade ... --set 'sidecarRbac.serviceAccounts[0].namespace=prod'
    //                           --set 'sidecarRbac.serviceAccounts[0].name=web'
    let namespace_value = format!("sidecarRbac.serviceAccounts[0].namespace={prod}");
    let _release = install_operator_with(
        &kube,
        &agent,
        &[&namespace_value, "sidecarRbac.serviceAccounts[0].name=web"],
    )
    .await?;
    let _cleanup = EnsembleCleanup::new(&kube, &[&prod]);

    apply_example(&kube, "coordinationensemble.yaml", &prod).await?;
    apply_example(&kube, "injected-deployment.yaml", &prod).await?;

    let pods = Api::<Pod>::namespaced(kube.client.clone(), &prod);
    let leader = wait_for(
        &agent,
        "one web pod labelled baton.dev/role=leader, the others candidate, the leader alone Ready",
        Duration::from_secs(300),
        || async {
            let web = pods
                .list(&ListParams::default().labels("app=web"))
                .await?
                .items;
            ensure!(web.len() == 3, "{} web pods", web.len());
            let role = |p: &Pod| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("baton.dev/role"))
                    .cloned()
                    .unwrap_or_default()
            };
            let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
            // What `kubectl get pods -l baton.dev/role=leader` lists.
            let leaders = pods
                .list(&ListParams::default().labels("baton.dev/role=leader"))
                .await?
                .items;
            let roles: Vec<(String, String)> = web.iter().map(|p| (name(p), role(p))).collect();
            ensure!(leaders.len() == 1, "roles {roles:?}");
            let leader = name(&leaders[0]);
            ensure!(
                web.iter()
                    .all(|p| name(p) == leader || role(p) == "candidate"),
                "roles {roles:?}"
            );
            let ready: Vec<String> = web.iter().filter(|p| ready(p)).map(name).collect();
            ensure!(
                ready == [leader.clone()],
                "leader {leader}, Ready {ready:?}"
            );
            Ok(leader)
        },
    )
    .await?;
    eprintln!("leader pod: {leader}");
    Ok(())
}
