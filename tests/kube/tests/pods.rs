//! Pods that run, on the real node (`tests/kube/src/node.rs`: a kubelet, containerd and runc
//! running the project's image): with the chart installed as the docs' local cluster installs
//! it, the operator's own pods (from the image, as the chart's ServiceAccount) bring a
//! CoordinationEnsemble of 3 up and elect a leader, the members finding each other by their DNS
//! names; a killed member is restarted by the kubelet and the ensemble keeps its data; 3→5→3; a
//! spec change rolls the members one at a time.
//!
//! `#[ignore]`d: `tests/scripts/test.sh` runs them on the node it starts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use baton_kube_tests::Kube;
use baton_kube_tests::node::{self, RELEASE, RELEASE_NAMESPACE, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use serde_json::{Value, json};
use zookeeper_client as zk;

/// A test's namespace on the node's cluster, the shared operator installed.
struct Setup {
    /// When this test's namespace was made and the chart found ready.
    started: Instant,
    kube: Kube,
}

impl Setup {
    async fn new(test: &str) -> Result<Setup> {
        let kube = Kube::on_node(test).await?;
        node::chart(&kube, &[]).await?;
        Ok(Setup {
            started: Instant::now(),
            kube,
        })
    }

    fn ensembles(&self) -> Result<Api<DynamicObject>> {
        let gvk = kube::api::GroupVersionKind::gvk("baton.dev", "v1alpha1", "CoordinationEnsemble");
        let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "coordinationensembles");
        Ok(Api::namespaced_with(
            self.kube.client.clone(),
            &self.kube.namespace,
            &resource,
        ))
    }

    async fn apply_ensemble(&self, name: &str, spec: Value) -> Result<()> {
        self.kube
            .apply(
                json!({"apiVersion": "baton.dev/v1alpha1", "kind": "CoordinationEnsemble",
                       "metadata": {"name": name}, "spec": spec}),
                false,
            )
            .await?;
        Ok(())
    }

    /// Waits until the ensemble reports `replicas` ready voters, a leader, Available, for its
    /// current generation; returns its status.
    async fn available(&self, name: &str, replicas: usize, timeout: Duration) -> Result<Value> {
        let api = self.ensembles()?;
        wait_for(
            &self.kube,
            &format!("ensemble {name} Available with {replicas} members"),
            timeout,
            || async {
                let ce = api.get(name).await?;
                let status = ce.data.get("status").cloned().unwrap_or(Value::Null);
                let generation = ce.metadata.generation.unwrap_or(0);
                ensure!(
                    status["observedGeneration"].as_i64() == Some(generation),
                    "observedGeneration {} of {generation}",
                    status["observedGeneration"]
                );
                let available = status["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == "Available")
                    .cloned()
                    .unwrap_or(Value::Null);
                ensure!(available["status"] == "True", "Available: {available}");
                ensure!(
                    status["readyReplicas"].as_u64() == Some(replicas as u64),
                    "readyReplicas {}",
                    status["readyReplicas"]
                );
                let members = status["members"].as_array().map(Vec::len).unwrap_or(0);
                ensure!(members == replicas, "members {}", status["members"]);
                ensure!(status["leader"].as_i64().is_some(), "no leader in {status}");
                // No step of a roll or membership change left.
                ensure!(status["step"].is_null(), "step {}", status["step"]);
                // And the kubelet finds every member pod ready by its probe.
                let pods = self.members(name).await?;
                ensure!(
                    pods.len() == replicas && pods.values().all(|(_, _, ready, ..)| *ready),
                    "member pods (uid, IP, ready, restarts, running): {pods:?}"
                );
                Ok(status)
            },
        )
        .await
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.kube.client.clone(), &self.kube.namespace)
    }

    /// The ensemble's member pods (not being deleted): name → (uid, IP, ready, restarts,
    /// running: every container's process runs).
    async fn members(
        &self,
        name: &str,
    ) -> Result<BTreeMap<String, (String, String, bool, i32, bool)>> {
        let params = ListParams::default().labels(&format!(
            "app.kubernetes.io/name=baton-ensemble,app.kubernetes.io/instance={name}"
        ));
        let mut out = BTreeMap::new();
        for pod in self.pods().list(&params).await?.items {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let status = pod.status.clone().unwrap_or_default();
            let ready = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let restarts = status
                .container_statuses
                .iter()
                .flatten()
                .map(|c| c.restart_count)
                .sum();
            let statuses = status.container_statuses.clone().unwrap_or_default();
            let running = !statuses.is_empty()
                && statuses
                    .iter()
                    .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
            out.insert(
                pod.metadata.name.clone().unwrap_or_default(),
                (
                    pod.metadata.uid.clone().unwrap_or_default(),
                    status.pod_ip.clone().unwrap_or_default(),
                    ready,
                    restarts,
                    running,
                ),
            );
        }
        Ok(out)
    }

    /// Deletes the ensemble and waits until its finalizer has run (the operator removes it).
    async fn delete_ensemble(&self, name: &str) -> Result<()> {
        let api = self.ensembles()?;
        api.delete(name, &DeleteParams::default()).await?;
        wait_for(
            &self.kube,
            &format!("ensemble {name} deleted"),
            Duration::from_secs(60),
            || async {
                match api.get_opt(name).await? {
                    None => Ok(()),
                    Some(ce) => bail!("still there, finalizers {:?}", ce.metadata.finalizers),
                }
            },
        )
        .await
    }

    /// A ZooKeeper session on `ip`:2181 as the operator-made super identity.
    async fn session(&self, ensemble: &str, ip: &str) -> Result<zk::Client> {
        node::super_session(&self.kube, ensemble, ip).await
    }
}

