//! The one error type of this crate: every variant names the file and the operation involved.

use std::io;
use std::path::PathBuf;

/// Why a log operation failed. Every variant carries enough context to act on without a debugger.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A system call on `path` failed; `op` says what we were doing (e.g. "fdatasync segment").
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// Data on disk failed validation at `offset` and could not be explained as a torn write.
    #[error("corrupt {} at byte {offset}: {reason}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },

    /// Found at open: this member's data cannot be brought back from its own directory (no intact
    /// snapshot that the log reaches back to, or a log damaged beyond a torn final write). Nothing
    /// was changed on disk; the member must be reseeded (its directory wiped, the member added
    /// back to the ensemble as a learner, which then copies the leader's snapshot).
    #[error(
        "the raft data in {} cannot be recovered: {reason}. Refusing to start: this member must be \
         reseeded from the ensemble. On Kubernetes annotate the CoordinationEnsemble with \
         baton.dev/reseed-member=\"<member id>\"; by hand, remove the member (DELETE /v1/members/<id>), \
         move this directory aside, start the member with --join and add it back (POST /v1/members)",
        dir.display()
    )]
    Unrecoverable { dir: PathBuf, reason: String },

    /// The data directory belongs to another member or cluster; refusing to use it.
    #[error(
        "data directory {} belongs to member {found_member} of cluster {found_cluster:?}, \
         but this process is member {expected_member} of cluster {expected_cluster:?}; \
         refusing to rejoin as someone else (wipe the directory to reuse it)",
        path.display()
    )]
    IdentityMismatch {
        path: PathBuf,
        expected_member: u64,
        expected_cluster: Option<String>,
        found_member: u64,
        found_cluster: String,
    },

    /// Another process (or handle) already holds the directory lock.
    #[error("data directory {} is locked by another process ({source})", path.display())]
    Locked {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// The cluster id is empty, too long, or contains characters other than `[A-Za-z0-9._-]`.
    #[error("invalid cluster id {0:?}: want 1-128 characters of [A-Za-z0-9._-]")]
    InvalidClusterId(String),

    /// The caller asked for something the raft log contract forbids (a bug in the caller, not disk trouble).
    #[error("invalid request on raft log {}: {reason}", dir.display())]
    InvalidRequest { dir: PathBuf, reason: String },

    /// The snapshot is older than what the log already holds.
    #[error(
        "snapshot at index {snapshot_index} is out of date (log {} already starts after {first_index})",
        dir.display()
    )]
    SnapshotOutOfDate {
        dir: PathBuf,
        snapshot_index: u64,
        first_index: u64,
    },

    /// The volume is full (ENOSPC or EDQUOT) and nothing of this call was written: the log is
    /// unchanged and still writable. Try again once space is freed (a snapshot compacts the
    /// log and deletes segments).
    #[error("{op} {}: no space left on the volume; nothing was written, the log stays writable: {source}", path.display())]
    NoSpace {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// An earlier write or fsync failed, so what is on disk is unknown; the log refuses further
    /// writes until it is reopened (which replays what really reached the disk).
    #[error("raft log {} refuses writes after an earlier failure: {first_failure}", dir.display())]
    Poisoned { dir: PathBuf, first_failure: String },
}

impl LogError {
    /// Builds an [`LogError::Io`] from a path and an operation name.
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        LogError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Whether this is a full volume that left the log unchanged and writable.
    pub fn is_no_space(&self) -> bool {
        matches!(self, LogError::NoSpace { .. })
    }

    /// Whether `self` is an I/O error for lack of space (the state on disk not yet known clean).
    pub(crate) fn is_space_io(&self) -> bool {
        match self {
            LogError::Io { source, .. } | LogError::NoSpace { source, .. } => {
                is_space_error(source)
            }
            _ => false,
        }
    }

    /// Turns an I/O error for lack of space into [`LogError::NoSpace`]; for a caller that
    /// made sure nothing of the failed write is left.
    pub(crate) fn into_no_space(self) -> Self {
        match self {
            LogError::Io { op, path, source } if is_space_error(&source) => {
                LogError::NoSpace { op, path, source }
            }
            e => e,
        }
    }

    /// Builds a [`LogError::Corrupt`].
    pub(crate) fn corrupt(
        path: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> Self {
        LogError::Corrupt {
            path: path.into(),
            offset,
            reason: reason.into(),
        }
    }
}

impl From<LogError> for raft::Error {
    fn from(e: LogError) -> Self {
        raft::Error::Store(raft::StorageError::Other(Box::new(e)))
    }
}

/// ENOSPC, or EDQUOT (a quota is a full volume to us).
pub(crate) fn is_space_error(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}
