//! The chart's pod-label ValidatingAdmissionPolicy in the real API server, with the sidecar's
//! real RBAC (both rendered by Helm from `charts/baton`): with its pod's own token (a
//! TokenRequest bound to the pod, what the kubelet projects), a pod's ServiceAccount
//! - may set, change and remove `baton.dev/*` labels and annotations on that pod;
//! - is refused, with the policy's own message, any other label or annotation, any change of
//!   the spec, the owners or the finalizers, and any change at all to another pod of the same
//!   ServiceAccount, or with a token of the ServiceAccount bound to no pod.
//!
//! A pod with no labels or annotations at all takes the sidecar's first write too. The admin
//! (not a ServiceAccount of the namespace) is not held to the policy.

use anyhow::{Context, Result, bail, ensure};
use baton_kube_tests::Kube;
use baton_kube_tests::sidecar::{SidecarChart, pod, pod_token};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const FIELD_MANAGER: &str = "baton-sidecar";

const OWN_TOKEN: &str = "a service account of this namespace may change a pod only with that \
                         pod's own token";
const LABELS: &str = "only baton.dev/* labels may be changed by the pod's own service account";
const ANNOTATIONS: &str =
    "only baton.dev/* annotations may be changed by the pod's own service account";
const SPEC: &str =
    "the pod's spec, owners and finalizers cannot be changed by its own service account";

#[tokio::test]
async fn a_pods_own_token_may_change_only_its_baton_labels_and_annotations() -> Result<()> {
    let kube = Kube::new("pod-label-policy").await?;
    kube.service_account("app").await?;
    let chart = SidecarChart::install(&kube, &["app"], false).await?;
    let result = check(&kube, &chart).await;
    chart.remove(&kube).await;
    result
}

