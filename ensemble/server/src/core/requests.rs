//! Client requests after the handshake: writes go to Raft, everything else is answered here in
//! per-session order.

use baton_machine::tenancy::{K8S_SCHEME, Refusal};
use baton_machine::{Command, CommandKind, WatchKind};
use baton_proto::{
    AddWatchMode, ClientInfo, ErrorCode, MultiReadOp, MultiReadResult, Request, Response,
    WatcherType,
};

use super::conn::Pending;
use super::messages::{ConnId, IdentityVerdict};
use super::throttled_log::ThrottledLog;
use super::{Core, clock, wire};

/// One line per interval about clients that do not read their replies, however many there are.
static HELD_LOG: ThrottledLog = ThrottledLog::every_10s();
/// One line per interval about sessions that reach the watch limit.
static WATCH_LIMIT_LOG: ThrottledLog = ThrottledLog::every_10s();
/// One line per interval about failed authentications (anyone can send auth packets).
static AUTH_LOG: ThrottledLog = ThrottledLog::every_10s();
/// One line per interval about requests the recipe-tree policy refused.
static TENANCY_LOG: ThrottledLog = ThrottledLog::every_10s();

impl Core {
    pub(super) fn on_request(&mut self, conn_id: ConnId, xid: i32, request: Request) {
        let now = self.now_ms();
        let is_leader = self.is_leader();
        let zxid = self.sm.last_applied();
        let Some(conn) = self.conns.get_mut(&conn_id) else {
            return;
        };
        let Some(session_id) = conn.session_id else {
            return;
        };
        conn.received += 1;
        self.metrics.requests.inc();
        if !self.tracker.touch(session_id, now) && is_leader {
            // The session expired (or is being closed) under us: tell the client the truth.
            conn.send(wire::reply(
                xid,
                zxid,
                ErrorCode::SessionExpired.code(),
                None,
            ));
            conn.close();
            return;
        }

        if is_leader {
            if !self.tracker.touch(session_id, now) {
                // The session expired (or is being closed) under us: tell the client the truth.
                conn.send(wire::reply(
                    xid,
                    zxid,
                    ErrorCode::SessionExpired.code(),
                    None,
                ));
                conn.close();
                return;
            }
        } else {
            self.touched.insert(session_id);
        }

        if conn.has_waiting_local() {
            // Behind a waiting read, even a write waits: see `LocalConn::has_waiting_local`.
            conn.pipeline.push_back(Pending::Deferred { xid, request });
            return;
        }
        let Some(request) = self.send_on_its_way(conn_id, session_id, xid, request) else {
            return;
        };
        let Some(conn) = self.conns.get_mut(&conn_id) else {
            return;
        };
        if conn.pipeline.is_empty() && !self.hold_if_unread(conn_id) {
            self.answer_local(conn_id, session_id, xid, request);
        } else if let Some(conn) = self.conns.get_mut(&conn_id) {
            conn.pipeline.push_back(Pending::Deferred { xid, request });
        }
    }

    /// Proposes a write or starts a sync, whose answers wait on the ensemble; hands any other
    /// request back, to be answered here.
    fn send_on_its_way(
        &mut self,
        conn_id: ConnId,
        session_id: i64,
        xid: i32,
        request: Request,
    ) -> Option<Request> {
        match request {
            Request::CloseSession => {
                let cmd = Command {
                    session_id,
                    xid,
                    time_ms: self.wall_ms(),
                    kind: CommandKind::CloseSession { expired: false },
                };
                self.propose_client_write(conn_id, session_id, xid, cmd.encode());
                None
            }
            request if request.is_write() => {
                let auth = self.conns.get(&conn_id)?.auth.clone();
                let cmd = Command {
                    session_id,
                    xid,
                    time_ms: self.wall_ms(),
                    kind: CommandKind::Write { auth, request },
                };
                self.propose_client_write(conn_id, session_id, xid, cmd.encode());
                None
            }
            Request::Sync { path } => {
                self.start_sync(conn_id, xid, path);
                None
            }
            request => Some(request),
        }
    }

