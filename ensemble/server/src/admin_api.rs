//! The admin HTTP API on `--admin-addr`: health, readiness, metrics, status, membership and
//! backups (DESIGN.md §1).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

use crate::core::CoreMsg;
use crate::core::backup::BackupRefused;
use crate::core::membership::{AdminCommand, AdminError};

use crate::metrics::Metrics;
use crate::status::Status;

/// How long a client may take to send a request's headers. hyper enforces no limit unless it
/// is given a timer, and without one a client that stops halfway holds its connection (and a
/// file descriptor) forever: enough of them exhaust the process's descriptors.
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What the admin handlers read.
#[derive(Clone)]
pub struct AdminContext {
    pub status: watch::Receiver<Status>,
    pub metrics: Arc<Metrics>,
    /// The core, for membership and leadership commands.
    pub core: mpsc::Sender<CoreMsg>,
    /// Serve the test-only raw proposal endpoint (`--unsafe-testing-raw-proposals`).
    pub raw_proposals: bool,
}

/// Who is calling, as far as the connection proved it (DESIGN.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// TLS, with the admin certificate of this ensemble's CA.
    Admin,
    /// TLS without it (probes, Prometheus, anyone else): only the open routes.
    Anonymous,
    /// Plain HTTP under `--insecure-no-tls`: nothing can be checked, everything is served.
    Unchecked,
}

/// The admin port's TLS: the acceptor and the cluster whose admin certificate counts.
#[derive(Clone)]
pub struct AdminTls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    pub cluster: String,
}

/// How long `GET /v1/snapshot` waits for the leader to confirm the state is current and for
/// this member to apply that far.
const SNAPSHOT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// Largest request body the admin API reads.
const MAX_BODY: usize = 64 * 1024;

/// Serves the admin API until `shutdown` fires: HTTPS when `tls` is given, else plain HTTP.
pub async fn serve_admin(
    listener: TcpListener,
    ctx: AdminContext,
    tls: Option<AdminTls>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let ctx = ctx.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let Some(tls) = tls else {
                return serve_connection(ctx, Caller::Unchecked, stream, peer).await;
            };
            // The TLS handshake gets the same bound as a request's headers: a client that
            // stalls in it must not hold a connection forever.
            let accepted = tokio::time::timeout(HEADER_READ_TIMEOUT, tls.acceptor.accept(stream));
            let stream = match accepted.await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    return tracing::debug!(%peer, error = %e, "admin TLS handshake failed");
                }
                Err(_) => return tracing::debug!(%peer, "admin TLS handshake timed out"),
            };
            let caller = match baton_tls::peer_identity(stream.get_ref().1) {
                Some(Ok(identity)) if identity == baton_tls::Identity::admin(&tls.cluster) => {
                    Caller::Admin
                }
                _ => Caller::Anonymous,
            };
            serve_connection(ctx, caller, stream, peer).await;
        });
    }
}

async fn serve_connection<S>(
    ctx: AdminContext,
    caller: Caller,
    stream: S,
    peer: std::net::SocketAddr,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let service = service_fn(move |req| {
        let ctx = ctx.clone();
        async move { Ok::<_, Infallible>(route(&ctx, caller, req).await) }
    });
    if let Err(e) = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(%peer, error = %e, "admin connection ended with an error");
    }
}

/// One call of the admin API, as the reference documents it. The router below answers these
/// and no others (a test reads its match arms); whether a call is open to anyone and which
/// paths answer 405 rather than 404 come from this table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminRoute {
    pub method: &'static str,
    /// The path; `{id}` stands for a member id.
    pub path: &'static str,
    /// Served to callers without the admin certificate (probes, Prometheus).
    pub open: bool,
    /// Only the leader acts on it; other members answer 421 `NotLeader` with `leaderId`.
    pub leader_only: bool,
    /// The JSON body it takes, in words (empty: none).
    pub body: &'static str,
    /// What it answers, in words.
    pub answer: &'static str,
    /// The error codes it can answer with beyond `Forbidden`, `NotFound` and
    /// `MethodNotAllowed`, each as `STATUS Code`.
    pub errors: &'static [&'static str],
}

