//! Kubernetes-visible elections (`--mirror-lease`) through a real `baton-sidecar` process and a
//! stateful mocked Kubernetes API server on loopback: the leader creates the Lease
//! `baton-<election>` (holder, acquireTime, duration, token), renews it, and clears the holder
//! when it resigns; without the flag no Lease is touched.

mod common;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::{BOUND, Sidecar, unique};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/team/leases";

/// One Lease request the mocked API server received.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    body: Value,
}

/// A mocked API server keeping Leases (get, create, update with resourceVersion checks) and
/// accepting pod patches.
struct FakeApiServer {
    requests: mpsc::UnboundedReceiver<Seen>,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

type Leases = Arc<Mutex<BTreeMap<String, Value>>>;

impl FakeApiServer {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("local addr");
        let (tx, requests) = mpsc::unbounded_channel();
        let tx = Arc::new(tx);
        let leases: Leases = Arc::default();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (tx, leases) = (tx.clone(), leases.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let (tx, leases) = (tx.clone(), leases.clone());
                        async move { Ok::<_, Infallible>(serve(req, &tx, &leases).await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
                 clusters:\n- name: fake\n  cluster:\n    server: http://{addr}\n\
                 contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n\
                 users:\n- name: fake\n  user:\n    token: sidecar-token\n"
            ),
        )
        .expect("write kubeconfig");
        Self {
            requests,
            kubeconfig,
            _dir: dir,
        }
    }

    fn env(&self) -> [(&str, &str); 1] {
        [("KUBECONFIG", self.kubeconfig.to_str().expect("utf-8 path"))]
    }

    /// The next Lease write (create or update), within the test bound.
    async fn next_write(&mut self) -> Seen {
        loop {
            let seen = tokio::time::timeout(BOUND, self.requests.recv())
                .await
                .expect("a Lease write in time")
                .expect("the API server runs");
            if seen.method != "GET" {
                return seen;
            }
        }
    }
}

fn status(code: u16, reason: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": reason,
           "code": code, "message": reason})
}

async fn serve(
    req: Request<Incoming>,
    tx: &mpsc::UnboundedSender<Seen>,
    leases: &Leases,
) -> Response<Full<Bytes>> {
    let (method, path) = (req.method().to_string(), req.uri().path().to_owned());
    let bytes = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let (code, reply) = if path.starts_with("/api/v1/namespaces/team/pods/") {
        (
            StatusCode::OK,
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                   "metadata": {"name": "app-0", "namespace": "team"}}),
        )
    } else if let Some(rest) = path.strip_prefix(LEASES) {
        let _ = tx.send(Seen {
            method: method.clone(),
            path: path.clone(),
            body: body.clone(),
        });
        let name = rest.trim_start_matches('/').to_owned();
        let mut leases = leases.lock().expect("leases");
        match method.as_str() {
            "GET" => match leases.get(&name) {
                Some(lease) => (StatusCode::OK, lease.clone()),
                None => (StatusCode::NOT_FOUND, status(404, "NotFound")),
            },
            "POST" => {
                let name = body["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                match leases.entry(name) {
                    std::collections::btree_map::Entry::Occupied(_) => {
                        (StatusCode::CONFLICT, status(409, "AlreadyExists"))
                    }
                    std::collections::btree_map::Entry::Vacant(slot) => {
                        let mut lease = body.clone();
                        lease["metadata"]["resourceVersion"] = json!("1");
                        slot.insert(lease.clone());
                        (StatusCode::CREATED, lease)
                    }
                }
            }
            "PUT" => {
                let stored = leases.get(&name).cloned().unwrap_or(Value::Null);
                let version = stored["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("0");
                if body["metadata"]["resourceVersion"].as_str() != Some(version) {
                    (StatusCode::CONFLICT, status(409, "Conflict"))
                } else {
                    let next: u64 = version.parse::<u64>().unwrap_or(0) + 1;
                    let mut lease = body.clone();
                    lease["metadata"]["resourceVersion"] = json!(next.to_string());
                    leases.insert(name, lease.clone());
                    (StatusCode::OK, lease)
                }
            }
            _ => (
                StatusCode::METHOD_NOT_ALLOWED,
                status(405, "MethodNotAllowed"),
            ),
        }
    } else {
        (StatusCode::NOT_FOUND, status(404, "NotFound"))
    };
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(reply.to_string())))
        .expect("response")
}

fn time(value: &Value) -> k8s_openapi::jiff::Timestamp {
    value
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("not a time: {value}"))
}

