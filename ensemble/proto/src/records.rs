//! Plain jute records shared by requests, responses and the server's data tree.

/// A znode's metadata (`org.apache.zookeeper.data.Stat`), field for field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Stat {
    pub czxid: i64,
    pub mzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub version: i32,
    pub cversion: i32,
    pub aversion: i32,
    pub ephemeral_owner: i64,
    pub data_length: i32,
    pub num_children: i32,
    pub pzxid: i64,
}

/// An authenticated identity or ACL subject (`org.apache.zookeeper.data.Id`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id {
    pub scheme: String,
    pub id: String,
}

impl Id {
    pub fn new(scheme: impl Into<String>, id: impl Into<String>) -> Self {
        Id {
            scheme: scheme.into(),
            id: id.into(),
        }
    }
}

/// One access-control entry (`org.apache.zookeeper.data.ACL`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Acl {
    pub perms: i32,
    pub id: Id,
}

/// Permission bits (`ZooDefs.Perms`).
pub mod perms {
    pub const READ: i32 = 1;
    pub const WRITE: i32 = 1 << 1;
    pub const CREATE: i32 = 1 << 2;
    pub const DELETE: i32 = 1 << 3;
    pub const ADMIN: i32 = 1 << 4;
    pub const ALL: i32 = READ | WRITE | CREATE | DELETE | ADMIN;
}

/// `ZooDefs.Ids.OPEN_ACL_UNSAFE`: everyone may do everything.
pub fn open_acl_unsafe() -> Vec<Acl> {
    vec![Acl {
        perms: perms::ALL,
        id: Id::new("world", "anyone"),
    }]
}

/// The kind of node a create makes, decoded from the request's `flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CreateMode {
    Persistent,
    Ephemeral,
    PersistentSequential,
    EphemeralSequential,
    Container,
    PersistentWithTtl,
    PersistentSequentialWithTtl,
}

impl CreateMode {
    /// `CreateMode.fromFlag`; unknown flags give `None` (ZooKeeper answers BadArguments).
    pub fn from_flags(flags: i32) -> Option<Self> {
        use CreateMode::*;
        Some(match flags {
            0 => Persistent,
            1 => Ephemeral,
            2 => PersistentSequential,
            3 => EphemeralSequential,
            4 => Container,
            5 => PersistentWithTtl,
            6 => PersistentSequentialWithTtl,
            _ => return None,
        })
    }

    pub fn flags(self) -> i32 {
        use CreateMode::*;
        match self {
            Persistent => 0,
            Ephemeral => 1,
            PersistentSequential => 2,
            EphemeralSequential => 3,
            Container => 4,
            PersistentWithTtl => 5,
            PersistentSequentialWithTtl => 6,
        }
    }

    pub fn is_ephemeral(self) -> bool {
        matches!(
            self,
            CreateMode::Ephemeral | CreateMode::EphemeralSequential
        )
    }

    pub fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential
                | CreateMode::EphemeralSequential
                | CreateMode::PersistentSequentialWithTtl
        )
    }

    pub fn is_container(self) -> bool {
        self == CreateMode::Container
    }

    pub fn is_ttl(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentWithTtl | CreateMode::PersistentSequentialWithTtl
        )
    }
}

/// `Watcher.Event.EventType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum EventType {
    None = -1,
    NodeCreated = 1,
    NodeDeleted = 2,
    NodeDataChanged = 3,
    NodeChildrenChanged = 4,
    DataWatchRemoved = 5,
    ChildWatchRemoved = 6,
    PersistentWatchRemoved = 7,
}

/// `Watcher.Event.KeeperState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum KeeperState {
    Disconnected = 0,
    SyncConnected = 3,
    AuthFailed = 4,
    ConnectedReadOnly = 5,
    SaslAuthenticated = 6,
    Closed = 7,
    Expired = -112,
}

/// A watch notification (`WatcherEvent`), sent with xid -1.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WatcherEvent {
    pub event_type: i32,
    pub state: i32,
    pub path: String,
}

/// `AddWatchMode` as sent in `AddWatchRequest.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddWatchMode {
    Persistent,
    PersistentRecursive,
}

impl AddWatchMode {
    pub fn from_mode(mode: i32) -> Option<Self> {
        match mode {
            0 => Some(AddWatchMode::Persistent),
            1 => Some(AddWatchMode::PersistentRecursive),
            _ => None,
        }
    }
}

/// `Watcher.WatcherType` as sent in check/removeWatches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatcherType {
    Children,
    Data,
    Any,
    Persistent,
    PersistentRecursive,
}

impl WatcherType {
    pub fn from_code(code: i32) -> Option<Self> {
        match code {
            1 => Some(WatcherType::Children),
            2 => Some(WatcherType::Data),
            3 => Some(WatcherType::Any),
            4 => Some(WatcherType::Persistent),
            5 => Some(WatcherType::PersistentRecursive),
            _ => None,
        }
    }
}

/// One entry of a `whoAmI` answer (`ClientInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientInfo {
    pub auth_scheme: String,
    pub user: String,
}
