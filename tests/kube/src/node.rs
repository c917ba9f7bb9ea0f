//! The real node (`tests/scripts/control-plane.sh up DIR --node`): a control plane with one
//! kubelet, containerd and runc, CNI, kube-proxy, CoreDNS, kube-router's NetworkPolicy firewall
//! and local volumes, the project's image imported under the chart's default name. Pods run
//! from images as containers, with their security contexts, limits and probes.
//!
//! The tests that use it are `#[ignore]`d: they need root, the image (`tests/scripts/image.sh
//! build target/image`) and a machine without another node. `tests/scripts/test.sh` starts the
//! node, exports its admin kubeconfig as `BATON_NODE_KUBECONFIG` and runs them with
//! `--run-ignored only`. Without the variable the first test brings one up in `target/kube-node`
//! and leaves it running (`tests/scripts/control-plane.sh down target/kube-node` stops it).
//!
//! Unlike the node agent's tests, these share one operator, as a real cluster does: the chart
//! installed once per node the way the docs' local cluster installs it
//! (`docs/src/getting-started/local-cluster.md`) ([`RELEASE`] in
//! [`RELEASE_NAMESPACE`]) with its PodMonitors on ([`CHART_VALUES`]), reconciling every test's
//! namespace at once.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};

use crate::{ControlPlane, Kube, helm, repo_root, target_dir, up_in_target};

/// The node's name (`control-plane.sh`).
pub const NODE: &str = "baton-test-node";
/// The chart's default image (`image.repository` and the workspace's version, which is the
/// chart's appVersion), the name `up --node` imports the project's image under.
pub const IMAGE: &str = concat!("ghcr.io/baton-dev/baton:", env!("CARGO_PKG_VERSION"));
/// The node's busybox image (`control-plane.sh up --node` imports it; nothing is pulled).
pub const BUSYBOX: &str = "localhost/baton-test/busybox:1";
/// The image's user (the Dockerfile's `USER`).
const IMAGE_UID: u32 = 65532;

/// The chart's release, as the docs name it.
pub const RELEASE: &str = "baton";
/// Its namespace, as the docs name it.
pub const RELEASE_NAMESPACE: &str = "baton-system";

/// The node's control plane: `BATON_NODE_KUBECONFIG`'s, else one started in `target/kube-node`.
pub fn plane() -> Result<&'static ControlPlane> {
    static PLANE: OnceLock<ControlPlane> = OnceLock::new();
    if let Some(plane) = PLANE.get() {
        return Ok(plane);
    }
    let kubeconfig = match std::env::var_os("BATON_NODE_KUBECONFIG") {
        Some(path) => PathBuf::from(path),
        None => up_in_target("kube-node", &["--node"])?,
    };
    let plane = ControlPlane::at(kubeconfig, "BATON_NODE_KUBECONFIG")?;
    Ok(PLANE.get_or_init(|| plane))
}

impl Kube {
    /// A test's view of the real node's cluster, with a namespace of its own.
    pub async fn on_node(test: &str) -> Result<Kube> {
        Kube::in_plane(test, plane()?).await
    }
}

/// The values every test installs the chart with, on top of the quick start's: the PodMonitors
/// (with a stand-in for the Prometheus Operator's CRD), so the members' NetworkPolicy opens the
/// admin port to the scraper the chart names by default (pods labelled
/// `app.kubernetes.io/name=prometheus` in `monitoring`). The same for all, so no test's install
/// rolls the operator under another's feet.
pub const CHART_VALUES: &[&str] = &["monitoring.podMonitors.enabled=true"];