    /// Whether the connection's unread replies are over its byte limit, so its next local
    /// request must wait; the connection's writer then sends `Drained` when it catches up.
    fn hold_if_unread(&mut self, conn_id: ConnId) -> bool {
        let Some(conn) = self.conns.get(&conn_id) else {
            return true;
        };
        if !conn.must_hold() {
            return false;
        }
        self.metrics.client_replies_held.inc();
        if let Some(suppressed) = HELD_LOG.admit() {
            tracing::info!(
                peer = %conn.peer,
                session = %format_args!("0x{:x}", conn.session_id.unwrap_or(0)),
                queued_bytes = conn.out.budget().queued(),
                similar_lines_suppressed = suppressed,
                "a client is not reading its replies: holding back its requests until it does"
            );
        }
        true
    }

    /// The writer of a connection whose replies were held caught up: answer what waited.
    pub(super) fn on_drained(&mut self, conn_id: ConnId) {
        if let Some(session_id) = self.conns.get(&conn_id).and_then(|c| c.session_id) {
            self.drain_deferred(conn_id, session_id);
        }
    }

    /// Starts a Raft ReadIndex for a `sync`; it is answered in order once applied that far.
    fn start_sync(&mut self, conn_id: ConnId, xid: i32, path: String) {
        let ctx = self.next_read_ctx;
        self.next_read_ctx += 1;
        let term = self.term();
        // The context names this member too: raft's leader silently drops a ReadIndex whose
        // context is already pending, and every member counts on its own.
        let mut request = self.cfg.id.to_be_bytes().to_vec();
        request.extend_from_slice(&ctx.to_be_bytes());
        let stale = self.cfg.bugs.sync_without_read_index;
        if !stale {
            self.node.read_index(request);
        }
        self.pending_reads.insert(ctx, conn_id);
        let now = self.now();
        if let Some(conn) = self.conns.get_mut(&conn_id) {
            conn.pipeline.push_back(Pending::Sync {
                xid,
                path,
                ctx,
                index: None,
                since: now,
                term,
            });
        }
        if stale {
            // The deliberate bug: whatever this member has applied counts as up to date.
            let applied = self.node.raft.raft_log.applied;
            self.on_read_state(ctx, applied);
        }
    }

    /// Records the commit index Raft confirmed for a sync, then answers what became answerable.
    pub(super) fn on_read_state(&mut self, ctx: u64, index: u64) {
        let Some(conn_id) = self.pending_reads.remove(&ctx) else {
            return;
        };
        let Some(conn) = self.conns.get_mut(&conn_id) else {
            return;
        };
        for p in conn.pipeline.iter_mut() {
            if let Pending::Sync {
                ctx: c, index: i, ..
            } = p
                && *c == ctx
            {
                *i = Some(index);
            }
        }
        self.syncing.insert(conn_id);
    }

    /// Answers syncs whose read index has been applied, with the reads queued behind them.
    pub(super) fn release_syncs(&mut self) {
        if self.syncing.is_empty() {
            return;
        }
        let conns: Vec<ConnId> = std::mem::take(&mut self.syncing).into_iter().collect();
        for conn_id in conns {
            let Some(session_id) = self.conns.get(&conn_id).and_then(|c| c.session_id) else {
                continue;
            };
            self.drain_deferred(conn_id, session_id);
            if let Some(conn) = self.conns.get(&conn_id)
                && conn
                    .pipeline
                    .iter()
                    .any(|p| matches!(p, Pending::Sync { index: Some(_), .. }))
            {
                self.syncing.insert(conn_id);
            }
        }
    }

    /// A request the decoder refused, answered with `err` in its place in the order. As in
    /// ZooKeeper 3.8, an unknown opcode (Unimplemented) then closes the connection, while a body
    /// that does not parse (MarshallingError) leaves it usable.
    pub(super) fn on_bad_request(&mut self, conn_id: ConnId, xid: i32, err: ErrorCode) {
        let Some(conn) = self.conns.get_mut(&conn_id) else {
            return;
        };
        conn.received += 1;
        if conn.pipeline.is_empty() {
            conn.send(wire::reply(xid, -1, err.code(), None));
            if err == ErrorCode::Unimplemented {
                conn.close();
            }
        } else {
            conn.pipeline.push_back(Pending::Refused { xid, err });
        }
    }

