//! The handshake. A ConnectRequest takes one of three paths:
//!
//! 1. **A new session** (`session_id == 0`): propose CreateSession; answer once it applies
//!    (`finish_create_session`).
//! 2. **A reconnect this member can settle**: the session is known and this member leads. The
//!    gate records that the session now lives here, and the client is answered at once.
//! 3. **A reconnect the leader must confirm**: this member sends the leader a `Claim` and answers
//!    when the `ClaimAck` comes (`finish_claim`), so that a write left behind on the client's
//!    old connection can never land after its new ones.
//!
//! Refusals come first: a client that has seen a newer state than this member holds, and a
//! session that is unknown or has a wrong password.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use baton_machine::{Command, CommandKind};
use baton_proto::{ConnectRequest, ConnectResponse};
use rand::RngCore;
use tokio::sync::oneshot;

use super::control::Control;
use super::local_conn::LocalConn;
use super::messages::{ConnId, ConnectOutcome, OutboundTx};
use super::sessions::session_hex;
use super::{Core, clock, wire};

/// How long a handshake may wait for its CreateSession to apply or for the leader's answer to
/// its claim, unless `--handshake-timeout` says otherwise. A backstop only: a leader change
/// re-sends waiting claims at once (`redirect_claims`), so no reconnect should ever reach it.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A new session whose CreateSession entry is not applied yet.
#[derive(Debug)]
pub(super) struct AwaitingSession {
    pub conn: ConnId,
    pub timeout_ms: i32,
    pub passwd: Vec<u8>,
    /// The `readOnly` flag of the answer: `None` for a client that sent none.
    pub read_only: Option<bool>,
    pub done: oneshot::Sender<ConnectOutcome>,
    pub since: Instant,
}

/// A reconnect waiting for the leader to confirm the session now lives here.
#[derive(Debug)]
pub(super) struct AwaitingClaim {
    pub conn: ConnId,
    pub session_id: i64,
    pub response: ConnectResponse,
    pub done: oneshot::Sender<ConnectOutcome>,
    pub since: Instant,
}

/// Handshakes this member started and has not answered yet.
#[derive(Debug)]
pub(super) struct PendingConnects {
    sessions: BTreeMap<i64, AwaitingSession>,
    claims: BTreeMap<u64, AwaitingClaim>,
    next_claim_token: u64,
}

impl Default for PendingConnects {
    fn default() -> Self {
        PendingConnects {
            sessions: BTreeMap::new(),
            claims: BTreeMap::new(),
            next_claim_token: 1,
        }
    }
}

impl PendingConnects {
    pub fn await_session(&mut self, session_id: i64, awaiting: AwaitingSession) {
        self.sessions.insert(session_id, awaiting);
    }

    pub fn awaits_session(&self, session_id: i64) -> bool {
        self.sessions.contains_key(&session_id)
    }

    pub fn take_session(&mut self, session_id: i64) -> Option<AwaitingSession> {
        self.sessions.remove(&session_id)
    }

    /// A fresh token for sending a claim: an answer to a claim sent earlier (to an earlier
    /// leader) then matches nothing.
    pub fn next_token(&mut self) -> u64 {
        let token = self.next_claim_token;
        self.next_claim_token += 1;
        token
    }

    pub fn await_claim(&mut self, token: u64, claim: AwaitingClaim) {
        self.claims.insert(token, claim);
    }

    pub fn take_claim(&mut self, token: u64) -> Option<AwaitingClaim> {
        self.claims.remove(&token)
    }

    pub fn has_claims(&self) -> bool {
        !self.claims.is_empty()
    }

    /// Every claim waiting, oldest first; none waits afterwards.
    pub fn take_claims(&mut self) -> Vec<AwaitingClaim> {
        std::mem::take(&mut self.claims).into_values().collect()
    }

    /// Tokens of the claims that have waited longer than `timeout` at `now`.
    pub fn overdue_claims(&self, now: Instant, timeout: Duration) -> Vec<u64> {
        self.claims
            .iter()
            .filter(|(_, c)| clock::since(now, c.since) > timeout)
            .map(|(t, _)| *t)
            .collect()
    }