/// Installs `charts/baton` as the docs' local cluster does, `helm install baton charts/baton
/// -n baton-system --create-namespace`, with [`CHART_VALUES`], and waits until the operator's
/// Deployment is available; then, with `set` (`KEY=VALUE` each), upgrades it as the injection
/// task does (`docs/src/tasks/inject.md`: `helm upgrade --reuse-values --set ...`). Tests call it first: the first installs, the
/// others find it (one at a time: a file lock). It is installed again only when the chart
/// changed since (a hash in the control plane's directory), never under a test that runs: a
/// roll of the operator would be part of no test. The CRDs are applied first, since Helm never
/// upgrades `crds/` of a release it installed before.
pub async fn chart(kube: &Kube, set: &[&str]) -> Result<()> {
    let path = target_dir().join("kube-node-chart.lock");
    let file = std::fs::File::create(&path).with_context(|| format!("create {path:?}"))?;
    let _lock = tokio::task::spawn_blocking(move || file.lock().map(|()| file)).await??;
    let chart = repo_root().join("charts/baton");
    let chart_arg = chart.to_str().context("chart path")?.to_string();
    let kubeconfig = kube.plane.kubeconfig.to_str().context("kubeconfig path")?;
    let marker = kube.plane.dir.join("kube-node-chart.hash");
    let hash = chart_hash(&chart)?;
    let t = Instant::now();
    let installed = std::fs::read_to_string(&marker).is_ok_and(|h| h == hash)
        && helm::run([
            "status",
            RELEASE,
            "-n",
            RELEASE_NAMESPACE,
            "--kubeconfig",
            kubeconfig,
        ])
        .is_ok();
    if !installed {
        let crds = chart.join("crds");
        for entry in std::fs::read_dir(&crds).with_context(|| format!("read {crds:?}"))? {
            let path = entry?.path();
            kube.apply_yaml(&std::fs::read_to_string(&path)?, false)
                .await
                .with_context(|| format!("apply {}", path.display()))?;
        }
        kube.apply(pod_monitor_crd(), false).await?;
        let mut args: Vec<&str> = vec![
            "upgrade",
            "--install",
            RELEASE,
            &chart_arg,
            "--namespace",
            RELEASE_NAMESPACE,
            "--create-namespace",
            "--wait",
            "--timeout",
            "5m",
            "--kubeconfig",
            kubeconfig,
        ];
        for value in CHART_VALUES {
            args.extend(["--set", value]);
        }
        helm::run(&args)?;
        std::fs::write(&marker, &hash)?;
        eprintln!(
            "chart {RELEASE} installed in {RELEASE_NAMESPACE} in {:?}",
            t.elapsed()
        );
    }
    if !set.is_empty() {
        let mut args: Vec<&str> = vec![
            "upgrade",
            RELEASE,
            &chart_arg,
            "--namespace",
            RELEASE_NAMESPACE,
            "--reuse-values",
            "--wait",
            "--kubeconfig",
            kubeconfig,
        ];
        for value in set {
            args.extend(["--set", value]);
        }
        helm::run(&args)?;
    }
    Ok(())
}

/// A digest of every file of the chart and of [`CHART_VALUES`].
fn chart_hash(chart: &std::path::Path) -> Result<String> {
    use std::hash::{Hash, Hasher};
    fn files(dir: &std::path::Path, out: &mut Vec<PathBuf>) -> Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                files(&path, out)?;
            } else {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut paths = Vec::new();
    files(chart, &mut paths)?;
    paths.sort();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for path in paths {
        path.hash(&mut hasher);
        std::fs::read(&path)?.hash(&mut hasher);
    }
    CHART_VALUES.hash(&mut hasher);
    Ok(format!("{:016x}", hasher.finish()))
}

/// The Prometheus Operator's PodMonitor kind, schemaless: what the chart's PodMonitors need to
/// be stored (no Prometheus reads them here).
fn pod_monitor_crd() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "podmonitors.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"kind": "PodMonitor", "listKind": "PodMonitorList",
                      "plural": "podmonitors", "singular": "podmonitor"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object",
                              "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    })
}

/// [`crate::poll`], the failure carrying what the test's namespace shows ([`describe`]).
pub async fn wait_for<T, F, Fut>(kube: &Kube, what: &str, timeout: Duration, check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    crate::poll(what, timeout, check, || describe(kube, &kube.namespace)).await
}

/// A ZooKeeper session on `ip`:2181 as the ensemble's operator-made super identity (its
/// Secret `ENSEMBLE-super` in the test's namespace), for tests that write and read back.
pub async fn super_session(
    kube: &Kube,
    ensemble: &str,
    ip: &str,
) -> Result<zookeeper_client::Client> {
    let secret =
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(kube.client.clone(), &kube.namespace)
            .get(&format!("{ensemble}-super"))
            .await?;
    let data = secret.data.unwrap_or_default();
    let field = |k: &str| {
        data.get(k)
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .with_context(|| format!("{ensemble}-super has no {k}"))
    };
    let credentials = format!("{}:{}", field("username")?, field("password")?);
    let connector = zookeeper_client::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .with_auth("digest", credentials.as_bytes());
    let addr = format!("{ip}:2181");
    tokio::time::timeout(Duration::from_secs(20), connector.connect(&addr))
        .await
        .map_err(|_| anyhow::anyhow!("no session from {addr}"))?
        .with_context(|| format!("session on {addr}"))
}