/// Every admin call (the test-only raw proposal of `--unsafe-testing-raw-proposals` aside).
pub const ADMIN_ROUTES: &[AdminRoute] = &[
    AdminRoute {
        method: "GET",
        path: "/healthz",
        open: true,
        leader_only: false,
        body: "",
        answer: "200 `ok` (text) while the process serves.",
        errors: &[],
    },
    AdminRoute {
        method: "GET",
        path: "/readyz",
        open: true,
        leader_only: false,
        body: "",
        answer: "200 `ready` (text) once a leader is known and everything known committed is \
                 applied.",
        errors: &["503 NoLeader", "503 CatchingUp"],
    },
    AdminRoute {
        method: "GET",
        path: "/metrics",
        open: true,
        leader_only: false,
        body: "",
        answer: "200 OpenMetrics text (the ensemble's metric families).",
        errors: &[],
    },
    AdminRoute {
        method: "GET",
        path: "/v1/status",
        open: false,
        leader_only: false,
        body: "",
        answer: "200 `{id, role, leaderId, term, commitIndex, appliedIndex, members, learners, \
                 clusterId, sessions, znodes, settings, featureLevel, maxFeatureLevel}`, fresh \
                 from the member's core.",
        errors: &[],
    },
    AdminRoute {
        method: "GET",
        path: "/v1/members",
        open: false,
        leader_only: false,
        body: "",
        answer: "200 `{members: [{id, peerAddr, role, leader}]}` (`role`: `voter` or `learner`).",
        errors: &[],
    },
    AdminRoute {
        method: "POST",
        path: "/v1/members",
        open: false,
        leader_only: true,
        body: "`{id, peerAddr}`: a positive id and `HOST:PORT`.",
        answer: "202 once proposed: the member is added as a learner (promoted to voter when it \
                 has caught up).",
        errors: &[
            "400 BadRequest",
            "409 Conflict",
            "413 TooLarge",
            "421 NotLeader",
            "503 ShuttingDown",
        ],
    },
    AdminRoute {
        method: "DELETE",
        path: "/v1/members/{id}",
        open: false,
        leader_only: true,
        body: "",
        answer: "202 once proposed: the member is removed.",
        errors: &[
            "400 BadRequest",
            "409 Conflict",
            "421 NotLeader",
            "503 ShuttingDown",
        ],
    },
    AdminRoute {
        method: "POST",
        path: "/v1/leader/transfer",
        open: false,
        leader_only: true,
        body: "`{to}` (optional): the voter to hand leadership to; without it the most caught-up \
               voter.",
        answer: "202 once the transfer started.",
        errors: &[
            "400 BadRequest",
            "409 Conflict",
            "413 TooLarge",
            "421 NotLeader",
            "503 ShuttingDown",
        ],
    },
    AdminRoute {
        method: "GET",
        path: "/v1/settings",
        open: false,
        leader_only: false,
        body: "",
        answer: "200 the replicated settings and alarms: `{set, appliedIndex, checkIdentities, \
                 namespaceZnodes, namespaceBytes, sharedZnodes, sharedBytes, \
                 ephemeralsPerSession, alarms: [{member, kind}]}` (also `settings` in \
                 `/v1/status`).",
        errors: &[],
    },
    AdminRoute {
        method: "PUT",
        path: "/v1/settings",
        open: false,
        leader_only: true,
        body: "Any of `{checkIdentities, namespaceZnodes, namespaceBytes, sharedZnodes, \
               sharedBytes, ephemeralsPerSession}`; those left out keep their value.",
        answer: "200 the new settings, once applied.",
        errors: &[
            "400 BadRequest",
            "409 Conflict",
            "413 TooLarge",
            "421 NotLeader",
            "503 ShuttingDown",
        ],
    },
    AdminRoute {
        method: "GET",
        path: "/v1/snapshot",
        open: false,
        leader_only: false,
        body: "",
        answer: "200 a backup file (`application/octet-stream`, headers `x-baton-index` and \
                 `x-baton-term`) of the state as applied through at least the commit index the \
                 leader confirmed: what `baton-ensemble snapshot save` fetches.",
        errors: &[
            "503 NoLeader",
            "503 LeaderChanged",
            "503 NotConfirmed",
            "503 ShuttingDown",
        ],
    },
];

