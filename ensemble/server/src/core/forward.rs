//! Client writes on any member: proposed at the leader (directly, or forwarded to it), admitted
//! through the `ProposalGate`, and answered by whichever member holds the connection once the
//! entry applies. Also session claims (reconnects) and touches, which the leader needs to keep
//! session ownership and deadlines.

use baton_machine::{Command, CommandKind};
use baton_proto::ErrorCode;
use bytes::Bytes;

use super::Core;
use super::conn::Pending;
use super::control::Control;
use super::gate::Proposal;
use super::messages::ConnId;

impl Core {
    pub(super) fn term(&self) -> u64 {
        self.node.raft.term
    }

    /// Proposes a client write for the connection, keeping the session's writes in order.
    /// Any doubt about order (a leader change with writes pending, a lost forward) closes the
    /// connection: the client sees ConnectionLoss and retries, as with ZooKeeper.
    pub(super) fn propose_client_write(
        &mut self,
        conn_id: ConnId,
        session_id: i64,
        xid: i32,
        command: Vec<u8>,
    ) {
        let term = self.term();
        let leader = self.node.raft.leader_id;
        let Some(conn) = self.conns.get_mut(&conn_id) else {
            return;
        };
        let mut prev_xid = None;
        for p in conn.pipeline.iter().rev() {
            if let Pending::Write { xid, term: t, .. } = p {
                if *t != term {
                    tracing::info!(peer = %conn.peer, "leader changed with writes in flight; closing the connection");
                    return self.drop_connection(conn_id);
                }
                prev_xid = Some(*xid);
                break;
            }
        }
        let admitted = if leader == self.cfg.id {
            let proposal = Proposal {
                member: self.cfg.id,
                session_id,
                xid,
                prev_xid,
            };
            self.admit_and_propose(proposal, command).is_ok()
        } else if leader == 0 {
            false
        } else {
            let msg = Control::Propose {
                term,
                session_id,
                xid,
                prev_xid,
                command,
            };
            self.send_control(leader, &msg)
        };
        if !admitted {
            tracing::info!(session = %format_args!("0x{session_id:x}"), leader, "cannot route a write to a leader; closing the connection");
            return self.drop_connection(conn_id);
        }
        self.metrics.writes.inc();
        let now = self.now();
        if let Some(conn) = self.conns.get_mut(&conn_id) {
            conn.pipeline.push_back(Pending::Write {
                xid,
                since: now,
                term,
            });
        }
    }

    /// At the leader: admits a write through the gate and appends it to the Raft log.
    fn admit_and_propose(&mut self, proposal: Proposal, command: Vec<u8>) -> Result<(), ErrorCode> {
        let term = self.term();
        self.gate.admit(term, proposal)?;
        self.node.propose(vec![], command).map_err(|e| {
            tracing::warn!(error = %e, "the leader could not append a write");
            // The gate recorded it as appended; forget the session's history so its next
            // write (which names this one as predecessor) is refused rather than reordered.
            self.gate.forget(proposal.session_id);
            ErrorCode::ConnectionLoss
        })
    }

    pub(super) fn send_control(&self, to: u64, msg: &Control) -> bool {
        match &self.transport {
            Some(t) => t.send_control(to, Bytes::from(msg.encode())),
            None => false,
        }
    }

    /// Closes a connection now and forgets it (its reader will report `Disconnected`, which
    /// then finds nothing to do).
    pub(super) fn drop_connection(&mut self, conn_id: ConnId) {
        if let Some(conn) = self.conns.get(&conn_id) {
            conn.close();
        }
        self.on_disconnected(conn_id);
    }

    /// A control message from member `from`.
    pub(super) fn on_control(&mut self, from: u64, payload: &[u8]) {
        let msg = match Control::decode(payload) {
            Ok(msg) => msg,
            Err(e) => {
                tracing::warn!(from, error = %e, "undecodable control message from a member; ignored");
                return;
            }
        };
        match msg {
            Control::Propose {
                term,
                session_id,
                xid,
                prev_xid,
                command,
            } => {
                let result = if term != self.term() || !self.is_leader() {
                    Err(ErrorCode::ConnectionLoss)
                } else if let Err(why) = check_forwarded(from, session_id, xid, &command) {
                    self.metrics.forwards_refused.inc();
                    tracing::warn!(
                        from, session = %format_args!("0x{session_id:x}"), xid, %why,
                        "refusing a forwarded write: it never enters the log"
                    );
                    Err(ErrorCode::MarshallingError)
                } else {
                    self.admit_and_propose(
                        Proposal {
                            member: from,
                            session_id,
                            xid,
                            prev_xid,
                        },
                        command,
                    )
                };
                if let Err(err) = result {
                    self.send_control(
                        from,
                        &Control::Rejected {
                            session_id,
                            xid,
                            err: err.code(),
                        },
                    );
                }
            }
            Control::Rejected {
                session_id,
                xid,
                err,
            } => {
                tracing::info!(
                    session = %format_args!("0x{session_id:x}"), xid, err,
                    "the leader refused a forwarded write; closing the connection so the client retries"
                );
                if let Some(&conn_id) = self.session_conns.get(&session_id) {
                    self.drop_connection(conn_id);
                } else if self.awaiting_sessions.contains_key(&session_id) {
                    self.finish_create_session(session_id, false);
                }
            }
            Control::Claim {
                term,
                session_id,
                token,
            } => {
                let now = self.now_ms();
                let ok = term == self.term()
                    && self.is_leader()
                    && self.sm.session(session_id).is_some()
                    && self.tracker.touch(session_id, now);
                if ok {
                    self.gate.claim(term, session_id, from);
                }
                self.send_control(from, &Control::ClaimAck { token, ok });
            }
            Control::ClaimAck { token, ok } => self.finish_claim(token, ok),
            Control::Touches { sessions } => {
                if self.is_leader() {
                    let now = self.now_ms();
                    for s in sessions {
                        self.tracker.touch(s, now);
                    }
                }
            }
        }
    }

