//! Client requests, as the server decodes them after the `RequestHeader`.

use crate::opcode::OpCode;
use crate::records::Acl;

/// The first frame of every connection (`ConnectRequest`); it has no `RequestHeader`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    pub protocol_version: i32,
    pub last_zxid_seen: i64,
    pub timeout_ms: i32,
    pub session_id: i64,
    pub passwd: Vec<u8>,
    /// The trailing `readOnly` flag; `None` when the frame ends before it (a client older
    /// than ZooKeeper 3.4, which must then be answered without the flag too).
    pub read_only: Option<bool>,
}

/// `RequestHeader`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub xid: i32,
    pub opcode: i32,
}

/// create, create2, createContainer and createTTL share this body (`ttl` only for createTTL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest {
    pub path: String,
    /// `None` is jute's null buffer (length -1): ZooKeeper keeps it apart from empty data, a
    /// later getData answers null too.
    pub data: Option<Vec<u8>>,
    pub acl: Vec<Acl>,
    /// Raw `flags`; validated by the server (unknown → BadArguments), not by the decoder.
    pub flags: i32,
    /// Present only for `OpCode::CreateTtl`.
    pub ttl: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRequest {
    pub path: String,
    pub version: i32,
}

/// exists, getData, getChildren and getChildren2 bodies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathWatchRequest {
    pub path: String,
    pub watch: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetDataRequest {
    pub path: String,
    /// `None` is jute's null buffer (length -1), as for [`CreateRequest::data`].
    pub data: Option<Vec<u8>>,
    pub version: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAclRequest {
    pub path: String,
    pub acl: Vec<Acl>,
    pub version: i32,
}

/// `CheckVersionRequest` (the `check` op inside a multi, or alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckVersionRequest {
    pub path: String,
    pub version: i32,
}

/// `AuthPacket` (`type` is always 0 in practice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthPacket {
    pub auth_type: i32,
    pub scheme: String,
    pub auth: Vec<u8>,
}

/// `SetWatches` and `SetWatches2` (the persistent lists are empty for the former).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SetWatchesRequest {
    pub relative_zxid: i64,
    pub data_watches: Vec<String>,
    pub exist_watches: Vec<String>,
    pub child_watches: Vec<String>,
    pub persistent_watches: Vec<String>,
    pub persistent_recursive_watches: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddWatchRequest {
    pub path: String,
    /// Raw `AddWatchMode`: 0 persistent, 1 persistent recursive.
    pub mode: i32,
}

/// `CheckWatchesRequest` / `RemoveWatchesRequest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchesRequest {
    pub path: String,
    /// Raw `WatcherType`: 1 children, 2 data, 3 any, 4 persistent, 5 persistent recursive.
    pub watcher_type: i32,
}

/// One operation of a `multi` (write transaction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiOp {
    /// `op` is Create, Create2, CreateContainer or CreateTtl.
    Create {
        op: OpCode,
        req: CreateRequest,
    },
    Delete(DeleteRequest),
    SetData(SetDataRequest),
    Check(CheckVersionRequest),
}

/// One operation of a `multiRead`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiReadOp {
    GetChildren(PathWatchRequest),
    GetData(PathWatchRequest),
}

/// A decoded client request (everything after the connect handshake).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `op` is Create, Create2, CreateContainer or CreateTtl (it decides the response shape).
    Create {
        op: OpCode,
        req: CreateRequest,
    },
    Delete(DeleteRequest),
    Exists(PathWatchRequest),
    GetData(PathWatchRequest),
    SetData(SetDataRequest),
    GetAcl {
        path: String,
    },
    SetAcl(SetAclRequest),
    GetChildren(PathWatchRequest),
    GetChildren2(PathWatchRequest),
    Sync {
        path: String,
    },
    Ping,
    Check(CheckVersionRequest),
    Multi(Vec<MultiOp>),
    MultiRead(Vec<MultiReadOp>),
    CloseSession,
    Auth(AuthPacket),
    /// `SetWatches` (101) or `SetWatches2` (105).
    SetWatches {
        op: OpCode,
        req: SetWatchesRequest,
    },
    AddWatch(AddWatchRequest),
    CheckWatches(WatchesRequest),
    RemoveWatches(WatchesRequest),
    GetEphemerals {
        prefix_path: String,
    },
    GetAllChildrenNumber {
        path: String,
    },
    WhoAmI,
}

impl Request {
    /// The opcode this request is answered as.
    pub fn opcode(&self) -> OpCode {
        match self {
            Request::Create { op, .. } => *op,
            Request::Delete(_) => OpCode::Delete,
            Request::Exists(_) => OpCode::Exists,
            Request::GetData(_) => OpCode::GetData,
            Request::SetData(_) => OpCode::SetData,
            Request::GetAcl { .. } => OpCode::GetAcl,
            Request::SetAcl(_) => OpCode::SetAcl,
            Request::GetChildren(_) => OpCode::GetChildren,
            Request::GetChildren2(_) => OpCode::GetChildren2,
            Request::Sync { .. } => OpCode::Sync,
            Request::Ping => OpCode::Ping,
            Request::Check(_) => OpCode::Check,
            Request::Multi(_) => OpCode::Multi,
            Request::MultiRead(_) => OpCode::MultiRead,
            Request::CloseSession => OpCode::CloseSession,
            Request::Auth(_) => OpCode::Auth,
            Request::SetWatches { op, .. } => *op,
            Request::AddWatch(_) => OpCode::AddWatch,
            Request::CheckWatches(_) => OpCode::CheckWatches,
            Request::RemoveWatches(_) => OpCode::RemoveWatches,
            Request::GetEphemerals { .. } => OpCode::GetEphemerals,
            Request::GetAllChildrenNumber { .. } => OpCode::GetAllChildrenNumber,
            Request::WhoAmI => OpCode::WhoAmI,
        }
    }

    /// Whether the request changes replicated state and so must go through the log.
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Request::Create { .. }
                | Request::Delete(_)
                | Request::SetData(_)
                | Request::SetAcl(_)
                | Request::Check(_)
                | Request::Multi(_)
                | Request::CloseSession
        )
    }
}
