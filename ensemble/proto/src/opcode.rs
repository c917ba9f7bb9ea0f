//! Operation codes (`ZooDefs.OpCode`) and the reserved xids.

/// A request's `type` field in its `RequestHeader`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum OpCode {
    Notification = 0,
    Create = 1,
    Delete = 2,
    Exists = 3,
    GetData = 4,
    SetData = 5,
    GetAcl = 6,
    SetAcl = 7,
    GetChildren = 8,
    Sync = 9,
    Ping = 11,
    GetChildren2 = 12,
    Check = 13,
    Multi = 14,
    Create2 = 15,
    Reconfig = 16,
    CheckWatches = 17,
    RemoveWatches = 18,
    CreateContainer = 19,
    DeleteContainer = 20,
    CreateTtl = 21,
    MultiRead = 22,
    Auth = 100,
    SetWatches = 101,
    Sasl = 102,
    GetEphemerals = 103,
    GetAllChildrenNumber = 104,
    SetWatches2 = 105,
    AddWatch = 106,
    WhoAmI = 107,
    CreateSession = -10,
    CloseSession = -11,
    Error = -1,
}

impl OpCode {
    /// Maps a wire value back; unknown values give `None`.
    pub fn from_code(code: i32) -> Option<Self> {
        use OpCode::*;
        Some(match code {
            0 => Notification,
            1 => Create,
            2 => Delete,
            3 => Exists,
            4 => GetData,
            5 => SetData,
            6 => GetAcl,
            7 => SetAcl,
            8 => GetChildren,
            9 => Sync,
            11 => Ping,
            12 => GetChildren2,
            13 => Check,
            14 => Multi,
            15 => Create2,
            16 => Reconfig,
            17 => CheckWatches,
            18 => RemoveWatches,
            19 => CreateContainer,
            20 => DeleteContainer,
            21 => CreateTtl,
            22 => MultiRead,
            100 => Auth,
            101 => SetWatches,
            102 => Sasl,
            103 => GetEphemerals,
            104 => GetAllChildrenNumber,
            105 => SetWatches2,
            106 => AddWatch,
            107 => WhoAmI,
            -10 => CreateSession,
            -11 => CloseSession,
            -1 => Error,
            _ => return None,
        })
    }

    /// The wire value.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// ZooKeeper's name for it (the field of `ZooDefs.OpCode`), as its docs and logs use.
    pub fn zookeeper_name(self) -> &'static str {
        use OpCode::*;
        match self {
            Notification => "notification",
            Create => "create",
            Delete => "delete",
            Exists => "exists",
            GetData => "getData",
            SetData => "setData",
            GetAcl => "getACL",
            SetAcl => "setACL",
            GetChildren => "getChildren",
            Sync => "sync",
            Ping => "ping",
            GetChildren2 => "getChildren2",
            Check => "check",
            Multi => "multi",
            Create2 => "create2",
            Reconfig => "reconfig",
            CheckWatches => "checkWatches",
            RemoveWatches => "removeWatches",
            CreateContainer => "createContainer",
            DeleteContainer => "deleteContainer",
            CreateTtl => "createTTL",
            MultiRead => "multiRead",
            Auth => "auth",
            SetWatches => "setWatches",
            Sasl => "sasl",
            GetEphemerals => "getEphemerals",
            GetAllChildrenNumber => "getAllChildrenNumber",
            SetWatches2 => "setWatches2",
            AddWatch => "addWatch",
            WhoAmI => "whoAmI",
            CreateSession => "createSession",
            CloseSession => "closeSession",
            Error => "error",
        }
    }
}

/// Reserved xids (`ClientCnxn`): replies with these are not answers to numbered requests.
pub mod xid {
    /// A watch notification sent by the server.
    pub const NOTIFICATION: i32 = -1;
    /// A ping and its reply.
    pub const PING: i32 = -2;
    /// An `auth` packet and its reply.
    pub const AUTH: i32 = -4;
    /// `setWatches`/`setWatches2` sent on reconnect.
    pub const SET_WATCHES: i32 = -8;
}
