//! Requests answered from this member's tree and watch table, never through the log: reads,
//! watches, `auth`, `whoAmI` and pings. Their turn in the session's order is `requests.rs`'s
//! business; this is what happens when it comes.

use baton_machine::WatchKind;
use baton_machine::tenancy::K8S_SCHEME;
use baton_proto::{
    AddWatchMode, ClientInfo, ErrorCode, MultiReadOp, MultiReadResult, Request, Response,
    WatcherType,
};

use super::auth::authenticate;
use super::messages::ConnId;
use super::throttled_log::ThrottledLog;
use super::{Core, wire};

/// One line per interval about sessions that reach the watch limit.
static WATCH_LIMIT_LOG: ThrottledLog = ThrottledLog::every_10s();
/// One line per interval about failed authentications (anyone can send auth packets).
static AUTH_LOG: ThrottledLog = ThrottledLog::every_10s();

impl Core {
    /// Executes a request that does not go through the log, against this member's tree.
    pub(super) fn answer_local(
        &mut self,
        conn_id: ConnId,
        session_id: i64,
        xid: i32,
        request: Request,
    ) {
        let zxid = self.sm.last_applied();
        let limit = self.max_watches_per_session;
        let added = new_watch_paths(&self.watches, session_id, &request);
        let watched = self.watches.session_paths(session_id);
        let Some(conn) = self.clients.get_mut(conn_id) else {
            return;
        };
        if added > 0 && watched.saturating_add(added) > limit {
            // Watches live in this member's memory for as long as the session is connected;
            // the request is refused whole (nothing read, nothing registered), so the client
            // never holds a read whose watch silently did not register.
            self.metrics.watch_limit_refusals.inc();
            if let Some(suppressed) = WATCH_LIMIT_LOG.admit() {
                tracing::warn!(
                    peer = %conn.peer,
                    session = %format_args!("0x{session_id:x}"),
                    watched, limit, similar_lines_suppressed = suppressed,
                    "a session reached the watch limit (--max-watches-per-session); refusing its request with QuotaExceeded"
                );
            }
            conn.send(wire::error(xid, zxid, ErrorCode::QuotaExceeded));
            return;
        }
        let result: Result<Option<Response>, ErrorCode> = match &request {
            Request::Ping => {
                conn.send(wire::ok(xid, zxid, None));
                return;
            }
            // Only reached for a sync queued as a plain read, which `on_request` never does.
            Request::Sync { path } => Ok(Some(Response::Sync { path: path.clone() })),
            Request::Auth(packet) => {
                let super_digest = self.tenancy.super_digest.as_deref();
                match authenticate(packet, super_digest) {
                    Ok(ids) => {
                        for id in ids {
                            if id.scheme == baton_machine::tenancy::SUPER_SCHEME
                                && !conn.auth.contains(&id)
                            {
                                tracing::warn!(
                                    peer = %conn.peer, session = %format_args!("0x{session_id:x}"),
                                    "session authenticated as the super identity (--super-digest): every ACL and the namespace policy are off for it"
                                );
                            }
                            if !conn.auth.contains(&id) {
                                conn.auth.push(id);
                            }
                        }
                        conn.send(wire::ok(xid, 0, None));
                    }
                    Err(reason) => {
                        if packet.scheme == K8S_SCHEME {
                            self.metrics
                                .k8s_auth
                                .get_or_create(&[("result", "disabled")])
                                .inc();
                        }
                        // ZooKeeper answers AuthFailed and closes the connection.
                        if let Some(suppressed) = AUTH_LOG.admit() {
                            tracing::info!(
                                peer = %conn.peer, scheme = %packet.scheme, reason,
                                similar_lines_suppressed = suppressed,
                                "authentication failed; answering AuthFailed and closing the connection"
                            );
                        }
                        conn.send(wire::error(xid, 0, ErrorCode::AuthFailed));
                        conn.close();
                    }
                }
                return;
            }
            Request::WhoAmI => Ok(Some(Response::WhoAmI {
                client_info: conn
                    .auth
                    .iter()
                    .map(|id| ClientInfo {
                        auth_scheme: id.scheme.clone(),
                        // ZooKeeper's digest provider names the user, not the hashed id.
                        user: match id.scheme.as_str() {
                            "digest" => id.id.split(':').next().unwrap_or_default().to_string(),
                            _ => id.id.clone(),
                        },
                    })
                    .collect(),
            })),
            Request::SetWatches { req, .. } => {
                let sm = &self.sm;
                // Watches on paths the session may not read are dropped silently (the client
                // re-sends what it held; a refusal would fail its whole reconnect).
                let mut req = req.clone();
                let mut dropped = None;
                for list in [
                    &mut req.data_watches,
                    &mut req.exist_watches,
                    &mut req.child_watches,
                    &mut req.persistent_watches,
                    &mut req.persistent_recursive_watches,
                ] {
                    list.retain(|p| match sm.may_read(p, &conn.auth) {
                        Ok(()) => true,
                        Err(refusal) => {
                            dropped.get_or_insert((p.clone(), refusal));
                            false
                        }
                    });
                }
                let events = self.watches.set_watches(session_id, &req, |p| sm.stat(p));
                for event in events {
                    conn.send(wire::notification(event));
                }
                conn.send(wire::ok(xid, zxid, None));
                if let Some((path, refusal)) = dropped {
                    self.count_refusal(session_id, &path, refusal);
                }
                return;
            }
            Request::AddWatch(req) => match AddWatchMode::from_mode(req.mode) {
                Some(_) if self.sm.may_read(&req.path, &conn.auth).is_err() => {
                    Err(ErrorCode::NoAuth)
                }
                Some(mode) => {
                    self.watches
                        .add(session_id, &req.path, WatchKind::from(mode));
                    Ok(Some(Response::AddWatch))
                }
                None => Err(ErrorCode::BadArguments),
            },
            Request::CheckWatches(req) | Request::RemoveWatches(req) => {
                match WatcherType::from_code(req.watcher_type) {
                    None => Err(ErrorCode::BadArguments),
                    Some(t) if !self.watches.has(session_id, &req.path, t) => {
                        Err(ErrorCode::NoWatcher)
                    }
                    // ZooKeeper sends no event for a removal: the client raises *WatchRemoved itself.
                    Some(t) if matches!(request, Request::RemoveWatches(_)) => self
                        .watches
                        .remove(session_id, &req.path, t)
                        .map(|()| Some(Response::Empty))
                        .map_err(|e| e.code()),
                    Some(_) => Ok(Some(Response::Empty)),
                }
            }
            read => {
                let result = self.sm.read(session_id, &conn.auth, read);
                register_read_watches(&mut self.watches, session_id, read, &result);
                result.map(Some)
            }
        };
        if refused_somewhere(&result) {
            let Some(conn) = self.clients.get(conn_id) else {
                return;
            };
            if let Some((path, refusal)) = self.sm.read_refusal(&conn.auth, &request) {
                self.count_refusal(session_id, &path, refusal);
            }
        }
        let Some(conn) = self.clients.get_mut(conn_id) else {
            return;
        };
        match result {
            Ok(Some(Response::Empty)) | Ok(None) => conn.send(wire::ok(xid, zxid, None)),
            Ok(Some(body)) => conn.send(wire::ok(xid, zxid, Some(&body))),
            Err(err) => conn.send(wire::error(xid, zxid, err)),
        }
    }
}

