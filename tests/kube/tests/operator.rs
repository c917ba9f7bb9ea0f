//! The real `baton-operator`, as the chart's ServiceAccount (a real token, no admin
//! credentials), against the real kube-apiserver and kube-controller-manager. The chart is
//! installed with its Deployment at 0 replicas (no kubelet runs pods here) and the operator
//! runs as local processes with the Deployment's own arguments. One test, one story, holding
//! [`OperatorLock`] throughout: the operator reconciles every CoordinationEnsemble of the
//! cluster, so no other test's operator may run beside it. It shows that the operator
//!
//! - reconciles a CoordinationEnsemble (backups to a claim, two other namespaces served) into
//!   every object `baton-operator render` makes for it, each owned by the ensemble (controller
//!   owner reference, so garbage collection removes it) or, where no owner can reach
//!   (the ClusterRoleBinding, the CA copy in the other namespace), labelled with it, all by
//!   server-side apply as `baton-operator`; adds its finalizer; leaves alone a ConfigMap of the
//!   CA copy's name that someone else made in a served namespace (server-side apply would have
//!   merged into it: it conflicts only on fields both set);
//! - writes the status through the status subresource with what the docs promise while no
//!   member runs (Available=False NoQuorum, Progressing=True WaitingForHealthyQuorum,
//!   Degraded=False, no ready replicas, the endpoints and selector), and an Event for the
//!   certificates it issued;
//! - holds its leader Lease while a second process waits; when the leader is killed the second
//!   takes over, and a killed operator started again takes its place: neither recreates or
//!   rewrites anything (every object's uid and resourceVersion unchanged, no second
//!   certificate Event);
//! - takes no step when scaled (the scale subresource, whose selector is the status's) without a
//!   leader; restores a deleted NetworkPolicy and StatefulSet, reports an invalid spec the schema lets
//!   through (Degraded InvalidSpec and a Warning Event), deletes the backup CronJob and the
//!   PodDisruptionBudget when the spec drops them, and flags an annotated pod that runs
//!   without its sidecar (Warning Event on the pod, condition SidecarsMissing, gone with it),
//!   and refuses a name too long for its pods' revision label (the schema takes it);
//! - on deletion, removes the ClusterRoleBinding and the CA copy through its finalizer, which
//!   then goes, and the garbage collector removes the rest; the members' data claims stay
//!   (documented: `whenDeleted: Retain`);
//! - is never refused a request for want of a permission (the audit log);
//! - stopped with SIGTERM, exits cleanly and gives its Lease up.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use baton_kube_tests::operator::{
    Operator, OperatorLock, Release, audit_mark, install_chart, lease_holder, refused_by_rbac,
    requests_since, run_helm, wait_for,
};
use baton_kube_tests::{Kube, TEST_LABEL, parse_yaml, repo_root};
use baton_operator::build::OperatorPods;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

/// Long enough for a reconcile after a watch event, or a Lease to expire (15 s) and be taken.
const LIMIT: Duration = Duration::from_secs(60);
const NAME: &str = "demo";
const CE_API: &str = "baton.dev/v1alpha1";

#[tokio::test]
async fn the_chart_operator_reconciles_fails_over_and_cleans_up_as_its_service_account()
-> Result<()> {
    let kube = Kube::new("operator").await?;
    let served = format!("{}-web", kube.namespace);
    let theirs = format!("{}-theirs", kube.namespace);
    for ns in [&served, &theirs] {
        create_namespace(&kube, ns).await?;
    }
    let _one_operator = OperatorLock::acquire().await?;
    let release = install_chart(&kube, &[]).await;
    let result = match &release {
        Ok(release) => story(&kube, release, &served, &theirs).await,
        Err(e) => Err(anyhow!("install the chart: {e:#}")),
    };
    // Whatever happened, nothing of this test may outlive it: the operators are gone (dropped
    // with the story), so the ensemble's finalizer and what it guards are removed here.
    clean_up(&kube, &[&served, &theirs]).await;
    if let Ok(release) = &release {
        // Its cluster-scoped objects (the injection webhook among them) outlive the namespace.
        let _ = run_helm(
            &kube,
            &["uninstall", &release.name, "--wait", "--timeout", "60s"],
        );
    }
    result
}