/// What `kubectl get pods` and `kubectl get events` would show of `namespace`, for failure
/// messages: each pod's phase and containers (state, last termination, restarts), then the
/// last events.
pub async fn describe(kube: &Kube, namespace: &str) -> String {
    let mut out = format!("--- pods of {namespace} ---\n");
    let pods = Api::<Pod>::namespaced(kube.client.clone(), namespace);
    match pods.list(&ListParams::default()).await {
        Err(e) => _ = writeln!(out, "(list: {e})"),
        Ok(list) => {
            for pod in list.items {
                let status = pod.status.unwrap_or_default();
                let _ = writeln!(
                    out,
                    "{} {} {}",
                    pod.metadata.name.unwrap_or_default(),
                    status.phase.unwrap_or_default(),
                    status.pod_ip.unwrap_or_default()
                );
                let containers = status.init_container_statuses.into_iter().flatten();
                for c in containers.chain(status.container_statuses.into_iter().flatten()) {
                    let _ = writeln!(
                        out,
                        "  {} ready={} restarts={} state={} last={}",
                        c.name,
                        c.ready,
                        c.restart_count,
                        state_text(c.state.as_ref()),
                        state_text(c.last_state.as_ref())
                    );
                }
            }
        }
    }
    let _ = writeln!(out, "--- events of {namespace} ---");
    let events = Api::<Event>::namespaced(kube.client.clone(), namespace);
    if let Ok(list) = events.list(&ListParams::default()).await {
        let mut items = list.items;
        items.sort_by_key(|e| e.last_timestamp.clone().map(|t| t.0));
        for e in items.iter().rev().take(40).rev() {
            let _ = writeln!(
                out,
                "{} {} {}: {}",
                e.involved_object.name.clone().unwrap_or_default(),
                e.type_.clone().unwrap_or_default(),
                e.reason.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default()
            );
        }
    }
    out
}

fn state_text(state: Option<&k8s_openapi::api::core::v1::ContainerState>) -> String {
    let Some(state) = state else {
        return "-".into();
    };
    if state.running.is_some() {
        "running".into()
    } else if let Some(w) = &state.waiting {
        format!(
            "waiting({}: {})",
            w.reason.clone().unwrap_or_default(),
            w.message.clone().unwrap_or_default()
        )
    } else if let Some(t) = &state.terminated {
        format!(
            "terminated({} exit {})",
            t.reason.clone().unwrap_or_default(),
            t.exit_code
        )
    } else {
        "-".into()
    }
}

/// The id containerd gave `pod`'s `container` now (`containerd://ID` in its status).
pub async fn container_id(kube: &Kube, pod: &str, container: &str) -> Result<String> {
    let pod = Api::<Pod>::namespaced(kube.client.clone(), &kube.namespace)
        .get(pod)
        .await?;
    let statuses = pod
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default();
    let status = statuses
        .iter()
        .find(|c| c.name == container)
        .with_context(|| format!("no status of container {container}"))?;
    let id = status
        .container_id
        .as_deref()
        .with_context(|| format!("container {container} has no id yet"))?;
    Ok(id.rsplit("://").next().unwrap_or(id).to_string())
}

/// The host's pids of the processes in container `id`, from each process's cgroup path (the
/// kubelet's cgroupfs driver names the container's cgroup after its id), oldest first: the
/// container's first process leads.
pub fn container_pids(id: &str) -> Result<Vec<i32>> {
    let mut pids = BTreeMap::new();
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cgroup) = std::fs::read_to_string(entry.path().join("cgroup")) else {
            continue; // gone meanwhile
        };
        if cgroup.lines().any(|l| l.ends_with(id)) {
            let started = std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|s| {
                    // Field 22, after the command in parentheses (which may hold spaces).
                    let rest = s.rsplit_once(')')?.1;
                    rest.split_whitespace().nth(19)?.parse::<u64>().ok()
                })
                .unwrap_or(u64::MAX);
            pids.insert((started, pid), ());
        }
    }
    if pids.is_empty() {
        bail!("no process of container {id} on this host");
    }
    Ok(pids.into_keys().map(|(_, pid)| pid).collect())
}

