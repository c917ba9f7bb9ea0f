//! The leader's check of a write another member forwarded, before it enters the log where
//! every member must apply it.

use baton_machine::{Command, CommandKind};
use baton_proto::{DecodeError, OpCode};

/// Why the leader refuses a forwarded write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ForwardRefusal {
    #[error("does not decode: {0}")]
    Undecodable(#[from] DecodeError),
    #[error(
        "the command is for session 0x{command_session:x} xid {command_xid}, the envelope says 0x{session_id:x} xid {xid}"
    )]
    EnvelopeMismatch {
        command_session: i64,
        command_xid: i32,
        session_id: i64,
        xid: i32,
    },
    #[error("{0:?} is not a write")]
    NotAWrite(OpCode),
    #[error("member {from} may not create session 0x{session_id:x}, outside its id range")]
    ForeignSessionRange { from: u64, session_id: i64 },
    #[error("{0} is for the leader alone to propose")]
    LeaderOnly(&'static str),
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
) -> Result<(), ForwardRefusal> {
    let cmd = Command::decode(command)?;
    if cmd.session_id != session_id || cmd.xid != xid {
        return Err(ForwardRefusal::EnvelopeMismatch {
            command_session: cmd.session_id,
            command_xid: cmd.xid,
            session_id,
            xid,
        });
    }
    match &cmd.kind {
        CommandKind::Write { request, .. } if request.is_write() => Ok(()),
        CommandKind::Write { request, .. } => Err(ForwardRefusal::NotAWrite(request.opcode())),
        // A member picks new session ids from its own range (its id in the top byte), so a
        // member can never open a session under an id another member may hand out.
        CommandKind::CreateSession { .. }
            if session_id != 0 && (session_id as u64) >> 56 == from & 0xff =>
        {
            Ok(())
        }
        CommandKind::CreateSession { .. } => {
            Err(ForwardRefusal::ForeignSessionRange { from, session_id })
        }
        CommandKind::CloseSession { expired: false } => Ok(()),
        // A member asks for its own alarm only, outside any session (which is what lets the
        // leader propose it without the session gate).
        CommandKind::Alarm { member, .. } if *member == from && session_id == 0 => Ok(()),
        // Expiry, container and TTL reaping, no-ops: the leader's own decisions, never a
        // member's request.
        other => Err(ForwardRefusal::LeaderOnly(kind_name(other))),
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
        CommandKind::SetSettings { .. } => "a settings change",
        CommandKind::Alarm { .. } => "another member's alarm",
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
        assert!(matches!(
            check_forwarded(2, 7, 3, b"garbage"),
            Err(ForwardRefusal::Undecodable(_))
        ));
        assert!(matches!(
            check_forwarded(2, 7, 3, &[]),
            Err(ForwardRefusal::Undecodable(_))
        ));
        let write = CommandKind::Write {
            auth: vec![],
            request: Request::Delete(DeleteRequest {
                path: "/a".into(),
                version: -1,
            }),
        };
        // Envelope and command disagree.
        let other_session = check_forwarded(2, 7, 3, &encoded(8, 3, write.clone()));
        assert_eq!(
            other_session.map_err(|e| e.to_string()),
            Err("the command is for session 0x8 xid 3, the envelope says 0x7 xid 3".into())
        );
        assert!(matches!(
            check_forwarded(2, 7, 3, &encoded(7, 4, write)),
            Err(ForwardRefusal::EnvelopeMismatch { command_xid: 4, .. })
        ));
        // A read dressed as a write.
        let read = CommandKind::Write {
            auth: vec![],
            request: Request::GetData(PathWatchRequest {
                path: "/a".into(),
                watch: false,
            }),
        };
        assert_eq!(
            check_forwarded(2, 7, 3, &encoded(7, 3, read)),
            Err(ForwardRefusal::NotAWrite(OpCode::GetData))
        );
        // Another member's session id range.
        let theirs = 3i64 << 56;
        let create = CommandKind::CreateSession {
            timeout_ms: 4000,
            passwd: vec![0; 16],
        };
        assert_eq!(
            check_forwarded(2, theirs, 0, &encoded(theirs, 0, create)),
            Err(ForwardRefusal::ForeignSessionRange {
                from: 2,
                session_id: theirs
            })
        );
        for leader_only in [
            CommandKind::CloseSession { expired: true },
            CommandKind::ReapContainer { path: "/c".into() },
            CommandKind::ExpireTtl { path: "/t".into() },
            CommandKind::Noop,
        ] {
            assert!(matches!(
                check_forwarded(2, 7, 3, &encoded(7, 3, leader_only)),
                Err(ForwardRefusal::LeaderOnly(_))
            ));
        }
    }
}
