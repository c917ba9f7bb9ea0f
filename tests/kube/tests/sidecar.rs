//! A real `baton-sidecar` against the real API server, with exactly the Kubernetes rights the
//! product gives an injected sidecar: its pod's ServiceAccount token (a TokenRequest bound to
//! the pod, what the kubelet projects; the pod itself never runs, there is no kubelet), the
//! chart's sidecar Role and RoleBinding (`sidecarRbac.serviceAccounts`, `sidecarRbac.leases`)
//! and the chart's pod-label ValidatingAdmissionPolicy in force. On a real three-member Baton
//! ensemble two sidecars, of pods `app-0` and `app-1`, stand in the elections `orders` and
//! `a.-b` with `--mirror-lease` (DESIGN.md §2, Pod view):
//! - the leader's pod gets `baton.dev/role=leader` (and `baton.dev/role-a.-b`) and the
//!   annotations `baton.dev/leader-since` and `baton.dev/fencing-token` of its term, the other
//!   pod `baton.dev/role=candidate`; the pods' other labels and annotations stay;
//! - the Lease `baton-orders` names the leader (holderIdentity, acquireTime = the term's start,
//!   leaseDurationSeconds = the session timeout, the fencing token), and is renewed;
//!   `baton-a.-b` is no valid object name: not mirrored, and never sent;
//! - app-0 resigns: app-1 leads, both pods are relabelled, the Lease names app-1
//!   (leaseTransitions 1); app-1 stops (SIGTERM): its pod is relabelled `candidate`, app-0
//!   leads again and holds the Lease (leaseTransitions 2); app-0's pod is deleted (bound to a
//!   Node, so it stays terminating) and its sidecar stopped: the terminating pod is relabelled
//!   `candidate` and the Lease names no one;
//! - the API server's audit log shows the sidecars' pod patches and Lease writes, and nothing
//!   of theirs refused (no 403, no 422).
//!
//! A sidecar killed outright (SIGKILL) releases nothing: the next leader takes the Lease over
//! from it (leaseTransitions 1); its pod says `leader` until the sidecar is back, whose first
//! write says `candidate`.
//!
//! And a sidecar refused explains why: without the chart's RBAC it says to grant `patch` on
//! pods; refused by the pod-label policy (a token of its ServiceAccount not bound to its pod)
//! it says so, with the policy's message; each keeps trying. With `--mirror-lease` but not
//! `sidecarRbac.leases` it labels its pod and says which value grants the Lease.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use baton_kube_tests::Kube;
use baton_kube_tests::sidecar::{
    BOUND, SidecarChart, SidecarProcess, pod, pod_on, pod_token, service_account_user, wait_allowed,
};
use baton_tests::cluster::Cluster;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::wait::{Condition, await_condition};
use serde_json::Value;

const ELECTION: &str = "orders";
const LEASE: &str = "baton-orders";
/// A second election: a valid election and label-key name, but `baton-a.-b` is no object
/// name the API server takes, so it is not mirrored.
const UNMIRRORED: &str = "a.-b";
/// The sidecars' session timeout, hence the Lease's duration (renewed every 2 s).
const SESSION_TIMEOUT_SECS: i32 = 6;

#[tokio::test]
async fn sidecars_label_their_pods_and_mirror_the_lease_with_the_charts_rbac() -> Result<()> {
    let kube = Kube::new("sidecar").await?;
    kube.service_account("app").await?;
    // `probe` only checks that the policy is in force before the sidecars start.
    kube.service_account("probe").await?;
    let chart = SidecarChart::install(&kube, &["app", "probe"], true).await?;
    // A Node object for the pods to be bound to, so deleting one leaves it terminating as a
    // kubelet would while it stops the containers (no kubelet: the Node never gets ready).
    let node = Node {
        metadata: ObjectMeta {
            name: Some(format!("ghost-{}", kube.namespace)),
            ..ObjectMeta::default()
        },
        ..Node::default()
    };
    let nodes = Api::<Node>::all(kube.client.clone());
    let node = nodes.create(&PostParams::default(), &node).await?;
    let node = node.metadata.name.context("a Node without name")?;
    let result = run(&kube, &chart, &node).await;
    // Its pods go first (grace period 0: nothing runs them), then the Node.
    let pods = Api::<Pod>::namespaced(kube.client.clone(), &kube.namespace);
    for name in ["app-0", "app-1"] {
        let _ = pods
            .delete(name, &DeleteParams::default().grace_period(0))
            .await;
    }
    let _ = nodes.delete(&node, &DeleteParams::default()).await;
    chart.remove(&kube).await;
    result
}