    /// Followers tell the leader which sessions were active, once per tick.
    pub(super) fn flush_touches(&mut self) {
        if self.touched.is_empty() {
            return;
        }
        let leader = self.node.raft.leader_id;
        if leader == 0 || leader == self.cfg.id {
            self.touched.clear();
            return;
        }
        let sessions: Vec<i64> = std::mem::take(&mut self.touched).into_iter().collect();
        self.send_control(leader, &Control::Touches { sessions });
    }
}

/// What the leader checks of a write a member forwards before it enters the log, where
/// every member must apply it: it decodes, it is the write the envelope says it is, and it
/// is something a member may ask for on a client's behalf. Session ownership is the gate's
/// check, after this one.
pub(crate) fn check_forwarded(
    from: u64,
    session_id: i64,
    xid: i32,
    command: &[u8],
) -> Result<(), String> {
    let cmd = Command::decode(command).map_err(|e| format!("does not decode: {e}"))?;
    if cmd.session_id != session_id || cmd.xid != xid {
        return Err(format!(
            "the command is for session 0x{:x} xid {}, the envelope says 0x{session_id:x} xid {xid}",
            cmd.session_id, cmd.xid
        ));
    }
    match &cmd.kind {
        CommandKind::Write { request, .. } if request.is_write() => Ok(()),
        CommandKind::Write { request, .. } => Err(format!("{:?} is not a write", request.opcode())),
        // A member picks new session ids from its own range (its id in the top byte), so a
        // member can never open a session under an id another member may hand out.
        CommandKind::CreateSession { .. } if (session_id as u64) >> 56 == from & 0xff => Ok(()),
        CommandKind::CreateSession { .. } => Err(format!(
            "member {from} may not create session 0x{session_id:x}, outside its id range"
        )),
        CommandKind::CloseSession { expired: false } => Ok(()),
        // Expiry, container and TTL reaping, no-ops: the leader's own decisions, never a
        // member's request.
        other => Err(format!(
            "{} is for the leader alone to propose",
            kind_name(other)
        )),
    }
}

fn kind_name(kind: &CommandKind) -> &'static str {
    match kind {
        CommandKind::CreateSession { .. } => "createSession",
        CommandKind::CloseSession { expired: true } => "an expiry",
        CommandKind::CloseSession { expired: false } => "closeSession",
        CommandKind::Write { .. } => "a write",
        CommandKind::ReapContainer { .. } => "a container reap",
        CommandKind::ExpireTtl { .. } => "a TTL expiry",
        CommandKind::Noop => "a no-op",
    }
}

#[cfg(test)]
mod tests {
    use baton_proto::request::{DeleteRequest, PathWatchRequest, Request};

    use super::*;

    fn encoded(session_id: i64, xid: i32, kind: CommandKind) -> Vec<u8> {
        Command {
            session_id,
            xid,
            time_ms: 1,
            kind,
        }
        .encode()
    }

    #[test]
    fn forwarded_client_writes_and_sessions_pass() {
        let write = CommandKind::Write {
            auth: vec![],
            request: Request::Delete(DeleteRequest {
                path: "/a".into(),
                version: -1,
            }),
        };
        assert_eq!(check_forwarded(2, 7, 3, &encoded(7, 3, write)), Ok(()));
        let own_range = (2i64 << 56) | 99;
        let create = CommandKind::CreateSession {
            timeout_ms: 4000,
            passwd: vec![0; 16],
        };
        assert_eq!(
            check_forwarded(2, own_range, 0, &encoded(own_range, 0, create)),
            Ok(())
        );
        let close = CommandKind::CloseSession { expired: false };
        assert_eq!(check_forwarded(2, 7, 5, &encoded(7, 5, close)), Ok(()));
    }

    #[test]
    fn garbage_mismatches_and_leader_only_commands_are_refused() {
        assert!(check_forwarded(2, 7, 3, b"garbage").is_err());
        assert!(check_forwarded(2, 7, 3, &[]).is_err());
        let write = CommandKind::Write {
            auth: vec![],
            request: Request::Delete(DeleteRequest {
                path: "/a".into(),
                version: -1,
            }),
        };
        // Envelope and command disagree.
        assert!(check_forwarded(2, 7, 3, &encoded(8, 3, write.clone())).is_err());
        assert!(check_forwarded(2, 7, 3, &encoded(7, 4, write)).is_err());
        // A read dressed as a write.
        let read = CommandKind::Write {
            auth: vec![],
            request: Request::GetData(PathWatchRequest {
                path: "/a".into(),
                watch: false,
            }),
        };
        assert!(check_forwarded(2, 7, 3, &encoded(7, 3, read)).is_err());
        // Another member's session id range.
        let theirs = 3i64 << 56;
        let create = CommandKind::CreateSession {
            timeout_ms: 4000,
            passwd: vec![0; 16],
        };
        assert!(check_forwarded(2, theirs, 0, &encoded(theirs, 0, create)).is_err());
        for leader_only in [
            CommandKind::CloseSession { expired: true },
            CommandKind::ReapContainer { path: "/c".into() },
            CommandKind::ExpireTtl { path: "/t".into() },
            CommandKind::Noop,
        ] {
            assert!(check_forwarded(2, 7, 3, &encoded(7, 3, leader_only)).is_err());
        }
    }
}
