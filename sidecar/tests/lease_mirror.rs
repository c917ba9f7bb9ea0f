//! Kubernetes-visible elections (`--mirror-lease`) without the real API server: with
//! `--pod/--namespace` but without the flag no Lease is touched (a recording stand-in API
//! server on loopback, found through a kubeconfig as kubectl would), and which elections have a
//! valid Lease name.
//!
//! The mirroring itself (create, renew, hand-over, release on resign and on SIGTERM, with the
//! chart's RBAC) is tested against the real API server: `tests/kube/tests/sidecar.rs`.

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

/// A stand-in API server: sends `METHOD path` of each Lease request, answers pod patches with
/// the pod's metadata and anything else 404.
struct FakeApiServer {
    leases: mpsc::UnboundedReceiver<String>,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl FakeApiServer {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("local addr");
        let (tx, leases) = mpsc::unbounded_channel();
        let tx = Arc::new(tx);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let tx = tx.clone();
                        async move { Ok::<_, Infallible>(serve(req, &tx)) }
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
            leases,
            kubeconfig,
            _dir: dir,
        }
    }

    fn env(&self) -> [(&str, &str); 1] {
        [("KUBECONFIG", self.kubeconfig.to_str().expect("utf-8 path"))]
    }
}

fn serve(req: Request<Incoming>, tx: &mpsc::UnboundedSender<String>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let (code, reply) = if path.starts_with("/api/v1/namespaces/team/pods/") {
        (
            StatusCode::OK,
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                   "metadata": {"name": "app-0", "namespace": "team"}}),
        )
    } else {
        if path.contains("/leases") {
            let _ = tx.send(format!("{} {path}", req.method()));
        }
        (
            StatusCode::NOT_FOUND,
            json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                   "reason": "NotFound", "code": 404}),
        )
    };
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(reply.to_string())))
        .expect("response")
}

async fn without_the_flag_no_lease_is_written() {
    let mut api = FakeApiServer::start().await;
    let election = unique("unmirrored");
    let flags = ["--pod", "app-0", "--namespace", "team"];
    let mut sidecar = Sidecar::start_with_env("app-0", &[&election], &flags, &api.env());
    sidecar.wait_log("became the leader");
    let status = sidecar.terminate();
    assert!(status.success(), "{status:?}");
    let request = api.leases.try_recv();
    assert!(
        request.is_err(),
        "no Lease request without --mirror-lease: {request:?}"
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
    // Each dot-separated part must start and end alphanumeric (the API server's rule).
    assert_eq!(lease_name("a.-b"), None);
    assert_eq!(lease_name("a-.b"), None);
    assert_eq!(lease_name("a..b"), None);
    assert_eq!(lease_name("a."), None);
    assert_eq!(lease_name(&"x".repeat(250)), None);
}

against_both!(without_the_flag_no_lease_is_written);