/// Whether `path` is `pattern`, `{id}` matching one segment.
fn path_matches(pattern: &str, path: &str) -> bool {
    match pattern.split_once("{id}") {
        Some((prefix, "")) => path
            .strip_prefix(prefix)
            .is_some_and(|rest| !rest.is_empty() && !rest.contains('/')),
        _ => pattern == path,
    }
}

/// Routes anyone may call: what probes and Prometheus need, and nothing that tells more.
fn is_open(method: &Method, path: &str) -> bool {
    ADMIN_ROUTES
        .iter()
        .any(|r| r.open && r.method == method.as_str() && path_matches(r.path, path))
}

/// Whether some admin call has this path (with another method: 405, not 404).
fn is_known_path(path: &str) -> bool {
    ADMIN_ROUTES.iter().any(|r| path_matches(r.path, path))
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

/// Answers one admin request from `caller`.
pub async fn route(
    ctx: &AdminContext,
    caller: Caller,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    if caller == Caller::Anonymous && !is_open(&method, &path) {
        tracing::info!(%method, %path, "admin call without the admin certificate refused");
        return error(
            StatusCode::FORBIDDEN,
            "Forbidden",
            "only /healthz, /readyz and /metrics are open; everything else needs the admin \
             certificate of this ensemble's CA",
        );
    }
    let command = match (&method, path.as_str()) {
        #[cfg(feature = "testing")]
        (&Method::POST, "/v1/testing/raw-proposal") if ctx.raw_proposals => {
            match http_body_util::Limited::new(req.into_body(), MAX_BODY)
                .collect()
                .await
            {
                Ok(body) => AdminCommand::RawProposal {
                    data: body.to_bytes().to_vec(),
                },
                Err(_) => {
                    return error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "TooLarge",
                        "body over 64 KiB",
                    );
                }
            }
        }
        (&Method::POST, "/v1/members") => match read_json::<AddMemberBody>(req).await {
            Ok(b) => AdminCommand::AddMember {
                id: b.id,
                peer_addr: b.peer_addr,
            },
            Err(resp) => return resp,
        },
        (&Method::POST, "/v1/leader/transfer") => match read_json::<TransferBody>(req).await {
            Ok(b) => AdminCommand::TransferLeader { to: b.to },
            Err(resp) => return resp,
        },
        (&Method::DELETE, p) if p.starts_with("/v1/members/") => {
            match p["/v1/members/".len()..].parse::<u64>() {
                Ok(id) => AdminCommand::RemoveMember { id },
                Err(_) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        "member id must be a positive integer",
                    );
                }
            }
        }
        (&Method::GET, "/v1/status") => {
            // Fresh from the core, so a caller sees the effect of what it just did.
            let (tx, rx) = oneshot::channel();
            let status = match ctx.core.send(CoreMsg::Status(tx)).await {
                Ok(()) => rx.await.unwrap_or_else(|_| ctx.status.borrow().clone()),
                Err(_) => ctx.status.borrow().clone(),
            };
            return json(StatusCode::OK, &status);
        }
        (&Method::GET, "/v1/snapshot") => return snapshot(ctx).await,
        (&Method::GET, "/v1/settings") => {
            let (tx, rx) = oneshot::channel();
            let status = match ctx.core.send(CoreMsg::Status(tx)).await {
                Ok(()) => rx.await.unwrap_or_else(|_| ctx.status.borrow().clone()),
                Err(_) => ctx.status.borrow().clone(),
            };
            return json(StatusCode::OK, &status.settings);
        }
        (&Method::PUT, "/v1/settings") => match read_json::<SettingsBody>(req).await {
            Ok(b) => AdminCommand::ChangeSettings {
                changes: b.changes(),
            },
            Err(resp) => return resp,
        },
        _ => return route_parts(ctx, &method, &path),
    };
    run_command(ctx, command).await
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AddMemberBody {
    id: u64,
    peer_addr: String,
}

