//! The chart's operator as a local process against the real API server: `charts/baton`
//! installed with Helm (its Deployment at 0 replicas: no kubelet runs pods here), then the
//! built `baton-operator` started with the Deployment's own arguments and environment and a
//! kubeconfig holding a real token of the chart's ServiceAccount (no admin credentials), so
//! every request it makes is decided by the chart's RBAC and shows in the audit log under that
//! ServiceAccount's name.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use serde_json::Value;

pub use crate::helm::run_in as run_helm;
use crate::{Kube, repo_root};

/// The `baton-operator` binary: `$BATON_OPERATOR_BIN`, or the one beside this test executable
/// (`target/<profile>/deps/<test>` → `target/<profile>/baton-operator`).
pub fn operator_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("BATON_OPERATOR_BIN") {
        return Ok(path.into());
    }
    let exe = std::env::current_exe().context("locate the test executable")?;
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .context("the test executable has no target/<profile> directory")?;
    let binary = profile.join("baton-operator");
    ensure!(
        binary.is_file(),
        "{} is missing: run `cargo build -p baton-operator --bins` first (or set BATON_OPERATOR_BIN)",
        binary.display()
    );
    Ok(binary)
}

/// Held while a test runs an operator: an operator reconciles every CoordinationEnsemble of the
/// cluster, so two tests' operators would act on each other's ensembles (and fight over what
/// differs between their releases, such as the NetworkPolicy's operator pods). An exclusive
/// `flock` of `target/kube-operator.lock`, the file the node agent's tests lock too
/// (`agent::OperatorLock`); released when dropped.
pub struct OperatorLock {
    _file: File,
}

impl OperatorLock {
    /// Waits (off the runtime: possibly for another test's whole run) until no other test
    /// runs an operator.
    pub async fn acquire() -> Result<OperatorLock> {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join("target"));
        let path = target.join("kube-operator.lock");
        let file = File::create(&path).with_context(|| format!("create {}", path.display()))?;
        let file = tokio::task::spawn_blocking(move || {
            file.lock()
                .with_context(|| format!("lock {}", path.display()))
                .map(|()| file)
        })
        .await??;
        Ok(OperatorLock { _file: file })
    }
}

/// One Helm release of `charts/baton` in the test's namespace.
#[derive(Debug, Clone)]
pub struct Release {
    pub name: String,
    pub namespace: String,
    /// The operator's ServiceAccount (the chart's).
    pub service_account: String,
    /// The operator container's arguments and environment, as the chart's Deployment has them.
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl Release {
    /// The operator's user name in the audit log.
    pub fn user(&self) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.namespace, self.service_account
        )
    }

    /// The leader-election Lease's name (`--lease-name`).
    pub fn lease_name(&self) -> Result<String> {
        self.args
            .iter()
            .find_map(|a| a.strip_prefix("--lease-name="))
            .map(str::to_string)
            .context("the chart's operator has no --lease-name")
    }
}

/// Installs `charts/baton` into the test's namespace with the operator's Deployment at 0
/// replicas (`flags` are more `helm install` flags) and reads the operator container's
/// arguments and environment from the stored Deployment. The chart's CRDs are applied first,
/// so the schema is this checkout's even where an older install left them (Helm never
/// upgrades `crds/`).
pub async fn install_chart(kube: &Kube, flags: &[&str]) -> Result<Release> {
    let crds = repo_root().join("charts/baton/crds");
    for entry in std::fs::read_dir(&crds).with_context(|| format!("read {}", crds.display()))? {
        let path = entry?.path();
        let yaml = std::fs::read_to_string(&path)?;
        kube.apply_yaml(&yaml, false)
            .await
            .with_context(|| format!("apply {}", path.display()))?;
    }
    // The release's name holds the chart's, so the chart names its objects after the release.
    let name = format!("baton-{}", kube.namespace.rsplit('-').next().unwrap_or("x"));
    let chart = repo_root().join("charts/baton");
    let chart = chart.to_str().context("chart path")?;
    let mut install = vec!["install", &name, chart, "--set", "operator.replicas=0"];
    install.extend_from_slice(flags);
    run_helm(kube, &install)?;
    let deployment = Api::<Deployment>::namespaced(kube.client.clone(), &kube.namespace)
        .get(&name)
        .await
        .with_context(|| format!("the chart's Deployment {name}"))?;
    let pod = deployment
        .spec
        .and_then(|s| s.template.spec)
        .context("the Deployment has no pod template")?;
    let container = pod
        .containers
        .iter()
        .find(|c| c.name == "operator")
        .context("the Deployment has no operator container")?;
    let env = container
        .env
        .iter()
        .flatten()
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .collect();
    Ok(Release {
        service_account: pod
            .service_account_name
            .clone()
            .context("the Deployment names no ServiceAccount")?,
        name,
        namespace: kube.namespace.clone(),
        args: container.args.clone().unwrap_or_default(),
        env,
    })
}

