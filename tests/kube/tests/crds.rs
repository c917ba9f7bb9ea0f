//! The CoordinationEnsemble CRD against the real API server (Kubernetes 1.33):
//! - `crds/` applies: a structural schema, every CEL rule (`x-kubernetes-validations`) compiled
//!   and within its cost budget (the API server refuses a CRD whose rule's estimated cost is
//!   over it), and the CRD becomes Established;
//! - every example in `operator/examples/` applies, with each commented-out variant the
//!   example offers (backups to a claim and to S3, a restore) uncommented;
//! - each invalid spec the docs promise to refuse is refused by the API server with its
//!   message, at creation (replicas 2, two or no backup targets, bad quantities, durations,
//!   namespaces) and on update (restoreFrom added or changed, storage changed), while the
//!   allowed updates (restoreFrom kept or removed, replicas scaled) pass;
//! - a status with every field the CRD declares goes through the operator's own type and its
//!   own status write (server-side apply to the status subresource) and comes back unchanged
//!   (nothing pruned); the scale subresource (`kubectl scale ce`) keeps the replicas enum.

use anyhow::{Context, Result, bail, ensure};
use baton_kube_tests::{Kube, parse_yaml, repo_root};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};
use std::time::Duration;

const CRD_NAME: &str = "coordinationensembles.baton.dev";

/// Applies `crds/` (idempotent: every test that needs the CRD calls it) and waits until the
/// CRD is Established.
async fn ensure_crds(kube: &Kube) -> Result<Value> {
    let path = repo_root().join("crds/coordinationensembles.baton.dev.yaml");
    let yaml = std::fs::read_to_string(&path)?;
    let docs = parse_yaml(&yaml)?;
    ensure!(docs.len() == 1, "one CRD in {}", path.display());
    kube.apply_yaml(&yaml, false)
        .await
        .context("apply crds/ (a CEL rule over its cost budget is refused here)")?;
    let crds = Api::<CustomResourceDefinition>::all(kube.client.clone());
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(crds, CRD_NAME, conditions::is_crd_established()),
    )
    .await
    .context("the CRD is not Established within 30s")??;
    Ok(docs.into_iter().next().unwrap_or_default())
}

fn example(name: &str) -> Result<String> {
    Ok(std::fs::read_to_string(
        repo_root().join("operator/examples").join(name),
    )?)
}

/// The example ensemble as JSON, named `name`.
fn example_ensemble(name: &str) -> Result<Value> {
    let mut ce = parse_yaml(&example("coordinationensemble.yaml")?)?
        .into_iter()
        .next()
        .context("no object in the example")?;
    ce["metadata"]["name"] = json!(name);
    Ok(ce)
}

fn ensembles(kube: &Kube) -> Result<Api<DynamicObject>> {
    let resource = kube::discovery::ApiResource {
        group: "baton.dev".into(),
        version: "v1alpha1".into(),
        api_version: "baton.dev/v1alpha1".into(),
        kind: "CoordinationEnsemble".into(),
        plural: "coordinationensembles".into(),
    };
    Ok(Api::namespaced_with(
        kube.client.clone(),
        &kube.namespace,
        &resource,
    ))
}

/// Creates `ce`, or returns the API server's refusal message.
async fn create(kube: &Kube, ce: &Value) -> Result<Result<DynamicObject, String>> {
    let object: DynamicObject = serde_json::from_value(ce.clone())?;
    match ensembles(kube)?
        .create(&PostParams::default(), &object)
        .await
    {
        Ok(created) => Ok(Ok(created)),
        Err(kube::Error::Api(status)) if status.code == 422 => Ok(Err(status.message)),
        Err(e) => Err(e.into()),
    }
}

/// Replaces the stored object with `ce` (same name), or returns the refusal message.
async fn update(kube: &Kube, ce: &Value) -> Result<Result<DynamicObject, String>> {
    let api = ensembles(kube)?;
    let name = ce["metadata"]["name"].as_str().context("no name")?;
    let current = api.get(name).await?;
    let mut object: DynamicObject = serde_json::from_value(ce.clone())?;
    object.metadata.resource_version = current.metadata.resource_version;
    match api.replace(name, &PostParams::default(), &object).await {
        Ok(replaced) => Ok(Ok(replaced)),
        Err(kube::Error::Api(status)) if status.code == 422 => Ok(Err(status.message)),
        Err(e) => Err(e.into()),
    }
}

