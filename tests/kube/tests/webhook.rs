//! The sidecar-injection webhook as the chart registers it, called by the real API server
//! (resolved through the webhook Service's endpoints to the operator's pod, which the node
//! agent runs): an annotated pod in a namespace the ensemble serves is stored with the sidecar,
//! and that sidecar, run by the agent, leads its election; a pod of a namespace the ensemble
//! does not serve is refused with the documented message; while the operator is down,
//! `failurePolicy: Fail` refuses annotated pods but not the pods the webhook excludes.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use baton_kube_tests::Kube;
use baton_kube_tests::agent::{
    EnsembleCleanup, Namespaces, NodeAgent, OperatorLock, install_operator,
    require_aggregator_routing, wait_for,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn app_pod(name: &str, annotations: Value, labels: Value) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations, "labels": labels},
        "spec": {
            "containers": [{"name": "app", "image": "registry.example/app:1"}],
            "terminationGracePeriodSeconds": 5,
        }
    }))?)
}

/// The API server's refusal of a pod create, or a failure if it was stored.
async fn refused(api: &Api<Pod>, pod: &Pod) -> Result<String> {
    match api.create(&PostParams::default(), pod).await {
        Ok(stored) => bail!(
            "pod {} was stored, expected a refusal",
            stored.metadata.name.unwrap_or_default()
        ),
        Err(kube::Error::Api(e)) => Ok(format!("{} {}", e.code, e.message)),
        Err(e) => Err(e.into()),
    }
}

/// An annotated pod in the ensemble's namespace gets the sidecar, whose election it leads; a
/// pod of a namespace the ensemble does not serve is refused, naming what it serves.
#[tokio::test(flavor = "multi_thread")]
async fn injected_sidecar_leads_and_unserved_namespace_is_refused() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let t0 = std::time::Instant::now();
    let kube = Kube::new("webhook-inject").await?;
    require_aggregator_routing(&kube)?;
    let extra = Namespaces::create(&kube, &["apps", "other"]).await?;
    let (apps, other) = (extra.names[0].clone(), extra.names[1].clone());
    let agent = NodeAgent::start_for(&kube, &[&apps, &other])?;
    let _release = install_operator(&kube, &agent).await?;
    let _cleanup = EnsembleCleanup::new(&kube, &[&apps]);

    // One member is enough for an election.
    let ensemble = json!({"apiVersion": "baton.dev/v1alpha1", "kind": "CoordinationEnsemble",
        "metadata": {"name": "demo", "namespace": apps},
        "spec": {"replicas": 1, "storage": {"size": "1Gi"}}});
    kube.apply(ensemble.clone(), false).await?;
    let ensembles = kube.api_for(&kube.client, &ensemble).await?;
    wait_for(
        &agent,
        "ensemble demo ready",
        Duration::from_secs(180),
        || async {
            let ce = ensembles.get("demo").await?;
            let ready = ce
                .data
                .pointer("/status/readyReplicas")
                .and_then(Value::as_i64);
            ensure!(ready == Some(1), "readyReplicas {ready:?}");
            Ok(())
        },
    )
    .await?;

    let pods = Api::<Pod>::namespaced(kube.client.clone(), &apps);
    let pod = app_pod("app", json!({"baton.dev/inject": "true"}), json!({}))?;
    let stored = pods
        .create(&PostParams::default(), &pod)
        .await
        .context("create the annotated pod")?;
    let spec = stored.spec.clone().unwrap_or_default();
    let sidecar = spec
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == "baton-sidecar")
        .with_context(|| format!("no baton-sidecar init container in the stored pod: {spec:?}"))?;
    ensure!(
        sidecar.restart_policy.as_deref() == Some("Always"),
        "the sidecar is not native"
    );

    wait_for(
        &agent,
        "the app pod Ready",
        Duration::from_secs(120),
        || async {
            let pod = pods.get("app").await?;
            let ready = pod
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ensure!(ready, "not ready");
            Ok(())
        },
    )
    .await?;
    // The sidecar's full API is on 127.0.0.1:4040 inside the pod: ask from its network.
    let pid = agent.pid("app", "baton-sidecar")?;
    wait_for(
        &agent,
        "the sidecar leads election app",
        Duration::from_secs(60),
        || async {
            let out = std::process::Command::new("nsenter")
                .args([
                    "-t",
                    &pid.to_string(),
                    "-n",
                    "curl",
                    "-sS",
                    "--max-time",
                    "5",
                ])
                .arg("http://127.0.0.1:4040/leader")
                .output()?;
            let body: Value = serde_json::from_slice(&out.stdout).with_context(|| {
                format!("GET /leader: {}", String::from_utf8_lossy(&out.stderr))
            })?;
            ensure!(body["self"]["isLeader"] == true, "GET /leader: {body}");
            ensure!(body["leader"]["identity"] == "app", "GET /leader: {body}");
            Ok(())
        },
    )
    .await?;

    // A namespace the ensemble does not serve (it lists no allowedNamespaces).
    let elsewhere = Api::<Pod>::namespaced(kube.client.clone(), &other);
    let pod = app_pod(
        "app",
        json!({"baton.dev/inject": "true", "baton.dev/ensemble": format!("{apps}/demo")}),
        json!({}),
    )?;
    let refusal = refused(&elsewhere, &pod).await?;
    let documented = format!("CoordinationEnsemble {apps}/demo does not serve namespace {other}");
    ensure!(
        refusal.contains(&documented) && refusal.contains("spec.allowedNamespaces"),
        "refusal {refusal:?} lacks {documented:?}"
    );

    pods.delete("app", &DeleteParams::default()).await?;
    ensembles.delete("demo", &DeleteParams::default()).await?;
    wait_for(
        &agent,
        "ensemble demo deleted",
        Duration::from_secs(60),
        || async {
            ensure!(ensembles.get_opt("demo").await?.is_none(), "still there");
            Ok(())
        },
    )
    .await?;
    eprintln!(
        "timing: agent ready {:?}, test {:?}",
        agent.started_in,
        t0.elapsed()
    );
    Ok(())
}

