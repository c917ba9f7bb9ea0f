//! The payload of one Raft log entry: everything `apply` needs to reach the same result on
//! every replica (who asked, with which identities, and the proposer's clock).

use baton_proto::{DecodeError, Id, Reader, Request, Writer, codec};

use crate::settings::{AlarmKind, Setting};

/// One replicated command. The zxid it gets is the Raft index of its entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The session the command acts for (0 for the ensemble's own housekeeping).
    pub session_id: i64,
    /// The client's xid, echoed in the reply.
    pub xid: i32,
    /// The proposer's wall clock in ms since the epoch: ctime/mtime and TTL decisions use it,
    /// never the applying replica's clock.
    pub time_ms: i64,
    pub kind: CommandKind,
}

/// What the command does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandKind {
    /// Open a session with an id and password chosen by the proposer.
    CreateSession { timeout_ms: i32, passwd: Vec<u8> },
    /// Close `session_id` (asked by the client, or expired by the leader) and delete its ephemerals.
    CloseSession { expired: bool },
    /// A client write (`Request::is_write`), checked against `auth` at apply. The request is
    /// kept in its wire form, so null data is jute's null buffer (length -1); entries written
    /// before null data was kept apart never hold one there and decode as they always did.
    Write { auth: Vec<Id>, request: Request },
    /// Delete a container node if it is still an empty container that once had children.
    ReapContainer { path: String },
    /// Delete a TTL node if it is still childless and unmodified for its TTL at `time_ms`.
    ExpireTtl { path: String },
    /// An empty entry (e.g. a new leader's no-op); applies to nothing.
    Noop,
    /// Changes the replicated settings (`settings.rs`): from the admin API, or with
    /// `initial` a leader's flags, applied only while nothing has set them.
    SetSettings {
        initial: bool,
        changes: Vec<Setting>,
    },
    /// Raises or clears `member`'s alarm, asked for by that member.
    Alarm {
        member: u64,
        kind: AlarmKind,
        raised: bool,
    },
}

const TAG_CREATE_SESSION: i32 = 1;
const TAG_CLOSE_SESSION: i32 = 2;
const TAG_WRITE: i32 = 3;
const TAG_REAP_CONTAINER: i32 = 4;
const TAG_EXPIRE_TTL: i32 = 5;
const TAG_NOOP: i32 = 6;
const TAG_SET_SETTINGS: i32 = 7;
const TAG_ALARM: i32 = 8;

impl Command {
    /// Encodes to bytes for a log entry (jute primitives; requests in their wire form).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(64);
        w.write_i64(self.session_id);
        w.write_i32(self.xid);
        w.write_i64(self.time_ms);
        match &self.kind {
            CommandKind::CreateSession { timeout_ms, passwd } => {
                w.write_i32(TAG_CREATE_SESSION);
                w.write_i32(*timeout_ms);
                w.write_buffer(passwd);
            }
            CommandKind::CloseSession { expired } => {
                w.write_i32(TAG_CLOSE_SESSION);
                w.write_bool(*expired);
            }
            CommandKind::Write { auth, request } => {
                w.write_i32(TAG_WRITE);
                w.write_vec(auth, |w, id| {
                    w.write_string(&id.scheme);
                    w.write_string(&id.id);
                });
                w.write_i32(request.opcode().code());
                codec::encode_request_body(request, &mut w);
            }
            CommandKind::ReapContainer { path } => {
                w.write_i32(TAG_REAP_CONTAINER);
                w.write_string(path);
            }
            CommandKind::ExpireTtl { path } => {
                w.write_i32(TAG_EXPIRE_TTL);
                w.write_string(path);
            }
            CommandKind::Noop => w.write_i32(TAG_NOOP),
            CommandKind::SetSettings { initial, changes } => {
                w.write_i32(TAG_SET_SETTINGS);
                w.write_bool(*initial);
                Setting::write_all(&mut w, changes);
            }
            CommandKind::Alarm {
                member,
                kind,
                raised,
            } => {
                w.write_i32(TAG_ALARM);
                w.write_i64(*member as i64);
                w.write_i32(kind.code());
                w.write_bool(*raised);
            }
        }
        w.into_inner()
    }

    /// Decodes what `encode` wrote. An error here means a corrupt log, not bad client input.
    pub fn decode(buf: &[u8]) -> Result<Command, DecodeError> {
        let mut r = Reader::new(buf);
        let session_id = r.read_i64()?;
        let xid = r.read_i32()?;
        let time_ms = r.read_i64()?;
        let tag = r.read_i32()?;
        let kind = match tag {
            TAG_CREATE_SESSION => CommandKind::CreateSession {
                timeout_ms: r.read_i32()?,
                passwd: r.read_buffer()?,
            },
            TAG_CLOSE_SESSION => CommandKind::CloseSession {
                expired: r.read_bool()?,
            },
            TAG_WRITE => {
                let auth = r.read_vec(8, |r| {
                    Ok(Id {
                        scheme: r.read_string()?,
                        id: r.read_string()?,
                    })
                })?;
                let opcode = r.read_i32()?;
                let pos = r.position();
                let request = codec::decode_request(opcode, &buf[pos..])?;
                return Ok(Command {
                    session_id,
                    xid,
                    time_ms,
                    kind: CommandKind::Write { auth, request },
                });
            }
            TAG_REAP_CONTAINER => CommandKind::ReapContainer {
                path: r.read_string()?,
            },
            TAG_EXPIRE_TTL => CommandKind::ExpireTtl {
                path: r.read_string()?,
            },
            TAG_NOOP => CommandKind::Noop,
            TAG_SET_SETTINGS => CommandKind::SetSettings {
                initial: r.read_bool()?,
                changes: Setting::read_all(&mut r)?,
            },
            TAG_ALARM => CommandKind::Alarm {
                member: r.read_i64()? as u64,
                kind: AlarmKind::from_code(r.read_i32()?)?,
                raised: r.read_bool()?,
            },
            other => {
                return Err(DecodeError::BadValue {
                    field: "command tag",
                    value: other,
                });
            }
        };
        r.finish()?;
        Ok(Command {
            session_id,
            xid,
            time_ms,
            kind,
        })
    }
}
