//! The handshake, reconnects, disconnects and session expiry.

use std::net::SocketAddr;

use baton_machine::{Command, CommandKind};
use baton_proto::{ConnectRequest, ConnectResponse};
use rand::RngCore;
use tokio::sync::oneshot;

use super::conn::LocalConn;
use super::messages::{ConnId, ConnectOutcome, Outbound, OutboundTx};
use super::{Core, clock, wire};

/// A new session whose CreateSession entry is not applied yet.
#[derive(Debug)]
pub struct AwaitingSession {
    pub conn: ConnId,
    pub timeout_ms: i32,
    pub passwd: Vec<u8>,
    pub done: oneshot::Sender<ConnectOutcome>,
    pub since: std::time::Instant,
}

/// A reconnect at a follower waiting for the leader to confirm the session now lives here.
#[derive(Debug)]
pub struct AwaitingClaim {
    pub conn: ConnId,
    pub session_id: i64,
    pub response: ConnectResponse,
    pub done: oneshot::Sender<ConnectOutcome>,
    pub since: std::time::Instant,
}

/// How long a reconnect may wait for the leader's answer to its claim.
const CLAIM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// ZooKeeper's scheme: the member id in the top byte, then a time-derived counter, so ids
/// proposed by different members (or by one member across restarts) never collide.
pub fn initial_session_id(member_id: u64, now_ms: i64) -> i64 {
    let time_part = ((now_ms as u64) << 24) >> 8;
    ((member_id << 56) | time_part) as i64
}

fn session_hex(id: i64) -> String {
    format!("0x{:016x}", id as u64)
}