async fn story(kube: &Kube, release: &Release, served: &str, theirs: &str) -> Result<()> {
    let user = release.user();
    // The missing-sidecar audit every second instead of every minute (a flag of its own).
    let audit_every = ["--sidecar-audit-interval=1s"];
    let first = Operator::start(kube, release, "operator-a", &audit_every).await?;
    wait_for("operator-a holds the Lease", LIMIT, || async {
        first.running().ok();
        Ok(lease_holder(kube, release)
            .await?
            .filter(|(holder, _)| holder == "operator-a"))
    })
    .await
    .with_context(|| first.log_tail())?;

    // An ensemble backing up to a claim and serving one other namespace.
    // A ConfigMap of the CA copy's name that is not the operator's, without a `ca.crt`.
    let copy = format!("{}.{NAME}-ca", kube.namespace);
    let foreign = Api::<ConfigMap>::namespaced(kube.client.clone(), theirs);
    let made: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": copy}, "data": {"theirs": "1"}
    }))?;
    foreign.create(&PostParams::default(), &made).await?;
    let yaml = ensemble_yaml(&[served, theirs])?;
    let ensemble = parse_yaml(&yaml)?
        .pop()
        .context("the example holds the ensemble")?;
    kube.apply(ensemble.clone(), false).await?;
    let ce = ce_api(kube).await?;
    let uid = ce
        .get(NAME)
        .await?
        .metadata
        .uid
        .context("the ensemble has no uid")?;
    let operator_pods = OperatorPods {
        namespace: release.namespace.clone(),
        labels: BTreeMap::new(),
        metrics_scraper: None,
    };
    let owned: Vec<Value> = rendered_objects(&yaml, &kube.namespace, &operator_pods)?
        .into_iter()
        .filter(|o| o["metadata"]["namespace"] != theirs)
        .collect();
    ensure!(
        owned.len() >= 14,
        "render made only {} objects",
        owned.len()
    );
    reconciled(kube, &owned, &uid)
        .await
        .with_context(|| first.log_tail())?;
    not_ready_status(kube)
        .await
        .with_context(|| first.log_tail())?;
    untouched(&foreign, &copy).await?;
    let stored_ce = ce.get(NAME).await?;
    ensure!(
        stored_ce
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "baton.dev/cleanup"),
        "no finalizer baton.dev/cleanup: {:?}",
        stored_ce.metadata.finalizers
    );
    let status_uri = format!(
        "patch /apis/{CE_API}/namespaces/{}/coordinationensembles/{NAME}/status",
        kube.namespace
    );
    ensure!(
        kube.requests_of(&user)?
            .iter()
            .any(|(r, code)| r.split('?').next() == Some(&status_uri) && *code == 200),
        "the status was not written through the status subresource by {user}"
    );
    let certificates = events_of(kube, "CoordinationEnsemble", NAME, "Certificates").await?;
    ensure!(
        certificates.len() == 1,
        "one Certificates Event, not {certificates:?}"
    );
    let event = &certificates[0];
    ensure!(
        event.type_.as_deref() == Some("Normal")
            && event.reporting_controller.as_deref() == Some("baton-operator")
            && event.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid.as_str())
            && event
                .note
                .as_deref()
                .is_some_and(|n| n.starts_with("new CA; issue member 1, member 2, member 3, admin")),
        "the Certificates Event: {event:?}"
    );

    // A second replica waits while the first holds the Lease.
    let second = Operator::start(kube, release, "operator-b", &audit_every).await?;
    wait_for("operator-b to try the Lease twice", LIMIT, || async {
        second.running()?;
        let tries = second.log().matches("another replica leads").count();
        Ok((tries >= 2).then_some(()))
    })
    .await
    .with_context(|| second.log_tail())?;
    ensure!(
        !second.log().contains("leading: reconciling"),
        "operator-b leads beside operator-a:\n{}",
        second.log_tail()
    );
    let (holder, transitions) = lease_holder(kube, release).await?.context("no Lease")?;
    ensure!(holder == "operator-a", "the Lease is {holder}'s");

    // The leader is killed: the second takes over and rewrites nothing.
    first.kill()?;
    let before = snapshot(kube, &owned).await?;
    wait_for("operator-b takes the Lease", LIMIT, || async {
        second.running()?;
        Ok(lease_holder(kube, release)
            .await?
            .filter(|(holder, t)| holder == "operator-b" && *t == transitions + 1))
    })
    .await
    .with_context(|| second.log_tail())?;
    unchanged_after_a_reconcile(kube, &user, &owned, &before, &status_uri)
        .await
        .with_context(|| second.log_tail())?;
    // Restarted: killed and started again as the same replica (its container restarted).
    second.kill()?;
    let mark = audit_mark(kube)?;
    let second = Operator::start(kube, release, "operator-b", &audit_every).await?;
    wait_for("the restarted operator-b leads", LIMIT, || async {
        second.running()?;
        Ok(second.log().contains("leading: reconciling").then_some(()))
    })
    .await
    .with_context(|| second.log_tail())?;
    ensure!(
        requests_since(kube, mark, &user)?
            .iter()
            .any(|(r, _)| r.starts_with("update /apis/coordination.k8s.io/")),
        "the restarted operator did not renew the Lease"
    );
    unchanged_after_a_reconcile(kube, &user, &owned, &before, &status_uri)
        .await
        .with_context(|| second.log_tail())?;
    let certificates = events_of(kube, "CoordinationEnsemble", NAME, "Certificates").await?;
    ensure!(
        certificates.len() == 1,
        "certificates issued again after the restart: {certificates:?}"
    );

    repairs_and_spec_changes(kube, &ensemble, &owned)
        .await
        .with_context(|| second.log_tail())?;
    missing_sidecar(kube)
        .await
        .with_context(|| second.log_tail())?;
    too_long_a_name(kube)
        .await
        .with_context(|| second.log_tail())?;
    deleted_through_the_finalizer(kube, &owned)
        .await
        .with_context(|| {
            // What a missing permission looks like: the finalizer's deletes refused.
            let rbac = refused_by_rbac(kube, &user).unwrap_or_default();
            format!("RBAC refused {rbac:?}; {}", second.log_tail())
        })?;

    // Someone else's ConfigMap outlived the ensemble as it was.
    untouched(&foreign, &copy).await?;
    // Never refused by RBAC; and no 403 at all for what this test made (another test's
    // ensemble in a namespace being deleted is refused by admission, not for a permission).
    let rbac = refused_by_rbac(kube, &user)?;
    ensure!(rbac.is_empty(), "RBAC refused {user}: {rbac:?}");
    let ours = |uri: &String| {
        !uri.contains("/namespaces/")
            || [kube.namespace.as_str(), served, theirs].iter().any(|ns| {
                uri.contains(&format!("/namespaces/{ns}/"))
                    || uri.ends_with(&format!("/namespaces/{ns}"))
            })
    };
    let refused: Vec<String> = kube
        .forbidden_for(&user)?
        .into_iter()
        .filter(ours)
        .collect();
    ensure!(refused.is_empty(), "{user} was refused: {refused:?}");
    second.running()?;

    // Stopped as a pod is (SIGTERM): it exits cleanly and gives the Lease up at once.
    let exit = second.terminate()?;
    ensure!(
        exit.success(),
        "operator-b exited {exit}:\n{}",
        second.log_tail()
    );
    let (holder, _) = lease_holder(kube, release).await?.context("no Lease")?;
    ensure!(
        holder.is_empty(),
        "the Lease is still {holder}'s after a clean stop"
    );
    Ok(())
}