/// A `baton-operator run` process, killed when dropped.
pub struct Operator {
    pub identity: String,
    // Behind a lock so a poll can check it through a shared reference.
    child: std::sync::Mutex<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Operator {
    /// Starts `baton-operator run` as the chart's Deployment would, as replica `identity`
    /// (its pod name): the Deployment's arguments, except that its metrics listener is on a
    /// free loopback port and the webhook's are left out (no API server can call a local
    /// process through the chart's Service: the node agent's tests run the webhook); then
    /// `extra` arguments. It reaches the API server with a fresh token of the chart's
    /// ServiceAccount and nothing else.
    pub async fn start(
        kube: &Kube,
        release: &Release,
        identity: &str,
        extra: &[&str],
    ) -> Result<Operator> {
        let dir = tempfile::Builder::new()
            .prefix("baton-kube-operator-")
            .tempdir()?;
        let token = kube
            .token(
                &release.namespace,
                &release.service_account,
                &[],
                None,
                3600,
            )
            .await?;
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kube.kubeconfig_with_token(&token))?;
        let log = dir.path().join("operator.log");
        let out = File::create(&log)?;
        // The webhook's flags stay out (see above); --log-json too: text reads better in a
        // failure message.
        let left_out = ["--webhook-", "--sidecar-image", "--log-json"];
        let args = release
            .args
            .iter()
            .filter(|a| !left_out.iter().any(|w| a.starts_with(w)))
            .map(|a| match a.starts_with("--metrics-addr=") {
                true => "--metrics-addr=127.0.0.1:0".to_string(),
                false => a.clone(),
            });
        let mut command = Command::new(operator_binary()?);
        command
            .arg("run")
            .args(args)
            .args(extra)
            .envs(release.env.iter().map(|(k, v)| (k, v)))
            // The downward API's values in the chart's pod.
            .env("POD_NAME", identity)
            .env("POD_NAMESPACE", &release.namespace)
            // The Lease's attempts too, which the tests wait on.
            .env("BATON_LOG", "info,baton_operator::leader_lease=debug")
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        let child = command
            .spawn()
            .with_context(|| format!("start {}", command.get_program().to_string_lossy()))?;
        Ok(Operator {
            identity: identity.into(),
            child: std::sync::Mutex::new(child),
            log,
            _dir: dir,
        })
    }

    /// Kills the process (SIGKILL: no lease released, nothing finished) and reaps it.
    pub fn kill(&self) -> Result<()> {
        let mut child = self.child.lock().map_err(|_| anyhow!("poisoned"))?;
        child.kill().context("kill the operator")?;
        child.wait().context("reap the operator")?;
        Ok(())
    }

    /// Stops the process as Kubernetes stops a pod (SIGTERM) and waits until it has exited.
    pub fn terminate(&self) -> Result<std::process::ExitStatus> {
        let mut child = self.child.lock().map_err(|_| anyhow!("poisoned"))?;
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .context("run kill -TERM")?;
        ensure!(sent.success(), "kill -TERM {}: {sent}", child.id());
        child.wait().context("wait for the operator to exit")
    }

    /// Fails if the process has exited.
    pub fn running(&self) -> Result<()> {
        let exited = self
            .child
            .lock()
            .map_err(|_| anyhow!("poisoned"))?
            .try_wait()?;
        match exited {
            None => Ok(()),
            Some(status) => bail!(
                "operator {} exited ({status}):\n{}",
                self.identity,
                self.log_tail()
            ),
        }
    }

    /// The whole log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last 40 lines of the log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Ok(child) = self.child.get_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The holder of the release's leader Lease and its `leaseTransitions`, if the Lease exists.
pub async fn lease_holder(kube: &Kube, release: &Release) -> Result<Option<(String, i32)>> {
    let lease = Api::<Lease>::namespaced(kube.client.clone(), &release.namespace)
        .get_opt(&release.lease_name()?)
        .await?;
    Ok(lease.and_then(|l| l.spec).map(|s| {
        (
            s.holder_identity.unwrap_or_default(),
            s.lease_transitions.unwrap_or(0),
        )
    }))
}

/// Polls `check` every 200 ms until it returns `Some`, for at most `limit`; the error names
/// `what` and the last answer's reason (`Err` answers are retried and reported).
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let last = match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => "not yet".to_string(),
            Err(e) => format!("{e:#}"),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(anyhow!("{what}: not within {limit:?} ({last})"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A point in the audit log (its length now): what a process does from here on.
pub fn audit_mark(kube: &Kube) -> Result<u64> {
    let path = kube.plane.dir.join("audit.log");
    Ok(std::fs::metadata(&path)
        .with_context(|| format!("stat {}", path.display()))?
        .len())
}

/// The requests of `user` in the audit log since `mark`: `VERB URI` (query left out) and the
/// response code.
pub fn requests_since(kube: &Kube, mark: u64, user: &str) -> Result<Vec<(String, i64)>> {
    let path = kube.plane.dir.join("audit.log");
    let mut file = File::open(&path).with_context(|| format!("open {}", path.display()))?;
    file.seek(SeekFrom::Start(mark))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e.pointer("/user/username").and_then(Value::as_str) == Some(user))
        // ResponseComplete only: a watch also logs ResponseStarted.
        .filter(|e| e["stage"] == "ResponseComplete")
        .map(|e| {
            let uri = e["requestURI"].as_str().unwrap_or("?");
            (
                format!(
                    "{} {}",
                    e["verb"].as_str().unwrap_or("?"),
                    uri.split('?').next().unwrap_or(uri)
                ),
                e.pointer("/responseStatus/code")
                    .and_then(Value::as_i64)
                    .unwrap_or(0),
            )
        })
        .collect())
}

/// Requests of `user` that RBAC refused (the audit's `authorization.k8s.io/decision: forbid`),
/// as `VERB URI`: unlike every 403 (`Kube::forbidden_for`), not those an admission plugin
/// refused, such as a write into a namespace being deleted.
pub fn refused_by_rbac(kube: &Kube, user: &str) -> Result<Vec<String>> {
    let path = kube.plane.dir.join("audit.log");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e.pointer("/user/username").and_then(Value::as_str) == Some(user))
        .filter(|e| e["annotations"]["authorization.k8s.io/decision"] == "forbid")
        .map(|e| {
            format!(
                "{} {}",
                e["verb"].as_str().unwrap_or("?"),
                e["requestURI"].as_str().unwrap_or("?")
            )
        })
        .collect())
}