/// Asserts `outcome` is a refusal whose message contains every one of `expected`.
fn refused(what: &str, outcome: Result<DynamicObject, String>, expected: &[&str]) -> Result<()> {
    match outcome {
        Ok(_) => bail!("{what}: accepted by the API server"),
        Err(message) => {
            for part in expected {
                ensure!(
                    message.contains(part),
                    "{what}: refused, but the message lacks {part:?}: {message}"
                );
            }
            Ok(())
        }
    }
}

#[tokio::test]
async fn the_crd_applies_with_every_cel_rule_within_budget() -> Result<()> {
    let kube = Kube::new("crd").await?;
    let sent = ensure_crds(&kube).await?;
    let stored = Api::<CustomResourceDefinition>::all(kube.client.clone())
        .get(CRD_NAME)
        .await?;
    let conditions = stored.status.and_then(|s| s.conditions).unwrap_or_default();
    for condition in &conditions {
        // NonStructuralSchema would mean no pruning, no defaulting and no CEL.
        ensure!(
            !(condition.type_ == "NonStructuralSchema" && condition.status == "True"),
            "{condition:?}"
        );
    }
    ensure!(
        conditions
            .iter()
            .any(|c| c.type_ == "NamesAccepted" && c.status == "True"),
        "{conditions:?}"
    );
    // Every rule sent is kept (none dropped on the way), so each was compiled and costed.
    let count = |v: &Value| v.to_string().matches("\"rule\":").count();
    let stored = serde_json::to_value(&stored.spec)?;
    ensure!(
        count(&sent["spec"]) >= 4,
        "rules in the CRD: {}",
        count(&sent["spec"])
    );
    ensure!(
        count(&stored) == count(&sent["spec"]),
        "rules lost on the way"
    );
    Ok(())
}

#[tokio::test]
async fn every_example_applies() -> Result<()> {
    let kube = Kube::new("examples").await?;
    ensure_crds(&kube).await?;
    for file in ["coordinationensemble.yaml", "injected-deployment.yaml"] {
        let applied = kube
            .apply_yaml(&example(file)?, false)
            .await
            .with_context(|| format!("operator/examples/{file}"))?;
        ensure!(!applied.is_empty(), "{file}: no objects");
    }
    // The server filled in the schema's defaults and kept every field (nothing pruned).
    let demo = ensembles(&kube)?.get("demo").await?;
    let spec = &demo.data["spec"];
    ensure!(spec["replicas"] == 3, "{spec}");
    ensure!(spec["storage"]["size"] == "1Gi", "{spec}");
    ensure!(spec["sessionTimeout"]["max"] == "40s", "{spec}");
    ensure!(spec["scheduling"]["antiAffinity"] == "Preferred", "{spec}");
    ensure!(spec["plainClientPort"] == false, "{spec}");

    // The variants the example offers commented out, each as a new ensemble.
    let text = example("coordinationensemble.yaml")?;
    let variants = [
        ("backup-pvc", "# backup: {schedule: \"0 3"),
        ("backup-s3", "# backup: {schedule: \"@daily\""),
        ("restore-s3", "# restoreFrom:"),
        ("allowed", "# allowedNamespaces:"),
    ];
    for (name, commented) in variants {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(commented))
            .with_context(|| format!("the example has no line {commented:?}"))?;
        let edited = text
            .replace(line, &line.replacen("# ", "", 1))
            .replace("name: demo", &format!("name: {name}"));
        kube.apply_yaml(&edited, false)
            .await
            .with_context(|| format!("the example with {commented:?} uncommented"))?;
    }
    let backup = ensembles(&kube)?.get("backup-pvc").await?;
    ensure!(
        backup.data["spec"]["backup"]["keep"] == 7
            && backup.data["spec"]["backup"]["suspend"] == false,
        "backup defaults: {}",
        backup.data["spec"]["backup"]
    );
    Ok(())
}