async fn run(kube: &Kube, chart: &SidecarChart, node: &str) -> Result<()> {
    let app0 = pod_on(kube, "app-0", "app", Some(node)).await?;
    let app1 = pod_on(kube, "app-1", "app", Some(node)).await?;
    // The policy and the grants in force before a sidecar sends its first request: a refusal
    // in the audit log must be the product's fault, never the test's haste (whether the grants
    // are enough is for the sidecars' requests to show).
    chart.wait_in_force(kube).await?;

    let cluster = Cluster::start(3).await.context("start a Baton ensemble")?;
    let ensemble = cluster.connect_string();
    let timeout = format!("{SESSION_TIMEOUT_SECS}s");
    let flags = [
        "--mirror-lease",
        "--session-timeout",
        &timeout,
        "--election",
        UNMIRRORED,
    ];
    let mut first = SidecarProcess::start(
        kube,
        &ensemble,
        "app-0",
        &pod_token(kube, &app0).await?,
        ELECTION,
        &flags,
    )?;
    let outcome = hand_over(kube, &app1, &ensemble, &flags, &mut first).await;
    outcome.map_err(|e| anyhow::anyhow!("{e:#}\n--- log of app-0 ---\n{}", first.log()))?;

    let user = service_account_user(kube, "app");
    let requests = kube.requests_of(&user)?;
    for (what, expected) in [
        (
            "a patch of app-0",
            "patch /api/v1/namespaces/{ns}/pods/app-0",
        ),
        (
            "a patch of app-1",
            "patch /api/v1/namespaces/{ns}/pods/app-1",
        ),
        (
            "a Lease created",
            "create /apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
        ),
        (
            "a Lease updated",
            "update /apis/coordination.k8s.io/v1/namespaces/{ns}/leases/baton-orders",
        ),
    ] {
        let expected = expected.replace("{ns}", &kube.namespace);
        ensure!(
            requests
                .iter()
                .any(|(r, code)| r.starts_with(&expected) && (200..300).contains(code)),
            "{what}: no successful `{expected}` by {user} in the audit log: {requests:?}"
        );
    }
    // Nothing refused: no 403, no invalid object (422). A read of the Lease before it exists
    // (404) and a write that lost a race in a hand-over (409, read again) are the design.
    let refused: Vec<_> = requests
        .iter()
        .filter(|(r, code)| {
            *code >= 400
                && !(*code == 404 && r.starts_with("get "))
                && !(*code == 409 && r.contains("/leases"))
        })
        .collect();
    ensure!(
        refused.is_empty(),
        "the API server refused the sidecars ({user}): {refused:?}"
    );
    ensure!(kube.forbidden_for(&user)?.is_empty(), "403s for {user}");
    Ok(())
}