    /// The connection task's verdict on a `k8s` auth packet, taking effect in its turn.
    pub(super) fn on_identity(&mut self, conn_id: ConnId, xid: i32, verdict: IdentityVerdict) {
        let Some(conn) = self.conns.get_mut(&conn_id) else {
            return;
        };
        conn.received += 1;
        if conn.pipeline.is_empty() {
            self.take_identity(conn_id, xid, verdict);
        } else {
            conn.pipeline.push_back(Pending::Identity { xid, verdict });
        }
    }

    /// Applies a verdict: the identity replaces any earlier `k8s` one (a session is one pod; a
    /// rotated token names the same pod, and a session never holds two namespaces at once).
    fn take_identity(&mut self, conn_id: ConnId, xid: i32, verdict: IdentityVerdict) {
        let Some(conn) = self.conns.get_mut(&conn_id) else {
            return;
        };
        let session = format!("0x{:x}", conn.session_id.unwrap_or(0));
        match verdict {
            IdentityVerdict::Accepted(id) => {
                let before: Vec<_> = conn
                    .auth
                    .iter()
                    .filter(|a| a.scheme == K8S_SCHEME)
                    .cloned()
                    .collect();
                if before != [id.clone()] {
                    conn.auth.retain(|a| a.scheme != K8S_SCHEME);
                    tracing::info!(
                        peer = %conn.peer, %session, identity = %format_args!("k8s:{}", id.id),
                        replaced = ?before.iter().map(|a| &a.id).collect::<Vec<_>>(),
                        "session authenticated with a Kubernetes service account token"
                    );
                    conn.auth.push(id);
                }
                conn.send(wire::reply(xid, 0, 0, None));
            }
            IdentityVerdict::Rejected(_) => {
                // Logged (rate-limited) by the connection task, which knows why.
                conn.send(wire::reply(xid, 0, ErrorCode::AuthFailed.code(), None));
                conn.close();
            }
            IdentityVerdict::Expired => {
                tracing::debug!(peer = %conn.peer, %session, "an expired k8s token (a client re-sending a rotated-out one); ignored");
                conn.send(wire::reply(xid, 0, 0, None));
            }
            IdentityVerdict::Unavailable(_) => conn.close(),
        }
    }

    /// Counts and logs a request of a session connected here that the recipe-tree policy refused.
    pub(super) fn count_refusal(&self, session_id: i64, path: &str, refusal: Refusal) {
        let Some(conn) = self
            .session_conns
            .get(&session_id)
            .and_then(|c| self.conns.get(c))
        else {
            return;
        };
        self.metrics
            .tenancy_refusals
            .get_or_create(&[("reason", refusal.label())])
            .inc();
        if let Some(suppressed) = TENANCY_LOG.admit() {
            let identities: Vec<String> = conn
                .auth
                .iter()
                .filter(|a| a.scheme != "ip")
                .map(|a| format!("{}:{}", a.scheme, a.id))
                .collect();
            tracing::info!(
                peer = %conn.peer, session = %format_args!("0x{session_id:x}"), path,
                ?identities, reason = %refusal, similar_lines_suppressed = suppressed,
                "request refused with NoAuth by the recipe-tree policy"
            );
        }
    }

    /// Routes the reply of an applied write to its connection, then runs the reads that were
    /// waiting behind it.
    pub(super) fn deliver_write_reply(
        &mut self,
        session_id: i64,
        xid: i32,
        zxid: i64,
        err: i32,
        body: Option<&Response>,
    ) {
        let Some(&conn_id) = self.session_conns.get(&session_id) else {
            return;
        };
        let Some(conn) = self.conns.get_mut(&conn_id) else {
            return;
        };
        match conn.pipeline.front() {
            Some(Pending::Write {
                xid: front, since, ..
            }) if *front == xid => {
                let elapsed = clock::since(self.clock.now(), *since);
                self.metrics.proposal_seconds.observe(elapsed.as_secs_f64());
                self.latency.record(elapsed);
                conn.pipeline.pop_front();
                conn.send(wire::reply(xid, zxid, err, body));
            }
            // A write sent on an earlier connection of this session: nobody waits for it here.
            _ => return,
        }
        self.drain_deferred(conn_id, session_id);
    }