async fn check(kube: &Kube, chart: &SidecarChart) -> Result<()> {
    let own = pod(kube, "app-0", "app").await?;
    pod(kube, "app-1", "app").await?;
    let token = pod_token(kube, &own).await?;
    let sidecar = kube.client_with_token(&token).await?;
    chart.wait_enforced(&sidecar, kube, "app-0").await?;
    let pods = Api::<Pod>::namespaced(sidecar.clone(), &kube.namespace);
    let admin = Api::<Pod>::namespaced(kube.client.clone(), &kube.namespace);

    // Allowed: what the sidecar writes, set and then removed, as the sidecar sends it (a merge
    // patch of the metadata).
    let set = json!({"metadata": {
        "labels": {"baton.dev/role": "leader", "baton.dev/role-billing": "candidate"},
        "annotations": {"baton.dev/leader-since": "2026-11-27T12:00:00.000Z",
                        "baton.dev/fencing-token": "42"}
    }});
    patch(&pods, "app-0", &set)
        .await
        .context("the pod's own token setting baton.dev/* labels and annotations")?;
    let stored = admin.get("app-0").await?;
    ensure!(
        label(&stored, "baton.dev/role") == Some("leader")
            && annotation(&stored, "baton.dev/fencing-token") == Some("42"),
        "not stored: {:?}",
        stored.metadata
    );
    ensure!(
        label(&stored, "app") == Some("demo") && annotation(&stored, "team") == Some("a"),
        "the pod's other metadata changed: {:?}",
        stored.metadata
    );
    let clear = json!({"metadata": {
        "labels": {"baton.dev/role": "candidate", "baton.dev/role-billing": null},
        "annotations": {"baton.dev/leader-since": null, "baton.dev/fencing-token": null}
    }});
    patch(&pods, "app-0", &clear)
        .await
        .context("the pod's own token removing baton.dev/* keys")?;
    let stored = admin.get("app-0").await?;
    ensure!(
        label(&stored, "baton.dev/role") == Some("candidate")
            && label(&stored, "baton.dev/role-billing").is_none()
            && annotation(&stored, "baton.dev/fencing-token").is_none(),
        "not stored: {:?}",
        stored.metadata
    );

    // A pod with no labels or annotations at all (the policy's `has()` paths): the sidecar's
    // first write, a candidate's, removing annotations that were never there.
    let bare = Pod {
        metadata: ObjectMeta {
            name: Some("bare-0".into()),
            ..ObjectMeta::default()
        },
        spec: own.spec.clone(),
        ..Pod::default()
    };
    let bare = admin.create(&PostParams::default(), &bare).await?;
    let bare_client = kube
        .client_with_token(&pod_token(kube, &bare).await?)
        .await?;
    let candidate = json!({"metadata": {
        "labels": {"baton.dev/role": "candidate"},
        "annotations": {"baton.dev/leader-since": null, "baton.dev/fencing-token": null}
    }});
    patch(
        &Api::<Pod>::namespaced(bare_client, &kube.namespace),
        "bare-0",
        &candidate,
    )
    .await
    .context("a bare pod's own token labelling it")?;
    let stored = admin.get("bare-0").await?;
    ensure!(
        stored.metadata.labels == Some([("baton.dev/role".into(), "candidate".into())].into()),
        "bare-0: {:?}",
        stored.metadata
    );

    // Refused, each with the rule's message.
    let refusals: [(&str, &str, Value, &str); 9] = [
        (
            "another label",
            "app-0",
            json!({"metadata": {"labels": {"app": "other"}}}),
            LABELS,
        ),
        (
            "a new label",
            "app-0",
            json!({"metadata": {"labels": {"tier": "gold"}}}),
            LABELS,
        ),
        (
            "removing a label",
            "app-0",
            json!({"metadata": {"labels": {"app": null}}}),
            LABELS,
        ),
        (
            "a label of a look-alike prefix",
            "app-0",
            json!({"metadata": {"labels": {"baton.dev.evil/role": "leader"}}}),
            LABELS,
        ),
        (
            "another annotation",
            "app-0",
            json!({"metadata": {"annotations": {"team": "b"}}}),
            ANNOTATIONS,
        ),
        (
            "the spec",
            "app-0",
            json!({"spec": {"activeDeadlineSeconds": 60}}),
            SPEC,
        ),
        (
            "an owner",
            "app-0",
            json!({"metadata": {"ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                "uid": "6a1e2b8c-0000-4000-8000-000000000001"
            }]}}),
            SPEC,
        ),
        (
            "a finalizer",
            "app-0",
            json!({"metadata": {"finalizers": ["example.com/keep"]}}),
            SPEC,
        ),
        (
            "another pod of the same ServiceAccount",
            "app-1",
            json!({"metadata": {"labels": {"baton.dev/role": "leader"}}}),
            OWN_TOKEN,
        ),
    ];
    for (what, target, body, message) in &refusals {
        refused(&pods, target, body, &chart.policy, message)
            .await
            .with_context(|| format!("{what} ({target})"))?;
    }
    // The same ServiceAccount's token bound to no pod proves no pod.
    let unbound = kube.token(&kube.namespace, "app", &[], None, 3600).await?;
    let unbound = Api::<Pod>::namespaced(kube.client_with_token(&unbound).await?, &kube.namespace);
    refused(
        &unbound,
        "app-0",
        &json!({"metadata": {"labels": {"baton.dev/role": "leader"}}}),
        &chart.policy,
        OWN_TOKEN,
    )
    .await
    .context("a token bound to no pod")?;

    // Nothing refused was stored.
    let stored = admin.get("app-0").await?;
    ensure!(
        label(&stored, "app") == Some("demo")
            && label(&stored, "tier").is_none()
            && annotation(&stored, "team") == Some("a")
            && stored.metadata.finalizers.is_none()
            && stored.metadata.owner_references.is_none()
            && stored
                .spec
                .as_ref()
                .and_then(|s| s.active_deadline_seconds)
                .is_none(),
        "a refused change was stored: {stored:?}"
    );
    let other = admin.get("app-1").await?;
    ensure!(
        label(&other, "baton.dev/role").is_none(),
        "app-1 was labelled: {:?}",
        other.metadata
    );

    // The admin is not a ServiceAccount of the namespace: not matched.
    patch(
        &admin,
        "app-1",
        &json!({"metadata": {"labels": {"app": "other"}}}),
    )
    .await
    .context("the admin changing another label")?;
    Ok(())
}

/// A merge patch of pod `name`'s metadata, as the sidecar sends it.
async fn patch(pods: &Api<Pod>, name: &str, body: &Value) -> Result<()> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    pods.patch_metadata(name, &params, &Patch::Merge(body))
        .await?;
    Ok(())
}

/// `body` patched onto pod `name` is refused by the policy with `message`.
async fn refused(
    pods: &Api<Pod>,
    name: &str,
    body: &Value,
    policy: &str,
    message: &str,
) -> Result<()> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match pods.patch(name, &params, &Patch::Merge(body)).await {
        Err(kube::Error::Api(e)) if e.message.contains(policy) => {
            ensure!(
                e.code == 403 && e.message.contains(message),
                "refused by {policy} but not as the rule says ({message:?}): {e:?}"
            );
            Ok(())
        }
        Err(e) => bail!("refused, but not by {policy}: {e}"),
        Ok(_) => bail!("accepted {body}"),
    }
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}
