//! Fixture for tests against a real Kubernetes control plane (etcd, kube-apiserver and
//! kube-controller-manager from `tests/scripts/control-plane.sh`). Pods that run: on the real
//! node of [`node`] (a kubelet and containerd running the project's image), or, for the tests
//! that need an operator of their own, on the node agent of [`agent`], a stand-in kubelet.
//!
//! `tests/scripts/test.sh` starts one control plane for the whole run and exports its admin
//! kubeconfig as `BATON_KUBECONFIG`. Without it (a `cargo test -p baton-kube-tests` of its
//! own) the first test brings one up in `target/kube-control-plane` and leaves it running for
//! the next runs (`tests/scripts/control-plane.sh down target/kube-control-plane` stops it).
//! A test never skips for want of a control plane: it fails.
//!
//! Each test gets [`Kube`]: an admin `kube::Client` and a namespace of its own (deleted when
//! it is dropped), so tests run in parallel (nextest runs each in a process of its own).

pub mod agent;
pub mod helm;
pub mod node;
pub mod operator;
pub mod sidecar;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail, ensure};
use base64::Engine as _;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    Api, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::Value;

/// The field manager of everything the tests apply.
pub const FIELD_MANAGER: &str = "baton-kube-tests";
/// Label on every namespace a test makes (to find leftovers).
pub const TEST_LABEL: &str = "baton.dev/kube-test";

/// One running control plane.
#[derive(Debug, Clone)]
pub struct ControlPlane {
    /// The admin kubeconfig (group `system:masters`).
    pub kubeconfig: PathBuf,
    /// Its directory: `audit.log`, `pki/`, the logs.
    pub dir: PathBuf,
}

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The control plane of this run: `BATON_KUBECONFIG`'s, else one in `target/kube-control-plane`
/// (started if it is not running; a lock keeps parallel test processes from starting two).
pub fn control_plane() -> Result<&'static ControlPlane> {
    static PLANE: OnceLock<ControlPlane> = OnceLock::new();
    if let Some(plane) = PLANE.get() {
        return Ok(plane);
    }
    let kubeconfig = match std::env::var_os("BATON_KUBECONFIG") {
        Some(path) => PathBuf::from(path),
        None => start_own_control_plane()?,
    };
    let plane = ControlPlane::at(kubeconfig, "BATON_KUBECONFIG")?;
    Ok(PLANE.get_or_init(|| plane))
}

impl ControlPlane {
    fn at(kubeconfig: PathBuf, variable: &str) -> Result<ControlPlane> {
        ensure!(
            kubeconfig.is_file(),
            "no kubeconfig at {} ({variable})",
            kubeconfig.display()
        );
        let dir = kubeconfig
            .parent()
            .context("the kubeconfig has no directory")?
            .to_path_buf();
        Ok(ControlPlane { kubeconfig, dir })
    }
}

/// The workspace's target directory.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

fn start_own_control_plane() -> Result<PathBuf> {
    up_in_target("kube-control-plane", &[])
}

