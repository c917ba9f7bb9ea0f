//! Baton's admin HTTP API as the cluster harness uses it: any method, an optional JSON body,
//! and `/v1/status` parsed into a typed `Status`.
//!
//! Every exchange is bounded by a deadline, so a member that accepts but never answers fails
//! the probe instead of hanging the test.

use std::fmt;
use std::net::SocketAddr;

use anyhow::{Context, Result};
use baton_tls::HttpClient;
use serde_json::Value;

/// An HTTP method the admin API takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        })
    }
}

/// An admin API answer: the status code and the body, parsed as JSON when it is JSON
/// (`Value::String` with the raw text otherwise, e.g. `/readyz`'s "ready").
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    /// The `error.code` of an error body (`NotLeader`, `Conflict`, ...), if there is one.
    pub fn error_code(&self) -> Option<&str> {
        self.body
            .get("error")
            .and_then(|error| error.get("code"))
            .and_then(Value::as_str)
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status, self.body)
    }
}

/// Sends one request through `client` (HTTPS with the admin certificate in every test).
pub async fn request(
    client: &HttpClient,
    addr: SocketAddr,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> Result<Reply> {
    let method = match method {
        Method::Get => http::Method::GET,
        Method::Post => http::Method::POST,
        Method::Put => http::Method::PUT,
        Method::Delete => http::Method::DELETE,
    };
    let body = body.map(|b| b.to_string().into_bytes());
    let answer = client
        .request(&addr.to_string(), method.clone(), path, body)
        .await
        .with_context(|| format!("{method} https://{addr}{path}"))?;
    Ok(Reply {
        status: answer.status.as_u16(),
        body: answer.json(),
    })
}

/// One member's `GET /v1/status`, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub id: u64,
    /// "leader", "follower", "candidate" or "learner".
    pub role: String,
    /// 0 when the member knows no leader.
    pub leader_id: u64,
    pub term: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    /// Voters and learners.
    pub members: Vec<u64>,
    pub learners: Vec<u64>,
    pub cluster_id: String,
    pub sessions: u64,
    pub znodes: u64,
}

impl Status {
    /// Parses the JSON of `/v1/status`; a missing or mistyped field is an error naming it.
    pub fn from_json(json: &Value) -> Result<Status> {
        let number = |key: &str| {
            json.get(key)
                .and_then(Value::as_u64)
                .with_context(|| format!("no unsigned integer {key:?} in status {json}"))
        };
        let text = |key: &str| {
            json.get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .with_context(|| format!("no string {key:?} in status {json}"))
        };
        let ids = |key: &str| -> Result<Vec<u64>> {
            json.get(key)
                .and_then(Value::as_array)
                .and_then(|ids| ids.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
                .with_context(|| format!("no array of ids {key:?} in status {json}"))
        };
        Ok(Status {
            id: number("id")?,
            role: text("role")?,
            leader_id: number("leaderId")?,
            term: number("term")?,
            commit_index: number("commitIndex")?,
            applied_index: number("appliedIndex")?,
            members: ids("members")?,
            learners: ids("learners")?,
            cluster_id: text("clusterId")?,
            sessions: number("sessions")?,
            znodes: number("znodes")?,
        })
    }

    /// The same condition as `/readyz`: a leader is known and everything known committed is
    /// applied.
    pub fn is_ready(&self) -> bool {
        self.leader_id != 0 && self.applied_index >= self.commit_index
    }

    /// Members that vote (members that are not learners), in id order.
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

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "member {} {} (leader {}, term {}, commit {}, applied {}, members {:?}, learners {:?})",
            self.id,
            self.role,
            self.leader_id,
            self.term,
            self.commit_index,
            self.applied_index,
            self.members,
            self.learners
        )
    }
}

/// One entry of `GET /v1/members`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberEntry {
    pub id: u64,
    pub peer_addr: String,
    /// "voter" or "learner".
    pub role: String,
    pub leader: bool,
}

impl MemberEntry {
    /// Parses the `members` array of `GET /v1/members`; a missing field is an error naming it.
    pub fn list_from_json(json: &Value) -> Result<Vec<MemberEntry>> {
        let list = json
            .get("members")
            .and_then(Value::as_array)
            .with_context(|| format!("no members array in {json}"))?;
        list.iter()
            .map(|entry| {
                let text = |key: &str| {
                    entry
                        .get(key)
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .with_context(|| format!("no string {key:?} in member {entry}"))
                };
                Ok(MemberEntry {
                    id: entry
                        .get("id")
                        .and_then(Value::as_u64)
                        .with_context(|| format!("no id in member {entry}"))?,
                    peer_addr: text("peerAddr")?,
                    role: text("role")?,
                    leader: entry
                        .get("leader")
                        .and_then(Value::as_bool)
                        .with_context(|| format!("no leader flag in member {entry}"))?,
                })
            })
            .collect()
    }
}