/// `PUT /v1/settings`: the settings to change; those left out keep their value.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SettingsBody {
    check_identities: Option<bool>,
    namespace_znodes: Option<u64>,
    namespace_bytes: Option<u64>,
    shared_znodes: Option<u64>,
    shared_bytes: Option<u64>,
    ephemerals_per_session: Option<u64>,
}

impl SettingsBody {
    fn changes(&self) -> Vec<baton_machine::Setting> {
        use baton_machine::Setting::*;
        let mut changes = Vec::new();
        changes.extend(self.check_identities.map(CheckIdentities));
        changes.extend(self.namespace_znodes.map(NamespaceZnodes));
        changes.extend(self.namespace_bytes.map(NamespaceBytes));
        changes.extend(self.shared_znodes.map(SharedZnodes));
        changes.extend(self.shared_bytes.map(SharedBytes));
        changes.extend(self.ephemerals_per_session.map(EphemeralsPerSession));
        changes
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TransferBody {
    #[serde(default)]
    to: Option<u64>,
}

async fn read_json<T: serde::de::DeserializeOwned + Default>(
    req: Request<Incoming>,
) -> Result<T, Response<Full<Bytes>>> {
    let limited = http_body_util::Limited::new(req.into_body(), MAX_BODY);
    let bytes = match limited.collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "TooLarge",
                "request body over 64 KiB",
            ));
        }
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("request body is not valid JSON for this call: {e}"),
        )
    })
}

async fn run_command(ctx: &AdminContext, command: AdminCommand) -> Response<Full<Bytes>> {
    if let AdminCommand::AddMember { id, peer_addr } = &command
        && (*id == 0
            || peer_addr
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
                .is_none())
    {
        return error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "expected {\"id\": N (positive), \"peerAddr\": \"HOST:PORT\"}",
        );
    }
    // A settings change is answered once applied; membership commands once proposed.
    let done = if matches!(command, AdminCommand::ChangeSettings { .. }) {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    let (reply, answer) = oneshot::channel();
    if ctx
        .core
        .send(CoreMsg::Admin { command, reply })
        .await
        .is_err()
    {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ShuttingDown",
            "the server is shutting down",
        );
    }
    match answer.await {
        Ok(Ok(body)) => json(done, &body),
        Ok(Err(AdminError::NotLeader { leader_id })) => json(
            StatusCode::MISDIRECTED_REQUEST,
            &serde_json::json!({ "error": { "code": "NotLeader", "message": "send this to the leader", "leaderId": leader_id } }),
        ),
        Ok(Err(AdminError::Conflict(m))) => error(StatusCode::CONFLICT, "Conflict", &m),
        Ok(Err(AdminError::BadRequest(m))) => error(StatusCode::BAD_REQUEST, "BadRequest", &m),
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ShuttingDown",
            "the server is shutting down",
        ),
    }
}