/// The example ensemble (`operator/examples/coordinationensemble.yaml`) with its backup to a
/// claim and `served` in `allowedNamespaces`.
fn ensemble_yaml(served: &[&str]) -> Result<String> {
    let example =
        std::fs::read_to_string(repo_root().join("operator/examples/coordinationensemble.yaml"))?;
    let yaml = example
        .replace("# backup: {schedule: \"0 3", "backup: {schedule: \"0 3")
        .replace(
            "# allowedNamespaces: [web]",
            &format!("allowedNamespaces: [{}]", served.join(", ")),
        );
    ensure!(
        yaml.contains("\n  backup: {schedule") && yaml.contains("allowedNamespaces: ["),
        "the example changed: no backup or allowedNamespaces line to uncomment"
    );
    Ok(yaml)
}

/// The ConfigMap someone else made is as they made it: no `ca.crt`, none of our labels.
async fn untouched(foreign: &Api<ConfigMap>, name: &str) -> Result<()> {
    let cm = foreign
        .get_opt(name)
        .await?
        .with_context(|| format!("someone else's ConfigMap {name} was deleted"))?;
    let data = cm.data.clone().unwrap_or_default();
    ensure!(
        data == BTreeMap::from([("theirs".to_string(), "1".to_string())])
            && cm.metadata.labels.is_none(),
        "someone else's ConfigMap {name} was written: labels {:?}, data keys {:?}",
        cm.metadata.labels,
        data.keys().collect::<Vec<_>>()
    );
    Ok(())
}

