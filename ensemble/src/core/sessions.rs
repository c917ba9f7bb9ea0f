//! The handshake, reconnects, disconnects and session expiry.

use std::net::SocketAddr;

use baton_machine::{Command, CommandKind};
use baton_proto::{ConnectRequest, ConnectResponse};
use rand::RngCore;
use tokio::sync::oneshot;

use super::conn::LocalConn;
use super::messages::{ConnId, ConnectOutcome, Outbound, OutboundTx};
use super::{Core, wall_ms, wire};

/// A new session whose CreateSession entry is not applied yet.
#[derive(Debug)]
pub struct AwaitingSession {
    pub conn: ConnId,
    pub timeout_ms: i32,
    pub passwd: Vec<u8>,
    pub done: oneshot::Sender<ConnectOutcome>,
}

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
                time_ms: wall_ms(),
                kind: CommandKind::CreateSession {
                    timeout_ms,
                    passwd: passwd.clone(),
                },
            };
            if let Err(e) = self.node.propose(vec![], cmd.encode()) {
                tracing::warn!(%peer, error = %e, "cannot open a session now (no leader?); closing the connection");
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
                },
            );
            return;
        }

        let now = self.now_ms();
        let known = self
            .sm
            .session(req.session_id)
            .map(|s| (s.passwd.clone(), s.timeout_ms));
        match known {
            Some((passwd, timeout))
                if passwd == req.passwd && self.tracker.touch(req.session_id, now) =>
            {
                if let Some(old) = self.session_conns.remove(&req.session_id) {
                    // The client moved to a new connection: the old one can no longer be answered
                    // in order, and its watches will be re-sent with setWatches.
                    tracing::info!(session = %session_hex(req.session_id), "session reconnected; closing its previous connection");
                    self.watches.remove_session(req.session_id);
                    if let Some(old_conn) = self.conns.remove(&old) {
                        old_conn.close();
                    }
                }
                conn.session_id = Some(req.session_id);
                let resp = ConnectResponse {
                    protocol_version: 0,
                    timeout_ms: timeout,
                    session_id: req.session_id,
                    passwd,
                    read_only: false,
                };
                conn.send(wire::connect_response(&resp));
                self.conns.insert(conn_id, conn);
                self.session_conns.insert(req.session_id, conn_id);
                tracing::debug!(%peer, session = %session_hex(req.session_id), "session resumed");
                let _ = done.send(ConnectOutcome::Established {
                    session_id: req.session_id,
                });
            }
            _ => {
                tracing::info!(%peer, session = %session_hex(req.session_id), "reconnect refused: session expired, closed or wrong password");
                conn.send(wire::connect_response(&expired_response()));
                conn.close();
                let _ = done.send(ConnectOutcome::Refused);
            }
        }
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
            time_ms: wall_ms(),
            kind: CommandKind::CloseSession { expired },
        };
        if let Err(e) = self.node.propose(vec![], cmd.encode()) {
            tracing::warn!(session = %session_hex(session_id), error = %e, "could not propose closing the session; will retry");
        }
    }

    /// Drops everything this member holds for a session closed by an applied entry.
    pub(super) fn forget_session(&mut self, session_id: i64) {
        self.tracker.remove(session_id);
        self.watches.remove_session(session_id);
        if let Some(conn_id) = self.session_conns.remove(&session_id)
            && let Some(conn) = self.conns.get(&conn_id)
        {
            conn.close();
        }
    }

    /// The leader's periodic clean-up: empty containers and expired TTL nodes.
    pub(super) fn propose_housekeeping(&mut self) {
        let now = wall_ms();
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
