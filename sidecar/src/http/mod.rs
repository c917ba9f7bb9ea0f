//! The localhost HTTP API on `--listen` (DESIGN.md §2): hyper HTTP/1.1, one task per
//! connection, JSON answers, small bodies only.

pub mod api;
mod error_code;
mod handlers;
pub mod openapi;
mod query;
mod reply;
mod route;
mod sse;

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use api::{DEFAULT_LOCK_WAIT, DEFAULT_TTL, MAX_TTL, MAX_WAIT, MIN_TTL};
pub use handlers::{ApiState, Campaigns, leader_body};
// `Query` is public (like `route`) only so the proptests in `sidecar/tests/http_parsing.rs`
// and the cargo-fuzz targets in `tests/fuzz/` can drive the parsers directly; nothing else uses it.
pub use error_code::ErrorCode;
pub use query::Query;
pub use reply::{ApiError, Body};
pub use route::{Route, route};

use crate::metrics::HttpLabels;

/// How long a client may take to send a request's headers. hyper enforces no limit unless it
/// is given a timer, and without one a client that stops halfway holds its connection (and a
/// file descriptor) forever: enough of them exhaust the process's descriptors.
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Largest request body accepted. The API takes its parameters in the query string; a body is
/// tolerated (and ignored) only up to this size.
pub const MAX_BODY: usize = 4096;

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// The whole API (`--listen`, localhost).
    Full,
    /// What the kubelet and Prometheus need (`--probe-listen`, the pod IP, which anyone on the
    /// pod network reaches): health, readiness, whether this pod leads an election (status
    /// only) and metrics. Nothing that acts as this pod, and nothing that names who leads:
    /// `/leader` would tell anyone the leader of every election this pod follows.
    ProbesOnly,
}

impl Exposure {
    /// Whether a listener of this exposure serves `route`: the probe port serves the endpoints
    /// the API's table marks `probe` (whatever the query: no probe route streams or waits, so
    /// `follow=stream` never holds a connection open there).
    pub fn serves(self, route: &Route) -> bool {
        match self {
            Exposure::Full => true,
            Exposure::ProbesOnly => route.endpoint().probe,
        }
    }
}

/// Serves the API on `listener` until `stop` is set; open connections finish their current
/// request (long-polls end when `state.draining` is set).
pub async fn serve(
    listener: TcpListener,
    state: Arc<ApiState>,
    exposure: Exposure,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "HTTP accept failed");
                    continue;
                }
            },
            _ = stopped(&mut stop) => return,
        };
        let state = state.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(respond(&state, exposure, req).await) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                _ = stopped(&mut stop) => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
            }
        });
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns must not live across an await.
    let _ = stop.wait_for(|s| *s).await.is_ok();
}

/// The endpoints the probe port serves, for its refusal's message: `GET /healthz, ...`.
fn probe_routes() -> String {
    api::ENDPOINTS
        .iter()
        .filter(|e| e.probe)
        .map(|e| {
            let path = if e.default_name {
                e.path.replace("/{name}", "[/NAME]")
            } else {
                e.path.replace("{name}", "NAME")
            };
            format!("{} {path}", e.method)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Answers one request, counting it by route and status.
async fn respond(state: &ApiState, exposure: Exposure, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().map(str::to_owned);
    let routed = route(&method, &path).and_then(|route| {
        if exposure.serves(&route) {
            Ok(route)
        } else {
            Err(ApiError::new(
                ErrorCode::ProbePortReadOnly,
                format!(
                    "{method} {path} is served only on the localhost API (--listen); the probe \
                     port answers {}",
                    probe_routes()
                ),
            ))
        }
    });
    let label = routed.as_ref().map_or("unknown", Route::label);
    let result = match routed {
        Ok(route) => match read_body(req).await {
            Ok(()) if exposure == Exposure::ProbesOnly => {
                handlers::handle_probe(state, route, query.as_deref()).await
            }
            Ok(()) => handlers::handle(state, route, query.as_deref()).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    let response = result.unwrap_or_else(ApiError::into_response);
    tracing::debug!(%method, %path, status = response.status().as_u16(), "HTTP request");
    state
        .metrics
        .http_requests
        .get_or_create(&HttpLabels {
            route: label.to_owned(),
            status: response.status().as_u16().to_string(),
        })
        .inc();
    response
}

/// Reads (and drops) the body, refusing more than [`MAX_BODY`] bytes with 413.
async fn read_body(req: Request<Incoming>) -> Result<(), ApiError> {
    let too_large = || {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "request bodies are limited to {MAX_BODY} bytes; parameters go in the query string"
            ),
        )
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(_) => Ok(()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(too_large())
        }
        Err(e) => Err(ApiError::bad_request(
            ErrorCode::BadBody,
            format!("could not read the request body: {e}"),
        )),
    }
}