#[tokio::test]
async fn invalid_specs_are_refused_at_creation_with_their_message() -> Result<()> {
    let kube = Kube::new("invalid-create").await?;
    ensure_crds(&kube).await?;
    let pvc = json!({"claimName": "baton-backups", "path": "demo/"});
    let s3 = json!({"bucket": "b", "key": "k", "credentialsSecret": "s"});
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "replicas 2",
            json!({"replicas": 2}),
            vec!["spec.replicas", "Unsupported value: 2"],
        ),
        (
            "a backup target with both pvc and s3",
            json!({"backup": {"schedule": "@daily", "target": {"pvc": pvc, "s3": s3}}}),
            vec!["spec.backup.target", "set exactly one of pvc and s3"],
        ),
        (
            "a backup target with neither",
            json!({"backup": {"schedule": "@daily", "target": {}}}),
            vec!["spec.backup.target", "set exactly one of pvc and s3"],
        ),
        (
            "restoreFrom with both pvc and s3",
            json!({"restoreFrom": {"pvc": pvc, "s3": s3}}),
            vec!["spec.restoreFrom", "set exactly one of pvc and s3"],
        ),
        (
            "backup keep 0",
            json!({"backup": {"schedule": "@daily", "keep": 0, "target": {"pvc": pvc}}}),
            vec!["spec.backup.keep", "should be greater than or equal to 1"],
        ),
        (
            "a storage size that is no quantity",
            json!({"storage": {"size": "lots"}}),
            vec!["spec.storage.size", "should match"],
        ),
        (
            "a session timeout that is no duration",
            json!({"sessionTimeout": {"min": "4 seconds", "max": "40s"}}),
            vec!["spec.sessionTimeout.min", "should match"],
        ),
        (
            "a wildcard allowed namespace",
            json!({"allowedNamespaces": ["*"]}),
            vec!["spec.allowedNamespaces[0]", "should match"],
        ),
        (
            "an unknown antiAffinity",
            json!({"scheduling": {"antiAffinity": "Sometimes"}}),
            vec!["spec.scheduling.antiAffinity", "Unsupported value"],
        ),
    ];
    for (i, (what, patch, expected)) in cases.into_iter().enumerate() {
        let mut ce = example_ensemble(&format!("bad-{i}"))?;
        merge(&mut ce["spec"], &patch);
        refused(what, create(&kube, &ce).await?, &expected)?;
    }
    // The example itself is accepted in the same namespace (the refusals are about the spec).
    create(&kube, &example_ensemble("good")?)
        .await?
        .map_err(|m| anyhow::anyhow!("the example refused: {m}"))?;
    Ok(())
}

#[tokio::test]
async fn restore_and_storage_cannot_change_after_creation() -> Result<()> {
    let kube = Kube::new("invalid-update").await?;
    ensure_crds(&kube).await?;
    let restore = json!({"pvc": {"claimName": "baton-backups", "path": "demo/"}});

    // Created without restoreFrom: adding it later is refused.
    let plain = example_ensemble("plain")?;
    create(&kube, &plain).await?.map_err(anyhow::Error::msg)?;
    let mut added = plain.clone();
    added["spec"]["restoreFrom"] = restore.clone();
    refused(
        "restoreFrom added after creation",
        update(&kube, &added).await?,
        &["restoreFrom is only for a new ensemble"],
    )?;
    let mut resized = plain.clone();
    resized["spec"]["storage"]["size"] = json!("2Gi");
    refused(
        "storage changed",
        update(&kube, &resized).await?,
        &["spec.storage", "storage cannot change after creation"],
    )?;
    // Scaling is an ordinary update.
    let mut scaled = plain.clone();
    scaled["spec"]["replicas"] = json!(5);
    update(&kube, &scaled).await?.map_err(anyhow::Error::msg)?;

    // Created with restoreFrom: kept as is is fine, changed is refused, removed is fine.
    let mut restored = example_ensemble("restored")?;
    restored["spec"]["restoreFrom"] = restore.clone();
    create(&kube, &restored)
        .await?
        .map_err(anyhow::Error::msg)?;
    let mut kept = restored.clone();
    kept["spec"]["replicas"] = json!(5);
    update(&kube, &kept).await?.map_err(anyhow::Error::msg)?;
    let mut changed = kept.clone();
    changed["spec"]["restoreFrom"]["pvc"]["path"] = json!("other/");
    refused(
        "restoreFrom changed",
        update(&kube, &changed).await?,
        &["restoreFrom is only for a new ensemble"],
    )?;
    let mut removed = kept.clone();
    if let Some(spec) = removed["spec"].as_object_mut() {
        spec.remove("restoreFrom");
    }
    update(&kube, &removed)
        .await?
        .map_err(|m| anyhow::anyhow!("removing restoreFrom (documented as fine): {m}"))?;
    Ok(())
}

