//! Talking to the ensemble's admin API (DESIGN.md §1): the `EnsembleAdmin` seam (HTTP in
//! production, a scripted fake in reconcile tests), what the members report, and the
//! membership steps built on it.

mod http_admin;
pub mod settings;
mod steps;
mod view;

use std::future::Future;

use serde::{Deserialize, Serialize};

use crate::pki::AdminCredentials;

pub use http_admin::{HttpAdmin, HttpAdmins};
pub use steps::{MembershipStep, Roster, StepError, run_action, wait_until};
pub use view::EnsembleView;

/// What one member's `GET /v1/status` says (the fields the operator uses).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    pub id: u64,
    /// `leader`, `follower`, `candidate` or `learner`.
    pub role: String,
    /// 0 when no leader is known.
    pub leader_id: u64,
    pub term: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    /// Voters and learners, by id.
    #[serde(default)]
    pub members: Vec<u64>,
    #[serde(default)]
    pub learners: Vec<u64>,
    #[serde(default)]
    pub cluster_id: String,
    /// The replicated settings (`GET /v1/settings`; absent from members that predate them).
    #[serde(default)]
    pub settings: Option<EnsembleSettings>,
    /// The feature levels (absent from members that predate them: level 1).
    #[serde(flatten)]
    pub levels: MemberLevels,
}

/// What a member's `GET /v1/status` says of the ensemble's feature level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct MemberLevels {
    /// The replicated level as this member has applied it (`featureLevel`).
    #[serde(default)]
    pub feature_level: Option<u32>,
    /// The highest level this member's build supports, or its `--max-feature-level`
    /// (`maxFeatureLevel`).
    #[serde(default)]
    pub max_feature_level: Option<u32>,
}

/// What `GET /v1/settings` (and `settings` of `GET /v1/status`) reports: the replicated
/// tenancy policy, quotas and alarms.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct EnsembleSettings {
    /// False until a leader proposed its flags or an admin set them (built-in defaults meanwhile).
    #[serde(default)]
    pub set: bool,
    #[serde(default)]
    pub applied_index: u64,
    #[serde(flatten)]
    pub values: SettingsValues,
    #[serde(default)]
    pub alarms: Vec<Alarm>,
}

/// The settings `PUT /v1/settings` changes: what the operator keeps equal to `spec.limits`
/// (and `checkIdentities` on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SettingsValues {
    pub check_identities: bool,
    pub namespace_znodes: u64,
    pub namespace_bytes: u64,
    pub shared_znodes: u64,
    pub shared_bytes: u64,
    pub ephemerals_per_session: u64,
}

impl SettingsValues {
    /// The body of `PUT /v1/settings` that turns `current` into `self`: only the fields that
    /// differ (the others keep their value on the ensemble); `None` when nothing differs.
    pub fn changes_from(&self, current: &SettingsValues) -> Option<serde_json::Value> {
        let (want, have) = (
            serde_json::to_value(self).ok()?,
            serde_json::to_value(current).ok()?,
        );
        let (want, have) = (want.as_object()?, have.as_object()?);
        let changes: serde_json::Map<String, serde_json::Value> = want
            .iter()
            .filter(|(k, v)| have.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        (!changes.is_empty()).then_some(serde_json::Value::Object(changes))
    }
}

/// A member's alarm in the replicated state.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
pub struct Alarm {
    pub member: u64,
    /// `nospace`.
    pub kind: String,
}

impl MemberStatus {
    /// What `/readyz` answers 200 for: a leader is known and everything committed is applied.
    pub fn is_ready(&self) -> bool {
        self.leader_id != 0 && self.applied_index >= self.commit_index
    }

    /// Voters only (members that are not learners), in id order.
    pub fn voters(&self) -> Vec<u64> {
        let mut voters: Vec<u64> = self
            .members
            .iter()
            .copied()
            .filter(|id| !self.learners.contains(id))
            .collect();
        voters.sort_unstable();
        voters
    }
}

/// Why an admin call did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    #[error("member admin API at {addr} is unreachable: {reason}")]
    Unreachable { addr: String, reason: String },
    #[error("member at {addr} does not lead (leader: {leader_id}, 0 = unknown)")]
    NotLeader { addr: String, leader_id: u64 },
    #[error("member at {addr} refused: {message}")]
    Conflict { addr: String, message: String },
    #[error("member at {addr} answered {status}: {body}")]
    Unexpected {
        addr: String,
        status: u16,
        body: String,
    },
    #[error("the admin certificate cannot be used: {0}")]
    Credentials(String),
}

/// Makes an `EnsembleAdmin` for one ensemble from its admin certificate (read from the
/// ensemble's `NAME-admin` Secret): every ensemble has a CA of its own.
pub trait AdminConnector: Send + Sync + 'static {
    type Admin: EnsembleAdmin;
    /// An admin client presenting `credentials` and trusting only their CA.
    fn connect(&self, credentials: &AdminCredentials) -> Result<Self::Admin, AdminError>;
}

/// The ensemble's admin API, one member (`HOST:PORT` of its admin address) per call. Membership
/// calls must reach the leader; the others answer `NotLeader`.
pub trait EnsembleAdmin: Send + Sync + 'static {
    /// `GET /v1/status`.
    fn status(&self, addr: &str) -> impl Future<Output = Result<MemberStatus, AdminError>> + Send;
    /// `POST /v1/members {id, peerAddr}`: adds a learner, promoted once caught up.
    fn add_member(
        &self,
        addr: &str,
        id: u64,
        peer_addr: &str,
    ) -> impl Future<Output = Result<(), AdminError>> + Send;
    /// `DELETE /v1/members/{id}`: refused (Conflict) when the rest could not form a quorum.
    fn remove_member(
        &self,
        addr: &str,
        id: u64,
    ) -> impl Future<Output = Result<(), AdminError>> + Send;
    /// `POST /v1/leader/transfer {to}`: to `to`, or to the most caught-up voter.
    fn transfer_leader(
        &self,
        addr: &str,
        to: Option<u64>,
    ) -> impl Future<Output = Result<(), AdminError>> + Send;
    /// `PUT /v1/settings` with `changes` (a JSON object of the settings to change): answered
    /// with the settings once the change has applied on the leader; elsewhere `NotLeader`,
    /// `Conflict` if leadership changed before it applied.
    fn put_settings(
        &self,
        addr: &str,
        changes: &serde_json::Value,
    ) -> impl Future<Output = Result<EnsembleSettings, AdminError>> + Send;
}
