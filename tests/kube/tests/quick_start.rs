//! The docs' local cluster (`docs/src/getting-started/local-cluster.md`) and the injection task
//! it leads to (`docs/src/tasks/inject.md`), followed on the real node (a kubelet,
//! containerd and runc running the project's image; `tests/kube/src/node.rs`): the chart
//! installed as `helm install baton charts/baton -n baton-system --create-namespace`, then
//! `helm upgrade --reuse-values` with exactly the `sidecarRbac` values the task passes (the
//! example Deployment's ServiceAccount `web` in the namespace), the namespace labelled
//! `baton.dev/injection=enabled`, the two example files applied
//! (`operator/examples/coordinationensemble.yaml`, three members, and
//! `operator/examples/injected-deployment.yaml`, three `web` pods), and then what
//! `kubectl get pods -l baton.dev/role=leader` shows: exactly one `web` pod, the others
//! labelled `candidate`, and the leader the only Ready one (its app's readiness probe asks the
//! sidecar's `/leader/ready`).
//!
//! As the local cluster page says, the example app's `busybox:1.37` becomes the node's own
//! busybox image, since nothing is pulled.
//!
//! `#[ignore]`d: `tests/scripts/test.sh` runs it on the node it starts.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use baton_kube_tests::node::{self, wait_for};
use baton_kube_tests::{Kube, parse_yaml, repo_root};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

/// The node's busybox (`control-plane.sh up --node` imports it).
const LOCAL_BUSYBOX: &str = "localhost/baton-test/busybox:1";

/// Applies an example file of `operator/examples/` into `namespace`, its app image swapped for
/// the node's busybox as the local cluster page does.
async fn apply_example(kube: &Kube, file: &str, namespace: &str) -> Result<()> {
    let path = repo_root().join("operator/examples").join(file);
    let yaml = std::fs::read_to_string(&path).with_context(|| format!("read {path:?}"))?;
    let yaml = yaml.replace("image: busybox:1.37", &format!("image: {LOCAL_BUSYBOX}"));
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
#[ignore = "needs a real node (root, the image): tests/scripts/test.sh runs it"]
async fn readme_quick_start_shows_the_leader_pod() -> Result<()> {
    let kube = Kube::on_node("quick-start").await?;
    let prod = kube.namespace.clone();
    // inject.md: helm upgrade ... --reuse-values
    //   --set 'sidecarRbac.serviceAccounts[0].namespace=prod'
    //   --set 'sidecarRbac.serviceAccounts[0].name=web'
    let namespace_value = format!("sidecarRbac.serviceAccounts[0].namespace={prod}");
    node::chart(
        &kube,
        &[&namespace_value, "sidecarRbac.serviceAccounts[0].name=web"],
    )
    .await?;
    // inject.md: kubectl label namespace prod baton.dev/injection=enabled
    Api::<Namespace>::all(kube.client.clone())
        .patch(
            &prod,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"baton.dev/injection": "enabled"}}})),
        )
        .await?;

    apply_example(&kube, "coordinationensemble.yaml", &prod).await?;
    apply_example(&kube, "injected-deployment.yaml", &prod).await?;

    let pods = Api::<Pod>::namespaced(kube.client.clone(), &prod);
    let leader = wait_for(
        &kube,
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
            leaders.into_iter().next().context("leader")
        },
    )
    .await?;
    // The injected sidecar is the image's baton-sidecar, run as the image's user.
    node::runs_from_the_image(&leader, "baton-sidecar")?;
    eprintln!("leader pod: {}", leader.metadata.name.unwrap_or_default());
    Ok(())
}
