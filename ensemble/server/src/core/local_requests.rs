//! Requests answered from this member's tree and watch table, never through the log: reads,
//! watches, `auth`, `whoAmI` and pings. Their turn in the session's order is `requests.rs`'s
//! business; this is what happens when it comes.

use baton_machine::WatchKind;
use baton_machine::tenancy::{K8S_SCHEME, SUPER_SCHEME};
use baton_machine::watch::notification;
use baton_proto::{
    AddWatchMode, AuthPacket, ClientInfo, ErrorCode, EventType, Id, MultiReadResult, Request,
    Response, SetWatchesRequest, WatcherType,
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
        if self.refuse_over_watch_limit(conn_id, session_id, xid, &request) {
            return;
        }
        let result = match &request {
            Request::Ping => Ok(None),
            Request::Auth(packet) => return self.answer_auth(conn_id, session_id, xid, packet),
            Request::SetWatches { req, .. } => {
                return self.answer_set_watches(conn_id, session_id, xid, req);
            }
            request => self.execute_local(conn_id, session_id, request),
        };
        if refused_somewhere(&result)
            && let Some(conn) = self.clients.get(conn_id)
            && let Some((path, refusal)) = self.sm.read_refusal(&conn.auth, &request)
        {
            self.count_refusal(session_id, &path, refusal);
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

    /// Answers `ErrorCode::REFUSED` (true) when `request` would take the session past the watch limit
    /// (paths, `--max-watches-per-session`) or the watch-bytes limit (their bytes,
    /// `--max-watch-bytes-per-session`). Watches live in this member's memory for as long as
    /// the session is connected, and a path's name is most of what one holds; the request is
    /// refused whole (nothing read, nothing registered), so the client never holds a read
    /// whose watch silently did not register.
    fn refuse_over_watch_limit(
        &mut self,
        conn_id: ConnId,
        session_id: i64,
        xid: i32,
        request: &Request,
    ) -> bool {
        let added = new_watch_paths(&self.watches, session_id, request);
        if added.paths == 0 {
            return false;
        }
        let watched = self.watches.session_paths(session_id);
        let watched_bytes = self.watches.session_path_bytes(session_id);
        let over_count = watched.saturating_add(added.paths) > self.max_watches_per_session;
        let over_bytes =
            watched_bytes.saturating_add(added.bytes) > self.max_watch_bytes_per_session;
        if !over_count && !over_bytes {
            return false;
        }
        let Some(conn) = self.clients.get_mut(conn_id) else {
            return true;
        };
        if over_count {
            self.metrics.watch_limit_refusals.inc();
        } else {
            self.metrics.watch_bytes_limit_refusals.inc();
        }
        if let Some(suppressed) = WATCH_LIMIT_LOG.admit() {
            let flag = if over_count {
                "--max-watches-per-session"
            } else {
                "--max-watch-bytes-per-session"
            };
            tracing::warn!(
                peer = %conn.peer,
                session = %format_args!("0x{session_id:x}"),
                watched, watched_bytes, adding = added.paths, adding_bytes = added.bytes,
                limit = flag, similar_lines_suppressed = suppressed,
                "a session reached a watch limit; refusing its request with BadArguments (-8)"
            );
        }
        let zxid = self.sm.last_applied();
        conn.send(wire::error(xid, zxid, ErrorCode::REFUSED));
        true
    }

    /// An `auth` packet this member checks itself (`digest`; `k8s` without `--k8s-auth`).
    fn answer_auth(&mut self, conn_id: ConnId, session_id: i64, xid: i32, packet: &AuthPacket) {
        let Some(conn) = self.clients.get_mut(conn_id) else {
            return;
        };
        let super_digest = self.tenancy.super_digest.as_deref();
        match authenticate(packet, super_digest) {
            Ok(ids) => {
                for id in ids {
                    if id.scheme == SUPER_SCHEME && !conn.auth.contains(&id) {
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
    }

    /// `setWatches` after a reconnect: the watches the client held, with an event for each
    /// that already fired. Watches on paths the session may not read are dropped (the client
    /// re-sends what it held; a refusal would fail its whole reconnect), but a one-shot one is
    /// answered with an event at once, whatever the node did: the client reads again and is
    /// refused NoAuth, where a silent drop left a lock waiter that lost access waiting forever,
    /// its node holding the queue (as `route` fires a one-shot watch set before the loss). The
    /// event is the same whatever the state, so it tells nothing about the path; persistent
    /// and recursive watches are dropped without one, as they would go on streaming.
    fn answer_set_watches(
        &mut self,
        conn_id: ConnId,
        session_id: i64,
        xid: i32,
        req: &SetWatchesRequest,
    ) {
        let zxid = self.sm.last_applied();
        let Some(conn) = self.clients.get_mut(conn_id) else {
            return;
        };
        let sm = &self.sm;
        let mut req = req.clone();
        let mut dropped = None;
        let mut look_again = Vec::new();
        for (list, event) in [
            (&mut req.data_watches, Some(EventType::NodeDataChanged)),
            (&mut req.exist_watches, Some(EventType::NodeCreated)),
            (&mut req.child_watches, Some(EventType::NodeChildrenChanged)),
            (&mut req.persistent_watches, None),
            (&mut req.persistent_recursive_watches, None),
        ] {
            list.retain(|p| match sm.may_read(p, &conn.auth) {
                Ok(()) => true,
                Err(refusal) => {
                    dropped.get_or_insert((p.clone(), refusal));
                    if let Some(event) = event {
                        look_again.push(notification(event, p));
                    }
                    false
                }
            });
        }
        let events = self.watches.set_watches(session_id, &req, |p| sm.stat(p));
        for event in events.into_iter().chain(look_again) {
            conn.send(wire::notification(event));
        }
        conn.send(wire::ok(xid, zxid, None));
        if let Some((path, refusal)) = dropped {
            self.count_refusal(session_id, &path, refusal);
        }
    }

    /// Reads and watch requests: the answer, not yet sent.
    fn execute_local(
        &mut self,
        conn_id: ConnId,
        session_id: i64,
        request: &Request,
    ) -> Result<Option<Response>, ErrorCode> {
        let Some(conn) = self.clients.get(conn_id) else {
            return Ok(None);
        };
        match request {
            // Only reached for a sync queued as a plain read, which `on_request` never does.
            Request::Sync { path } => Ok(Some(Response::Sync { path: path.clone() })),
            Request::WhoAmI => Ok(Some(Response::WhoAmI {
                client_info: conn.auth.iter().map(client_info).collect(),
            })),
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
                    // ZooKeeper's `WatcherType.fromInt` throws, its request processor answers
                    // MarshallingError and keeps the connection (verified against 3.8).
                    None => Err(ErrorCode::MarshallingError),
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
        }
    }
}

/// How `whoAmI` shows an identity. ZooKeeper's digest provider names the user, not the
/// hashed id.
fn client_info(id: &Id) -> ClientInfo {
    ClientInfo {
        auth_scheme: id.scheme.clone(),
        user: match id.scheme.as_str() {
            "digest" => id.id.split(':').next().unwrap_or_default().to_string(),
            _ => id.id.clone(),
        },
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

/// The paths a request would start watching that its session watches in no way yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NewWatches {
    paths: usize,
    bytes: usize,
}

/// How many paths `request` would start watching for `session_id` that it watches on none
/// yet, and their bytes: what the watch limits count (a path watched several ways counts once).
fn new_watch_paths(
    watches: &baton_machine::WatchManager,
    session_id: i64,
    request: &Request,
) -> NewWatches {
    let mut paths: Vec<&str> = Vec::new();
    match request {
        Request::Exists(r) | Request::GetData(r) if r.watch => paths.push(&r.path),
        Request::GetChildren(r) | Request::GetChildren2(r) if r.watch => paths.push(&r.path),
        Request::AddWatch(r) => paths.push(&r.path),
        // A multiRead's watch flags set nothing (`register_read_watches`).
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
        _ => return NewWatches { paths: 0, bytes: 0 },
    }
    paths.sort_unstable();
    paths.dedup();
    paths
        .into_iter()
        .filter(|p| watches.kinds(session_id, p).is_empty())
        .fold(NewWatches { paths: 0, bytes: 0 }, |sum, p| NewWatches {
            paths: sum.paths + 1,
            bytes: sum.bytes + p.len(),
        })
}

/// Registers the watches a read asked for, as ZooKeeper does: `exists` watches a missing node
/// for its creation; `getData`/`getChildren` only watch nodes that exist. A `multiRead` sets
/// none whatever its ops' watch flags: ZooKeeper's `MultiOperationRecord` drops them when it
/// reads the ops (verified against 3.8).
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
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use baton_proto::{AddWatchRequest, MultiReadOp, PathWatchRequest};

    use super::*;

    fn get_data(path: &str, watch: bool) -> Request {
        Request::GetData(PathWatchRequest {
            path: path.into(),
            watch,
        })
    }

    #[test]
    fn the_watch_limit_counts_paths_not_yet_watched_once_each() {
        let mut watches = baton_machine::WatchManager::default();
        assert_eq!(new_watch_paths(&watches, 7, &get_data("/a", true)).paths, 1);
        assert_eq!(
            new_watch_paths(&watches, 7, &get_data("/a", false)).paths,
            0
        );
        watches.add(7, "/a", WatchKind::Data);
        assert_eq!(new_watch_paths(&watches, 7, &get_data("/a", true)).paths, 0);
        assert_eq!(new_watch_paths(&watches, 8, &get_data("/a", true)).paths, 1);
        let reads = Request::MultiRead(vec![
            MultiReadOp::GetData(PathWatchRequest {
                path: "/b".into(),
                watch: true,
            }),
            MultiReadOp::GetChildren(PathWatchRequest {
                path: "/b".into(),
                watch: true,
            }),
            MultiReadOp::GetData(PathWatchRequest {
                path: "/a".into(),
                watch: true,
            }),
        ]);
        assert_eq!(
            new_watch_paths(&watches, 7, &reads).paths,
            0,
            "a multiRead sets no watch"
        );
        let add = Request::AddWatch(AddWatchRequest {
            path: "/c".into(),
            mode: 0,
        });
        assert_eq!(
            new_watch_paths(&watches, 7, &add),
            NewWatches { paths: 1, bytes: 2 }
        );
        assert_eq!(new_watch_paths(&watches, 7, &Request::Ping).paths, 0);
    }

    #[test]
    fn a_multi_read_registers_no_watch() {
        let mut watches = baton_machine::WatchManager::default();
        let watched = PathWatchRequest {
            path: "/m".into(),
            watch: true,
        };
        let reads = Request::MultiRead(vec![
            MultiReadOp::GetData(watched.clone()),
            MultiReadOp::GetChildren(watched),
        ]);
        let answer = Ok(Response::MultiRead(vec![
            MultiReadResult::GetData {
                data: None,
                stat: Default::default(),
            },
            MultiReadResult::GetChildren { children: vec![] },
        ]));
        register_read_watches(&mut watches, 7, &reads, &answer);
        assert_eq!(watches.session_paths(7), 0);
        register_read_watches(&mut watches, 7, &get_data("/m", true), &Ok(Response::Empty));
        assert_eq!(watches.session_paths(7), 1);
    }

    #[test]
    fn no_auth_is_found_whole_or_in_one_read_of_a_multi_read() {
        assert!(refused_somewhere(&Err(ErrorCode::NoAuth)));
        assert!(!refused_somewhere(&Err(ErrorCode::NoNode)));
        assert!(!refused_somewhere(&Ok(None)));
        let partly = Response::MultiRead(vec![MultiReadResult::Error {
            err: ErrorCode::NoAuth,
        }]);
        assert!(refused_somewhere(&Ok(Some(partly))));
    }

    #[test]
    fn who_am_i_names_a_digest_user_not_its_hash() {
        let digest = client_info(&Id::new("digest", "alice:HASH="));
        assert_eq!(
            (digest.auth_scheme.as_str(), digest.user.as_str()),
            ("digest", "alice")
        );
        let ip = client_info(&Id::new("ip", "10.0.0.1"));
        assert_eq!(ip.user, "10.0.0.1");
    }
}