    /// New sessions that have waited longer than `timeout` at `now`.
    pub fn overdue_sessions(&self, now: Instant, timeout: Duration) -> Vec<i64> {
        self.sessions
            .iter()
            .filter(|(_, a)| clock::since(now, a.since) > timeout)
            .map(|(id, _)| *id)
            .collect()
    }
}

/// A connection whose handshake has arrived, before the core knows which path it takes.
struct Arrival {
    id: ConnId,
    conn: LocalConn,
    done: oneshot::Sender<ConnectOutcome>,
}

impl Arrival {
    /// Closes the connection, with `answer` queued first if given.
    fn refuse(mut self, answer: Option<&ConnectResponse>) {
        if let Some(answer) = answer {
            self.conn.send(wire::connect_response(answer));
        }
        self.conn.close();
        let _ = self.done.send(ConnectOutcome::Refused);
    }
}

/// The answer ZooKeeper gives to a reconnect of an unknown or expired session, or a wrong
/// password: timeout 0 tells the client its session has expired. Shaped like any other
/// answer to `req` (`answer_flag`).
fn expired_response(read_only: Option<bool>) -> ConnectResponse {
    ConnectResponse {
        protocol_version: 0,
        timeout_ms: 0,
        session_id: 0,
        passwd: vec![0; 16],
        read_only,
    }
}

/// The `readOnly` flag of every answer to `req`: `false` (Baton has no read-only mode), and
/// none at all when the request had none. ZooKeeper does the same (`isOldClient`), and clients
/// older than 3.4 (and libraries written after them) refuse an answer of any other length.
fn answer_flag(req: &ConnectRequest) -> Option<bool> {
    req.read_only.map(|_| false)
}

impl Core {
    pub(super) fn on_connect(
        &mut self,
        conn_id: ConnId,
        peer: SocketAddr,
        out: OutboundTx,
        req: ConnectRequest,
        done: oneshot::Sender<ConnectOutcome>,
    ) {
        let mut conn = LocalConn::new(peer, out);
        conn.received += 1;
        let arrival = Arrival {
            id: conn_id,
            conn,
            done,
        };
        if self.client_is_ahead(&req, peer) {
            arrival.refuse(None);
        } else if req.session_id == 0 {
            self.open_session(arrival, req.timeout_ms, answer_flag(&req));
        } else {
            self.resume_session(arrival, &req);
        }
    }

    /// Whether the client has seen a newer state than this member has applied: answering
    /// would move it back in time.
    fn client_is_ahead(&self, req: &ConnectRequest, peer: SocketAddr) -> bool {
        let last_zxid = self.sm.last_applied();
        if req.last_zxid_seen <= last_zxid {
            return false;
        }
        tracing::warn!(
            %peer, session = %session_hex(req.session_id), client_zxid = req.last_zxid_seen, our_zxid = last_zxid,
            "refusing connection: the client has seen a newer zxid than this member has applied"
        );
        true
    }

    /// Path 1: proposes CreateSession under a fresh id and password.
    fn open_session(
        &mut self,
        arrival: Arrival,
        requested_timeout_ms: i32,
        read_only: Option<bool>,
    ) {
        let timeout_ms = requested_timeout_ms.clamp(
            self.cfg.min_session_timeout_ms,
            self.cfg.max_session_timeout_ms,
        );
        let session_id = self.next_session_id;
        self.next_session_id += 1;
        let mut passwd = vec![0u8; 16];
        rand::rng().fill_bytes(&mut passwd);
        let cmd = Command {
            session_id,
            xid: 0,
            time_ms: self.wall_ms(),
            kind: CommandKind::CreateSession {
                timeout_ms,
                passwd: passwd.clone(),
            },
        };
        if !self.propose_for_session(session_id, cmd.encode()) {
            tracing::warn!(peer = %arrival.conn.peer, "cannot open a session now (no leader known); closing the connection");
            return arrival.refuse(None);
        }
        let Arrival { id, conn, done } = arrival;
        self.clients.insert(id, conn);
        let awaiting = AwaitingSession {
            conn: id,
            timeout_ms,
            passwd,
            read_only,
            done,
            since: self.now(),
        };
        self.connects.await_session(session_id, awaiting);
    }