/// Every object `baton-operator render` makes for `yaml` in `namespace`.
fn rendered_objects(yaml: &str, namespace: &str, operator: &OperatorPods) -> Result<Vec<Value>> {
    let mut objects = Vec::new();
    for (_, text) in baton_operator::render::render(yaml, namespace, "baton:test", operator)? {
        objects.extend(parse_yaml(&text)?);
    }
    Ok(objects)
}

async fn ce_api(kube: &Kube) -> Result<Api<DynamicObject>> {
    kube.api_for(
        &kube.client,
        &json!({"apiVersion": CE_API, "kind": "CoordinationEnsemble"}),
    )
    .await
}

fn describe(object: &Value) -> String {
    format!(
        "{} {}/{}",
        object["kind"].as_str().unwrap_or("?"),
        object["metadata"]["namespace"].as_str().unwrap_or("-"),
        object["metadata"]["name"].as_str().unwrap_or("?")
    )
}

async fn get(kube: &Kube, object: &Value) -> Result<Option<DynamicObject>> {
    let api = kube.api_for(&kube.client, object).await?;
    let name = object["metadata"]["name"].as_str().context("no name")?;
    Ok(api.get_opt(name).await?)
}

/// Waits until every rendered object is stored, then checks each is owned (or, out of an
/// owner's reach, labelled) and applied by the operator.
async fn reconciled(kube: &Kube, owned: &[Value], uid: &str) -> Result<()> {
    for object in owned {
        let found = wait_for(&format!("{} stored", describe(object)), LIMIT, || async {
            get(kube, object).await
        })
        .await?;
        let meta = &found.metadata;
        let in_namespace = object["metadata"]["namespace"].as_str() == Some(&kube.namespace);
        if in_namespace {
            let owner = meta
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.uid == uid)
                .with_context(|| {
                    format!(
                        "{} has no owner reference to the ensemble",
                        describe(object)
                    )
                })?;
            ensure!(
                owner.kind == "CoordinationEnsemble"
                    && owner.name == NAME
                    && owner.controller == Some(true)
                    && owner.block_owner_deletion == Some(true),
                "{}: owner reference {owner:?}",
                describe(object)
            );
        } else {
            let labels = meta.labels.clone().unwrap_or_default();
            ensure!(
                labels.get("baton.dev/ensemble-namespace") == Some(&kube.namespace)
                    && labels.get("baton.dev/ensemble-name").map(String::as_str) == Some(NAME)
                    && meta.owner_references.is_none(),
                "{}: labels {labels:?}, owners {:?}",
                describe(object),
                meta.owner_references
            );
        }
        ensure!(
            meta.managed_fields
                .iter()
                .flatten()
                .any(|m| m.manager.as_deref() == Some("baton-operator")),
            "{} is not managed by baton-operator: {:?}",
            describe(object),
            meta.managed_fields
        );
    }
    Ok(())
}

