//! Group membership: the live candidates of an election, read by anyone (the seeds'
//! service-discovery pattern: every member stands in the election, and whoever needs the list
//! reads it and waits for it to change).
//!
//! The version is a hash of what the answer says (each member's node, czxid and data), so
//! every pod reading the same membership answers the same version, and a member that leaves
//! and comes back is a change.

use serde::Serialize;
use zookeeper_client as zk;

use super::election_types::CandidateData;
use super::queue::{NodeKind, Queue};
use super::trust::is_trusted;
use super::{ConnectionState, RecipeError, ResourceName, SessionHandle};

/// One live member, in queue order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub identity: String,
    pub address: Option<String>,
    pub pod: Option<String>,
    /// When it joined (the leader: when it took office), RFC 3339.
    pub since: String,
    /// The czxid of its candidate node (the fencing token while it leads).
    pub token: i64,
    /// The first live member leads.
    pub leader: bool,
    pub node: String,
}

/// The live members of one election.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Members {
    pub election: ResourceName,
    /// Changes whenever the answer does (16 hex digits).
    pub version: String,
    pub members: Vec<Member>,
}

/// FNV-1a, 64 bits: stable across processes and versions (unlike `DefaultHasher`).
fn fnv(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Reads the members of election `name`, and a watch that fires when the folder's children
/// change (or the folder appears). Only live ephemeral candidates count ([`super::trust`]).
pub async fn read_members(
    session: &SessionHandle,
    name: &ResourceName,
) -> Result<(Members, zk::OneshotWatcher), RecipeError> {
    let conn = match session.connected_now() {
        Some(conn) => conn,
        None if session.state() == ConnectionState::Suspended => {
            return Err(RecipeError::Suspended);
        }
        None => return Err(RecipeError::SessionLost),
    };
    let client = &conn.client;
    let dir = name.election_dir(session.namespace());
    let (children, watcher) = match client.list_and_watch_children(&dir).await {
        Ok(found) => found,
        Err(zk::Error::NoNode) => {
            let (_, watcher) = client
                .check_and_watch_stat(&dir)
                .await
                .map_err(|e| RecipeError::from_zk("exists", &dir, e))?;
            (Vec::new(), watcher)
        }
        Err(e) => return Err(RecipeError::from_zk("list", &dir, e)),
    };
    let queue = Queue::new(&children, NodeKind::ELECTION_KINDS);
    let mut members = Vec::new();
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for node in queue.nodes() {
        let path = format!("{dir}/{}", node.name);
        let (data, stat) = match client.get_data(&path).await {
            Ok(found) => found,
            // Gone since the list: the watch has fired already.
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(RecipeError::from_zk("get", &path, e)),
        };
        if !is_trusted(&stat) {
            session.ignored_nodes().report(node.kind, &path, stat.czxid);
            continue;
        }
        hash = fnv(hash, node.name.as_bytes());
        hash = fnv(hash, &stat.czxid.to_be_bytes());
        hash = fnv(hash, &data);
        let parsed: Option<CandidateData> = serde_json::from_slice(&data).ok();
        let parsed = parsed.unwrap_or_else(|| CandidateData {
            identity: String::new(),
            address: None,
            pod: None,
            since: String::new(),
            owner: None,
        });
        members.push(Member {
            identity: parsed.identity,
            address: parsed.address,
            pod: parsed.pod,
            since: parsed.since,
            token: stat.czxid,
            leader: members.is_empty(),
            node: node.name.clone(),
        });
    }
    Ok((
        Members {
            election: name.clone(),
            version: format!("{hash:016x}"),
            members,
        },
        watcher,
    ))
}

#[cfg(test)]
mod tests {
    use super::fnv;

    #[test]
    fn the_version_hash_is_fnv_1a() {
        // The published FNV-1a 64 test vector for "a".
        assert_eq!(fnv(0xcbf2_9ce4_8422_2325, b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
