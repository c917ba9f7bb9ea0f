//! The node agent (`tests/node-agent`, a stand-in kubelet) for one test: started on the test's
//! namespace, stopped (every pod's processes killed, its Node removed) when dropped.
//!
//! The binary is `$BATON_NODE_AGENT`, else `baton-node-agent` in the build directory (next to
//! `baton-ensemble`, `baton-sidecar` and `baton-operator`, which the agent runs for Baton
//! images). `cargo build --workspace --bins` (tests/scripts/test.sh) builds them all.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use serde_json::json;

use crate::{Kube, TEST_LABEL, repo_root, unique};

/// How long the agent may take to register its Node.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The build directory holding the Baton binaries and the agent.
pub fn bin_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    target.join("debug")
}

/// Where the Baton programs the pods run come from: `$BATON_AGENT_BIN_DIR` (e.g. a build with
/// a deliberate bug, to see a test fail), else [`bin_dir`].
pub fn programs_dir() -> PathBuf {
    std::env::var_os("BATON_AGENT_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(bin_dir)
}

/// A running agent.
pub struct NodeAgent {
    child: Child,
    /// Its Node's name.
    pub node: String,
    /// Its work directory: `agent.log`, `logs/POD_CONTAINER.log`, `pids/POD_CONTAINER`, `pvc/`.
    pub dir: tempfile::TempDir,
    /// How long it took to print `ready`.
    pub started_in: Duration,
}

impl NodeAgent {
    /// Starts an agent for `kube`'s namespace; returns once its Node is registered.
    pub fn start(kube: &Kube) -> Result<NodeAgent> {
        Self::start_for(kube, &[])
    }

    /// Starts an agent for `kube`'s namespace and the `others` (pods of all of them share the
    /// agent's network).
    pub fn start_for(kube: &Kube, others: &[&str]) -> Result<NodeAgent> {
        let mut namespaces = vec![kube.namespace.as_str()];
        namespaces.extend_from_slice(others);
        let bin = match std::env::var_os("BATON_NODE_AGENT") {
            Some(path) => PathBuf::from(path),
            None => bin_dir().join("baton-node-agent"),
        };
        for program in [bin.clone(), programs_dir().join("baton-ensemble")] {
            if !program.is_file() {
                bail!(
                    "{} is missing: build it with `cargo build --workspace --bins` \
                     (or -p baton-node-agent -p baton-ensemble -p baton-sidecar -p baton-operator)",
                    program.display()
                );
            }
        }
        if Command::new("iptables").arg("-V").output().is_err() {
            bail!("iptables is missing: the node agent needs it (apt-get install iptables)");
        }
        let dir = tempfile::Builder::new().prefix("node-agent-").tempdir()?;
        let node = unique("agent");
        let log = std::fs::File::create(dir.path().join("agent.log"))?;
        let t0 = Instant::now();
        let mut command = Command::new(&bin);
        command
            .arg("--kubeconfig")
            .arg(&kube.plane.kubeconfig)
            .args(["--namespace", &namespaces.join(","), "--node", &node])
            .arg("--bin-dir")
            .arg(programs_dir())
            .arg("--work-dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        // SAFETY: only prctl between fork and exec. A test process killed outright (no drop)
        // still stops its agent, which then stops every pod it runs: SIGTERM when this
        // (the test's) thread ends.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                prctl(PR_SET_PDEATHSIG, 15);
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("start {}", bin.display()))?;
        let stdout = child.stdout.take().context("agent stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut agent = NodeAgent {
            child,
            node,
            dir,
            started_in: Duration::ZERO,
        };
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(line) if line.trim() == "ready" => {}
            _ => bail!(
                "the node agent did not get ready within {START_TIMEOUT:?}:\n{}",
                agent.logs()
            ),
        }
        agent.started_in = t0.elapsed();
        Ok(agent)
    }

    /// The pid of `pod`'s `container` process as the agent runs it now.
    pub fn pid(&self, pod: &str, container: &str) -> Result<i32> {
        let path = self
            .dir
            .path()
            .join("pids")
            .join(format!("{pod}_{container}"));
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("{} (is {pod}/{container} running?)", path.display()))?;
        text.trim().parse().context("pid file")
    }

    /// The output of `pod`'s `container` (every run of it).
    pub fn container_log(&self, pod: &str, container: &str) -> String {
        let path = self
            .dir
            .path()
            .join("logs")
            .join(format!("{pod}_{container}.log"));
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// The agent's log and the last lines of every container's output, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = format!(
            "--- node agent {} ---\n{}",
            self.node,
            tail(&self.dir.path().join("agent.log"), 60)
        );
        if let Ok(entries) = std::fs::read_dir(self.dir.path().join("logs")) {
            let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
            paths.sort();
            for path in paths {
                let name = path
                    .file_stem()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                out += &format!("--- container {name} ---\n{}", tail(&path, 25));
            }
        }
        out
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let mut out = all[all.len().saturating_sub(lines)..].join("\n");
    out.push('\n');
    out
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        // SIGTERM: the agent stops every pod and removes its Node, bridge and namespaces.
        // SAFETY: a signal to the child this struct started.
        unsafe { libc_kill(self.child.id() as i32, 15) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const PR_SET_PDEATHSIG: i32 = 1;

unsafe extern "C" {
    fn prctl(option: i32, ...) -> i32;
    #[link_name = "kill"]
    fn libc_kill(pid: i32, signal: i32) -> i32;
}

/// [`crate::poll`], the failure carrying the agent's and containers' logs.
pub async fn wait_for<T, F, Fut>(
    agent: &NodeAgent,
    what: &str,
    timeout: Duration,
    check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    crate::poll(what, timeout, check, || async { agent.logs() }).await
}

/// Held while a test has an operator installed: the operator watches every namespace, so two
/// at once would both reconcile each other's ensembles (and two injection webhooks would
/// answer for every enabled namespace). A file lock, since nextest runs each test in a
/// process of its own.
pub struct OperatorLock {
    _file: std::fs::File,
}

impl OperatorLock {
    pub async fn acquire() -> Result<OperatorLock> {
        let target = bin_dir().join("..");
        let path = target.join("kube-operator.lock");
        let file =
            std::fs::File::create(&path).with_context(|| format!("create {}", path.display()))?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        // Blocking flock off the runtime: it may wait for another test's whole run.
        tokio::task::spawn_blocking(move || {
            // SAFETY: flock on a descriptor `file` keeps open.
            if unsafe { flock(fd, 2) } != 0 {
                bail!("flock: {}", std::io::Error::last_os_error());
            }
            Ok(())
        })
        .await??;
        Ok(OperatorLock { _file: file })
    }
}

unsafe extern "C" {
    fn flock(fd: i32, operation: i32) -> i32;
}

/// `charts/baton` installed into the test's namespace; uninstalled when dropped (its
/// cluster-scoped objects, the injection webhook among them, would outlive the namespace).
pub struct Release {
    pub name: String,
    /// The chart's full name: the Deployment, ServiceAccount, webhook Service's prefix.
    pub fullname: String,
    namespace: String,
    kubeconfig: PathBuf,
}

impl Release {
    /// `helm install` of the chart with `set` (`key=value` each) as release `name`.
    pub fn install(kube: &Kube, name: &str, set: &[&str]) -> Result<Release> {
        let chart = repo_root().join("charts/baton");
        let chart = chart.to_str().context("chart path")?;
        let mut args = vec!["install", name, chart];
        for s in set {
            args.extend(["--set", s]);
        }
        crate::helm::run_in(kube, &args)?;
        let fullname = if name.contains("baton") {
            name.to_string()
        } else {
            format!("{name}-baton")
        };
        Ok(Release {
            name: name.to_string(),
            fullname,
            namespace: kube.namespace.clone(),
            kubeconfig: kube.plane.kubeconfig.clone(),
        })
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = Command::new(crate::helm::binary())
            .args([
                "uninstall",
                &self.name,
                "--namespace",
                &self.namespace,
                "--kubeconfig",
            ])
            .arg(&self.kubeconfig)
            .output();
    }
}

/// The namespace label the injection webhook of [`install_operator`] selects (the value: the
/// test's namespace), instead of the chart's `baton.dev/injection: enabled`: tests run in
/// parallel, and another test's chart (its webhook with no pod to answer, `failurePolicy:
/// Fail`) would be asked about pods in every namespace with the chart's label, as this one's
/// would about theirs.
pub const INJECTION_LABEL: &str = "baton.dev/injection-test";

/// Namespaces a test makes besides its own, labelled for injection by this test's webhook only
/// ([`INJECTION_LABEL`]); deleted when dropped.
pub struct Namespaces {
    client: kube::Client,
    pub names: Vec<String>,
}

impl Namespaces {
    pub async fn create(kube: &Kube, suffixes: &[&str]) -> Result<Namespaces> {
        let api = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(kube.client.clone());
        let mut names = Vec::new();
        for suffix in suffixes {
            let name = format!("{}-{suffix}", kube.namespace);
            let ns: k8s_openapi::api::core::v1::Namespace =
                serde_json::from_value(json!({"metadata": {
                "name": name,
                "labels": {TEST_LABEL: "true", INJECTION_LABEL: kube.namespace}}}))?;
            api.create(&kube::api::PostParams::default(), &ns)
                .await
                .with_context(|| format!("create namespace {name}"))?;
            names.push(name);
        }
        Ok(Namespaces {
            client: kube.client.clone(),
            names,
        })
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        // As Kube's own: from a runtime of its own (the test's is blocked in this drop).
        let (client, names) = (self.client.clone(), self.names.clone());
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                let api = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client);
                for name in names {
                    let _ = tokio::time::timeout(
                        Duration::from_secs(10),
                        api.delete(&name, &kube::api::DeleteParams::default()),
                    )
                    .await;
                }
            });
        })
        .join();
    }
}