fn condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// The status while no member runs, as DESIGN §3 and the README describe it.
async fn not_ready_status(kube: &Kube) -> Result<()> {
    let ce = ce_api(kube).await?;
    let status = wait_for(
        "the status of an ensemble without members",
        LIMIT,
        || async {
            let stored = ce.get(NAME).await?;
            let status = stored.data["status"].clone();
            let waiting = condition(&status, "Progressing")
                .is_some_and(|c| c["reason"] == "WaitingForHealthyQuorum");
            let current = status["observedGeneration"].as_i64() == stored.metadata.generation;
            Ok((waiting && current).then_some(status))
        },
    )
    .await?;
    let expect = |type_: &str, value: &str, reason: &str| -> Result<()> {
        let c = condition(&status, type_).with_context(|| format!("no {type_} in {status}"))?;
        ensure!(
            c["status"] == value && c["reason"] == reason,
            "{type_}: {c} (expected {value} {reason})"
        );
        Ok(())
    };
    expect("Available", "False", "NoQuorum")?;
    expect("Progressing", "True", "WaitingForHealthyQuorum")?;
    expect("Degraded", "False", "AsExpected")?;
    ensure!(
        condition(&status, "Available")
            .is_some_and(|c| c["message"] == "no member reports a leader"),
        "{status}"
    );
    ensure!(status["readyReplicas"] == 0, "{status}");
    ensure!(
        status["members"].as_array().is_none_or(|m| m.is_empty()) && status["leader"].is_null(),
        "members or a leader without members: {status}"
    );
    ensure!(
        status["secureClientEndpoint"] == format!("{NAME}-client.{}.svc:2281", kube.namespace),
        "{status}"
    );
    ensure!(
        status["clientEndpoint"].is_null(),
        "no plain port: {status}"
    );
    ensure!(
        status["selector"]
            == "app.kubernetes.io/instance=demo,app.kubernetes.io/name=baton-ensemble",
        "{status}"
    );
    Ok(())
}

/// Events in the test's namespace about `kind` `name` with `reason`.
async fn events_of(kube: &Kube, kind: &str, name: &str, reason: &str) -> Result<Vec<Event>> {
    Ok(
        Api::<Event>::namespaced(kube.client.clone(), &kube.namespace)
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().is_some_and(|r| {
                        r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name)
                    })
            })
            .collect(),
    )
}

/// `describe → (uid, resourceVersion)` of the ensemble and every object it owns.
async fn snapshot(kube: &Kube, owned: &[Value]) -> Result<BTreeMap<String, (String, String)>> {
    let ensemble = json!({"apiVersion": CE_API, "kind": "CoordinationEnsemble",
                          "metadata": {"name": NAME, "namespace": kube.namespace}});
    let mut seen = BTreeMap::new();
    for object in owned.iter().chain([&ensemble]) {
        let found = get(kube, object)
            .await?
            .with_context(|| format!("{} is gone", describe(object)))?;
        seen.insert(
            describe(object),
            (
                found.metadata.uid.unwrap_or_default(),
                found.metadata.resource_version.unwrap_or_default(),
            ),
        );
    }
    Ok(seen)
}

