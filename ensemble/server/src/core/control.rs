//! Messages between members that are not Raft's own: forwarded client writes and their
//! refusals, session claims on reconnect, and batches of session touches for the leader.
//! They ride the peer transport's ordered lane next to Raft messages, as opaque payloads.
//! The codec comes first, then what the core does with each message.

use baton_proto::{DecodeError, ErrorCode, Reader, Writer};

use super::Core;
use super::check_forwarded::check_forwarded;
use super::gate::Proposal;

/// One control message. Every variant that depends on who leads names the term it assumes,
/// so a message that outlives a leader change is refused instead of misapplied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// A client write for the leader to append, from the member holding the connection.
    Propose {
        term: u64,
        session_id: i64,
        xid: i32,
        prev_xid: Option<i32>,
        command: Vec<u8>,
    },
    /// The leader refused a forwarded write; the sender drops the connection so the client retries.
    Rejected {
        session_id: i64,
        xid: i32,
        err: ErrorCode,
    },
    /// "This session now lives on me": sent by a member before it answers a reconnect.
    Claim {
        term: u64,
        session_id: i64,
        token: u64,
    },
    /// The leader's answer to a claim: `ok` when the session is alive and now owned by the sender.
    ClaimAck { token: u64, ok: bool },
    /// Sessions that showed activity on the sender since its last batch.
    Touches { sessions: Vec<i64> },
}

const PROPOSE: i32 = 1;
const REJECTED: i32 = 2;
const CLAIM: i32 = 3;
const CLAIM_ACK: i32 = 4;
const TOUCHES: i32 = 5;

impl Control {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(32);
        match self {
            Control::Propose {
                term,
                session_id,
                xid,
                prev_xid,
                command,
            } => {
                w.write_i32(PROPOSE);
                w.write_i64(*term as i64);
                w.write_i64(*session_id);
                w.write_i32(*xid);
                w.write_bool(prev_xid.is_some());
                w.write_i32(prev_xid.unwrap_or(0));
                w.write_buffer(command);
            }
            Control::Rejected {
                session_id,
                xid,
                err,
            } => {
                w.write_i32(REJECTED);
                w.write_i64(*session_id);
                w.write_i32(*xid);
                w.write_i32(err.code());
            }
            Control::Claim {
                term,
                session_id,
                token,
            } => {
                w.write_i32(CLAIM);
                w.write_i64(*term as i64);
                w.write_i64(*session_id);
                w.write_i64(*token as i64);
            }
            Control::ClaimAck { token, ok } => {
                w.write_i32(CLAIM_ACK);
                w.write_i64(*token as i64);
                w.write_bool(*ok);
            }
            Control::Touches { sessions } => {
                w.write_i32(TOUCHES);
                w.write_vec(sessions, |w, s| w.write_i64(*s));
            }
        }
        w.into_inner()
    }

    /// Decodes a payload from an authenticated member; garbage is an error, never a panic.
    pub fn decode(buf: &[u8]) -> Result<Control, DecodeError> {
        let mut r = Reader::new(buf);
        let msg = match r.read_i32()? {
            PROPOSE => {
                let term = r.read_i64()? as u64;
                let session_id = r.read_i64()?;
                let xid = r.read_i32()?;
                let has_prev = r.read_bool()?;
                let prev = r.read_i32()?;
                let command = r.read_buffer()?;
                Control::Propose {
                    term,
                    session_id,
                    xid,
                    prev_xid: has_prev.then_some(prev),
                    command,
                }
            }
            REJECTED => {
                let session_id = r.read_i64()?;
                let xid = r.read_i32()?;
                let code = r.read_i32()?;
                let err = ErrorCode::from_code(code).ok_or(DecodeError::BadValue {
                    field: "rejection error code",
                    value: code,
                })?;
                Control::Rejected {
                    session_id,
                    xid,
                    err,
                }
            }
            CLAIM => Control::Claim {
                term: r.read_i64()? as u64,
                session_id: r.read_i64()?,
                token: r.read_i64()? as u64,
            },
            CLAIM_ACK => Control::ClaimAck {
                token: r.read_i64()? as u64,
                ok: r.read_bool()?,
            },
            TOUCHES => Control::Touches {
                sessions: r.read_vec(8, |r| r.read_i64())?,
            },
            other => {
                return Err(DecodeError::BadValue {
                    field: "control message kind",
                    value: other,
                });
            }
        };
        r.finish()?;
        Ok(msg)
    }
}