/// Fails unless `pod`'s `container` runs (Ready or not) from [`IMAGE`] as imported, as the
/// image's non-root user, with a read-only root filesystem: checked on the host's processes,
/// not only in the pod's spec.
pub fn runs_from_the_image(pod: &Pod, container: &str) -> Result<()> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    // Native sidecars (init containers that keep running) count too.
    let statuses = status.init_container_statuses.into_iter().flatten();
    let status = statuses
        .chain(status.container_statuses.into_iter().flatten())
        .find(|c| c.name == container)
        .with_context(|| format!("{name} has no container {container}"))?;
    ensure!(
        status.image == IMAGE && !status.image_id.is_empty(),
        "{name}/{container} runs image {} ({}), not {IMAGE}",
        status.image,
        status.image_id
    );
    let id = status
        .container_id
        .as_deref()
        .and_then(|id| id.rsplit("://").next())
        .with_context(|| format!("{name}/{container} has no container id"))?;
    for pid in container_pids(id)? {
        let proc_status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let uid = proc_status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|u| u.parse::<u32>().ok())
            .with_context(|| format!("no Uid in /proc/{pid}/status"))?;
        ensure!(
            uid == IMAGE_UID,
            "{name}/{container}: pid {pid} runs as uid {uid}"
        );
    }
    // Root on the host, writing through the process's own view of its root filesystem.
    let pid = container_pids(id)?[0];
    let probe = format!("/proc/{pid}/root/baton-read-only-check");
    match std::fs::write(&probe, b"x") {
        Err(e) if e.raw_os_error() == Some(30) => Ok(()), // EROFS
        Err(e) => bail!("{name}/{container}: writing {probe}: {e}, not EROFS"),
        Ok(()) => {
            let _ = std::fs::remove_file(&probe);
            bail!("{name}/{container}: its root filesystem is writable")
        }
    }
}

/// Whether a pod `name` with `labels` in `namespace` can open a TCP connection to each of
/// `targets` (`HOST:PORT`; host names through the cluster's DNS), trying each up to `tries` times
/// a second or so apart (a policy that admits a new pod takes effect once the enforcer has seen
/// it; one that refuses it does from the start): `HOST:PORT` → reached. The pod runs busybox's
/// `nc` and is deleted with the namespace.
pub async fn reach(
    kube: &Kube,
    namespace: &str,
    name: &str,
    labels: serde_json::Value,
    targets: &[String],
    tries: u32,
) -> Result<BTreeMap<String, bool>> {
    let mut script = String::new();
    for target in targets {
        let (host, port) = target
            .rsplit_once(':')
            .with_context(|| format!("{target} is not HOST:PORT"))?;
        let _ = write!(
            script,
            "(r=closed; i=0; while [ $i -lt {tries} ]; do \
               if nc -w 2 {host} {port} </dev/null >/dev/null 2>&1; then r=open; break; fi; \
               i=$((i+1)); sleep 1; done; echo \"{target} $r\") & "
        );
    }
    script.push_str("wait");
    let pods = Api::<Pod>::namespaced(kube.client.clone(), namespace);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "nc", "image": BUSYBOX, "imagePullPolicy": "Never",
                            "command": ["sh", "-c", script]}],
        },
    }))?;
    pods.create(&Default::default(), &pod)
        .await
        .with_context(|| format!("create pod {namespace}/{name}"))?;
    let limit = Duration::from_secs(60 + 4 * u64::from(tries));
    wait_for(
        kube,
        &format!("pod {namespace}/{name} done"),
        limit,
        || async {
            let phase = pods
                .get(name)
                .await?
                .status
                .and_then(|s| s.phase)
                .unwrap_or_default();
            ensure!(phase == "Succeeded", "phase {phase:?}");
            Ok(())
        },
    )
    .await?;
    let log = pods.logs(name, &Default::default()).await?;
    let mut reached = BTreeMap::new();
    for line in log.lines() {
        if let Some((target, result)) = line.split_once(' ') {
            reached.insert(target.to_string(), result == "open");
        }
    }
    ensure!(
        reached.len() == targets.len(),
        "{namespace}/{name} printed {log:?}"
    );
    Ok(reached)
}