/// Waits for one whole reconcile from here on (its last write is the status), then checks
/// nothing changed.
async fn unchanged_after_a_reconcile(
    kube: &Kube,
    user: &str,
    owned: &[Value],
    before: &BTreeMap<String, (String, String)>,
    status_uri: &str,
) -> Result<()> {
    let mark = audit_mark(kube)?;
    let statefulset = format!(
        "patch /apis/apps/v1/namespaces/{}/statefulsets/{NAME}",
        kube.namespace
    );
    wait_for("a whole reconcile", LIMIT, || async {
        let since = requests_since(kube, mark, user)?;
        let applied = since.iter().position(|(r, _)| *r == statefulset);
        Ok(applied
            .and_then(|at| since[at..].iter().position(|(r, _)| r == status_uri))
            .map(|_| ()))
    })
    .await?;
    let after = snapshot(kube, owned).await?;
    let changed: Vec<String> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: {v:?} → {:?}", after.get(k)))
        .collect();
    ensure!(changed.is_empty(), "rewritten or recreated: {changed:?}");
    Ok(())
}

/// What the operator repairs and changes after the ensemble exists.
async fn repairs_and_spec_changes(kube: &Kube, ensemble: &Value, owned: &[Value]) -> Result<()> {
    let find = |kind: &str| {
        owned
            .iter()
            .find(|o| o["kind"] == kind)
            .cloned()
            .with_context(|| format!("render made no {kind}"))
    };
    // Deleted by someone: restored (the StatefulSet at its recorded size).
    for kind in ["NetworkPolicy", "StatefulSet"] {
        let object = find(kind)?;
        let old = get(kube, &object).await?.context("not stored")?;
        let api = kube.api_for(&kube.client, &object).await?;
        api.delete(&old.name_any(), &DeleteParams::background())
            .await?;
        let restored = wait_for(&format!("{kind} restored"), LIMIT, || async {
            Ok(get(kube, &object).await?.filter(|o| {
                o.metadata.uid != old.metadata.uid && o.metadata.deletion_timestamp.is_none()
            }))
        })
        .await?;
        if kind == "StatefulSet" {
            ensure!(
                restored.data["spec"]["replicas"] == 3,
                "recreated at {}",
                restored.data["spec"]["replicas"]
            );
        }
    }

    // `kubectl scale` through the scale subresource (its selector is the status's): the spec
    // changes, and without a leader the operator takes no step (the StatefulSet stays at 3).
    let ce = ce_api(kube).await?;
    ce.patch_scale(
        NAME,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await?;
    let scale = ce.get_scale(NAME).await?;
    let status = scale.status.context("the scale has no status")?;
    ensure!(
        scale.spec.and_then(|s| s.replicas) == Some(5)
            && status.replicas == 0
            && status.selector.as_deref()
                == Some("app.kubernetes.io/instance=demo,app.kubernetes.io/name=baton-ensemble"),
        "the scale subresource: {status:?}"
    );
    wait_for("the scaled spec observed", LIMIT, || async {
        let stored = ce.get(NAME).await?;
        let status = &stored.data["status"];
        let waiting = condition(status, "Progressing")
            .is_some_and(|c| c["reason"] == "WaitingForHealthyQuorum");
        Ok(
            (waiting && status["observedGeneration"].as_i64() == stored.metadata.generation)
                .then_some(()),
        )
    })
    .await?;
    let statefulset = get(kube, &find("StatefulSet")?)
        .await?
        .context("no StatefulSet")?;
    ensure!(
        statefulset.data["spec"]["replicas"] == 3,
        "scaled without a leader: {}",
        statefulset.data["spec"]["replicas"]
    );

    // A spec the schema accepts and the operator refuses: reported, nothing applied.
    let mut invalid = ensemble.clone();
    invalid["spec"]["backup"]["schedule"] = json!("every day at three");
    kube.apply(invalid, false).await?;
    wait_for("the invalid spec reported", LIMIT, || async {
        let stored = ce.get(NAME).await?;
        let status = &stored.data["status"];
        let degraded = condition(status, "Degraded").is_some_and(|c| {
            c["status"] == "True"
                && c["reason"] == "InvalidSpec"
                && c["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("spec.backup.schedule"))
        });
        Ok(
            (degraded && status["observedGeneration"].as_i64() == stored.metadata.generation)
                .then_some(()),
        )
    })
    .await?;
    // Nothing of it applied: the backup CronJob keeps its schedule.
    let cron_job = get(kube, &find("CronJob")?).await?.context("no CronJob")?;
    ensure!(
        cron_job.data["spec"]["schedule"] == "0 3 * * *",
        "the invalid schedule was applied: {}",
        cron_job.data["spec"]["schedule"]
    );
    let warned = events_of(kube, "CoordinationEnsemble", NAME, "InvalidSpec").await?;
    ensure!(
        warned.iter().any(|e| e.type_.as_deref() == Some("Warning")),
        "no Warning Event InvalidSpec: {warned:?}"
    );

    // Valid again, without the backup and the disruption budget: both go.
    let mut fewer = ensemble.clone();
    if let Some(spec) = fewer["spec"].as_object_mut() {
        spec.remove("backup");
    }
    fewer["spec"]["podDisruptionBudget"]["enabled"] = json!(false);
    kube.apply(fewer, false).await?;
    for kind in ["CronJob", "PodDisruptionBudget"] {
        let object = find(kind)?;
        wait_for(&format!("{kind} deleted"), LIMIT, || async {
            Ok(get(kube, &object).await?.is_none().then_some(()))
        })
        .await?;
    }
    wait_for("Degraded back to False", LIMIT, || async {
        let status = ce.get(NAME).await?.data["status"].clone();
        Ok(condition(&status, "Degraded")
            .is_some_and(|c| c["status"] == "False")
            .then_some(()))
    })
    .await?;
    Ok(())
}

/// A pod annotated for injection that runs without the sidecar, in an opted-in namespace: a
/// Warning Event on it and the ensemble's condition SidecarsMissing, both until it goes.
async fn missing_sidecar(kube: &Kube) -> Result<()> {
    let pods = Api::<Pod>::namespaced(kube.client.clone(), &kube.namespace);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "app", "annotations": {"baton.dev/inject": "true"}},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}
    }))?;
    // Created before the namespace opts in: afterwards every chart's webhook in the cluster
    // would be asked, and none can answer here.
    pods.create(&PostParams::default(), &pod).await?;
    Api::<Namespace>::all(kube.client.clone())
        .patch(
            &kube.namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"baton.dev/injection": "enabled"}}})),
        )
        .await?;
    let ce = ce_api(kube).await?;
    let flagged = |want: bool| {
        let ce = ce.clone();
        async move {
            let status = ce.get(NAME).await?.data["status"].clone();
            let there = condition(&status, "SidecarsMissing").is_some_and(|c| {
                c["status"] == "True"
                    && c["reason"] == "PodsWithoutSidecar"
                    && c["message"].as_str().is_some_and(|m| m.contains("/app"))
            });
            Ok((there == want).then_some(()))
        }
    };
    wait_for("SidecarsMissing=True", LIMIT, || flagged(true)).await?;
    let warned = events_of(kube, "Pod", "app", "SidecarMissing").await?;
    ensure!(
        warned.iter().any(|e| e.type_.as_deref() == Some("Warning")),
        "no Warning Event SidecarMissing on the pod: {warned:?}"
    );
    pods.delete("app", &DeleteParams::default()).await?;
    wait_for("SidecarsMissing gone with the pod", LIMIT, || {
        flagged(false)
    })
    .await?;
    Ok(())
}

