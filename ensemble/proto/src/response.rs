//! Server replies, as encoded after the `ReplyHeader`.

use crate::error::ErrorCode;
use crate::records::{Acl, ClientInfo, Stat, WatcherEvent};

/// The answer to the connect handshake (`ConnectResponse`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectResponse {
    pub protocol_version: i32,
    pub timeout_ms: i32,
    pub session_id: i64,
    pub passwd: Vec<u8>,
    /// The trailing `readOnly` flag; `None` leaves it out (36 bytes with a 16-byte password),
    /// which is what a client that sent no flag expects: some such clients refuse any other
    /// length.
    pub read_only: Option<bool>,
}

/// `ReplyHeader`. `err` is 0 for success, else an [`ErrorCode`] value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHeader {
    pub xid: i32,
    pub zxid: i64,
    pub err: i32,
}

/// The result of one op of a `multi`, as it is encoded in a `MultiResponse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiResult {
    /// Answer to a `create` op: only the path.
    Create {
        path: String,
    },
    /// Answer to `create2`, `createContainer` and `createTTL` ops: path and stat.
    Create2 {
        path: String,
        stat: Stat,
    },
    Delete,
    SetData {
        stat: Stat,
    },
    Check,
    /// `ErrorResponse`: in a failed multi, `Ok` (0) for ops before the failure, the failure's
    /// code, then `RuntimeInconsistency` for the rest.
    Error {
        err: i32,
    },
}

/// The result of one op of a `multiRead`; `GetData`'s `data` is `None` for null data, as in
/// `Response::GetData`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiReadResult {
    GetChildren { children: Vec<String> },
    GetData { data: Option<Vec<u8>>, stat: Stat },
    Error { err: ErrorCode },
}

/// A successful reply body. Errors are sent as a `ReplyHeader` with `err` set and no body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// No body: delete, check, ping, closeSession, auth, setWatches, checkWatches,
    /// removeWatches.
    Empty,
    /// The answer to a successful `addWatch`: ZooKeeper sends an `ErrorResponse{err: 0}` (four
    /// zero bytes) and its Java client fails the connection if they are missing.
    AddWatch,
    Create {
        path: String,
    },
    Create2 {
        path: String,
        stat: Stat,
    },
    /// exists, setData and setACL answer with a lone `Stat`.
    Stat(Stat),
    /// `data` is `None` for a node created or last set with null data (sent as length -1);
    /// its `Stat.dataLength` is 0, as in ZooKeeper.
    GetData {
        data: Option<Vec<u8>>,
        stat: Stat,
    },
    GetAcl {
        acl: Vec<Acl>,
        stat: Stat,
    },
    GetChildren {
        children: Vec<String>,
    },
    GetChildren2 {
        children: Vec<String>,
        stat: Stat,
    },
    Sync {
        path: String,
    },
    Multi(Vec<MultiResult>),
    MultiRead(Vec<MultiReadResult>),
    GetEphemerals {
        ephemerals: Vec<String>,
    },
    GetAllChildrenNumber {
        total: i32,
    },
    WhoAmI {
        client_info: Vec<ClientInfo>,
    },
}

/// A notification frame: `ReplyHeader{xid: -1, zxid, err: 0}` followed by the event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub zxid: i64,
    pub event: WatcherEvent,
}
