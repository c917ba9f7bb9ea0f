//! ZooKeeper's `KeeperException.Code` values, as sent in `ReplyHeader.err`.

/// A ZooKeeper error code. `Ok` is not an error and never appears here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ErrorCode {
    SystemError = -1,
    RuntimeInconsistency = -2,
    DataInconsistency = -3,
    ConnectionLoss = -4,
    MarshallingError = -5,
    Unimplemented = -6,
    OperationTimeout = -7,
    BadArguments = -8,
    UnknownSession = -12,
    NewConfigNoQuorum = -13,
    ReconfigInProgress = -14,
    ApiError = -100,
    NoNode = -101,
    NoAuth = -102,
    BadVersion = -103,
    NoChildrenForEphemerals = -108,
    NodeExists = -110,
    NotEmpty = -111,
    SessionExpired = -112,
    InvalidCallback = -113,
    InvalidAcl = -114,
    AuthFailed = -115,
    SessionMoved = -118,
    NotReadOnly = -119,
    EphemeralOnLocalSession = -120,
    NoWatcher = -121,
    RequestTimeout = -122,
    ReconfigDisabled = -123,
    SessionClosedRequireSaslAuth = -124,
    QuotaExceeded = -125,
    Throttled = -127,
}

impl ErrorCode {
    /// What Baton answers for a refusal that Apache ZooKeeper makes only when configured to
    /// (a quota, the disk alarm, a watch limit): BadArguments (-8). ZooKeeper's own code for a
    /// quota, QuotaExceeded (-125), came in 3.7 and is sent only with hard quotas on, so clients
    /// never had to learn it: kazoo 2.x's connection thread dies on it (every later call hangs),
    /// node-zookeeper-client throws out of its socket handler, and the Java 3.5/3.6 and C 3.8
    /// clients have no constant for it. Every client since 2008 maps -8 to an exception and keeps
    /// its connection, and none retries it (Curator and kazoo retry only connection loss and
    /// timeouts). The member's log and `baton_quota_refusals_total{reason}` say which limit it was.
    pub const REFUSED: ErrorCode = ErrorCode::BadArguments;

    /// The wire value.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// Maps a wire value back; `0` (Ok) and unknown values give `None`.
    pub fn from_code(code: i32) -> Option<Self> {
        use ErrorCode::*;
        Some(match code {
            -1 => SystemError,
            -2 => RuntimeInconsistency,
            -3 => DataInconsistency,
            -4 => ConnectionLoss,
            -5 => MarshallingError,
            -6 => Unimplemented,
            -7 => OperationTimeout,
            -8 => BadArguments,
            -12 => UnknownSession,
            -13 => NewConfigNoQuorum,
            -14 => ReconfigInProgress,
            -100 => ApiError,
            -101 => NoNode,
            -102 => NoAuth,
            -103 => BadVersion,
            -108 => NoChildrenForEphemerals,
            -110 => NodeExists,
            -111 => NotEmpty,
            -112 => SessionExpired,
            -113 => InvalidCallback,
            -114 => InvalidAcl,
            -115 => AuthFailed,
            -118 => SessionMoved,
            -119 => NotReadOnly,
            -120 => EphemeralOnLocalSession,
            -121 => NoWatcher,
            -122 => RequestTimeout,
            -123 => ReconfigDisabled,
            -124 => SessionClosedRequireSaslAuth,
            -125 => QuotaExceeded,
            -127 => Throttled,
            _ => return None,
        })
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} ({})", self, self.code())
    }
}

impl std::error::Error for ErrorCode {}