impl Core {
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
                let proposal = Proposal {
                    member: from,
                    session_id,
                    xid,
                    prev_xid,
                };
                self.on_forwarded_write(term, proposal, command)
            }
            Control::Rejected {
                session_id,
                xid,
                err,
            } => self.on_forward_rejected(session_id, xid, err),
            Control::Claim {
                term,
                session_id,
                token,
            } => self.on_claim(from, term, session_id, token),
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

    /// At the leader: a client write another member forwards. Refused (and the sender told)
    /// when this member no longer leads in `term`, the write fails `check_forwarded`, or the
    /// gate refuses it.
    fn on_forwarded_write(&mut self, term: u64, p: Proposal, command: Vec<u8>) {
        let from = p.member;
        let result = if term != self.term() || !self.is_leader() {
            Err(ErrorCode::ConnectionLoss)
        } else if let Err(why) = check_forwarded(from, p.session_id, p.xid, &command) {
            self.metrics.forwards_refused.inc();
            tracing::warn!(
                from, session = %format_args!("0x{:x}", p.session_id), xid = p.xid, %why,
                "refusing a forwarded write: it never enters the log"
            );
            Err(ErrorCode::MarshallingError)
        } else if p.session_id == 0 {
            // Session 0 is no client's (`check_forwarded` lets only a member's own alarm
            // through there): no per-session order to keep, so no gate.
            self.node.propose(vec![], command).map_err(|e| {
                tracing::warn!(error = %e, "the leader could not append a member's alarm");
                ErrorCode::ConnectionLoss
            })
        } else {
            self.admit_and_propose(p, command)
        };
        if let Err(err) = result {
            let rejected = Control::Rejected {
                session_id: p.session_id,
                xid: p.xid,
                err,
            };
            self.send_control(from, &rejected);
        }
    }

    /// The leader refused a write this member forwarded: the client reconnects and retries.
    fn on_forward_rejected(&mut self, session_id: i64, xid: i32, err: ErrorCode) {
        tracing::info!(
            session = %format_args!("0x{session_id:x}"), xid, err = err.code(),
            "the leader refused a forwarded write; closing the connection so the client retries"
        );
        if let Some(conn_id) = self.clients.conn_of(session_id) {
            self.drop_connection(conn_id);
        } else if self.connects.awaits_session(session_id) {
            self.finish_create_session(session_id, false);
        }
    }

    /// At the leader: another member says a session now lives there (a reconnect). Granted
    /// only while this member leads in `term` and the session is alive.
    fn on_claim(&mut self, from: u64, term: u64, session_id: i64, token: u64) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_variant() {
        let all = [
            Control::Propose {
                term: 3,
                session_id: -5,
                xid: 9,
                prev_xid: Some(8),
                command: vec![1, 2, 3],
            },
            Control::Propose {
                term: 3,
                session_id: 5,
                xid: 9,
                prev_xid: None,
                command: vec![],
            },
            Control::Rejected {
                session_id: 5,
                xid: 9,
                err: ErrorCode::SessionMoved,
            },
            Control::Claim {
                term: 7,
                session_id: 5,
                token: 11,
            },
            Control::ClaimAck {
                token: 11,
                ok: true,
            },
            Control::Touches {
                sessions: vec![1, 2, 3],
            },
        ];
        for msg in all {
            assert_eq!(Control::decode(&msg.encode()), Ok(msg));
        }
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(Control::decode(&[]).is_err());
        assert!(Control::decode(&[0, 0, 0, 99]).is_err());
        let mut truncated = Control::Claim {
            term: 1,
            session_id: 2,
            token: 3,
        }
        .encode();
        truncated.pop();
        assert!(Control::decode(&truncated).is_err());
    }

    #[test]
    fn a_rejection_carries_a_zookeeper_error_code_or_does_not_decode() {
        let mut bytes = Control::Rejected {
            session_id: 5,
            xid: 9,
            err: ErrorCode::ConnectionLoss,
        }
        .encode();
        assert_eq!(bytes[bytes.len() - 4..], (-4i32).to_be_bytes());
        let at = bytes.len() - 4;
        bytes[at..].copy_from_slice(&(-9999i32).to_be_bytes());
        assert_eq!(
            Control::decode(&bytes),
            Err(DecodeError::BadValue {
                field: "rejection error code",
                value: -9999
            })
        );
        bytes[at..].copy_from_slice(&0i32.to_be_bytes());
        assert!(Control::decode(&bytes).is_err(), "0 is no rejection");
    }
}
