//! What the sidecar tests share: the chart's sidecar parts (the pod-label
//! ValidatingAdmissionPolicy and the sidecar RBAC, rendered by Helm from `charts/baton` and
//! applied), Pod objects with tokens bound to them (what a projected token is, minus the
//! kubelet), waits for RBAC and the policy to be in force, and a `baton-sidecar` process.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{Kube, parse_yaml, repo_root};

/// How long a wait on the API server or on a process may take before the test fails.
pub const BOUND: Duration = Duration::from_secs(60);

/// The chart's sidecar parts, installed for the test's namespace: `pod-label-policy.yaml` and
/// `sidecar-rbac.yaml` exactly as `helm template` renders them with `sidecarRbac` listing the
/// test's service accounts. The policy and its bindings are cluster-scoped (named after a
/// release of this test's own): [`SidecarChart::remove`] deletes them.
pub struct SidecarChart {
    /// The ValidatingAdmissionPolicy's name.
    pub policy: String,
    /// The rendered objects (Role, RoleBinding, the policy, its bindings).
    pub objects: Vec<Value>,
}

impl SidecarChart {
    /// Renders and applies the chart's sidecar parts granting `service_accounts` of the test's
    /// namespace the sidecar's RBAC (with `sidecarRbac.leases` as `leases`).
    ///
    /// The chart binds the policy twice: to the injection namespaces (the webhook's
    /// `namespaceSelector`, `baton.dev/injection: enabled`) and to the namespaces
    /// `sidecarRbac` grants pod patching in. The test's namespace is the second kind: labelling
    /// it for injection would send its pods to whatever webhook another test's chart install
    /// registered. The first binding gets `kubernetes.io/metadata.name` added to its selector,
    /// so it matches nothing of another test's (or nothing at all) while this one runs.
    pub async fn install(kube: &Kube, service_accounts: &[&str], leases: bool) -> Result<Self> {
        let release = format!("baton-{}", kube.namespace.rsplit('-').next().unwrap_or("x"));
        let version = kube.client.apiserver_version().await?.git_version;
        let mut args: Vec<String> = [
            "template",
            &release,
            &repo_root().join("charts/baton").to_string_lossy(),
            "--namespace",
            &kube.namespace,
            "--kube-version",
            &version,
            "--show-only",
            "templates/pod-label-policy.yaml",
            "--show-only",
            "templates/sidecar-rbac.yaml",
            "--set",
            &format!("sidecarRbac.leases={leases}"),
            "--set-json",
            &format!(
                "webhook.namespaceSelector={}",
                json!({"matchLabels": {"kubernetes.io/metadata.name": kube.namespace}})
            ),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for (i, sa) in service_accounts.iter().enumerate() {
            args.push("--set".into());
            args.push(format!(
                "sidecarRbac.serviceAccounts[{i}].namespace={}",
                kube.namespace
            ));
            args.push("--set".into());
            args.push(format!("sidecarRbac.serviceAccounts[{i}].name={sa}"));
        }
        let objects = parse_yaml(&crate::helm::run(&args)?)?;
        let policy = objects
            .iter()
            .find(|o| o["kind"] == "ValidatingAdmissionPolicy")
            .and_then(|o| o["metadata"]["name"].as_str())
            .context("the chart rendered no ValidatingAdmissionPolicy")?
            .to_string();
        for kind in ["Role", "RoleBinding", "ValidatingAdmissionPolicyBinding"] {
            ensure!(
                objects.iter().any(|o| o["kind"] == kind),
                "the chart rendered no {kind}"
            );
        }
        let chart = SidecarChart { policy, objects };
        for object in &chart.objects {
            if let Err(e) = kube.apply(object.clone(), false).await {
                chart.remove(kube).await;
                return Err(e);
            }
        }
        Ok(chart)
    }

    /// What the chart's sidecar Role grants: `(verb, apiGroup, resource)` each.
    pub fn granted(&self) -> Vec<(String, String, String)> {
        let mut granted = Vec::new();
        for role in self.objects.iter().filter(|o| o["kind"] == "Role") {
            for rule in role["rules"].as_array().into_iter().flatten() {
                let list = |key: &str| -> Vec<String> {
                    rule[key]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect()
                };
                for group in list("apiGroups") {
                    for resource in list("resources") {
                        for verb in list("verbs") {
                            granted.push((verb, group.clone(), resource.clone()));
                        }
                    }
                }
            }
        }
        granted
    }

    /// Deletes the cluster-scoped objects (the namespaced ones go with the namespace).
    pub async fn remove(&self, kube: &Kube) {
        for object in self.objects.iter().filter(|o| {
            o["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("ValidatingAdmissionPolicy"))
        }) {
            let Some(name) = object["metadata"]["name"].as_str() else {
                continue;
            };
            if let Ok(api) = kube.api_for(&kube.client, object).await {
                let _ = api.delete(name, &DeleteParams::default()).await;
            }
        }
    }

    /// Waits until the chart's parts are in force for ServiceAccount `app`: the policy, checked
    /// with the token of a pod `probe-0` of another account (so its refusal is the test's own,
    /// never a sidecar's), and the Role's grants.
    pub async fn wait_in_force(&self, kube: &Kube) -> Result<()> {
        let probe = pod(kube, "probe-0", "probe").await?;
        let probe_client = kube
            .client_with_token(&pod_token(kube, &probe).await?)
            .await?;
        self.wait_enforced(&probe_client, kube, "probe-0").await?;
        wait_allowed(kube, "app", &self.granted()).await
    }

    /// Waits until the policy is in force in the test's namespace: a dry-run patch of a label
    /// outside `baton.dev/` on `pod` with `client` (the pod's own token, of a service account
    /// with the chart's RBAC) is refused by the policy. Policies reach the admission plugin
    /// through an informer, a moment after they are stored.
    pub async fn wait_enforced(&self, client: &kube::Client, kube: &Kube, pod: &str) -> Result<()> {
        let pods = Api::<Pod>::namespaced(client.clone(), &kube.namespace);
        let params = PatchParams {
            dry_run: true,
            ..PatchParams::default()
        };
        let patch = json!({"metadata": {"labels": {"kube-test-probe": "x"}}});
        let deadline = Instant::now() + BOUND;
        loop {
            let answer = pods.patch(pod, &params, &Patch::Merge(&patch)).await;
            match &answer {
                Err(kube::Error::Api(e)) if e.message.contains(&self.policy) => return Ok(()),
                _ if Instant::now() >= deadline => {
                    bail!(
                        "policy {} not in force after {BOUND:?}: {answer:?}",
                        self.policy
                    )
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

/// The ServiceAccount `name` of the test's namespace as a username.
pub fn service_account_user(kube: &Kube, name: &str) -> String {
    format!("system:serviceaccount:{}:{name}", kube.namespace)
}

/// Waits until RBAC lets ServiceAccount `sa` of the test's namespace do each
/// `(verb, group, resource)` there (the authorizer's cache follows new Roles a moment later;
/// asked by the admin through SubjectAccessReview, so the account itself is never refused).
pub async fn wait_allowed(kube: &Kube, sa: &str, rules: &[(String, String, String)]) -> Result<()> {
    let reviews = Api::<SubjectAccessReview>::all(kube.client.clone());
    let groups = vec![
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{}", kube.namespace),
        "system:authenticated".to_string(),
    ];
    for (verb, group, resource) in rules {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(service_account_user(kube, sa)),
                groups: Some(groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(kube.namespace.clone()),
                    verb: Some(verb.clone()),
                    group: Some(group.clone()),
                    resource: Some(resource.clone()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let deadline = Instant::now() + BOUND;
        loop {
            let status = reviews
                .create(&PostParams::default(), &review)
                .await?
                .status
                .context("a SubjectAccessReview without status")?;
            if status.allowed {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "{sa} may not {verb} {resource} after {BOUND:?}: {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// A Pod object of ServiceAccount `sa` in the test's namespace (no node: it stays Pending,
/// and deleting it is immediate), with a label `app=demo` and an annotation `team=a`.
pub async fn pod(kube: &Kube, name: &str, sa: &str) -> Result<Pod> {
    pod_on(kube, name, sa, None).await
}

/// [`pod`], bound to `node` if given: deleting it then only marks it terminating
/// (`deletionTimestamp`), as on a real node until its kubelet has stopped the containers; no
/// kubelet runs here, so it stays so until deleted with grace period 0.
pub async fn pod_on(kube: &Kube, name: &str, sa: &str, node: Option<&str>) -> Result<Pod> {
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("app".to_string(), "demo".to_string())].into()),
            annotations: Some([("team".to_string(), "a".to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            service_account_name: Some(sa.into()),
            node_name: node.map(String::from),
            containers: vec![Container {
                name: "app".into(),
                image: Some("busybox:1.37".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    };
    Api::<Pod>::namespaced(kube.client.clone(), &kube.namespace)
        .create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("create pod {name}"))
}

/// The token the kubelet would project into `pod` for the API server (TokenRequest for the
/// pod's ServiceAccount, the API server's own audience, bound to the pod), valid for an hour.
pub async fn pod_token(kube: &Kube, pod: &Pod) -> Result<String> {
    let name = pod.metadata.name.as_deref().context("a pod without name")?;
    let uid = pod.metadata.uid.as_deref().context("a pod without uid")?;
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_deref())
        .context("a pod without serviceAccountName")?;
    kube.token(&kube.namespace, sa, &[], Some((name, uid)), 3600)
        .await
}

/// `baton-sidecar` of this build: `$BATON_SIDECAR_BIN`, else beside `baton-ensemble`
/// (`target/<profile>/`).
pub fn sidecar_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("BATON_SIDECAR_BIN") {
        return Ok(path.into());
    }
    let ensemble = baton_tests_binary_dir()?;
    let binary = ensemble.join("baton-sidecar");
    ensure!(
        binary.is_file(),
        "{} is missing: run `cargo build -p baton-sidecar --bins` first (or set BATON_SIDECAR_BIN)",
        binary.display()
    );
    Ok(binary)
}

/// `target/<profile>` of the running test executable (`target/<profile>/deps/<test>`).
fn baton_tests_binary_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locate the test executable")?;
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("{} has no target/<profile> dir", exe.display()))
}

/// A running `baton-sidecar`, killed when dropped; its log (stderr) is kept.
pub struct SidecarProcess {
    pub identity: String,
    pub addr: SocketAddr,
    child: Option<Child>,
    log: Arc<(Mutex<Vec<String>>, Condvar)>,
    _dir: tempfile::TempDir,
}

impl SidecarProcess {
    /// Starts `baton-sidecar` as pod `pod` of the test's namespace: `--identity`, `--pod` and
    /// `--namespace` as the webhook's downward-API env gives them, Kubernetes reached with
    /// `token` only (a kubeconfig holding it and the API server's CA; no in-cluster
    /// variables), standing in `election` on `ensemble`, plus `extra` flags. Returns once it
    /// serves HTTP.
    pub fn start(
        kube: &Kube,
        ensemble: &str,
        pod: &str,
        token: &str,
        election: &str,
        extra: &[&str],
    ) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("baton-kube-sidecar-")
            .tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kube.kubeconfig_with_token(token))?;
        let mut command = Command::new(sidecar_binary()?);
        // Nothing of the test process's environment may choose for it.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("BATON_") {
                command.env_remove(name);
            }
        }
        command
            .args(["--ensemble", ensemble, "--listen", "127.0.0.1:0"])
            .args(["--identity", pod, "--pod", pod])
            .args(["--namespace", &kube.namespace, "--election", election])
            .args(extra)
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", dir.path())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .env("BATON_LOG", "info,baton_sidecar=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().context("start baton-sidecar")?;
        let stderr = child.stderr.take().context("no stderr pipe")?;
        let log = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let (lines, more) = &*sink;
                lines.lock().unwrap_or_else(|p| p.into_inner()).push(line);
                more.notify_all();
            }
        });
        let mut sidecar = SidecarProcess {
            identity: pod.to_string(),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            child: Some(child),
            log,
            _dir: dir,
        };
        let line = sidecar.wait_log("serving the HTTP API")?;
        sidecar.addr = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("addr="))
            .and_then(|a| a.parse().ok())
            .with_context(|| format!("no addr= in {line:?}"))?;
        Ok(sidecar)
    }

    /// Waits (up to [`BOUND`]) for a log line containing `needle`.
    pub fn wait_log(&self, needle: &str) -> Result<String> {
        self.wait_log_all(&[needle])
    }

    /// Waits (up to [`BOUND`]) for a log line containing every one of `needles`.
    pub fn wait_log_all(&self, needles: &[&str]) -> Result<String> {
        let (lines, more) = &*self.log;
        let deadline = Instant::now() + BOUND;
        let mut guard = lines.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(line) = guard.iter().find(|l| needles.iter().all(|n| l.contains(n))) {
                return Ok(line.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "{}: no log line with {needles:?} within {BOUND:?}:\n{}",
                    self.identity,
                    guard.join("\n")
                );
            }
            guard = more
                .wait_timeout(guard, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The log so far.
    pub fn log(&self) -> String {
        self.log
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .join("\n")
    }

    /// SIGKILL, as an OOM kill or a node's crash: no resign, no relabel, no release.
    pub fn kill(&mut self) -> Result<()> {
        let mut child = self.child.take().context("already stopped")?;
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// SIGTERM (it resigns, relabels its pod and releases its Leases), then the exit status
    /// (SIGKILL and an error after [`BOUND`]).
    pub fn terminate(&mut self) -> Result<ExitStatus> {
        let mut child = self.child.take().context("already stopped")?;
        let pid = child.id().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status()?;
        ensure!(status.success(), "kill -TERM {pid}: {status}");
        let deadline = Instant::now() + BOUND;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{} did not exit within {BOUND:?} of SIGTERM", self.identity);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `METHOD path` on its HTTP API (no body): status and JSON body.
    pub async fn call(&self, method: &str, path: &str) -> Result<(u16, Value)> {
        // HTTP/1.0: the answer ends with the connection, never chunked.
        let mut stream = tokio::net::TcpStream::connect(self.addr).await?;
        stream
            .write_all(
                format!("{method} {path} HTTP/1.0\r\nHost: sidecar\r\nContent-Length: 0\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
        let mut answer = Vec::new();
        tokio::time::timeout(BOUND, stream.read_to_end(&mut answer))
            .await
            .context("no HTTP answer in time")??;
        let text = String::from_utf8(answer).context("a non-UTF-8 answer")?;
        let (head, body) = text
            .split_once("\r\n\r\n")
            .with_context(|| format!("no HTTP header end: {text:?}"))?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("no HTTP status: {head:?}"))?;
        let body = serde_json::from_str(body).unwrap_or(Value::String(body.to_string()));
        Ok((status, body))
    }
}

impl Drop for SidecarProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
