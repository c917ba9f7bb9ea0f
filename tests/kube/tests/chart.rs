//! `charts/baton` with real Helm against the real API server, for every values combination
//! `tests/scripts/validate-chart.sh` renders: `helm install`, `helm upgrade` and
//! `helm uninstall` succeed, and afterwards nothing of the release is left (every object of
//! its manifest gone, nothing labelled with the release anywhere, nothing but the
//! namespace's defaults in its namespace). Helm's `crds/` stays by Helm's own rule (it never
//! deletes CRDs), which the leftover check names.
//!
//! The combinations needing cert-manager's or the Prometheus operator's APIs get stand-in
//! CRDs first (same group, version and kind, open schema): they check that the chart's
//! objects are accepted and cleaned up, not those projects' own schemas (validate-chart.sh
//! checks the rendering of those strictly).
//!
//! Each ValidatingAdmissionPolicy the chart installs compiles and type-checks in the API server
//! (a CEL type error refuses the install itself), and the controller-manager's check against
//! the pods' schema leaves no expression warning in its status.
//!
//! With the defaults, the operator's ServiceAccount as the chart makes it (a real token, no
//! admin) may apply every object the operator builds for an ensemble (dry run), including the
//! ClusterRoleBinding to `system:auth-delegator`, which the API server's escalation check
//! allows only with the chart's `bind` on that role.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use baton_kube_tests::helm::run_in as run_helm;
use baton_kube_tests::{Kube, parse_yaml, repo_root};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::discovery::{Discovery, Scope, verbs};
use serde_json::{Value, json};

/// Stand-in CRDs for the optional parts' APIs (cert-manager, Prometheus operator).
async fn stand_in_crds(kube: &Kube) -> Result<()> {
    for (group, kind, plural) in [
        ("cert-manager.io", "Certificate", "certificates"),
        ("cert-manager.io", "Issuer", "issuers"),
        ("monitoring.coreos.com", "PodMonitor", "podmonitors"),
        ("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
    ] {
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": true
                    }}
                }]
            }
        });
        kube.apply(crd, false).await?;
    }
    // Established before Helm looks the kinds up.
    let crds = Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(kube.client.clone());
    for name in [
        "certificates.cert-manager.io",
        "issuers.cert-manager.io",
        "podmonitors.monitoring.coreos.com",
        "prometheusrules.monitoring.coreos.com",
    ] {
        tokio::time::timeout(
            Duration::from_secs(30),
            kube::runtime::wait::await_condition(
                crds.clone(),
                name,
                kube::runtime::wait::conditions::is_crd_established(),
            ),
        )
        .await
        .with_context(|| format!("{name} not Established"))??;
    }
    Ok(())
}

/// Creates namespace `name` unless it exists (combinations share `prod`, `staging`, `grafana`).
async fn namespace(kube: &Kube, name: &str) -> Result<()> {
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match Api::<Namespace>::all(kube.client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `(apiVersion, kind, namespace, name)` of every object in a manifest.
fn manifest_objects(manifest: &str, namespace: &str) -> Result<Vec<Value>> {
    Ok(parse_yaml(manifest)?
        .into_iter()
        .map(|mut o| {
            if o.pointer("/metadata/namespace").is_none() {
                o["metadata"]["namespace"] = json!(namespace);
            }
            o
        })
        .collect())
}

/// What of the release is still there: objects labelled with it anywhere, and anything in its
/// namespace but the namespace's own defaults.
async fn leftovers(kube: &Kube, discovery: &Discovery, release: &str) -> Result<Vec<String>> {
    let mut found = Vec::new();
    let by_label = ListParams::default().labels(&format!("app.kubernetes.io/instance={release}"));
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if !caps.supports_operation(verbs::LIST) || resource.kind == "Event" {
                continue;
            }
            let all: Api<DynamicObject> = Api::all_with(kube.client.clone(), &resource);
            for o in all.list_metadata(&by_label).await?.items {
                found.push(describe(&resource.kind, &o.metadata));
            }
            if caps.scope == Scope::Namespaced {
                let here: Api<DynamicObject> =
                    Api::namespaced_with(kube.client.clone(), &kube.namespace, &resource);
                for o in here.list_metadata(&ListParams::default()).await?.items {
                    let name = o.metadata.name.clone().unwrap_or_default();
                    let default = matches!(
                        (resource.kind.as_str(), name.as_str()),
                        ("ServiceAccount", "default") | ("ConfigMap", "kube-root-ca.crt")
                    );
                    if !default {
                        found.push(describe(&resource.kind, &o.metadata));
                    }
                }
            }
        }
    }
    found.sort();
    found.dedup();
    Ok(found)
}