/// An ensemble whose name the API server takes but whose StatefulSet could make no pod (the
/// pods' `controller-revision-hash` label would pass 63 characters): refused as an invalid
/// spec, nothing applied.
async fn too_long_a_name(kube: &Kube) -> Result<()> {
    let name = "a".repeat(baton_operator::validate::MAX_NAME_LEN + 1);
    let long = json!({"apiVersion": CE_API, "kind": "CoordinationEnsemble",
                      "metadata": {"name": name}, "spec": {"replicas": 1}});
    kube.apply(long, false).await?;
    let ce = ce_api(kube).await?;
    wait_for("the too long name refused", LIMIT, || async {
        let status = ce.get(&name).await?.data["status"].clone();
        Ok(condition(&status, "Degraded")
            .is_some_and(|c| {
                c["reason"] == "InvalidSpec"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("controller-revision-hash"))
            })
            .then_some(()))
    })
    .await?;
    let statefulset = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                             "metadata": {"name": name}});
    ensure!(
        get(kube, &statefulset).await?.is_none(),
        "a StatefulSet was applied for the too long name"
    );
    ce.delete(&name, &DeleteParams::default()).await?;
    wait_for("the too long name deleted", LIMIT, || async {
        Ok(ce.get_opt(&name).await?.is_none().then_some(()))
    })
    .await
}

