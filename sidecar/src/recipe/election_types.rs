//! What an election's handle ([`ElectionRecipe`](super::ElectionRecipe)) and its candidate
//! task share: who the candidate is, what its node holds, the view the task publishes, and
//! the commands and long-poll interest the handle sends it.

use std::sync::atomic::AtomicUsize;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, oneshot};

use super::{ConnectionState, RecipeError, ResourceName};

/// Who this process is, as written into its candidate node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Unique name of this member (usually the pod name).
    pub identity: String,
    /// Where followers can reach the leader's application, if it says.
    pub address: Option<String>,
    /// The Kubernetes pod, if known.
    pub pod: Option<String>,
}

/// The JSON data of a candidate node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CandidateData {
    #[serde(default)]
    pub identity: String,
    #[serde(default)]
    pub address: Option<String>,
    #[serde(default)]
    pub pod: Option<String>,
    /// When the candidate joined the queue; the leader rewrites it to when it took office.
    #[serde(default)]
    pub since: String,
    /// Owner id, for recovering a create whose reply was lost.
    #[serde(default)]
    pub owner: Option<String>,
}

/// The current leader of an election.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderInfo {
    pub identity: String,
    pub address: Option<String>,
    pub pod: Option<String>,
    /// When the leader took office (RFC 3339), or joined if it has not said yet.
    pub since: String,
    /// Fencing token: the czxid of the leader's candidate node, rising with every new term.
    pub token: i64,
    /// The leader's candidate node name.
    #[serde(skip)]
    pub node: String,
}

/// What this process knows about one election, as of the candidate task's last look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionView {
    pub election: ResourceName,
    /// The leader, `None` when there is none or it cannot be known (no session).
    pub leader: Option<LeaderInfo>,
    /// Whether this process leads. Only ever true while CONNECTED: at most one process in
    /// the ensemble reports true at any instant.
    pub is_leader: bool,
    pub state: ConnectionState,
    /// This process's candidate node, while it has one.
    pub node: Option<String>,
    /// When this process took office, while it leads.
    pub leader_since: Option<SystemTime>,
    /// Session generation the view was computed on.
    pub generation: u64,
}

impl ElectionView {
    pub(crate) fn empty(election: ResourceName) -> Self {
        Self {
            election,
            leader: None,
            is_leader: false,
            state: ConnectionState::Lost,
            node: None,
            leader_since: None,
            generation: 0,
        }
    }

    /// The leader's fencing token, 0 when there is no leader (tokens are positive zxids).
    pub fn leader_token(&self) -> i64 {
        self.leader.as_ref().map_or(0, |l| l.token)
    }
}

/// Commands the handle sends to the candidate task.
pub(crate) enum Command {
    /// Step down if leading, then queue again at the back; answers whether it was leading.
    Resign(oneshot::Sender<Result<bool, RecipeError>>),
    /// Re-read the folder and publish a fresh view, then answer.
    Refresh(oneshot::Sender<()>),
    /// Withdraw the candidacy and stop.
    Leave(oneshot::Sender<()>),
}

/// Long-pollers waiting for a leader change; while any wait, the task also watches the leader.
#[derive(Debug, Default)]
pub(crate) struct Interest {
    pub waiting: AtomicUsize,
    pub arrived: Notify,
}