fn describe(kind: &str, meta: &kube::api::ObjectMeta) -> String {
    match &meta.namespace {
        Some(ns) => format!("{kind} {ns}/{}", meta.name.as_deref().unwrap_or("?")),
        None => format!("{kind} {}", meta.name.as_deref().unwrap_or("?")),
    }
}

/// Install, upgrade, uninstall one combination; nothing may remain.
async fn install_upgrade_uninstall(combo: &str, flags: &[&str]) -> Result<()> {
    let kube = Kube::new(&format!("helm-{combo}")).await?;
    stand_in_crds(&kube).await?;
    for ns in ["prod", "staging", "grafana"] {
        namespace(&kube, ns).await?;
    }
    // A release name of its own (cluster-scoped objects are named after it); holding the
    // chart's name, it is the objects' name as is.
    let release = format!("baton-{}", kube.namespace.rsplit('-').next().unwrap_or("x"));
    let chart = repo_root().join("charts/baton");
    let chart = chart.to_str().context("chart path")?;
    let mut install = vec!["install", &release, chart];
    install.extend_from_slice(flags);
    run_helm(&kube, &install)?;
    let manifest = run_helm(&kube, &["get", "manifest", &release])?;
    let objects = manifest_objects(&manifest, &kube.namespace)?;
    ensure!(!objects.is_empty(), "{combo}: an empty manifest");
    for object in &objects {
        let api = kube.api_for(&kube.client, object).await?;
        let name = object["metadata"]["name"].as_str().context("no name")?;
        api.get(name)
            .await
            .with_context(|| format!("{combo}: {} {name} not stored", object["kind"]))?;
    }
    for policy in objects
        .iter()
        .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
    {
        policy_type_checks(&kube, policy).await?;
    }
    if combo == "defaults" {
        operator_may_apply_what_it_builds(&kube, &release).await?;
    }

    // An upgrade that changes something (the operator's replicas) and keeps the rest.
    let mut upgrade = vec![
        "upgrade",
        &release,
        chart,
        "--reuse-values",
        "--set",
        "operator.replicas=1",
    ];
    upgrade.extend_from_slice(flags);
    run_helm(&kube, &upgrade)?;
    let deployment = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(
        kube.client.clone(),
        &kube.namespace,
    )
    .get(&release)
    .await?;
    ensure!(
        deployment.spec.and_then(|s| s.replicas) == Some(1),
        "{combo}: the upgrade did not reach the Deployment"
    );

    run_helm(
        &kube,
        &["uninstall", &release, "--wait", "--timeout", "60s"],
    )?;
    // The controllers' own objects of the release (EndpointSlices of its Services, the
    // ReplicaSets of its Deployment) go by garbage collection, shortly after.
    let discovery = Discovery::new(kube.client.clone()).run().await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let left = leftovers(&kube, &discovery, &release).await?;
        if left.is_empty() {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("{combo}: left behind after helm uninstall: {left:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for object in &objects {
        let api = kube.api_for(&kube.client, object).await?;
        let name = object["metadata"]["name"].as_str().context("no name")?;
        ensure!(
            api.get_opt(name).await?.is_none(),
            "{combo}: {} {name} still there after uninstall",
            object["kind"]
        );
    }
    // What Helm keeps on purpose: the CRD from the chart's crds/ (never deleted by Helm).
    let crds = Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(kube.client.clone());
    ensure!(
        crds.get_opt("coordinationensembles.baton.dev")
            .await?
            .is_some(),
        "{combo}: the CRD went with the release (Helm keeps crds/; the docs say so)"
    );
    Ok(())
}

/// The API server's type check of a ValidatingAdmissionPolicy's CEL (done by the
/// controller-manager once the policy is stored): no expression may have a warning.
async fn policy_type_checks(kube: &Kube, policy: &Value) -> Result<()> {
    let api = kube.api_for(&kube.client, policy).await?;
    let name = policy["metadata"]["name"].as_str().context("no name")?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let stored = api.get(name).await?;
        let checked = stored
            .data
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64);
        if checked.is_some() && checked == stored.metadata.generation {
            let warnings = stored
                .data
                .pointer("/status/typeChecking/expressionWarnings")
                .cloned()
                .unwrap_or(json!([]));
            ensure!(
                warnings.as_array().is_none_or(|w| w.is_empty()),
                "ValidatingAdmissionPolicy {name}: the API server's type check warns: {warnings}"
            );
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "ValidatingAdmissionPolicy {name} not type-checked within 60s: {}",
            stored.data["status"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// As the chart's operator ServiceAccount (a real token): dry-run apply every object the
/// operator builds for the example ensemble (backups to a claim, another namespace served),
/// and the status patch and finalizer it writes. A 403 names the missing permission.
async fn operator_may_apply_what_it_builds(kube: &Kube, release: &str) -> Result<()> {
    // The release's name holds the chart's, so the chart names its objects after the release.
    let sa = release.to_string();
    let operator = kube.client_as(&kube.namespace, &sa).await?;
    let served = format!("{}-web", kube.namespace);
    namespace(kube, &served).await?;
    let example =
        std::fs::read_to_string(repo_root().join("operator/examples/coordinationensemble.yaml"))?
            .replace("# backup: {schedule: \"0 3", "backup: {schedule: \"0 3")
            .replace(
                "# allowedNamespaces: [web]",
                &format!("allowedNamespaces: [{served}]"),
            );
    let pods = baton_operator::build::OperatorPods {
        namespace: kube.namespace.clone(),
        labels: Default::default(),
        metrics_scraper: None,
    };
    let rendered = baton_operator::render::render(&example, &kube.namespace, "baton:test", &pods)?;
    ensure!(rendered.len() > 10, "rendered {} objects", rendered.len());
    for (file, yaml) in rendered {
        for object in parse_yaml(&yaml)? {
            kube.apply_as(&operator, object, true)
                .await
                .with_context(|| format!("as {sa}: {file}"))?;
        }
    }
    let user = format!("system:serviceaccount:{}:{sa}", kube.namespace);
    let refused = kube.forbidden_for(&user)?;
    ensure!(refused.is_empty(), "{user} was refused: {refused:?}");
    let _ = Api::<Namespace>::all(kube.client.clone())
        .delete(&served, &Default::default())
        .await;
    Ok(())
}

macro_rules! combos {
    ($($name:ident => $combo:literal: [$($flag:literal),*]),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() -> Result<()> {
                install_upgrade_uninstall($combo, &[$($flag),*]).await
            }
        )+
    };
}

// The combinations of tests/scripts/validate-chart.sh (keep them in step).
combos! {
    defaults => "defaults": [],
    cert_manager => "cert-manager": ["--set", "webhook.certManager.enabled=true"],
    cert_manager_issuer => "cert-manager-issuer": [
        "--set", "webhook.certManager.enabled=true",
        "--set", "webhook.certManager.issuerRef.name=my-ca",
        "--set", "webhook.certManager.issuerRef.kind=ClusterIssuer"
    ],
    no_webhook => "no-webhook": ["--set", "webhook.enabled=false"],
    failure_ignore => "failure-ignore": ["--set", "webhook.failurePolicy=Ignore"],
    sidecar_rbac => "sidecar-rbac": [
        "--set", "sidecarRbac.serviceAccounts[0].namespace=prod",
        "--set", "sidecarRbac.serviceAccounts[0].name=web",
        "--set", "sidecarRbac.serviceAccounts[1].namespace=prod",
        "--set", "sidecarRbac.serviceAccounts[1].name=api",
        "--set", "sidecarRbac.serviceAccounts[2].namespace=staging",
        "--set", "sidecarRbac.serviceAccounts[2].name=web",
        "--set", "sidecarRbac.leases=true"
    ],
    pod_label_policy_exempt => "pod-label-policy-exempt": [
        "--set", "podLabelPolicy.exemptServiceAccounts[0].namespace=prod",
        "--set", "podLabelPolicy.exemptServiceAccounts[0].name=mgr",
        "--set", "sidecarRbac.serviceAccounts[0].namespace=prod",
        "--set", "sidecarRbac.serviceAccounts[0].name=web"
    ],
    no_pod_label_policy => "no-pod-label-policy": ["--set", "podLabelPolicy.enabled=false"],
    object_selector => "object-selector": [
        "--set", "webhook.objectSelector.matchLabels.team=a",
        "--set", "webhook.objectSelector.matchExpressions[0].key=tier",
        "--set", "webhook.objectSelector.matchExpressions[0].operator=Exists"
    ],
    no_serviceaccount => "no-serviceaccount": [
        "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=existing"
    ],
    monitoring => "monitoring": [
        "--set", "monitoring.podMonitors.enabled=true",
        "--set", "monitoring.podMonitors.labels.release=prom",
        "--set", "monitoring.prometheusRule.enabled=true",
        "--set", "monitoring.grafanaDashboard.enabled=true",
        "--set", "monitoring.grafanaDashboard.namespace=grafana"
    ],
}