/// Deletes the ensemble: the finalizer removes what no owner reaches, then goes; the garbage
/// collector removes the rest; the members' claims stay.
async fn deleted_through_the_finalizer(kube: &Kube, owned: &[Value]) -> Result<()> {
    let ce = ce_api(kube).await?;
    ce.delete(NAME, &DeleteParams::default()).await?;
    wait_for(
        "the ensemble gone (its finalizer removed)",
        LIMIT,
        || async { Ok(ce.get_opt(NAME).await?.is_none().then_some(())) },
    )
    .await?;
    for object in owned {
        wait_for(&format!("{} deleted", describe(object)), LIMIT, || async {
            Ok(get(kube, object).await?.is_none().then_some(()))
        })
        .await?;
    }
    let claims = Api::<PersistentVolumeClaim>::namespaced(kube.client.clone(), &kube.namespace)
        .list(&ListParams::default().labels("app.kubernetes.io/instance=demo"))
        .await?;
    let mut names: Vec<String> = claims
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    names.sort();
    ensure!(
        names == ["data-demo-0", "data-demo-1", "data-demo-2"],
        "the members' data claims stay (whenDeleted: Retain): {names:?}"
    );
    Ok(())
}

async fn create_namespace(kube: &Kube, name: &str) -> Result<()> {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([(TEST_LABEL.to_string(), "true".to_string())].into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(kube.client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("create namespace {name}"))?;
    Ok(())
}

/// Best effort: the test namespace's ensembles without their finalizer and deleted, their
/// ClusterRoleBindings, the served namespaces, and the members' claims.
async fn clean_up(kube: &Kube, served: &[&str]) {
    if let Ok(ce) = ce_api(kube).await
        && let Ok(list) = ce.list_metadata(&ListParams::default()).await
    {
        for name in list.items.iter().filter_map(|o| o.metadata.name.clone()) {
            let _ = ce
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await;
            let _ = ce.delete(&name, &DeleteParams::default()).await;
        }
    }
    let bindings = Api::<ClusterRoleBinding>::all(kube.client.clone());
    let ours =
        ListParams::default().labels(&format!("baton.dev/ensemble-namespace={}", kube.namespace));
    if let Ok(list) = bindings.list_metadata(&ours).await {
        for name in list.items.iter().filter_map(|o| o.metadata.name.clone()) {
            let _ = bindings.delete(&name, &DeleteParams::default()).await;
        }
    }
    for ns in served {
        let _ = Api::<Namespace>::all(kube.client.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
    release_claims(kube).await;
}

/// Lets the test namespace's claims go: their `kubernetes.io/pvc-protection` finalizer is
/// removed by a controller this control plane does not run.
async fn release_claims(kube: &Kube) {
    let claims = Api::<PersistentVolumeClaim>::namespaced(kube.client.clone(), &kube.namespace);
    let Ok(list) = claims.list(&ListParams::default()).await else {
        return;
    };
    for claim in list.items {
        let Some(name) = claim.metadata.name else {
            continue;
        };
        let _ = claims
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
        let _ = claims.delete(&name, &DeleteParams::default()).await;
    }
}
