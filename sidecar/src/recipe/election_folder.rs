//! Reading an election's folder: where our candidate node stands (leading, following whom,
//! or gone) and, for a process standing aside, who leads. Both count live ephemeral
//! candidates only ([`super::trust`]) and return the watches the candidate's task waits on.

use zookeeper_client as zk;

use super::RecipeError;
use super::election_types::{CandidateData, LeaderInfo};
use super::owned_node::OwnedNode;
use super::queue::{NodeKind, Queue};
use super::trust::{IgnoredNodes, is_trusted};

/// What one look at the folder found.
pub(super) enum Evaluation {
    /// Our node is gone (deleted by someone else, or the folder vanished): queue again.
    Missing,
    /// The folder changed between two reads: look again.
    Again,
    /// Our node is the lowest; the watcher fires if it is deleted or changed.
    Leading { own: zk::OneshotWatcher },
    /// Someone else leads; the watchers fire when our predecessor (and, while long-pollers
    /// wait, the leader) goes away or changes.
    Following {
        leader: LeaderInfo,
        predecessor: zk::OneshotWatcher,
        leader_watch: Option<zk::OneshotWatcher>,
        /// The predecessor is the leader (its watch covers leader changes too).
        behind_leader: bool,
    },
}

/// Who leads, for a process with no node in the queue: the first live candidate, and a watch
/// on the folder's children (any change may change the head).
pub(super) async fn observe(
    client: &zk::Client,
    dir: &str,
    ignored: &IgnoredNodes,
) -> Result<(Option<LeaderInfo>, Option<zk::OneshotWatcher>), RecipeError> {
    loop {
        let (children, watcher) = match client.list_and_watch_children(dir).await {
            Ok(found) => found,
            Err(zk::Error::NoNode) => {
                // No folder yet: watch for it to appear.
                let (stat, watcher) = client
                    .check_and_watch_stat(dir)
                    .await
                    .map_err(|e| RecipeError::from_zk("exists", dir, e))?;
                if stat.is_none() {
                    return Ok((None, Some(watcher)));
                }
                // Made between the list and this look (another pod's first candidacy): on a
                // node that exists this is a data watch, which no candidate joining fires,
                // so waiting on it would miss every leader until something else looked
                // again. List it instead.
                continue;
            }
            Err(e) => return Err(RecipeError::from_zk("list", dir, e)),
        };
        let mut queue = Queue::new(&children, NodeKind::ELECTION_KINDS);
        let head = loop {
            let Some(head) = queue.head().cloned() else {
                break Some(None);
            };
            let path = format!("{dir}/{}", head.name);
            match client.get_data(&path).await {
                Ok((_, stat)) if !is_trusted(&stat) => {
                    ignored.report(head.kind, &path, stat.czxid);
                    queue.remove(&head.name);
                }
                Ok((data, stat)) => break Some(Some(leader_info(head.name, &data, stat.czxid))),
                // Gone between the list and the read: list again.
                Err(zk::Error::NoNode) => break None,
                Err(e) => return Err(RecipeError::from_zk("get", &path, e)),
            }
        };
        if let Some(leader) = head {
            return Ok((leader, Some(watcher)));
        }
    }
}

/// The leader as its candidate node `name` (data, czxid) says.
fn leader_info(name: String, data: &[u8], czxid: i64) -> LeaderInfo {
    let parsed: CandidateData = serde_json::from_slice(data).unwrap_or_else(|_| CandidateData {
        identity: String::new(),
        address: None,
        pod: None,
        since: String::new(),
        owner: None,
    });
    LeaderInfo {
        identity: parsed.identity,
        address: parsed.address,
        pod: parsed.pod,
        since: parsed.since,
        token: czxid,
        node: name,
    }
}

/// Reads the folder once and decides where `node` stands.
///
/// Only live ephemeral candidates count ([`super::trust`]). `getChildren` carries no per-child
/// stat, so trust is learnt from the reads the election makes anyway: the predecessor is read
/// with a watch (its stat comes back with it) and the leader is read for its data. Walking
/// back from our node, a persistent predecessor is dropped from the order and the next one
/// earlier is read, until a live one (we follow it) or none (we lead); walking forward from
/// the head likewise finds the leader. With no planted nodes this is the two reads it always
/// was; each planted node in the way costs one more read per look. Nothing is cached: a
/// name can be deleted and made again as another kind of node, and the stat of the node there
/// now is what counts. So a planted node never leads and is never waited for, and a live one
/// is never skipped.
pub(super) async fn evaluate(
    client: &zk::Client,
    dir: &str,
    node: &OwnedNode,
    watch_leader: bool,
    ignored: &IgnoredNodes,
) -> Result<Evaluation, RecipeError> {
    let children = match client.list_children(dir).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(Evaluation::Missing),
        Err(e) => return Err(RecipeError::from_zk("list", dir, e)),
    };
    let mut queue = Queue::new(&children, NodeKind::ELECTION_KINDS);
    // Our predecessor: the closest earlier live candidate, read and watched.
    let predecessor = loop {
        let Some(index) = queue.position(&node.name) else {
            return Ok(Evaluation::Missing);
        };
        let Some(predecessor) = queue.blocker(index).cloned() else {
            break None;
        };
        let path = format!("{dir}/{}", predecessor.name);
        match client.get_and_watch_data(&path).await {
            Ok((_, stat, _)) if !is_trusted(&stat) => {
                ignored.report(predecessor.kind, &path, stat.czxid);
                queue.remove(&predecessor.name);
            }
            Ok((data, stat, watcher)) => break Some((predecessor, data, stat, watcher)),
            Err(zk::Error::NoNode) => return Ok(Evaluation::Again),
            Err(e) => return Err(RecipeError::from_zk("get", &path, e)),
        }
    };
    let Some((predecessor, predecessor_data, predecessor_stat, predecessor_watch)) = predecessor
    else {
        let (stat, own) = client
            .check_and_watch_stat(&node.path)
            .await
            .map_err(|e| RecipeError::from_zk("exists", &node.path, e))?;
        return Ok(if stat.is_some() {
            Evaluation::Leading { own }
        } else {
            Evaluation::Missing
        });
    };
    // The leader: the first live candidate (at the latest, our predecessor). Its data is
    // needed for the view; its watch only when a long-poller wants any leader change.
    let (head, data, stat, leader_watch) = loop {
        let Some(head) = queue.head().cloned() else {
            return Ok(Evaluation::Again);
        };
        if head.name == predecessor.name {
            break (head, predecessor_data, predecessor_stat, None);
        }
        let path = format!("{dir}/{}", head.name);
        let read = if watch_leader {
            client
                .get_and_watch_data(&path)
                .await
                .map(|(data, stat, watcher)| (data, stat, Some(watcher)))
        } else {
            client
                .get_data(&path)
                .await
                .map(|(data, stat)| (data, stat, None))
        };
        match read {
            Ok((_, stat, _)) if !is_trusted(&stat) => {
                ignored.report(head.kind, &path, stat.czxid);
                queue.remove(&head.name);
            }
            Ok((data, stat, watcher)) => break (head, data, stat, watcher),
            Err(zk::Error::NoNode) => return Ok(Evaluation::Again),
            Err(e) => return Err(RecipeError::from_zk("get", &path, e)),
        }
    };
    let behind_leader = head.name == predecessor.name;
    let leader = leader_info(head.name, &data, stat.czxid);
    Ok(Evaluation::Following {
        leader,
        predecessor: predecessor_watch,
        leader_watch,
        behind_leader,
    })
}