/// Whether a local answer carries NoAuth (whole, or for one op of a multiRead).
fn refused_somewhere(result: &Result<Option<Response>, ErrorCode>) -> bool {
    match result {
        Err(ErrorCode::NoAuth) => true,
        Ok(Some(Response::MultiRead(results))) => results.iter().any(|r| {
            matches!(
                r,
                MultiReadResult::Error {
                    err: ErrorCode::NoAuth
                }
            )
        }),
        _ => false,
    }
}

/// How many paths `request` would start watching for `session_id` that it watches on none
/// yet: what the watch limit counts (a path watched several ways counts once).
fn new_watch_paths(
    watches: &baton_machine::WatchManager,
    session_id: i64,
    request: &Request,
) -> usize {
    let mut paths: Vec<&str> = Vec::new();
    match request {
        Request::Exists(r) | Request::GetData(r) if r.watch => paths.push(&r.path),
        Request::GetChildren(r) | Request::GetChildren2(r) if r.watch => paths.push(&r.path),
        Request::AddWatch(r) => paths.push(&r.path),
        Request::MultiRead(ops) => {
            for op in ops {
                match op {
                    MultiReadOp::GetData(r) if r.watch => paths.push(&r.path),
                    MultiReadOp::GetChildren(r) if r.watch => paths.push(&r.path),
                    _ => {}
                }
            }
        }
        Request::SetWatches { req, .. } => {
            for list in [
                &req.data_watches,
                &req.exist_watches,
                &req.child_watches,
                &req.persistent_watches,
                &req.persistent_recursive_watches,
            ] {
                paths.extend(list.iter().map(String::as_str));
            }
        }
        _ => return 0,
    }
    paths.sort_unstable();
    paths.dedup();
    paths
        .into_iter()
        .filter(|p| watches.kinds(session_id, p).is_empty())
        .count()
}

/// Registers the watches a read asked for, as ZooKeeper does: `exists` watches a missing node
/// for its creation; `getData`/`getChildren` only watch nodes that exist.
fn register_read_watches(
    watches: &mut baton_machine::WatchManager,
    session_id: i64,
    request: &Request,
    result: &Result<Response, ErrorCode>,
) {
    match request {
        Request::Exists(r) if r.watch => match result {
            Ok(_) => _ = watches.add(session_id, &r.path, WatchKind::Data),
            Err(ErrorCode::NoNode) => _ = watches.add(session_id, &r.path, WatchKind::Exist),
            Err(_) => {}
        },
        Request::GetData(r) if r.watch && result.is_ok() => {
            _ = watches.add(session_id, &r.path, WatchKind::Data)
        }
        Request::GetChildren(r) | Request::GetChildren2(r) if r.watch && result.is_ok() => {
            _ = watches.add(session_id, &r.path, WatchKind::Child)
        }
        Request::MultiRead(ops) => {
            if let Ok(Response::MultiRead(results)) = result {
                for (op, res) in ops.iter().zip(results) {
                    let ok = !matches!(res, baton_proto::MultiReadResult::Error { .. });
                    match op {
                        MultiReadOp::GetData(r) if r.watch && ok => {
                            _ = watches.add(session_id, &r.path, WatchKind::Data)
                        }
                        MultiReadOp::GetChildren(r) if r.watch && ok => {
                            _ = watches.add(session_id, &r.path, WatchKind::Child)
                        }
                        _ => {}
                    }
                }
            }
        }
        _ => {}
    }
}