async fn the_leader_mirrors_its_term_into_a_lease_and_releases_it_on_resign() {
    let mut api = FakeApiServer::start().await;
    let election = unique("mirrored");
    let lease_path = format!("{LEASES}/baton-{election}");
    let flags = [
        "--pod",
        "app-0",
        "--namespace",
        "team",
        "--mirror-lease",
        "--session-timeout",
        "3s",
    ];
    let sidecar = Sidecar::start_with_env("app-0", &[&election], &flags, &api.env());

    let created = api.next_write().await;
    assert_eq!(
        (created.method.as_str(), created.path.as_str()),
        ("POST", LEASES)
    );
    let answer = sidecar.call("GET", &format!("/leader/{election}")).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let leader = &answer.body["leader"];
    let lease = &created.body;
    assert_eq!(lease["metadata"]["name"], format!("baton-{election}"));
    assert_eq!(
        lease["metadata"]["annotations"]["baton.dev/fencing-token"],
        leader["token"].to_string()
    );
    let spec = &lease["spec"];
    assert_eq!(spec["holderIdentity"], "app-0");
    assert_eq!(spec["leaseDurationSeconds"], 3);
    assert_eq!(spec["leaseTransitions"], 0);
    assert_eq!(time(&spec["acquireTime"]), time(&leader["since"]));
    let first_renew = time(&spec["renewTime"]);

    // Renewed (every third of the duration) while it leads, with the same term.
    let renewed = api.next_write().await;
    assert_eq!(
        (renewed.method.as_str(), renewed.path.as_str()),
        ("PUT", lease_path.as_str())
    );
    let spec = &renewed.body["spec"];
    assert_eq!(spec["holderIdentity"], "app-0");
    assert_eq!(spec["leaseTransitions"], 0);
    assert_eq!(time(&spec["acquireTime"]), time(&leader["since"]));
    assert!(time(&spec["renewTime"]) > first_renew, "{spec}");

    // Another candidate, then a resign: the other pod leads, this one clears the holder.
    let other = Sidecar::start_with_env("app-1", &[&election], &[], &[]);
    let answer = sidecar
        .call("POST", &format!("/leader/{election}/resign"))
        .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let released = loop {
        let seen = api.next_write().await;
        assert_eq!(seen.path, lease_path, "{seen:?}");
        if seen.body["spec"]["holderIdentity"].is_null() {
            break seen;
        }
    };
    assert_eq!(released.method, "PUT");
    assert!(
        released.body["metadata"]["annotations"]
            .get("baton.dev/fencing-token")
            .is_none(),
        "{released:?}"
    );
    let answer = other.call("GET", &format!("/leader/{election}")).await;
    assert_eq!(answer.body["leader"]["identity"], "app-1", "{answer:?}");
    drop(other);
    drop(sidecar);
}

async fn sigterm_releases_the_lease() {
    let mut api = FakeApiServer::start().await;
    let election = unique("terminated");
    let flags = ["--pod", "app-0", "--namespace", "team", "--mirror-lease"];
    let mut sidecar = Sidecar::start_with_env("app-0", &[&election], &flags, &api.env());
    let created = api.next_write().await;
    assert_eq!(created.body["spec"]["holderIdentity"], "app-0");
    let status = sidecar.terminate();
    assert!(status.success(), "{status:?}");
    let mut last = None;
    while let Ok(seen) = api.requests.try_recv() {
        if seen.method != "GET" {
            last = Some(seen);
        }
    }
    let last = last.expect("a write before exit");
    assert_eq!(last.method, "PUT", "{last:?}");
    assert!(last.body["spec"]["holderIdentity"].is_null(), "{last:?}");
}

async fn without_the_flag_no_lease_is_written() {
    let mut api = FakeApiServer::start().await;
    let election = unique("unmirrored");
    let flags = ["--pod", "app-0", "--namespace", "team"];
    let mut sidecar = Sidecar::start_with_env("app-0", &[&election], &flags, &api.env());
    sidecar.wait_log("became the leader");
    let status = sidecar.terminate();
    assert!(status.success(), "{status:?}");
    assert!(
        api.requests.try_recv().is_err(),
        "no Lease request without --mirror-lease"
    );
}

#[test]
fn lease_names_follow_kubernetes_rules() {
    use baton_sidecar::pod::lease_name;
    assert_eq!(lease_name("orders").as_deref(), Some("baton-orders"));
    assert_eq!(lease_name("a.b-c").as_deref(), Some("baton-a.b-c"));
    assert_eq!(lease_name("Orders"), None);
    assert_eq!(lease_name("orders_x"), None);
    assert_eq!(lease_name("orders-"), None);
    assert_eq!(lease_name(&"x".repeat(250)), None);
}

against_both!(
    the_leader_mirrors_its_term_into_a_lease_and_releases_it_on_resign,
    sigterm_releases_the_lease,
    without_the_flag_no_lease_is_written,
);