/// `helm install` of the chart (one operator replica, the webhook selecting namespaces
/// labelled [`INJECTION_LABEL`]`=NAMESPACE`) and its Deployment available: the operator
/// running as the pod the agent runs for it.
pub async fn install_operator(kube: &Kube, agent: &NodeAgent) -> Result<Release> {
    install_operator_with(kube, agent, &[]).await
}

/// [`install_operator`] with more values (`key=value` each, as `helm --set` takes them).
pub async fn install_operator_with(
    kube: &Kube,
    agent: &NodeAgent,
    set: &[&str],
) -> Result<Release> {
    remove_orphan_webhooks(kube).await?;
    let selector = format!(
        "webhook.namespaceSelector.matchLabels.{}={}",
        INJECTION_LABEL.replace('.', "\\."),
        kube.namespace
    );
    let mut values = vec![
        "operator.replicas=1",
        "webhook.namespaceSelector.matchLabels.baton\\.dev/injection=null",
        &selector,
    ];
    values.extend_from_slice(set);
    let release = Release::install(kube, &kube.namespace, &values)?;
    let deployments = kube::Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(
        kube.client.clone(),
        &kube.namespace,
    );
    let name = release.fullname.clone();
    wait_for(
        agent,
        "the operator's Deployment available",
        Duration::from_secs(120),
        || async {
            let d = deployments.get(&name).await?;
            let ready = d.status.and_then(|s| s.ready_replicas).unwrap_or(0);
            if ready != 1 {
                bail!("{ready} ready replicas");
            }
            Ok(())
        },
    )
    .await?;
    Ok(release)
}