    /// Paths 2 and 3: a reconnect of a session this member's tree knows, with its password.
    fn resume_session(&mut self, arrival: Arrival, req: &ConnectRequest) {
        let known = self
            .sm
            .session(req.session_id)
            .map(|s| (s.passwd.clone(), s.timeout_ms));
        let Some((passwd, timeout)) = known.filter(|(passwd, _)| *passwd == req.passwd) else {
            tracing::info!(peer = %arrival.conn.peer, session = %session_hex(req.session_id), "reconnect refused: session expired, closed or wrong password");
            return arrival.refuse(Some(&expired_response(answer_flag(req))));
        };
        let response = ConnectResponse {
            protocol_version: 0,
            timeout_ms: timeout,
            session_id: req.session_id,
            passwd,
            read_only: answer_flag(req),
        };
        let Arrival { id, conn, done } = arrival;
        self.clients.insert(id, conn);
        let claim = AwaitingClaim {
            conn: id,
            session_id: req.session_id,
            response,
            done,
            since: self.now(),
        };
        self.claim_session(claim);
    }

    /// Settles a reconnect's claim here if this member leads (path 2), else sends it to the
    /// leader (path 3). With no leader known (an election is under way) the claim waits for
    /// one rather than failing: the client's reconnect then completes within milliseconds of
    /// the election instead of after its own timeout.
    fn claim_session(&mut self, claim: AwaitingClaim) {
        let leader = self.node.raft.leader_id;
        if leader == self.cfg.id {
            let now = self.now_ms();
            let alive = self.tracker.touch(claim.session_id, now);
            if alive {
                self.gate.claim(self.term(), claim.session_id, self.cfg.id);
            }
            return self.finish_reconnect(claim, alive);
        }
        let token = self.connects.next_token();
        if leader != 0 {
            let msg = Control::Claim {
                term: self.term(),
                session_id: claim.session_id,
                token,
            };
            if !self.send_control(leader, &msg) {
                return self.finish_reconnect(claim, false);
            }
        }
        self.connects.await_claim(token, claim);
    }

    /// After a leader change, claims sent to the old leader (or waiting for any) go to the new
    /// one: a leader that died took its answers with it.
    pub(super) fn redirect_claims(&mut self) {
        if self.node.raft.leader_id == 0 || !self.connects.has_claims() {
            return;
        }
        for claim in self.connects.take_claims() {
            if self.clients.contains(claim.conn) {
                self.claim_session(claim);
            }
        }
    }

    /// The leader answered a claim.
    pub(super) fn finish_claim(&mut self, token: u64, ok: bool) {
        if let Some(claim) = self.connects.take_claim(token) {
            self.finish_reconnect(claim, ok);
        }
    }

    /// Handshakes nobody answered (the leader died, or the link broke): the client retries.
    pub(super) fn expire_stuck_claims(&mut self) {
        let now = self.now();
        let timeout = self.cfg.handshake_timeout;
        for token in self.connects.overdue_claims(now, timeout) {
            self.finish_claim(token, false);
        }
        for session_id in self.connects.overdue_sessions(now, timeout) {
            tracing::warn!(session = %session_hex(session_id), "no answer to opening a session; closing the connection");
            self.finish_create_session(session_id, false);
        }
    }