/// While no operator runs, `failurePolicy: Fail` (the chart's default, charts/baton/README.md)
/// refuses pods the webhook would look at, and still admits the members and the operator,
/// which its objectSelector leaves out; once the operator is back, the webhook answers again.
#[tokio::test(flavor = "multi_thread")]
async fn operator_down_fails_closed_except_for_excluded_pods() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let t0 = std::time::Instant::now();
    let kube = Kube::new("webhook-down").await?;
    require_aggregator_routing(&kube)?;
    let extra = Namespaces::create(&kube, &["apps"]).await?;
    let apps = extra.names[0].clone();
    let agent = NodeAgent::start_for(&kube, &[&apps])?;
    let release = install_operator(&kube, &agent).await?;
    let pods = Api::<Pod>::namespaced(kube.client.clone(), &apps);
    let annotated = app_pod("app", json!({"baton.dev/inject": "true"}), json!({}))?;

    // Up: the webhook answers (no ensemble in the namespace: its documented refusal).
    let up = refused(&pods, &annotated).await?;
    ensure!(
        up.contains(&format!("no CoordinationEnsemble in namespace {apps}")),
        "with the operator up: {up}"
    );

    let deployments = Api::<Deployment>::namespaced(kube.client.clone(), &kube.namespace);
    let scale = |n: i32| {
        let deployments = deployments.clone();
        let name = release.fullname.clone();
        async move {
            deployments
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": n}})),
                )
                .await
        }
    };
    scale(0).await?;
    let operator_pods = Api::<Pod>::namespaced(kube.client.clone(), &kube.namespace);
    let selector = format!("app.kubernetes.io/instance={}", release.name);
    wait_for(
        &agent,
        "no operator pod",
        Duration::from_secs(60),
        || async {
            let left = operator_pods
                .list(&ListParams::default().labels(&selector))
                .await?
                .items
                .len();
            ensure!(left == 0, "{left} operator pods");
            Ok(())
        },
    )
    .await?;

    // Down: refused because the webhook cannot be called (not by the webhook's own answer).
    let down = refused(&pods, &annotated).await?;
    ensure!(
        down.contains("failed calling webhook") && !down.contains("no CoordinationEnsemble"),
        "with the operator down: {down}"
    );
    // A pod the webhook's objectSelector leaves out (a member's label) is admitted.
    let member = app_pod(
        "member",
        json!({}),
        json!({"app.kubernetes.io/name": "baton-ensemble"}),
    )?;
    pods.create(&PostParams::default(), &member)
        .await
        .context("a member-labelled pod while the operator is down")?;

    scale(1).await?;
    wait_for(
        &agent,
        "the webhook answering again",
        Duration::from_secs(120),
        || async {
            let again = refused(&pods, &annotated).await?;
            ensure!(again.contains("no CoordinationEnsemble"), "{again}");
            Ok(())
        },
    )
    .await?;
    eprintln!("timing: operator-down test {:?}", t0.elapsed());
    Ok(())
}