/// Deletes injection webhooks of releases whose namespace is gone or going (a test killed
/// before its uninstall): with `failurePolicy: Fail` such a webhook would refuse every pod of
/// every namespace labelled for injection.
async fn remove_orphan_webhooks(kube: &Kube) -> Result<()> {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    use k8s_openapi::api::core::v1::Namespace;
    let configs = kube::Api::<MutatingWebhookConfiguration>::all(kube.client.clone());
    let namespaces = kube::Api::<Namespace>::all(kube.client.clone());
    for config in configs.list(&Default::default()).await?.items {
        let name = config.metadata.name.clone().unwrap_or_default();
        if !name.ends_with("-sidecar-injector") {
            continue;
        }
        for webhook in config.webhooks.iter().flatten() {
            let Some(service) = &webhook.client_config.service else {
                continue;
            };
            let gone = match namespaces.get_opt(&service.namespace).await? {
                None => true,
                Some(ns) => ns.metadata.deletion_timestamp.is_some(),
            };
            if gone {
                eprintln!("deleting MutatingWebhookConfiguration {name} of a gone namespace");
                let _ = configs.delete(&name, &Default::default()).await;
                break;
            }
        }
    }
    Ok(())
}

/// Fails unless the API server calls webhook Services at their endpoints' pod IPs
/// (`--enable-aggregator-routing`, tests/scripts/control-plane.sh): without it, it dials the
/// ClusterIP, which nothing routes here. A control plane started by an older script lacks it.
pub fn require_aggregator_routing(kube: &Kube) -> Result<()> {
    let pid_file = kube.plane.dir.join("kube-apiserver.pid");
    let Ok(pid) = std::fs::read_to_string(&pid_file) else {
        return Ok(()); // not a control-plane.sh one: nothing to look at
    };
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim())).unwrap_or_default();
    if !String::from_utf8_lossy(&cmdline).contains("--enable-aggregator-routing=true") {
        bail!(
            "the kube-apiserver of {} runs without --enable-aggregator-routing=true, so it cannot \
             call webhooks at pod IPs: restart it with the current script \
             (tests/scripts/control-plane.sh down DIR, then up DIR)",
            kube.plane.dir.display()
        );
    }
    Ok(())
}

