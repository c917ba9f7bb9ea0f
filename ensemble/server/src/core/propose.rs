//! Getting a write into the log: at the leader through the `ProposalGate`, from any other
//! member forwarded to the leader as a `Control::Propose`. Whichever member holds the
//! connection answers once the entry applies.

use baton_machine::{Command, CommandKind};
use baton_proto::ErrorCode;
use bytes::Bytes;

use super::Core;
use super::control::Control;
use super::gate::Proposal;
use super::local_conn::Pending;
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
        let Some(conn) = self.clients.get(conn_id) else {
            return;
        };
        let prev = conn.last_write();
        if prev.is_some_and(|(_, t)| t != term) {
            tracing::info!(peer = %conn.peer, "leader changed with writes in flight; closing the connection");
            return self.drop_connection(conn_id);
        }
        let prev_xid = prev.map(|(xid, _)| xid);
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
        if let Some(conn) = self.clients.get_mut(conn_id) {
            conn.pipeline.push_back(Pending::Write {
                xid,
                since: now,
                term,
            });
        }
    }

    /// At the leader: admits a write through the gate and appends it to the Raft log.
    pub(super) fn admit_and_propose(
        &mut self,
        proposal: Proposal,
        command: Vec<u8>,
    ) -> Result<(), ErrorCode> {
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

    /// Proposes a session-level command that no client request precedes (opening a session):
    /// at the leader directly, elsewhere forwarded to it. `false` when no leader can take it.
    pub(super) fn propose_for_session(&mut self, session_id: i64, command: Vec<u8>) -> bool {
        let leader = self.node.raft.leader_id;
        let term = self.term();
        if leader == self.cfg.id {
            let p = Proposal {
                member: self.cfg.id,
                session_id,
                xid: 0,
                prev_xid: None,
            };
            self.gate.admit(term, p).is_ok() && self.node.propose(vec![], command).is_ok()
        } else {
            let msg = Control::Propose {
                term,
                session_id,
                xid: 0,
                prev_xid: None,
                command,
            };
            leader != 0 && self.send_control(leader, &msg)
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

    pub(super) fn send_control(&self, to: u64, msg: &Control) -> bool {
        match &self.transport {
            Some(t) => t.send_control(to, Bytes::from(msg.encode())),
            None => false,
        }
    }
}