/// `control-plane.sh up target/NAME EXTRA...` under a lock of its own; the kubeconfig's path.
pub(crate) fn up_in_target(name: &str, extra: &[&str]) -> Result<PathBuf> {
    let target = target_dir();
    std::fs::create_dir_all(&target)?;
    let dir = target.join(name);
    let script = repo_root().join("tests/scripts/control-plane.sh");
    // flock(1): the first test process starts it, the others wait and get the path again.
    // `-o`: the script does not get the lock's descriptor, so the daemons it starts do not
    // inherit it and hold the lock for as long as they run (every later test would wait).
    let out = Command::new("flock")
        .arg("-o")
        .arg(target.join(format!("{name}.lock")))
        .arg(&script)
        .arg("up")
        .arg(&dir)
        .args(extra)
        .output()
        .with_context(|| format!("run {} up {}", script.display(), dir.display()))?;
    if !out.status.success() {
        bail!(
            "{} up {} failed ({}):\n{}",
            script.display(),
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stdout = String::from_utf8(out.stdout).context("control-plane.sh printed non-UTF-8")?;
    let last = stdout
        .lines()
        .last()
        .context("control-plane.sh up printed no kubeconfig path")?;
    Ok(PathBuf::from(last.trim()))
}

/// Polls `check` every half second until it answers `Ok`, at most `timeout`; the failure
/// names `what` and the last reason `check` gave, then what `diagnose` finds (logs, pod states).
pub async fn poll<T, F, Fut, D, DFut>(
    what: &str,
    timeout: Duration,
    mut check: F,
    diagnose: D,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
    D: FnOnce() -> DFut,
    DFut: std::future::Future<Output = String>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(value) => return Ok(value),
            Err(e) => format!("{e:#}"),
        };
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "{what}: not within {timeout:?}; last: {last}\n{}",
                diagnose().await
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A unique suffix for names (pid and time: tests run in processes of their own).
pub fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut name = format!("{prefix}-{:x}{:x}", std::process::id(), nanos % 0xfffff);
    name.truncate(63);
    name.trim_end_matches('-').to_string()
}

/// A test's view of the control plane: an admin client and a namespace of its own.
pub struct Kube {
    pub client: Client,
    pub namespace: String,
    pub plane: &'static ControlPlane,
    server: String,
    ca_pem: Vec<u8>,
}

impl Kube {
    /// Connects as admin to the run's control plane and creates a fresh namespace named after
    /// `test`.
    pub async fn new(test: &str) -> Result<Kube> {
        Kube::in_plane(test, control_plane()?).await
    }

    /// As [`Kube::new`], on `plane` (e.g. the real node's, [`node::plane`]).
    pub async fn in_plane(test: &str, plane: &'static ControlPlane) -> Result<Kube> {
        // Two rustls providers in one build (see Cargo.toml): make ring the process default.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let kubeconfig = Kubeconfig::read_from(&plane.kubeconfig)
            .with_context(|| format!("read {}", plane.kubeconfig.display()))?;
        let cluster = kubeconfig
            .clusters
            .first()
            .and_then(|c| c.cluster.clone())
            .context("the admin kubeconfig names no cluster")?;
        let server = cluster.server.context("the cluster has no server")?;
        let ca_pem = base64::engine::general_purpose::STANDARD
            .decode(
                cluster
                    .certificate_authority_data
                    .context("the cluster has no certificate-authority-data")?,
            )
            .context("certificate-authority-data is not base64")?;
        let config =
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        let client = Client::try_from(config)?;
        let namespace = unique(&test.replace('_', "-"));
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.clone()),
                labels: Some([(TEST_LABEL.to_string(), "true".to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("create namespace {namespace}"))?;
        Ok(Kube {
            client,
            namespace,
            plane,
            server,
            ca_pem,
        })
    }

    /// Creates ServiceAccount `name` in the test's namespace.
    pub async fn service_account(&self, name: &str) -> Result<ServiceAccount> {
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        Ok(
            Api::<ServiceAccount>::namespaced(self.client.clone(), &self.namespace)
                .create(&PostParams::default(), &sa)
                .await?,
        )
    }

    /// A real bound token of ServiceAccount `namespace/name` from the TokenRequest API, for
    /// `audiences` (empty: the API server's own), bound to `pod` (name, uid) if given.
    pub async fn token(
        &self,
        namespace: &str,
        name: &str,
        audiences: &[&str],
        pod: Option<(&str, &str)>,
        seconds: i64,
    ) -> Result<String> {
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: audiences.iter().map(|a| a.to_string()).collect(),
                expiration_seconds: Some(seconds),
                bound_object_ref: pod.map(|(pod, uid)| BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(pod.into()),
                    uid: Some(uid.into()),
                }),
            },
            ..TokenRequest::default()
        };
        let answer = Api::<ServiceAccount>::namespaced(self.client.clone(), namespace)
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .with_context(|| format!("TokenRequest for {namespace}/{name}"))?;
        Ok(answer.status.context("TokenRequest without status")?.token)
    }

    /// A kubeconfig (YAML) for this API server with `token` as the bearer token.
    pub fn kubeconfig_with_token(&self, token: &str) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    \
             certificate-authority-data: {ca}\nusers:\n- name: test\n  user:\n    token: {token}\n\
             contexts:\n- name: test\n  context: {{cluster: test, user: test}}\ncurrent-context: test\n",
            self.server
        )
    }

    /// A client authenticated with `token` (and nothing else).
    pub async fn client_with_token(&self, token: &str) -> Result<Client> {
        let kubeconfig = Kubeconfig::from_yaml(&self.kubeconfig_with_token(token))?;
        let config =
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(Client::try_from(config)?)
    }

    /// A client AS ServiceAccount `namespace/name`: a real token from TokenRequest, valid for
    /// an hour, the API server's CA from the admin kubeconfig; no admin credentials.
    pub async fn client_as(&self, namespace: &str, name: &str) -> Result<Client> {
        let token = self.token(namespace, name, &[], None, 3600).await?;
        self.client_with_token(&token).await
    }

    /// Requests the API server refused with 403 to `user` (e.g.
    /// `system:serviceaccount:NS:SA`), from the audit log: `VERB URI` each.
    pub fn forbidden_for(&self, user: &str) -> Result<Vec<String>> {
        Ok(self
            .requests_of(user)?
            .into_iter()
            .filter(|(_, code)| *code == 403)
            .map(|(request, _)| request)
            .collect())
    }

    /// Every request of `user` in the audit log: `VERB URI` and the response code.
    pub fn requests_of(&self, user: &str) -> Result<Vec<(String, i64)>> {
        audit_requests(&self.plane.dir.join("audit.log"), user)
    }

    /// Server-side applies every object of `yaml` (multi-document) as [`FIELD_MANAGER`];
    /// namespaced objects without a namespace go into the test's. `dry_run`: dryRun=All
    /// (admission and validation run, nothing is stored).
    pub async fn apply_yaml(&self, yaml: &str, dry_run: bool) -> Result<Vec<DynamicObject>> {
        let mut applied = Vec::new();
        for doc in parse_yaml(yaml)? {
            applied.push(self.apply(doc, dry_run).await?);
        }
        Ok(applied)
    }

    /// Server-side applies one object (as `apply_yaml`).
    pub async fn apply(&self, object: Value, dry_run: bool) -> Result<DynamicObject> {
        self.apply_as(&self.client, object, dry_run).await
    }

    /// Server-side applies one object with `client`'s identity.
    pub async fn apply_as(
        &self,
        client: &Client,
        object: Value,
        dry_run: bool,
    ) -> Result<DynamicObject> {
        let api = self.api_for(client, &object).await?;
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .context("an object without metadata.name")?
            .to_string();
        let mut params = PatchParams::apply(FIELD_MANAGER).force();
        params.dry_run = dry_run;
        api.patch(&name, &params, &Patch::Apply(&object))
            .await
            .map_err(|e| anyhow!("apply {} {name}: {e}", kind_of(&object)))
    }

    /// The API of `object`'s kind (namespaced in its namespace or the test's).
    pub async fn api_for(&self, client: &Client, object: &Value) -> Result<Api<DynamicObject>> {
        let api_version = object["apiVersion"].as_str().context("no apiVersion")?;
        let kind = object["kind"].as_str().context("no kind")?;
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .with_context(|| format!("discover {api_version} {kind}"))?;
        Ok(match caps.scope {
            kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
            kube::discovery::Scope::Namespaced => {
                let ns = object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or(&self.namespace);
                Api::namespaced_with(client.clone(), ns, &resource)
            }
        })
    }
}

