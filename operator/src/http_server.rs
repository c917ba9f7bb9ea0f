//! `/metrics`, `/healthz` (liveness: the process answers) and `/readyz` (readiness: the
//! admission webhook, when this replica serves one, answers with a certificate the API server
//! trusts) on `--metrics-addr`.

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::metrics::Metrics;
use crate::webhook::server::ReloadableCert;

/// What `/readyz` answers. A replica is ready once the webhook it serves (if any) listens with
/// the certificate the caBundle names: until then the webhook Service must not send it
/// reviews, which with `failurePolicy: Fail` would refuse pods. Liveness does not wait for it.
#[derive(Debug, Default)]
pub struct Readiness {
    serves_webhook: bool,
    webhook: OnceLock<Arc<ReloadableCert>>,
}

impl Readiness {
    /// `serves_webhook`: whether this replica is to serve the webhook (`--webhook-addr`).
    pub fn new(serves_webhook: bool) -> Arc<Readiness> {
        Arc::new(Readiness {
            serves_webhook,
            webhook: OnceLock::new(),
        })
    }

    /// The webhook's listener is bound and served, with `cert`.
    pub fn webhook_listening(&self, cert: Arc<ReloadableCert>) {
        let _ = self.webhook.set(cert);
    }

    /// `Ok` when ready; else why not.
    pub fn check(&self) -> Result<(), &'static str> {
        if !self.serves_webhook {
            return Ok(());
        }
        match self.webhook.get() {
            None => Err("the admission webhook is not listening yet"),
            Some(cert) if !cert.is_trusted() => Err(
                "the admission webhook has not loaded its stored certificate yet (the Secret or the API server is unreachable)",
            ),
            Some(_) => Ok(()),
        }
    }
}

/// How long a client may take to send a request's headers. hyper enforces no limit unless it
/// is given a timer, and without one a client that stops halfway holds its connection (and a
/// file descriptor) forever: enough of them exhaust the process's descriptors.
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves until the task is dropped; every connection gets its own task.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, readiness: Arc<Readiness>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                continue;
            }
        };
        let metrics = metrics.clone();
        let readiness = readiness.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let metrics = metrics.clone();
                let readiness = readiness.clone();
                async move { Ok::<_, Infallible>(answer(&metrics, &readiness, &req)) }
            });
            if let Err(e) = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "metrics connection ended with an error");
            }
        });
    }
}

fn answer(
    metrics: &Metrics,
    readiness: &Readiness,
    req: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        (&Method::GET, "/readyz") => match readiness.check() {
            Ok(()) => (StatusCode::OK, "text/plain", "ok\n".to_string()),
            Err(why) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("{why}\n"),
            ),
        },
        (&Method::GET, "/metrics") => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.render(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_string(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = http::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_tls::HttpClient;

    async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
        let answer = HttpClient::plain(std::time::Duration::from_secs(10))
            .request(&addr.to_string(), http::Method::GET, path, None)
            .await
            .expect("an answer");
        let text = String::from_utf8_lossy(&answer.body).into_owned();
        (answer.status.as_u16(), text)
    }

    #[tokio::test]
    async fn serves_health_and_metrics() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let metrics = Arc::new(Metrics::new());
        metrics.set_leader(true);
        metrics.start_reconcile().finish(Some("ensemble"));
        let server = tokio::spawn(serve(listener, metrics, Readiness::new(false)));
        assert_eq!(get(addr, "/healthz").await.0, 200);
        assert_eq!(get(addr, "/readyz").await.0, 200, "no webhook to wait for");
        let (status, text) = get(addr, "/metrics").await;
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("baton_operator_is_leader 1"), "{text}");
        assert!(
            text.contains("baton_operator_reconciles_total{result=\"ensemble\"} 1"),
            "{text}"
        );
        assert_eq!(get(addr, "/nope").await.0, 404);
        server.abort();
    }

    /// A replica that serves the webhook is live at once but ready only once the webhook
    /// listens with its real certificate: not before it listens, not with the interim one.
    #[tokio::test]
    async fn readiness_waits_for_the_webhook_and_its_real_certificate() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let readiness = Readiness::new(true);
        let server = tokio::spawn(serve(listener, Arc::new(Metrics::new()), readiness.clone()));
        assert_eq!(get(addr, "/healthz").await.0, 200);
        let (status, why) = get(addr, "/readyz").await;
        assert_eq!(status, 503);
        assert!(why.contains("not listening"), "{why}");

        let bundle = crate::webhook::certs::new_bundle(
            &["baton-webhook.baton-system.svc".into()],
            None,
            k8s_openapi::jiff::Timestamp::now(),
        )
        .expect("bundle");
        let key = || {
            crate::webhook::server::certified_key(
                bundle.cert_pem.as_bytes(),
                bundle.key_pem.as_bytes(),
                "test",
            )
            .expect("key")
        };
        let cert = ReloadableCert::interim(key());
        readiness.webhook_listening(cert.clone());
        let (status, why) = get(addr, "/readyz").await;
        assert_eq!(status, 503);
        assert!(why.contains("stored certificate"), "{why}");

        cert.replace(key());
        assert_eq!(get(addr, "/readyz").await.0, 200);
        assert_eq!(get(addr, "/healthz").await.0, 200);
        server.abort();
    }
}