/// Merges `patch` into `target` (objects key by key; anything else replaced).
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// A value for every property of `schema` (enums: their first value), so that a status built
/// from it has every field the CRD declares.
fn sample(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    if schema["x-kubernetes-int-or-string"] == true {
        return json!(1);
    }
    match schema["type"].as_str() {
        Some("object") => match schema["properties"].as_object() {
            Some(properties) => properties
                .iter()
                .map(|(k, v)| (k.clone(), sample(v)))
                .collect::<serde_json::Map<_, _>>()
                .into(),
            None if schema["additionalProperties"].is_object() => {
                json!({"k": sample(&schema["additionalProperties"])})
            }
            None => json!({}),
        },
        Some("array") => json!([sample(&schema["items"])]),
        Some("integer") => json!(1),
        Some("number") => json!(1.5),
        Some("boolean") => json!(true),
        _ if schema["format"] == "date-time" => json!("2026-11-27T10:00:00Z"),
        _ => json!("x"),
    }
}

#[tokio::test]
async fn a_full_status_and_a_scale_go_through_their_subresources() -> Result<()> {
    use baton_operator::crd::CoordinationEnsembleStatus;
    let kube = Kube::new("status").await?;
    let crd = ensure_crds(&kube).await?;
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
    ensure!(schema.is_object(), "no status schema");
    // Every field the CRD declares, through the operator's own type (what it cannot hold, it
    // would never write) and its own write (server-side apply to the status subresource).
    let full = sample(schema);
    let status: CoordinationEnsembleStatus = serde_json::from_value(full.clone())
        .context("the operator's status type refuses a status the CRD declares")?;
    let kept = serde_json::to_value(&status)?;
    for field in full.as_object().context("status sample")?.keys() {
        ensure!(
            kept.get(field).is_some(),
            "the operator's status type drops status.{field}"
        );
    }
    ensure!(
        full.as_object().map_or(0, |o| o.len()) >= 10,
        "status sample: {full}"
    );
    create(&kube, &example_ensemble("demo")?)
        .await?
        .map_err(anyhow::Error::msg)?;
    let names = baton_operator::names::EnsembleNames::new("demo", &kube.namespace);
    baton_operator::status::publish(&kube.client, &names, &status)
        .await
        .context("the API server refused the operator's status")?;
    let stored = ensembles(&kube)?.get("demo").await?;
    let sent = serde_json::to_value(&status)?;
    ensure!(
        stored.data["status"] == sent,
        "the status came back changed (pruned or defaulted):\nsent   {sent}\nstored {}",
        stored.data["status"]
    );

    // `kubectl scale ce demo --replicas 5` (the example's own advice) uses the scale
    // subresource; the enum holds there too.
    let api = ensembles(&kube)?;
    let scale = |n: i64| json!({"spec": {"replicas": n}});
    api.patch_scale(
        "demo",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&scale(5)),
    )
    .await
    .context("scale to 5")?;
    ensure!(api.get("demo").await?.data["spec"]["replicas"] == 5);
    match api
        .patch_scale(
            "demo",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&scale(4)),
        )
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 422 && e.message.contains("Unsupported value: 4") => {
        }
        other => bail!("scale to 4: {other:?}"),
    }
    Ok(())
}