async fn hand_over(
    kube: &Kube,
    app1: &Pod,
    ensemble: &str,
    flags: &[&str],
    first: &mut SidecarProcess,
) -> Result<()> {
    let pods = Api::<Pod>::namespaced(kube.client.clone(), &kube.namespace);
    let leases = Api::<Lease>::namespaced(kube.client.clone(), &kube.namespace);

    // app-0 alone: it leads both elections.
    let (token, since) = term(&leader_of(first).await?, "app-0")?;
    let labelled = wait_for(&pods, "app-0", "app-0 labelled leader", role_is("leader")).await?;
    check_leader_pod(&labelled, token, &since)?;
    // The second election's keys carry its name; the API server takes them as label keys.
    ensure!(
        label(&labelled, &format!("baton.dev/role-{UNMIRRORED}")) == Some("leader"),
        "no leader label for {UNMIRRORED}: {:?}",
        labelled.metadata
    );
    let lease = wait_for(
        &leases,
        LEASE,
        "the Lease held by app-0",
        holder_is("app-0"),
    )
    .await?;
    let first_renew = check_lease(&lease, "app-0", token, &since, 0)?;
    // baton-a.-b is no object name the API server takes: said once, never tried.
    first.wait_log("no Lease mirror")?;

    // Renewed while it leads (every third of its duration), the term unchanged.
    let renewed = wait_for(&leases, LEASE, "the Lease renewed", |l: Option<&Lease>| {
        l.and_then(|l| l.spec.as_ref())
            .and_then(|s| s.renew_time.as_ref())
            .is_some_and(|t| t.0 > first_renew)
    })
    .await?;
    check_lease(&renewed, "app-0", token, &since, 0)?;

    // app-1 stands too and waits.
    let mut second = SidecarProcess::start(
        kube,
        ensemble,
        "app-1",
        &pod_token(kube, app1).await?,
        ELECTION,
        flags,
    )?;
    let result = async {
        wait_for(
            &pods,
            "app-1",
            "app-1 labelled candidate",
            role_is("candidate"),
        )
        .await?;
        // The label says candidate from the start; queued is what makes it next in line.
        second.wait_log_all(&["queued as a candidate", &format!("election={ELECTION}")])?;

        // app-0 resigns (and stands again): app-1 leads, the Lease changes hands.
        let (status, body) = first
            .call("POST", &format!("/leader/{ELECTION}/resign"))
            .await?;
        ensure!(status == 200, "resign: {status} {body}");
        let (token1, since1) = term(&leader_of(&second).await?, "app-1")?;
        ensure!(token1 > token, "the new term's token {token1} <= {token}");
        let labelled = wait_for(&pods, "app-1", "app-1 labelled leader", role_is("leader")).await?;
        check_leader_pod(&labelled, token1, &since1)?;
        let lease = wait_for(
            &leases,
            LEASE,
            "the Lease held by app-1",
            holder_is("app-1"),
        )
        .await?;
        check_lease(&lease, "app-1", token1, &since1, 1)?;
        let resigned = wait_for(
            &pods,
            "app-0",
            "app-0 labelled candidate",
            role_is("candidate"),
        )
        .await?;
        ensure!(
            annotation(&resigned, "baton.dev/fencing-token").is_none()
                && annotation(&resigned, "baton.dev/leader-since").is_none(),
            "app-0 after it resigned: {:?}",
            resigned.metadata
        );

        // app-1 stops: it relabels its pod and releases the Lease on its way out; app-0
        // leads again.
        let status = second.terminate()?;
        ensure!(status.success(), "app-1's sidecar exited with {status}");
        let stopped = pods.get("app-1").await?;
        ensure!(
            label(&stopped, "baton.dev/role") == Some("candidate")
                && annotation(&stopped, "baton.dev/fencing-token").is_none(),
            "app-1 after its sidecar stopped: {:?}",
            stopped.metadata
        );
        let (token2, since2) = term(&leader_of(first).await?, "app-0")?;
        ensure!(token2 > token1, "the new term's token {token2} <= {token1}");
        let labelled = wait_for(
            &pods,
            "app-0",
            "app-0 labelled leader again",
            role_is("leader"),
        )
        .await?;
        check_leader_pod(&labelled, token2, &since2)?;
        let lease = wait_for(
            &leases,
            LEASE,
            "the Lease back with app-0",
            holder_is("app-0"),
        )
        .await?;
        check_lease(&lease, "app-0", token2, &since2, 2)?;

        // app-0's pod is deleted: it is terminating (deletionTimestamp set) when its sidecar
        // gets SIGTERM, as from a kubelet. It still relabels the pod (the policy allows it, the
        // pod's token is still good) and releases the Lease: the Lease names no one.
        pods.delete("app-0", &DeleteParams::default()).await?;
        let status = first.terminate()?;
        ensure!(status.success(), "app-0's sidecar exited with {status}");
        let terminating = pods.get("app-0").await?;
        ensure!(
            terminating.metadata.deletion_timestamp.is_some()
                && label(&terminating, "baton.dev/role") == Some("candidate")
                && annotation(&terminating, "baton.dev/fencing-token").is_none(),
            "app-0, terminating, after its sidecar stopped: {:?}",
            terminating.metadata
        );
        let lease = leases.get(LEASE).await?;
        let spec = lease.spec.clone().unwrap_or_default();
        ensure!(
            spec.holder_identity.is_none()
                && lease
                    .metadata
                    .annotations
                    .as_ref()
                    .is_none_or(|a| !a.contains_key("baton.dev/fencing-token")),
            "the Lease after the last leader stopped: {lease:?}"
        );
        ensure!(
            leases
                .get_opt(&format!("baton-{UNMIRRORED}"))
                .await?
                .is_none(),
            "a Lease for {UNMIRRORED}"
        );
        Ok(())
    }
    .await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\n--- log of app-1 ---\n{}", second.log()))
}

