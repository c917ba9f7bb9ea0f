//! Client requests after the handshake, in per-session order: writes and syncs are sent on
//! their way to the ensemble, everything else is answered here (`local_requests.rs`) once
//! every earlier request of the connection is answered.

use baton_machine::tenancy::Refusal;
use baton_machine::{Command, CommandKind};
use baton_proto::{ErrorCode, Request, Response};

use super::local_conn::Pending;
use super::messages::{ConnId, IdentityVerdict};
use super::throttled_log::ThrottledLog;
use super::{Core, clock, wire};

/// One line per interval about clients that do not read their replies, however many there are.
static HELD_LOG: ThrottledLog = ThrottledLog::every_10s();
/// One line per interval about requests the recipe-tree policy refused.
static TENANCY_LOG: ThrottledLog = ThrottledLog::every_10s();

impl Core {
    pub(super) fn on_request(&mut self, conn_id: ConnId, xid: i32, request: Request) {
        let now = self.now_ms();
        let is_leader = self.is_leader();
        let zxid = self.sm.last_applied();
        let Some(conn) = self.clients.get_mut(conn_id) else {
            return;
        };
        let Some(session_id) = conn.session_id else {
            return;
        };
        conn.received += 1;
        self.metrics.requests.inc();
        // Only the leader expires sessions, so only its tracker's verdict counts; a follower
        // reports the activity to the leader instead (`flush_touches`).
        if !self.tracker.touch(session_id, now) && is_leader {
            // The session expired (or is being closed) under us: tell the client the truth.
            conn.send(wire::error(xid, zxid, ErrorCode::SessionExpired));
            conn.close();
            return;
        }
        if !is_leader {
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
        let Some(conn) = self.clients.get(conn_id) else {
            return;
        };
        if conn.pipeline.is_empty() && !self.hold_if_unread(conn_id) {
            self.answer_local(conn_id, session_id, xid, request);
        } else if let Some(conn) = self.clients.get_mut(conn_id) {
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
                let conn = self.clients.get(conn_id)?;
                // With nothing of the session in flight, this member's state already says
                // whether a quota or the alarm refuses it: answer without a log entry. Apply
                // decides whatever gets through.
                if conn.pipeline.is_empty()
                    && let Some(why) = self.sm.refuses_early(session_id, &conn.auth, &request)
                {
                    self.count_quota_refusal(session_id, why, true);
                    let zxid = self.sm.last_applied();
                    if let Some(conn) = self.clients.get_mut(conn_id) {
                        conn.send(wire::error(xid, zxid, why.code()));
                    }
                    return None;
                }
                let auth = conn.auth.clone();
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
        let Some(conn) = self.clients.get(conn_id) else {
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
        if let Some(session_id) = self.clients.get(conn_id).and_then(|c| c.session_id) {
            self.drain_deferred(conn_id, session_id);
        }
    }

    /// A request the decoder refused, answered with `err` in its place in the order. As in
    /// ZooKeeper 3.8, an unknown opcode (Unimplemented) then closes the connection, while a body
    /// that does not parse (MarshallingError) leaves it usable.
    pub(super) fn on_bad_request(&mut self, conn_id: ConnId, xid: i32, err: ErrorCode) {
        let Some(conn) = self.clients.get_mut(conn_id) else {
            return;
        };
        conn.received += 1;
        if conn.pipeline.is_empty() {
            conn.send(wire::error(xid, -1, err));
            if err == ErrorCode::Unimplemented {
                conn.close();
            }
        } else {
            conn.pipeline.push_back(Pending::Refused { xid, err });
        }
    }

    /// Counts and logs a request of a session connected here that the recipe-tree policy refused.
    pub(super) fn count_refusal(&self, session_id: i64, path: &str, refusal: Refusal) {
        let Some(conn) = self.clients.of_session(session_id) else {
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
        err: Option<ErrorCode>,
        body: Option<&Response>,
    ) {
        let Some(conn_id) = self.clients.conn_of(session_id) else {
            return;
        };
        let Some(conn) = self.clients.get_mut(conn_id) else {
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
            let Some(conn) = self.clients.get_mut(conn_id) else {
                return;
            };
            if let Some(Pending::Sync {
                index: Some(index), ..
            }) = conn.pipeline.front()
                && *index as i64 <= applied
            {
                if let Some(Pending::Sync { xid, path, .. }) = conn.pipeline.pop_front() {
                    let body = Response::Sync { path };
                    conn.send(wire::ok(xid, applied, Some(&body)));
                }
                continue;
            }
            match conn.pipeline.front() {
                Some(Pending::Refused { .. }) => {
                    if let Some(Pending::Refused { xid, err }) = conn.pipeline.pop_front() {
                        conn.send(wire::error(xid, -1, err));
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
                    let Some(conn) = self.clients.get_mut(conn_id) else {
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
                    match self.clients.get_mut(conn_id) {
                        Some(conn) => conn.pipeline.extend(rest),
                        None => return,
                    }
                }
                // An idle connection keeps no queue: its room for four entries was 576 bytes
                // of each of 10,000 sessions' connections.
                None => {
                    conn.pipeline = std::collections::VecDeque::new();
                    return;
                }
                Some(Pending::Write { .. } | Pending::Sync { .. }) => return,
            }
        }
    }
}