    /// Answers queued local requests until the next write in the pipeline.
    pub(super) fn drain_deferred(&mut self, conn_id: ConnId, session_id: i64) {
        let applied = self.sm.last_applied();
        loop {
            let Some(conn) = self.conns.get_mut(&conn_id) else {
                return;
            };
            if let Some(Pending::Sync {
                index: Some(index), ..
            }) = conn.pipeline.front()
                && *index as i64 <= applied
            {
                if let Some(Pending::Sync { xid, path, .. }) = conn.pipeline.pop_front() {
                    let body = Response::Sync { path };
                    conn.send(wire::reply(xid, applied, 0, Some(&body)));
                }
                continue;
            }
            match conn.pipeline.front() {
                Some(Pending::Refused { .. }) => {
                    if let Some(Pending::Refused { xid, err }) = conn.pipeline.pop_front() {
                        conn.send(wire::reply(xid, -1, err.code(), None));
                        if err == ErrorCode::Unimplemented {
                            conn.close();
                            return;
                        }
                    }
                }
                Some(Pending::Identity { .. }) => {
                    if let Some(Pending::Identity { xid, verdict }) = conn.pipeline.pop_front() {
                        let closes = matches!(
                            verdict,
                            IdentityVerdict::Rejected(_) | IdentityVerdict::Unavailable(_)
                        );
                        self.take_identity(conn_id, xid, verdict);
                        if closes {
                            return;
                        }
                    }
                }
                Some(Pending::Deferred { request, .. }) => {
                    let waits_on_ensemble = request.is_write()
                        || matches!(request, Request::CloseSession | Request::Sync { .. });
                    if !waits_on_ensemble && self.hold_if_unread(conn_id) {
                        return;
                    }
                    let Some(conn) = self.conns.get_mut(&conn_id) else {
                        return;
                    };
                    let Some(Pending::Deferred { xid, request }) = conn.pipeline.pop_front() else {
                        return;
                    };
                    if !waits_on_ensemble {
                        self.answer_local(conn_id, session_id, xid, request);
                        continue;
                    }
                    // Everything before it is answered and everything after it waits, so it
                    // goes on its way at the front: the rest is set aside while it is sent,
                    // then put back behind it.
                    let rest = std::mem::take(&mut conn.pipeline);
                    let _ = self.send_on_its_way(conn_id, session_id, xid, request);
                    match self.conns.get_mut(&conn_id) {
                        Some(conn) => conn.pipeline.extend(rest),
                        None => return,
                    }
                }
                _ => return,
            }
        }
    }

    /// Executes a request that does not go through the log, against this member's tree.
    fn answer_local(&mut self, conn_id: ConnId, session_id: i64, xid: i32, request: Request) {
        let zxid = self.sm.last_applied();
        let limit = self.max_watches_per_session;
        let added = new_watch_paths(&self.watches, session_id, &request);
        let watched = self.watches.session_paths(session_id);
        let Some(conn) = self.conns.get_mut(&conn_id) else {
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
            conn.send(wire::reply(
                xid,
                zxid,
                ErrorCode::QuotaExceeded.code(),
                None,
            ));
            return;
        }
        let result: Result<Option<Response>, ErrorCode> = match &request {
            Request::Ping => {
                conn.send(wire::reply(xid, zxid, 0, None));
                return;
            }
            // Only reached for a sync queued as a plain read, which `on_request` never does.
            Request::Sync { path } => Ok(Some(Response::Sync { path: path.clone() })),
            Request::Auth(packet) => {
                let super_digest = self.tenancy.super_digest.as_deref();
                match super::auth::authenticate(packet, super_digest) {
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
                        conn.send(wire::reply(xid, 0, 0, None));
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
                        conn.send(wire::reply(xid, 0, ErrorCode::AuthFailed.code(), None));
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
                conn.send(wire::reply(xid, zxid, 0, None));
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
            let Some(conn) = self.conns.get(&conn_id) else {
                return;
            };
            if let Some((path, refusal)) = self.sm.read_refusal(&conn.auth, &request) {
                self.count_refusal(session_id, &path, refusal);
            }
        }
        let Some(conn) = self.conns.get_mut(&conn_id) else {
            return;
        };
        match result {
            Ok(Some(Response::Empty)) | Ok(None) => conn.send(wire::reply(xid, zxid, 0, None)),
            Ok(Some(body)) => conn.send(wire::reply(xid, zxid, 0, Some(&body))),
            Err(err) => conn.send(wire::reply(xid, zxid, err.code(), None)),
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