/// The sidecar's `GET /leader/orders` once it names this sidecar as the leader.
async fn leader_of(sidecar: &SidecarProcess) -> Result<Value> {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let (status, body) = sidecar.call("GET", &format!("/leader/{ELECTION}")).await?;
        if status == 200 && body["self"]["isLeader"] == true {
            return Ok(body);
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{} does not lead after {BOUND:?}: {status} {body}",
            sidecar.identity
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The fencing token and start of the term `/leader` shows, led by `identity`.
fn term(answer: &Value, identity: &str) -> Result<(i64, String)> {
    let leader = &answer["leader"];
    ensure!(
        leader["identity"] == identity,
        "not led by {identity}: {answer}"
    );
    let token = leader["token"].as_i64().context("no token")?;
    let since = leader["since"].as_str().context("no since")?.to_string();
    Ok((token, since))
}

fn check_leader_pod(pod: &Pod, token: i64, since: &str) -> Result<()> {
    ensure!(
        annotation(pod, "baton.dev/fencing-token") == Some(token.to_string().as_str())
            && annotation(pod, "baton.dev/leader-since") == Some(since),
        "the leader's pod does not show term {token} since {since}: {:?}",
        pod.metadata
    );
    // The sidecar's keys are owned by its field manager (`kubectl --show-managed-fields`).
    let managers: Vec<_> = pod
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|f| f.manager.as_deref())
        .collect();
    ensure!(
        managers.contains(&"baton-sidecar"),
        "no field manager baton-sidecar on the pod: {managers:?}"
    );
    // What the pod had of its own is untouched.
    ensure!(
        label(pod, "app") == Some("demo") && annotation(pod, "team") == Some("a"),
        "the pod's other metadata changed: {:?}",
        pod.metadata
    );
    Ok(())
}

/// Checks the Lease against the term; returns its renewTime.
fn check_lease(
    lease: &Lease,
    holder: &str,
    token: i64,
    since: &str,
    transitions: i32,
) -> Result<Timestamp> {
    let spec = lease.spec.as_ref().context("a Lease without spec")?;
    let since: Timestamp = since.parse().context("since is not RFC 3339")?;
    let acquired = spec.acquire_time.as_ref().context("no acquireTime")?.0;
    ensure!(
        spec.holder_identity.as_deref() == Some(holder)
            && spec.lease_duration_seconds == Some(SESSION_TIMEOUT_SECS)
            && spec.lease_transitions == Some(transitions)
            && acquired == since,
        "Lease {LEASE}: want holder {holder}, duration {SESSION_TIMEOUT_SECS}, transitions \
         {transitions}, acquireTime {since}: {spec:?}"
    );
    let stored_token = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("baton.dev/fencing-token"));
    ensure!(
        stored_token.map(String::as_str) == Some(token.to_string().as_str()),
        "Lease {LEASE}: fencing token {stored_token:?}, want {token}"
    );
    Ok(spec.renew_time.as_ref().context("no renewTime")?.0)
}

fn role_is(role: &'static str) -> impl Condition<Pod> {
    move |p: Option<&Pod>| p.is_some_and(|p| label(p, "baton.dev/role") == Some(role))
}

fn holder_is(holder: &'static str) -> impl Condition<Lease> {
    move |l: Option<&Lease>| {
        l.and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.as_deref())
            == Some(holder)
    }
}