impl Drop for Kube {
    fn drop(&mut self) {
        // Drop cannot await: delete the namespace from a runtime of its own (best effort; the
        // namespace controller removes what is in it), with a client of that runtime: the
        // test's client serves its requests on the test's runtime, blocked right here.
        let kubeconfig = self.plane.kubeconfig.clone();
        let namespace = self.namespace.clone();
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                let delete = async {
                    let kubeconfig = Kubeconfig::read_from(&kubeconfig)?;
                    let config =
                        Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                            .await?;
                    Api::<Namespace>::all(Client::try_from(config)?)
                        .delete(&namespace, &DeleteParams::default())
                        .await?;
                    anyhow::Ok(())
                };
                let _ = tokio::time::timeout(Duration::from_secs(10), delete).await;
            });
        })
        .join();
    }
}

/// The documents of a multi-document YAML file (empty ones left out).
pub fn parse_yaml(yaml: &str) -> Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).context("parse YAML")?;
    Ok(docs
        .into_iter()
        .filter(|d| d.is_object() && d.get("kind").is_some())
        .collect())
}

/// `KIND` of a JSON object, for messages.
pub fn kind_of(object: &Value) -> String {
    object["kind"].as_str().unwrap_or("?").to_string()
}

/// The requests of `user` in the audit log at `path`: `VERB URI` and the response code each.
pub fn audit_requests(path: &Path, user: &str) -> Result<Vec<(String, i64)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let mut requests = Vec::new();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue; // a line being written right now
        };
        if event.pointer("/user/username").and_then(Value::as_str) == Some(user) {
            requests.push((
                format!(
                    "{} {}",
                    event["verb"].as_str().unwrap_or("?"),
                    event["requestURI"].as_str().unwrap_or("?")
                ),
                event
                    .pointer("/responseStatus/code")
                    .and_then(Value::as_i64)
                    .unwrap_or(0),
            ));
        }
    }
    Ok(requests)
}