/// The member ids an ensemble's status lists, sorted.
fn member_ids(status: &Value) -> Vec<i64> {
    let mut ids: Vec<i64> = status["members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_i64)
        .collect();
    ids.sort();
    ids
}

fn small_ensemble(replicas: i32) -> Value {
    json!({
        "replicas": replicas,
        "storage": {"size": "1Gi"},
        "plainClientPort": true,
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
    })
}

/// (1) The chart's operator runs as its own pod with the chart's ServiceAccount token, and a
/// CoordinationEnsemble of 3 becomes Available with a leader.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a real node (root, the image): tests/scripts/test.sh runs it"]
async fn operator_pod_brings_up_an_ensemble_of_three() -> Result<()> {
    let s = Setup::new("pods-create").await?;
    let operator_ready = s.started.elapsed();

    // The operator's pods are the chart's Deployment's: on the node, from the image, as the
    // chart's ServiceAccount, every container running as the image's non-root user.
    let operators = Api::<Pod>::namespaced(s.kube.client.clone(), RELEASE_NAMESPACE)
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}")))
        .await?
        .items;
    ensure!(!operators.is_empty(), "no operator pods");
    for pod in &operators {
        let spec = pod.spec.clone().unwrap_or_default();
        ensure!(
            spec.node_name.as_deref() == Some(node::NODE),
            "operator pod on {:?}",
            spec.node_name
        );
        ensure!(
            spec.service_account_name.as_deref() == Some(RELEASE),
            "operator's ServiceAccount {:?}",
            spec.service_account_name
        );
        node::runs_from_the_image(pod, "operator")?;
    }

    s.apply_ensemble("demo", small_ensemble(3)).await?;
    let status = s.available("demo", 3, Duration::from_secs(240)).await?;
    let members = member_ids(&status);
    ensure!(members == [1, 2, 3], "members {members:?}");
    let pods = s.members("demo").await?;
    ensure!(
        pods.len() == 3 && pods.values().all(|(_, _, ready, ..)| *ready),
        "member pods {pods:?}"
    );

    // The members, likewise, found each other by their DNS names (the ConfigMap's members).
    for pod in s
        .pods()
        .list(&ListParams::default().labels("app.kubernetes.io/instance=demo"))
        .await?
        .items
    {
        node::runs_from_the_image(&pod, "ensemble")?;
    }
    let config = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
        s.kube.client.clone(),
        &s.kube.namespace,
    )
    .get("demo-config")
    .await?;
    let peers = format!("demo-0.demo-peers.{}.svc", s.kube.namespace);
    ensure!(
        config
            .data
            .iter()
            .flatten()
            .any(|(_, v)| v.contains(&peers)),
        "no member named {peers} in demo-config: {:?}",
        config.data
    );

    // Everything the operator did, it did as its ServiceAccount (the token the kubelet
    // mounted), and nothing it asked for here was refused.
    let user = format!("system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}");
    let requests = s.kube.requests_of(&user)?;
    ensure!(
        requests.iter().any(|(r, _)| r.contains("statefulsets")),
        "no StatefulSet request by {user} in the audit log"
    );
    // The operator is shared: in another test's namespace that is being deleted, the API server
    // refuses (403) what the operator still writes there; this test's namespace is alive.
    let own = format!("/namespaces/{}/", s.kube.namespace);
    let refused: Vec<String> = s
        .kube
        .forbidden_for(&user)?
        .into_iter()
        .filter(|r| {
            !r.contains("/namespaces/")
                || r.contains(&own)
                || r.contains(&format!("/namespaces/{RELEASE_NAMESPACE}/"))
        })
        .collect();
    ensure!(refused.is_empty(), "refused to {user}: {refused:?}");

    s.delete_ensemble("demo").await?;
    eprintln!(
        "timings: operator ready {operator_ready:?}, ensemble available and deleted {:?}",
        s.started.elapsed() - operator_ready
    );
    Ok(())
}