    /// Attaches a resumed session to its new connection, or closes the connection without an
    /// answer when the leader could not confirm it: only an applied close may tell a client its
    /// session expired, so a doubtful reconnect is simply retried.
    fn finish_reconnect(&mut self, claim: AwaitingClaim, ok: bool) {
        let AwaitingClaim {
            conn: conn_id,
            session_id,
            response,
            done,
            ..
        } = claim;
        if !ok {
            self.drop_connection(conn_id);
            let _ = done.send(ConnectOutcome::Refused);
            return;
        }
        if let Some(old) = self.clients.take_session(session_id) {
            // The client moved to a new connection: the old one can no longer be answered in
            // order, and its watches will be re-sent with setWatches.
            tracing::info!(session = %session_hex(session_id), "session reconnected; closing its previous connection");
            self.watches.remove_session(session_id);
            old.close();
        }
        let Some(conn) = self.clients.attach(session_id, conn_id) else {
            let _ = done.send(ConnectOutcome::Refused);
            return;
        };
        conn.send(wire::connect_response(&response));
        tracing::debug!(peer = %conn.peer, session = %session_hex(session_id), "session resumed");
        let _ = done.send(ConnectOutcome::Established { session_id });
    }

    /// Completes a handshake once its CreateSession entry has applied.
    pub(super) fn finish_create_session(&mut self, session_id: i64, ok: bool) {
        let Some(awaiting) = self.connects.take_session(session_id) else {
            return;
        };
        if !ok {
            if let Some(conn) = self.clients.get(awaiting.conn) {
                conn.close();
                let _ = awaiting.done.send(ConnectOutcome::Refused);
            }
            return;
        }
        let Some(conn) = self.clients.attach(session_id, awaiting.conn) else {
            return;
        };
        let resp = ConnectResponse {
            protocol_version: 0,
            timeout_ms: awaiting.timeout_ms,
            session_id,
            passwd: awaiting.passwd,
            read_only: awaiting.read_only,
        };
        conn.send(wire::connect_response(&resp));
        tracing::debug!(peer = %conn.peer, session = %session_hex(session_id), timeout_ms = awaiting.timeout_ms, "session opened");
        let _ = awaiting
            .done
            .send(ConnectOutcome::Established { session_id });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(conn: ConnId, since: Instant) -> AwaitingClaim {
        AwaitingClaim {
            conn,
            session_id: 7,
            response: expired_response(Some(false)),
            done: oneshot::channel().0,
            since,
        }
    }

    fn session(conn: ConnId, since: Instant) -> AwaitingSession {
        AwaitingSession {
            conn,
            timeout_ms: 4000,
            passwd: vec![0; 16],
            read_only: Some(false),
            done: oneshot::channel().0,
            since,
        }
    }

    #[test]
    fn claim_tokens_are_never_reused() {
        let mut p = PendingConnects::default();
        let t0 = Instant::now();
        let first = p.next_token();
        p.await_claim(first, claim(1, t0));
        let second = p.next_token();
        assert!(second > first);
        assert!(p.take_claim(second).is_none(), "sent but not awaited");
        assert_eq!(p.take_claim(first).map(|c| c.conn), Some(1));
        assert!(p.take_claim(first).is_none(), "answered once");
        assert!(!p.has_claims());
    }

    #[test]
    fn redirecting_takes_every_claim_oldest_first() {
        let mut p = PendingConnects::default();
        let t0 = Instant::now();
        for conn in [5, 6] {
            let token = p.next_token();
            p.await_claim(token, claim(conn, t0));
        }
        let conns: Vec<ConnId> = p.take_claims().iter().map(|c| c.conn).collect();
        assert_eq!(conns, vec![5, 6]);
        assert!(!p.has_claims());
    }

    #[test]
    fn handshakes_are_overdue_only_after_the_timeout() {
        let mut p = PendingConnects::default();
        let t0 = Instant::now();
        let token = p.next_token();
        p.await_claim(token, claim(1, t0));
        p.await_session(9, session(2, t0));
        assert!(p.awaits_session(9));
        let timeout = HANDSHAKE_TIMEOUT;
        assert!(p.overdue_claims(t0 + timeout, timeout).is_empty());
        assert!(p.overdue_sessions(t0 + timeout, timeout).is_empty());
        let later = t0 + timeout + Duration::from_millis(1);
        assert_eq!(p.overdue_claims(later, timeout), vec![token]);
        assert_eq!(p.overdue_sessions(later, timeout), vec![9]);
        assert!(p.take_session(9).is_some());
        assert!(!p.awaits_session(9));
    }
}
