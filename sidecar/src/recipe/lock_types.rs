//! The vocabulary of the lock recipe: modes, the data a lock node carries, how an
//! acquisition fails, and what [`LockRecipe::inspect`] reports.
//!
//! [`LockRecipe::inspect`]: super::LockRecipe::inspect

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::RecipeError;
use super::queue::NodeKind;

/// How a lock is requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LockMode {
    /// `lock-<seq>`: one holder at a time.
    Exclusive,
    /// `read-<seq>`: shared with other readers, excluded by writers queued earlier.
    Read,
    /// `write-<seq>`: one holder at a time, like exclusive, ordered with readers.
    Write,
    /// `permit-<seq>`: one of a semaphore's N holders ([`LockRecipe::semaphore`]).
    ///
    /// [`LockRecipe::semaphore`]: super::LockRecipe::semaphore
    Permit,
}

impl LockMode {
    /// The queue-node kind this mode creates.
    pub fn kind(self) -> NodeKind {
        match self {
            LockMode::Exclusive => NodeKind::Exclusive,
            LockMode::Read => NodeKind::Read,
            LockMode::Write => NodeKind::Write,
            LockMode::Permit => NodeKind::Permit,
        }
    }

    pub(super) fn from_kind(kind: NodeKind) -> Option<Self> {
        match kind {
            NodeKind::Exclusive => Some(LockMode::Exclusive),
            NodeKind::Read => Some(LockMode::Read),
            NodeKind::Write => Some(LockMode::Write),
            NodeKind::Permit => Some(LockMode::Permit),
            NodeKind::Candidate | NodeKind::Party => None,
        }
    }

    /// The name used in JSON and query strings.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Exclusive => "exclusive",
            LockMode::Read => "read",
            LockMode::Write => "write",
            LockMode::Permit => "permit",
        }
    }
}

/// The JSON data of a lock node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LockData {
    #[serde(default)]
    pub identity: String,
    #[serde(default)]
    pub owner: String,
    /// When the holder's lease runs out (RFC 3339); `None` for holders without a lease.
    #[serde(default)]
    pub lease_expires_at: Option<String>,
    /// A semaphore node's permit count: every pod must ask for the same one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
}

/// Why an acquisition did not produce a grant.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LockError {
    #[error("not granted within {}ms", .waited.as_millis())]
    NotGranted { waited: Duration },
    #[error(
        "semaphore node {node} asks for permits={theirs}, this request for permits={ours}: every pod must use the same count"
    )]
    PermitsMismatch {
        ours: u32,
        theirs: u32,
        node: String,
    },
    #[error(transparent)]
    Recipe(#[from] RecipeError),
}

/// One node in a lock's queue, as [`LockRecipe::inspect`] reports it.
///
/// [`LockRecipe::inspect`]: super::LockRecipe::inspect
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockEntry {
    pub node: String,
    pub mode: LockMode,
    pub identity: String,
    pub owner: String,
    /// The czxid of the node: its fencing token once granted.
    pub token: i64,
    pub lease_expires_at: Option<String>,
    /// The permit count a semaphore node carries.
    pub permits: Option<u32>,
}

/// A lock's queue split into who holds it and who waits, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LockState {
    pub holders: Vec<LockEntry>,
    pub waiters: Vec<LockEntry>,
}