/// (2) A member's process is killed: the kubelet restarts it (restartCount), the ensemble is
/// Available again, and what was written before is still there, on the killed member too.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a real node (root, the image): tests/scripts/test.sh runs it"]
async fn killed_member_is_restarted_and_keeps_its_data() -> Result<()> {
    let s = Setup::new("pods-kill").await?;
    s.apply_ensemble("demo", small_ensemble(3)).await?;
    let status = s.available("demo", 3, Duration::from_secs(240)).await?;
    let leader = status["leader"].as_i64().context("leader")?;
    let victim = format!("demo-{}", leader - 1);
    let pods = s.members("demo").await?;
    let (uid, ip, _, restarts, _) = pods.get(&victim).cloned().context("leader's pod")?;

    let before = s.session("demo", &ip).await?;
    before
        .create(
            "/kubelet-kill",
            b"written before the kill",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await?;
    drop(before);

    let id = node::container_id(&s.kube, &victim, "ensemble").await?;
    let pid = node::container_pids(&id)?[0];
    // SIGKILL: no clean shutdown.
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()?;
    ensure!(killed.success(), "kill -KILL {pid}");
    wait_for(
        &s.kube,
        &format!("{victim} restarted by the kubelet"),
        Duration::from_secs(60),
        || async {
            let pods = s.members("demo").await?;
            let (now_uid, _, ready, now_restarts, _) =
                pods.get(&victim).cloned().context("pod gone")?;
            ensure!(
                now_uid == uid,
                "the pod was replaced, not its container restarted"
            );
            ensure!(now_restarts > restarts, "restartCount {now_restarts}");
            ensure!(ready, "not ready");
            Ok(())
        },
    )
    .await?;
    s.available("demo", 3, Duration::from_secs(120)).await?;

    let after = s.session("demo", &ip).await?;
    // The restarted member serves the write of before (a sync first: it may still catch up).
    after.sync("/").await?;
    let (data, _) = after.get_data("/kubelet-kill").await?;
    ensure!(
        data == b"written before the kill",
        "{victim} has {:?}",
        String::from_utf8_lossy(&data)
    );
    s.delete_ensemble("demo").await?;
    eprintln!("timing: member kill test {:?}", s.started.elapsed());
    Ok(())
}

/// (4) 3 → 5 → 3: the operator adds two members (joining, then voters) and removes them again.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a real node (root, the image): tests/scripts/test.sh runs it"]
async fn scale_three_five_three() -> Result<()> {
    let s = Setup::new("pods-scale").await?;
    s.apply_ensemble("demo", small_ensemble(3)).await?;
    s.available("demo", 3, Duration::from_secs(240)).await?;
    s.apply_ensemble("demo", small_ensemble(5)).await?;
    let status = s.available("demo", 5, Duration::from_secs(300)).await?;
    let members = member_ids(&status);
    ensure!(members == [1, 2, 3, 4, 5], "members at 5: {members:?}");
    s.apply_ensemble("demo", small_ensemble(3)).await?;
    let status = s.available("demo", 3, Duration::from_secs(300)).await?;
    let members = member_ids(&status);
    ensure!(members == [1, 2, 3], "members back at 3: {members:?}");
    wait_for(
        &s.kube,
        "demo-3 and demo-4 gone",
        Duration::from_secs(60),
        || async {
            let pods = s.members("demo").await?;
            ensure!(
                pods.len() == 3,
                "pods {:?}",
                pods.keys().collect::<Vec<_>>()
            );
            Ok(())
        },
    )
    .await?;
    s.delete_ensemble("demo").await?;
    eprintln!("timing: scale test {:?}", s.started.elapsed());
    Ok(())
}

/// (5) A spec change that changes the members' pod template rolls them one at a time: every
/// member pod is replaced, and at no observed moment are two members' pods unready or gone at
/// once (deleted, being deleted, not yet made again, or not yet Ready): the operator deletes the
/// next only once the ensemble reports the previous one back and its new pod is Ready, as the
/// chart's PodDisruptionBudget (at most one unavailable) promises.
///
/// Readiness is the kubelet's: the chart's probe, and it takes failures in a row to mark a
/// Ready pod unready, so a leader election's moment without a leader does not show. Whether a
/// new pod's process runs comes from the kubelet's status reports, which lag the process, so it
/// is only reported.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a real node (root, the image): tests/scripts/test.sh runs it"]
async fn rolling_upgrade_replaces_one_member_at_a_time() -> Result<()> {
    let s = Setup::new("pods-roll").await?;
    s.apply_ensemble("demo", small_ensemble(3)).await?;
    s.available("demo", 3, Duration::from_secs(240)).await?;
    let before = s.members("demo").await?;

    let mut spec = small_ensemble(3);
    spec["sessionTimeout"] = json!({"min": "4s", "max": "30s"});
    s.apply_ensemble("demo", spec).await?;
    let most_gone = std::cell::Cell::new(0usize);
    let most_starting = std::cell::Cell::new(0usize);
    // The most member pods seen unready (or gone) at once, and which.
    let most_unready = std::cell::RefCell::new((0usize, String::new()));
    let order = std::cell::RefCell::new(Vec::<String>::new());
    wait_for(
        &s.kube,
        "every member replaced",
        Duration::from_secs(300),
        || async {
            let now = s.members("demo").await?;
            let mut gone = Vec::new();
            let mut starting = 0;
            let mut replaced = 0;
            for (name, (uid, ..)) in &before {
                match now.get(name) {
                    None => gone.push(name.clone()),
                    Some((new_uid, .., running)) if new_uid != uid => {
                        replaced += 1;
                        if !running {
                            starting += 1;
                        }
                        if !order.borrow().contains(name) {
                            order.borrow_mut().push(name.clone());
                        }
                    }
                    Some(_) => {}
                }
            }
            // Gone pods count: the members whose pod is not there Ready.
            let unready: Vec<&String> = before
                .keys()
                .filter(|name| !now.get(*name).is_some_and(|(_, _, ready, ..)| *ready))
                .collect();
            if unready.len() > most_unready.borrow().0 {
                eprintln!("unready or gone at once: {unready:?}");
                *most_unready.borrow_mut() = (unready.len(), format!("{unready:?} of {now:?}"));
            }
            let unready = unready.len();
            most_starting.set(most_starting.get().max(starting + gone.len()));
            if gone.len() > most_gone.get() {
                most_gone.set(gone.len());
                eprintln!("gone at once: {gone:?}");
            }
            ensure!(
                replaced == 3 && gone.is_empty() && starting == 0 && unready == 0,
                "{replaced} replaced, gone {gone:?}, {starting} starting, {unready} unready"
            );
            Ok(())
        },
    )
    .await?;
    let most = most_gone.get();
    ensure!(
        most <= 1,
        "{most} members' pods were gone at once during the roll"
    );
    let (unready, which) = most_unready.borrow().clone();
    ensure!(
        unready <= 1,
        "{unready} member pods were unready or gone at once during the roll: {which}"
    );
    eprintln!(
        "roll order {:?}; at most {} members gone or starting, {unready} pods unready at once",
        order.borrow(),
        most_starting.get(),
    );
    s.available("demo", 3, Duration::from_secs(120)).await?;
    s.delete_ensemble("demo").await?;
    eprintln!("timing: rolling upgrade test {:?}", s.started.elapsed());
    Ok(())
}

/// A one-member ensemble (what a restarted member serves is then what its own disk held) with
/// `memory` as its limit, Available, holding `/before-restart`; its pod's (IP, restartCount).
async fn one_member_with_a_write(s: &Setup, memory: &str) -> Result<(String, i32)> {
    let mut spec = small_ensemble(1);
    spec["resources"]["limits"] = json!({"memory": memory});
    s.apply_ensemble("demo", spec).await?;
    s.available("demo", 1, Duration::from_secs(180)).await?;
    let pods = s.members("demo").await?;
    let (_, ip, _, restarts, _) = pods.get("demo-0").cloned().context("demo-0")?;
    s.session("demo", &ip)
        .await?
        .create(
            "/before-restart",
            b"acknowledged before the restart",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await?;
    Ok((ip, restarts))
}

/// Waits until demo-0's ensemble container was restarted (same pod, restartCount above
/// `restarts`, Ready again), and returns how its last run ended (`terminated.reason`); then
/// checks the write of [`one_member_with_a_write`] is served.
async fn restarted_with_its_data(s: &Setup, ip: &str, restarts: i32) -> Result<String> {
    let pods = s.pods();
    let reason = wait_for(
        &s.kube,
        "demo-0's member restarted in place and Ready",
        Duration::from_secs(180),
        || async {
            let pod = pods.get("demo-0").await?;
            let status = pod.status.unwrap_or_default();
            let ready = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let member = status
                .container_statuses
                .iter()
                .flatten()
                .find(|c| c.name == "ensemble")
                .cloned()
                .context("no ensemble container status")?;
            ensure!(
                member.restart_count > restarts && ready,
                "restartCount {}, Ready {ready}",
                member.restart_count
            );
            Ok(member
                .last_state
                .and_then(|s| s.terminated)
                .and_then(|t| t.reason)
                .unwrap_or_default())
        },
    )
    .await?;
    let session = s.session("demo", ip).await?;
    let (data, _) = session.get_data("/before-restart").await?;
    ensure!(
        data == b"acknowledged before the restart",
        "after the restart /before-restart holds {:?}",
        String::from_utf8_lossy(&data)
    );
    Ok(reason)
}

/// (6) A member that outgrows its memory limit is killed by the kernel (the container's
/// cgroup is at its limit), restarted by the kubelet, and serves what it acknowledged before.
/// The memory is a `tail /dev/zero` the test puts into the member's container cgroup, with the
/// member itself made the OOM killer's first choice (`oom_score_adj` 1000), so the kill is the
/// member's, as when its own tree outgrows the limit, without a crash loop afterwards.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a real node (root, the image): tests/scripts/test.sh runs it"]
async fn member_killed_at_its_memory_limit_restarts_with_its_data() -> Result<()> {
    let s = Setup::new("pods-oom").await?;
    let (ip, restarts) = one_member_with_a_write(&s, "160Mi").await?;
    let id = node::container_id(&s.kube, "demo-0", "ensemble").await?;
    let pid = node::container_pids(&id)?[0];
    std::fs::write(format!("/proc/{pid}/oom_score_adj"), "1000")?;
    let memory_cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once(':')?;
            let (controllers, path) = rest.split_once(':')?;
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| format!("/sys/fs/cgroup/memory{path}"))
        })
        .context("the member has no memory cgroup (cgroup v1 expected)")?;
    let mut hog = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {memory_cgroup}/cgroup.procs && exec tail /dev/zero"
        ))
        .spawn()?;
    let outcome = restarted_with_its_data(&s, &ip, restarts).await;
    // The hog is the next in line once the member is gone; if it is not dead yet, end it.
    let _ = hog.kill();
    let _ = hog.wait();
    let reason = outcome?;
    ensure!(
        reason == "OOMKilled",
        "the member's last run ended {reason:?}"
    );
    s.delete_ensemble("demo").await?;
    eprintln!("timing: memory limit test {:?}", s.started.elapsed());
    Ok(())
}

