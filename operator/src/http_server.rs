//! `/metrics` and `/healthz` on `--metrics-addr`.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// How long a client may take to send a request's headers. hyper enforces no limit unless it
/// is given a timer, and without one a client that stops halfway holds its connection (and a
/// file descriptor) forever: enough of them exhaust the process's descriptors.
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves until the task is dropped; every connection gets its own task.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                continue;
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let metrics = metrics.clone();
                async move { Ok::<_, Infallible>(answer(&metrics, &req)) }
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

fn answer(metrics: &Metrics, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => (StatusCode::OK, "text/plain", "ok\n".to_string()),
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
        let server = tokio::spawn(serve(listener, metrics));
        assert_eq!(get(addr, "/healthz").await.0, 200);
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
}
