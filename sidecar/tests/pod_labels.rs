//! The pod view through a real `baton-sidecar` process and a mocked Kubernetes API server on
//! loopback (found through a kubeconfig, as kubectl would): the exact patches sent, the
//! errors explained, and no Kubernetes call at all without `--pod/--namespace`.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

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

/// One request the mocked API server received.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    query: String,
    content_type: String,
    authorization: String,
    body: Value,
}

/// How the mocked API server answers a PATCH.
#[derive(Clone, Copy)]
enum Answer {
    Ok,
    Forbidden,
}

/// A mocked API server: records every request, answers PATCHes as told.
struct FakeApiServer {
    requests: mpsc::UnboundedReceiver<Seen>,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl FakeApiServer {
    async fn start(answer: Answer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("local addr");
        let (tx, requests) = mpsc::unbounded_channel();
        let tx = Arc::new(tx);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let tx = tx.clone();
                        async move { Ok::<_, Infallible>(serve(req, &tx, answer).await) }
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

    /// The next request, within the test bound.
    async fn next(&mut self) -> Seen {
        tokio::time::timeout(BOUND, self.requests.recv())
            .await
            .expect("a request to the API server in time")
            .expect("the API server runs")
    }
}

async fn serve(
    req: Request<Incoming>,
    tx: &mpsc::UnboundedSender<Seen>,
    answer: Answer,
) -> Response<Full<Bytes>> {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let (method, path, query) = (
        req.method().to_string(),
        req.uri().path().to_owned(),
        req.uri().query().unwrap_or_default().to_owned(),
    );
    let (content_type, authorization) = (header("content-type"), header("authorization"));
    let bytes = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let _ = tx.send(Seen {
        method,
        path,
        query,
        content_type,
        authorization,
        body,
    });
    let (status, reply) = match answer {
        Answer::Ok => (
            StatusCode::OK,
            json!({
                "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                "metadata": {"name": "app-0", "namespace": "team"}
            }),
        ),
        Answer::Forbidden => (
            StatusCode::FORBIDDEN,
            json!({
                "apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "Forbidden",
                "code": 403,
                "message": "pods \"app-0\" is forbidden: User \"system:serviceaccount:team:default\" cannot patch resource \"pods\""
            }),
        ),
    };
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(reply.to_string())))
        .expect("response")
}

/// Checks everything about a patch but its labels and annotations, and returns those.
fn metadata_of(seen: &Seen) -> (&Value, &Value) {
    assert_eq!(seen.method, "PATCH", "{seen:?}");
    assert_eq!(seen.path, "/api/v1/namespaces/team/pods/app-0", "{seen:?}");
    assert!(
        seen.query
            .split('&')
            .any(|p| p == "fieldManager=baton-sidecar"),
        "{seen:?}"
    );
    assert_eq!(
        seen.content_type, "application/merge-patch+json",
        "{seen:?}"
    );
    assert_eq!(seen.authorization, "Bearer sidecar-token", "{seen:?}");
    let metadata = seen.body["metadata"]
        .as_object()
        .unwrap_or_else(|| panic!("no metadata: {seen:?}"));
    assert_eq!(metadata.len(), 2, "only labels and annotations: {seen:?}");
    (&metadata["labels"], &metadata["annotations"])
}

fn pod_flags() -> [&'static str; 4] {
    ["--pod", "app-0", "--namespace", "team"]
}

async fn the_leader_labels_its_pod_and_relabels_it_candidate_on_sigterm() {
    let mut api = FakeApiServer::start(Answer::Ok).await;
    let election = unique("labelled");
    let mut sidecar = Sidecar::start_with_env("app-0", &[&election], &pod_flags(), &api.env());

    // The first patches may say candidate (before the election settles); then leader.
    let leading = loop {
        let seen = api.next().await;
        let (labels, annotations) = metadata_of(&seen);
        match labels["baton.dev/role"].as_str() {
            Some("leader") => break annotations.clone(),
            Some("candidate") => {
                assert_eq!(
                    *annotations,
                    json!({"baton.dev/leader-since": null, "baton.dev/fencing-token": null}),
                    "{seen:?}"
                );
            }
            other => panic!("unexpected role {other:?}: {seen:?}"),
        }
    };
    let answer = sidecar.call("GET", &format!("/leader/{election}")).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let leader = &answer.body["leader"];
    assert_eq!(leader["identity"], "app-0");
    assert_eq!(
        leading,
        json!({
            "baton.dev/leader-since": leader["since"],
            "baton.dev/fencing-token": leader["token"].to_string(),
        })
    );

    let status = sidecar.terminate();
    assert!(status.success(), "{status:?}");
    let mut last = None;
    while let Ok(seen) = api.requests.try_recv() {
        last = Some(seen);
    }
    let seen = last.expect("a final patch before exit");
    let (labels, annotations) = metadata_of(&seen);
    assert_eq!(*labels, json!({"baton.dev/role": "candidate"}));
    assert_eq!(
        *annotations,
        json!({"baton.dev/leader-since": null, "baton.dev/fencing-token": null})
    );
}

async fn a_forbidden_patch_is_explained_and_retried() {
    let mut api = FakeApiServer::start(Answer::Forbidden).await;
    let election = unique("forbidden");
    let sidecar = Sidecar::start_with_env("app-0", &[&election], &pod_flags(), &api.env());
    let line = sidecar.wait_log("pod labels not updated");
    assert!(
        line.contains("grant it `patch` on `pods`") && line.contains("team/app-0"),
        "{line}"
    );
    // Still serving, and it tries again (with backoff) rather than giving up.
    metadata_of(&api.next().await);
    metadata_of(&api.next().await);
    let answer = sidecar.call("GET", &format!("/leader/{election}")).await;
    assert_eq!(answer.status, 200, "{answer:?}");
}

async fn without_pod_flags_the_sidecar_never_calls_kubernetes() {
    let mut api = FakeApiServer::start(Answer::Ok).await;
    let election = unique("unlabelled");
    let mut sidecar = Sidecar::start_with_env("app-0", &[&election], &[], &api.env());
    // Leading, then resigning and exiting: every moment a labeler would have patched.
    sidecar.wait_log("became the leader");
    let status = sidecar.terminate();
    assert!(status.success(), "{status:?}");
    assert!(
        api.requests.try_recv().is_err(),
        "no request may reach the API server"
    );
}

#[test]
fn no_kubernetes_access_is_a_clear_startup_error() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_baton-sidecar"))
        .args(["--ensemble", "127.0.0.1:1", "--identity", "app-0"])
        .args(pod_flags())
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env("HOME", "/nonexistent")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .expect("run baton-sidecar");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no Kubernetes API access") && stderr.contains("team/app-0"),
        "{stderr}"
    );
}

against_both!(
    the_leader_labels_its_pod_and_relabels_it_candidate_on_sigterm,
    a_forbidden_patch_is_explained_and_retried,
    without_pod_flags_the_sidecar_never_calls_kubernetes,
);