/// (7) A member that stops answering its liveness probe (stopped with SIGSTOP: alive, but
/// serving nothing) is killed and restarted by the kubelet, and serves its data again.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a real node (root, the image): tests/scripts/test.sh runs it"]
async fn member_failing_its_liveness_probe_is_restarted() -> Result<()> {
    let s = Setup::new("pods-liveness").await?;
    let (ip, restarts) = one_member_with_a_write(&s, "256Mi").await?;
    let id = node::container_id(&s.kube, "demo-0", "ensemble").await?;
    let pid = node::container_pids(&id)?[0];
    let stopped = std::process::Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status()?;
    ensure!(stopped.success(), "kill -STOP {pid}");
    restarted_with_its_data(&s, &ip, restarts).await?;
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(
        s.kube.client.clone(),
        &s.kube.namespace,
    )
    .list(&ListParams::default().fields("involvedObject.name=demo-0"))
    .await?
    .items;
    ensure!(
        events.iter().any(|e| e.reason.as_deref() == Some("Killing")
            && e.message.as_deref().unwrap_or("").contains("liveness")),
        "no Killing event for a failed liveness probe: {:?}",
        events
            .iter()
            .map(|e| (e.reason.clone(), e.message.clone()))
            .collect::<Vec<_>>()
    );
    s.delete_ensemble("demo").await?;
    eprintln!("timing: liveness test {:?}", s.started.elapsed());
    Ok(())
}