/// Watches `name` until `condition` holds (up to [`BOUND`]).
async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    condition: impl Condition<K>,
) -> Result<K>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + Send
        + 'static,
{
    match tokio::time::timeout(BOUND, await_condition(api.clone(), name, condition)).await {
        Ok(Ok(Some(object))) => Ok(object),
        Ok(Ok(None)) => bail!("{what}: {name} is gone"),
        Ok(Err(e)) => bail!("{what}: watching {name}: {e}"),
        Err(_) => bail!(
            "{what}: not within {BOUND:?}; {name} is {:?}",
            api.get_opt(name).await
        ),
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

#[tokio::test]
async fn a_refused_sidecar_says_why_and_keeps_trying() -> Result<()> {
    let kube = Kube::new("sidecar-refused").await?;
    kube.service_account("app").await?;
    // Not in sidecarRbac: no right to patch pods.
    kube.service_account("other").await?;
    let chart = SidecarChart::install(&kube, &["app"], false).await?;
    let result = refusals(&kube, &chart).await;
    chart.remove(&kube).await;
    result
}

async fn refusals(kube: &Kube, chart: &SidecarChart) -> Result<()> {
    let app0 = pod(kube, "app-0", "app").await?;
    let other0 = pod(kube, "other-0", "other").await?;
    let own_token = pod_token(kube, &app0).await?;
    chart
        .wait_enforced(&kube.client_with_token(&own_token).await?, kube, "app-0")
        .await?;
    wait_allowed(kube, "app", &chart.granted()).await?;
    let cluster = Cluster::start(1).await.context("start a Baton ensemble")?;
    let ensemble = cluster.connect_string();

    // No RBAC: the API server's 403 for want of `patch`.
    let unbound = SidecarProcess::start(
        kube,
        &ensemble,
        "other-0",
        &pod_token(kube, &other0).await?,
        ELECTION,
        &[],
    )?;
    let line = unbound.wait_log("pod labels not updated")?;
    ensure!(
        line.contains("grant it `patch` on `pods`") && line.contains("other-0"),
        "without RBAC: {line}"
    );
    patched_again(kube, "other", "other-0").await?;

    // RBAC, but a token of the ServiceAccount bound to no pod (as a Secret-based token would
    // be): the policy refuses, and granting `patch` would not help.
    let stray = kube.token(&kube.namespace, "app", &[], None, 3600).await?;
    let refused = SidecarProcess::start(kube, &ensemble, "app-0", &stray, ELECTION, &[])?;
    let line = refused.wait_log("pod labels not updated")?;
    ensure!(
        line.contains("refused by admission")
            && line.contains(&chart.policy)
            && line.contains("may change a pod only with that pod's own token")
            && !line.contains("grant it"),
        "refused by the policy: {line}"
    );
    patched_again(kube, "app", "app-0").await?;

    // Its own token and the chart's pod RBAC, with --mirror-lease but without
    // `sidecarRbac.leases` (the chart's default): the pod is labelled, the Lease refused and
    // the log says which value grants it.
    let app1 = pod(kube, "app-1", "app").await?;
    let mirrored = SidecarProcess::start(
        kube,
        &ensemble,
        "app-1",
        &pod_token(kube, &app1).await?,
        "mirrored",
        &["--mirror-lease"],
    )?;
    let line = mirrored.wait_log("Lease not updated")?;
    ensure!(
        line.contains("sidecarRbac.leases=true") && line.contains("baton-mirrored"),
        "a Lease without the chart's Lease RBAC: {line}"
    );
    wait_for(
        &Api::<Pod>::namespaced(kube.client.clone(), &kube.namespace),
        "app-1",
        "app-1 labelled leader without Lease RBAC",
        role_is("leader"),
    )
    .await?;
    ensure!(
        Api::<Pod>::namespaced(kube.client.clone(), &kube.namespace)
            .get("app-0")
            .await?
            .metadata
            .labels
            .is_some_and(|l| !l.contains_key("baton.dev/role")),
        "app-0 was labelled through a refused token"
    );
    Ok(())
}

/// The audit log shows ServiceAccount `sa` trying to patch `pod` at least twice (each refused).
async fn patched_again(kube: &Kube, sa: &str, pod: &str) -> Result<()> {
    let user = service_account_user(kube, sa);
    let uri = format!("patch /api/v1/namespaces/{}/pods/{pod}", kube.namespace);
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let tries = kube
            .requests_of(&user)?
            .into_iter()
            .filter(|(r, code)| r.starts_with(&uri) && *code == 403)
            .count();
        if tries >= 2 {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{user} tried {uri} {tries} times in {BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_killed_leaders_lease_is_taken_over_and_its_pod_relabelled_on_restart() -> Result<()> {
    let kube = Kube::new("sidecar-killed").await?;
    kube.service_account("app").await?;
    kube.service_account("probe").await?;
    let chart = SidecarChart::install(&kube, &["app", "probe"], true).await?;
    let result = killed(&kube, &chart).await;
    chart.remove(&kube).await;
    result
}

async fn killed(kube: &Kube, chart: &SidecarChart) -> Result<()> {
    let app0 = pod(kube, "app-0", "app").await?;
    let app1 = pod(kube, "app-1", "app").await?;
    let token0 = pod_token(kube, &app0).await?;
    chart.wait_in_force(kube).await?;
    let cluster = Cluster::start(1).await.context("start a Baton ensemble")?;
    let ensemble = cluster.connect_string();
    let timeout = format!("{SESSION_TIMEOUT_SECS}s");
    let flags = ["--mirror-lease", "--session-timeout", &timeout];
    let pods = Api::<Pod>::namespaced(kube.client.clone(), &kube.namespace);
    let leases = Api::<Lease>::namespaced(kube.client.clone(), &kube.namespace);

    let mut first = SidecarProcess::start(kube, &ensemble, "app-0", &token0, ELECTION, &flags)?;
    let (token, _) = term(&leader_of(&first).await?, "app-0")?;
    wait_for(
        &leases,
        LEASE,
        "the Lease held by app-0",
        holder_is("app-0"),
    )
    .await?;
    let second = SidecarProcess::start(
        kube,
        &ensemble,
        "app-1",
        &pod_token(kube, &app1).await?,
        ELECTION,
        &flags,
    )?;
    second.wait_log_all(&["queued as a candidate", &format!("election={ELECTION}")])?;

    // Killed outright: nothing released. Its session expires, app-1 leads and takes the Lease
    // over from a holder that never let go.
    first.kill()?;
    let (token1, since1) = term(&leader_of(&second).await?, "app-1")?;
    ensure!(token1 > token, "the new term's token {token1} <= {token}");
    let lease = wait_for(&leases, LEASE, "the Lease taken over", holder_is("app-1")).await?;
    check_lease(&lease, "app-1", token1, &since1, 1)?;
    wait_for(&pods, "app-1", "app-1 labelled leader", role_is("leader")).await?;
    // Nothing relabels a killed sidecar's pod: it says leader until its sidecar is back.
    let stale = pods.get("app-0").await?;
    ensure!(
        label(&stale, "baton.dev/role") == Some("leader"),
        "app-0 while its sidecar is dead: {:?}",
        stale.metadata
    );

    // Restarted (as the kubelet restarts the container): its first write says candidate.
    let restarted = SidecarProcess::start(kube, &ensemble, "app-0", &token0, ELECTION, &flags)?;
    let relabelled = wait_for(
        &pods,
        "app-0",
        "app-0 relabelled candidate",
        role_is("candidate"),
    )
    .await?;
    ensure!(
        annotation(&relabelled, "baton.dev/fencing-token").is_none(),
        "app-0 after its sidecar restarted: {:?}",
        relabelled.metadata
    );
    let lease = leases.get(LEASE).await?;
    check_lease(&lease, "app-1", token1, &since1, 1)?;
    drop(restarted);
    drop(second);

    let user = service_account_user(kube, "app");
    let refused = kube.forbidden_for(&user)?;
    ensure!(
        refused.is_empty(),
        "the API server refused {user}: {refused:?}"
    );
    Ok(())
}