/// `GET /v1/snapshot`: a backup file (`crate::backup::format`) of the state as applied through
/// at least the commit index the leader confirmed when asked.
async fn snapshot(ctx: &AdminContext) -> Response<Full<Bytes>> {
    let shutting_down = || {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ShuttingDown",
            "the server is shutting down",
        )
    };
    let (tx, rx) = oneshot::channel();
    if ctx.core.send(CoreMsg::Backup(tx)).await.is_err() {
        return shutting_down();
    }
    let snap = match tokio::time::timeout(SNAPSHOT_DEADLINE, rx).await {
        Ok(Ok(Ok(snap))) => snap,
        Ok(Ok(Err(refused))) => {
            let code = match refused {
                BackupRefused::NoLeader => "NoLeader",
                BackupRefused::LeaderChanged => "LeaderChanged",
            };
            return error(StatusCode::SERVICE_UNAVAILABLE, code, &refused.to_string());
        }
        Ok(Err(_)) => return shutting_down(),
        Err(_) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "NotConfirmed",
                &format!(
                    "the leader did not confirm this member's state within {SNAPSHOT_DEADLINE:?} \
                     (no quorum?); try again or ask another member"
                ),
            );
        }
    };
    let cluster = ctx.status.borrow().cluster_id.clone();
    let (index, term) = (snap.index, snap.term);
    // Hashing a large state takes a while: not on a runtime thread.
    let encoded = tokio::task::spawn_blocking(move || {
        crate::backup::format::Backup {
            cluster_id: &cluster,
            index,
            term,
            body: &snap.data,
        }
        .encode()
    })
    .await;
    let Ok(file) = encoded else {
        return shutting_down();
    };
    tracing::info!(index, term, bytes = file.len(), "served a backup snapshot");
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header("x-baton-index", index)
        .header("x-baton-term", term)
        .body(Full::new(Bytes::from(file)))
        .unwrap_or_default()
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
                    let role = if status.learners.contains(id) {
                        "learner"
                    } else {
                        "voter"
                    };
                    serde_json::json!({
                        "id": id,
                        "peerAddr": status.addresses.get(id),
                        "role": role,
                        "leader": *id == status.leader_id,
                    })
                })
                .collect();
            json(StatusCode::OK, &serde_json::json!({ "members": members }))
        }
        (_, p) if is_known_path(p) => error(
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
        let (core, _) = mpsc::channel(1);
        AdminContext {
            status: rx,
            metrics: Arc::new(Metrics::new()),
            core,
            raw_proposals: false,
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

    /// The table lists exactly the calls the router's match arms answer.
    #[test]
    fn the_table_is_what_the_router_answers() {
        let file = include_str!("admin_api.rs");
        // The router, not these tests.
        let source = file.split("#[cfg(test)]\nmod tests").next().unwrap_or(file);
        let mut routed = std::collections::BTreeSet::new();
        for (i, _) in source.match_indices("(&Method::") {
            let rest = &source[i + "(&Method::".len()..];
            let Some((method, rest)) = rest.split_once(", ") else {
                continue;
            };
            if method.is_empty() || !method.chars().all(|c| c.is_ascii_uppercase()) {
                continue;
            }
            let path = if let Some(rest) = rest.strip_prefix('"') {
                rest.split('"').next().unwrap_or_default().to_owned()
            } else if rest.starts_with("p)") {
                // `(&Method::DELETE, p) if p.starts_with("/v1/members/")`
                let prefix = rest.split('"').nth(1).unwrap_or_default();
                format!("{prefix}{{id}}")
            } else {
                continue;
            };
            if path.starts_with("/v1/testing/") {
                continue;
            }
            routed.insert((method.to_owned(), path));
        }
        let table: std::collections::BTreeSet<_> = ADMIN_ROUTES
            .iter()
            .map(|r| (r.method.to_owned(), r.path.to_owned()))
            .collect();
        assert_eq!(routed, table);
    }

    #[test]
    fn other_methods_on_known_paths_are_405() {
        let c = ctx(Status::default());
        for path in ["/v1/leader/transfer", "/v1/members/3", "/v1/snapshot"] {
            assert_eq!(
                route_parts(&c, &Method::PATCH, path).status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{path}"
            );
        }
        assert!(is_open(&Method::GET, "/metrics"));
        assert!(!is_open(&Method::GET, "/v1/status"));
        assert!(!is_open(&Method::POST, "/healthz"));
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
