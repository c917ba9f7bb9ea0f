//! The admin HTTP API on `--admin-addr`: health, readiness, metrics and status (DESIGN.md §1).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::status::Status;

/// What the admin handlers read.
#[derive(Clone)]
pub struct AdminContext {
    pub status: watch::Receiver<Status>,
    pub metrics: Arc<Metrics>,
    /// Peer addresses by member id, as configured.
    pub peers: Arc<Vec<(u64, String)>>,
}

/// Serves the admin API until `shutdown` fires.
pub async fn serve_admin(
    listener: TcpListener,
    ctx: AdminContext,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let ctx = ctx.clone();
                async move { Ok::<_, Infallible>(route(&ctx, &req)) }
            });
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "admin connection ended with an error");
            }
        });
    }
}

fn json(status: StatusCode, body: &impl serde::Serialize) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(bytes)))
        .unwrap_or_default()
}

fn error(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    json(
        status,
        &serde_json::json!({ "error": { "code": code, "message": message } }),
    )
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_default()
}

/// Answers one admin request.
pub fn route(ctx: &AdminContext, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    route_parts(ctx, req.method(), req.uri().path())
}

fn route_parts(ctx: &AdminContext, method: &Method, path: &str) -> Response<Full<Bytes>> {
    let status = ctx.status.borrow().clone();
    match (method, path) {
        (&Method::GET, "/healthz") => text(StatusCode::OK, "text/plain", "ok\n".into()),
        (&Method::GET, "/readyz") => {
            if status.is_ready() {
                text(StatusCode::OK, "text/plain", "ready\n".into())
            } else if status.leader_id == 0 {
                error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "NoLeader",
                    "this member knows no leader",
                )
            } else {
                error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "CatchingUp",
                    "this member has not applied everything committed yet",
                )
            }
        }
        (&Method::GET, "/metrics") => text(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            ctx.metrics.render(),
        ),
        (&Method::GET, "/v1/status") => json(StatusCode::OK, &status),
        (&Method::GET, "/v1/members") => {
            let members: Vec<_> = status
                .members
                .iter()
                .map(|id| {
                    let addr = ctx.peers.iter().find(|(m, _)| m == id).map(|(_, a)| a.clone());
                    serde_json::json!({ "id": id, "peerAddr": addr, "leader": *id == status.leader_id })
                })
                .collect();
            json(StatusCode::OK, &serde_json::json!({ "members": members }))
        }
        (&Method::POST, "/v1/members") => error(
            StatusCode::NOT_IMPLEMENTED,
            "NotImplemented",
            "membership changes arrive with the replicated ensemble",
        ),
        (&Method::DELETE, p) if p.starts_with("/v1/members/") => error(
            StatusCode::NOT_IMPLEMENTED,
            "NotImplemented",
            "membership changes arrive with the replicated ensemble",
        ),
        (_, "/healthz" | "/readyz" | "/metrics" | "/v1/status" | "/v1/members") => error(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "this path does not take that method",
        ),
        _ => error(StatusCode::NOT_FOUND, "NotFound", "no such admin endpoint"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(status: Status) -> AdminContext {
        let (_tx, rx) = watch::channel(status);
        AdminContext {
            status: rx,
            metrics: Arc::new(Metrics::new()),
            peers: Arc::new(vec![(1, "127.0.0.1:2888".into())]),
        }
    }

    #[test]
    fn readiness_follows_leader_and_apply() {
        let not_ready = ctx(Status {
            leader_id: 0,
            ..Default::default()
        });
        assert_eq!(
            route_parts(&not_ready, &Method::GET, "/readyz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let behind = ctx(Status {
            leader_id: 1,
            commit_index: 5,
            applied_index: 4,
            ..Default::default()
        });
        assert_eq!(
            route_parts(&behind, &Method::GET, "/readyz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let ready = ctx(Status {
            leader_id: 1,
            commit_index: 5,
            applied_index: 5,
            ..Default::default()
        });
        assert_eq!(
            route_parts(&ready, &Method::GET, "/readyz").status(),
            StatusCode::OK
        );
    }

    #[test]
    fn unknown_paths_and_methods() {
        let c = ctx(Status::default());
        assert_eq!(
            route_parts(&c, &Method::GET, "/nope").status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            route_parts(&c, &Method::POST, "/healthz").status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            route_parts(&c, &Method::GET, "/metrics").status(),
            StatusCode::OK
        );
    }
}
