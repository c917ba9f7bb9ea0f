//! The pod view without a Kubernetes API server to speak of: no Kubernetes call at all without
//! `--pod/--namespace` (a recording stand-in on loopback, found through a kubeconfig as kubectl
//! would), and a clear start-up error without any Kubernetes access.
//!
//! What the patches do, with the chart's RBAC and pod-label policy, and how a refusal is
//! explained, is tested against the real API server: `tests/kube/tests/sidecar.rs`.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use common::{Sidecar, unique};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// A stand-in API server: records every request, answers each with the pod's metadata.
struct FakeApiServer {
    /// `METHOD path` of each request.
    requests: mpsc::UnboundedReceiver<String>,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl FakeApiServer {
    async fn start() -> Self {
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
                        async move { Ok::<_, Infallible>(serve(req, &tx).await) }
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
}

async fn serve(
    req: Request<Incoming>,
    tx: &mpsc::UnboundedSender<String>,
) -> Response<Full<Bytes>> {
    let _ = tx.send(format!("{} {}", req.method(), req.uri()));
    let reply = json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {"name": "app-0", "namespace": "team"}
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(reply.to_string())))
        .expect("response")
}

fn pod_flags() -> [&'static str; 4] {
    ["--pod", "app-0", "--namespace", "team"]
}

async fn without_pod_flags_the_sidecar_never_calls_kubernetes() {
    let mut api = FakeApiServer::start().await;
    let election = unique("unlabelled");
    let mut sidecar = Sidecar::start_with_env("app-0", &[&election], &[], &api.env());
    // Leading, then resigning and exiting: every moment a labeler would have patched.
    sidecar.wait_log("became the leader");
    let status = sidecar.terminate();
    assert!(status.success(), "{status:?}");
    let request = api.requests.try_recv();
    assert!(
        request.is_err(),
        "no request may reach the API server: {request:?}"
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

against_both!(without_pod_flags_the_sidecar_never_calls_kubernetes);