/// The answer ZooKeeper gives to a reconnect of an unknown or expired session, or a wrong
/// password: timeout 0 tells the client its session has expired.
fn expired_response() -> ConnectResponse {
    ConnectResponse {
        protocol_version: 0,
        timeout_ms: 0,
        session_id: 0,
        passwd: vec![0; 16],
        read_only: false,
    }
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
        let last_zxid = self.sm.last_applied();
        if req.last_zxid_seen > last_zxid {
            // The client has seen a newer state than we hold: answering would move it back in time.
            tracing::warn!(
                %peer, session = %session_hex(req.session_id), client_zxid = req.last_zxid_seen, our_zxid = last_zxid,
                "refusing connection: the client has seen a newer zxid than this member has applied"
            );
            let _ = out.send(Outbound::Close);
            let _ = done.send(ConnectOutcome::Refused);
            return;
        }
        let timeout_ms = req.timeout_ms.clamp(
            self.cfg.min_session_timeout_ms,
            self.cfg.max_session_timeout_ms,
        );
        let mut conn = LocalConn::new(peer, out);
        conn.received += 1;

        if req.session_id == 0 {
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
                tracing::warn!(%peer, "cannot open a session now (no leader known); closing the connection");
                conn.close();
                let _ = done.send(ConnectOutcome::Refused);
                return;
            }
            self.conns.insert(conn_id, conn);
            self.awaiting_sessions.insert(
                session_id,
                AwaitingSession {
                    conn: conn_id,
                    timeout_ms,
                    passwd,
                    done,
                    since: self.now(),
                },
            );
            return;
        }

        let known = self
            .sm
            .session(req.session_id)
            .map(|s| (s.passwd.clone(), s.timeout_ms));
        let Some((passwd, timeout)) = known.filter(|(passwd, _)| *passwd == req.passwd) else {
            tracing::info!(%peer, session = %session_hex(req.session_id), "reconnect refused: session expired, closed or wrong password");
            conn.send(wire::connect_response(&expired_response()));
            conn.close();
            let _ = done.send(ConnectOutcome::Refused);
            return;
        };
        let response = ConnectResponse {
            protocol_version: 0,
            timeout_ms: timeout,
            session_id: req.session_id,
            passwd,
            read_only: false,
        };
        self.conns.insert(conn_id, conn);
        let claim = AwaitingClaim {
            conn: conn_id,
            session_id: req.session_id,
            response,
            done,
            since: self.now(),
        };
        self.claim_session(claim);
    }

    /// Settles or sends a reconnect's claim. The leader must learn that the session moved
    /// here before we answer, so that a write left behind on the client's old connection can
    /// never land after its new ones. With no leader known (an election is under way) the
    /// claim waits for one rather than failing: the client's reconnect then completes within
    /// milliseconds of the election instead of after its own timeout.
    fn claim_session(&mut self, claim: AwaitingClaim) {
        let leader = self.node.raft.leader_id;
        if leader == self.cfg.id {
            let now = self.now_ms();
            let alive = self.tracker.touch(claim.session_id, now);
            let term = self.term();
            if alive {
                self.gate.claim(term, claim.session_id, self.cfg.id);
            }
            return self.finish_reconnect(
                claim.conn,
                claim.session_id,
                claim.response,
                claim.done,
                alive,
            );
        }
        // A fresh token per send: an answer to a claim sent to an earlier leader is ignored.
        let token = self.next_claim_token;
        self.next_claim_token += 1;
        if leader != 0 {
            let msg = super::control::Control::Claim {
                term: self.term(),
                session_id: claim.session_id,
                token,
            };
            if !self.send_control(leader, &msg) {
                return self.finish_reconnect(
                    claim.conn,
                    claim.session_id,
                    claim.response,
                    claim.done,
                    false,
                );
            }
        }
        self.awaiting_claims.insert(token, claim);
    }

    /// After a leader change, claims sent to the old leader (or waiting for any) go to the new
    /// one: a leader that died took its answers with it.
    pub(super) fn redirect_claims(&mut self) {
        if self.node.raft.leader_id == 0 || self.awaiting_claims.is_empty() {
            return;
        }
        for (_, claim) in std::mem::take(&mut self.awaiting_claims) {
            if self.conns.contains_key(&claim.conn) {
                self.claim_session(claim);
            }
        }
    }

    /// The leader answered a claim.
    pub(super) fn finish_claim(&mut self, token: u64, ok: bool) {
        if let Some(c) = self.awaiting_claims.remove(&token) {
            self.finish_reconnect(c.conn, c.session_id, c.response, c.done, ok);
        }
    }

    /// Claims the leader never answered (it died, or the link broke): the client retries.
    pub(super) fn expire_stuck_claims(&mut self) {
        let now = self.now();
        let stuck: Vec<u64> = self
            .awaiting_claims
            .iter()
            .filter(|(_, c)| clock::since(now, c.since) > CLAIM_TIMEOUT)
            .map(|(t, _)| *t)
            .collect();
        for token in stuck {
            self.finish_claim(token, false);
        }
        let stuck: Vec<i64> = self
            .awaiting_sessions
            .iter()
            .filter(|(_, a)| clock::since(now, a.since) > CLAIM_TIMEOUT)
            .map(|(id, _)| *id)
            .collect();
        for session_id in stuck {
            tracing::warn!(session = %session_hex(session_id), "no answer to opening a session; closing the connection");
            self.finish_create_session(session_id, false);
        }
    }

    /// Attaches a resumed session to its new connection, or closes the connection without an
    /// answer when the leader could not confirm it: only an applied close may tell a client its
    /// session expired, so a doubtful reconnect is simply retried.
    fn finish_reconnect(
        &mut self,
        conn_id: ConnId,
        session_id: i64,
        response: ConnectResponse,
        done: oneshot::Sender<ConnectOutcome>,
        ok: bool,
    ) {
        if !ok {
            self.drop_connection(conn_id);
            let _ = done.send(ConnectOutcome::Refused);
            return;
        }
        if let Some(old) = self.session_conns.remove(&session_id) {
            // The client moved to a new connection: the old one can no longer be answered in
            // order, and its watches will be re-sent with setWatches.
            tracing::info!(session = %session_hex(session_id), "session reconnected; closing its previous connection");
            self.watches.remove_session(session_id);
            if let Some(old_conn) = self.conns.remove(&old) {
                old_conn.close();
            }
        }
        let Some(conn) = self.conns.get_mut(&conn_id) else {
            let _ = done.send(ConnectOutcome::Refused);
            return;
        };
        conn.session_id = Some(session_id);
        conn.send(wire::connect_response(&response));
        self.session_conns.insert(session_id, conn_id);
        tracing::debug!(peer = %conn.peer, session = %session_hex(session_id), "session resumed");
        let _ = done.send(ConnectOutcome::Established { session_id });
    }

    /// Completes a handshake once its CreateSession entry has applied.
    pub(super) fn finish_create_session(&mut self, session_id: i64, ok: bool) {
        let Some(awaiting) = self.awaiting_sessions.remove(&session_id) else {
            return;
        };
        let Some(conn) = self.conns.get_mut(&awaiting.conn) else {
            return;
        };
        if !ok {
            conn.close();
            let _ = awaiting.done.send(ConnectOutcome::Refused);
            return;
        }
        conn.session_id = Some(session_id);
        let resp = ConnectResponse {
            protocol_version: 0,
            timeout_ms: awaiting.timeout_ms,
            session_id,
            passwd: awaiting.passwd,
            read_only: false,
        };
        conn.send(wire::connect_response(&resp));
        self.session_conns.insert(session_id, awaiting.conn);
        tracing::debug!(peer = %conn.peer, session = %session_hex(session_id), timeout_ms = awaiting.timeout_ms, "session opened");
        let _ = awaiting
            .done
            .send(ConnectOutcome::Established { session_id });
    }

    pub(super) fn on_disconnected(&mut self, conn_id: ConnId) {
        let Some(conn) = self.conns.remove(&conn_id) else {
            return;
        };
        if let Some(session_id) = conn.session_id
            && self.session_conns.get(&session_id) == Some(&conn_id)
        {
            // The session lives on until it expires; its watches belong to the connection
            // (clients re-send them with setWatches when they reconnect).
            self.session_conns.remove(&session_id);
            self.watches.remove_session(session_id);
        }
    }

    /// Proposes closing a session (the client asked, or the leader saw it expire).
    pub(super) fn propose_close(&mut self, session_id: i64, expired: bool) {
        let cmd = Command {
            session_id,
            xid: 0,
            time_ms: self.wall_ms(),
            kind: CommandKind::CloseSession { expired },
        };
        if let Err(e) = self.node.propose(vec![], cmd.encode()) {
            tracing::warn!(session = %session_hex(session_id), error = %e, "could not propose closing the session; will retry");
        }
    }

    /// Proposes a session-level command that no client request precedes (opening a session):
    /// at the leader directly, elsewhere forwarded to it. `false` when no leader can take it.
    fn propose_for_session(&mut self, session_id: i64, command: Vec<u8>) -> bool {
        let leader = self.node.raft.leader_id;
        let term = self.term();
        if leader == self.cfg.id {
            let p = super::gate::Proposal {
                member: self.cfg.id,
                session_id,
                xid: 0,
                prev_xid: None,
            };
            self.gate.admit(term, p).is_ok() && self.node.propose(vec![], command).is_ok()
        } else {
            let msg = super::control::Control::Propose {
                term,
                session_id,
                xid: 0,
                prev_xid: None,
                command,
            };
            leader != 0 && self.send_control(leader, &msg)
        }
    }

    pub(super) fn forget_session(&mut self, session_id: i64) {
        self.tracker.remove(session_id);
        self.gate.forget(session_id);
        self.watches.remove_session(session_id);
        if let Some(conn_id) = self.session_conns.remove(&session_id)
            && let Some(conn) = self.conns.get(&conn_id)
        {
            conn.close();
        }
    }

    /// The leader's periodic clean-up: empty containers and expired TTL nodes.
    pub(super) fn propose_housekeeping(&mut self) {
        let now = self.wall_ms();
        let mut kinds: Vec<CommandKind> = self
            .sm
            .containers_to_reap()
            .into_iter()
            .map(|path| CommandKind::ReapContainer { path })
            .collect();
        kinds.extend(
            self.sm
                .expired_ttl_nodes(now)
                .into_iter()
                .map(|path| CommandKind::ExpireTtl { path }),
        );
        for kind in kinds {
            let cmd = Command {
                session_id: 0,
                xid: 0,
                time_ms: now,
                kind,
            };
            if self.node.propose(vec![], cmd.encode()).is_err() {
                return;
            }
        }
    }
}