/// When dropped, removes the finalizers of every CoordinationEnsemble left in `namespaces`
/// (a test that failed before deleting its ensemble): once the operator is uninstalled,
/// nothing else would, and the namespace would stay Terminating for good.
pub struct EnsembleCleanup {
    kubeconfig: PathBuf,
    namespaces: Vec<String>,
}

impl EnsembleCleanup {
    pub fn new(kube: &Kube, namespaces: &[&str]) -> EnsembleCleanup {
        EnsembleCleanup {
            kubeconfig: kube.plane.kubeconfig.clone(),
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        }
    }
}

impl Drop for EnsembleCleanup {
    fn drop(&mut self) {
        let (kubeconfig, namespaces) = (self.kubeconfig.clone(), self.namespaces.clone());
        // A runtime and client of its own: the test's runtime is blocked in this drop.
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                let strip = async {
                    let kubeconfig = kube::config::Kubeconfig::read_from(&kubeconfig)?;
                    let config = kube::Config::from_custom_kubeconfig(
                        kubeconfig,
                        &kube::config::KubeConfigOptions::default(),
                    )
                    .await?;
                    let client = kube::Client::try_from(config)?;
                    let gvk = kube::api::GroupVersionKind::gvk(
                        "baton.dev",
                        "v1alpha1",
                        "CoordinationEnsemble",
                    );
                    let resource =
                        kube::api::ApiResource::from_gvk_with_plural(&gvk, "coordinationensembles");
                    for ns in namespaces {
                        let api = kube::Api::<kube::api::DynamicObject>::namespaced_with(
                            client.clone(),
                            &ns,
                            &resource,
                        );
                        for ce in api.list(&Default::default()).await?.items {
                            let name = ce.metadata.name.unwrap_or_default();
                            let _ = api
                                .patch(
                                    &name,
                                    &kube::api::PatchParams::default(),
                                    &kube::api::Patch::Merge(
                                        serde_json::json!({"metadata": {"finalizers": null}}),
                                    ),
                                )
                                .await;
                        }
                    }
                    anyhow::Ok(())
                };
                let _ = tokio::time::timeout(Duration::from_secs(10), strip).await;
            });
        })
        .join();
    }
}
