//! Session lifetimes: ids, expiry at the leader, the touches followers report so the leader
//! knows a session is alive, and what closing a session forgets. The handshake that opens or
//! resumes a session is `connect.rs`.

use baton_machine::{Command, CommandKind};

use super::Core;
use super::control::Control;

/// ZooKeeper's scheme: the member id in the top byte, then a time-derived counter, so ids
/// proposed by different members (or by one member across restarts) never collide.
pub fn initial_session_id(member_id: u64, now_ms: i64) -> i64 {
    let time_part = ((now_ms as u64) << 24) >> 8;
    ((member_id << 56) | time_part) as i64
}

pub(super) fn session_hex(id: i64) -> String {
    format!("0x{:016x}", id as u64)
}

impl Core {
    /// At the leader: proposes closing every session whose deadline has passed.
    pub(super) fn expire_sessions(&mut self) {
        let now = self.now_ms();
        for session_id in self.tracker.expired(now) {
            tracing::info!(session = %format_args!("0x{session_id:x}"), "session expired");
            self.propose_close(session_id, true);
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

    /// A session's close applied: forget it everywhere and close its connection here.
    pub(super) fn forget_session(&mut self, session_id: i64) {
        self.tracker.remove(session_id);
        self.gate.forget(session_id);
        self.watches.remove_session(session_id);
        if let Some(conn_id) = self.clients.detach(session_id)
            && let Some(conn) = self.clients.get(conn_id)
        {
            conn.close();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_carry_their_member_and_differ_across_restarts() {
        let a = initial_session_id(3, 1_700_000_000_000);
        assert_eq!((a as u64) >> 56, 3);
        let later = initial_session_id(3, 1_700_000_000_001);
        assert_ne!(a, later);
        assert_eq!((later as u64) >> 56, 3);
        assert_eq!(session_hex(0x1f), "0x000000000000001f");
    }
}
