//! The fair-lock recipe (ZooKeeper's "locks without herd effect"), which leader election shares.
//!
//! Each contender creates an ephemeral sequential node under one directory; the lowest sequence
//! holds; every other contender watches only the node just before its own, so one release
//! wakes one waiter. Release is a delete; a crashed holder's session takes its node with it.

use std::time::Duration;

use tokio::time::{Instant, timeout_at};
use zookeeper_client::{Acls, Client, CreateMode, EventType};

use crate::error::BenchError;

/// One node this session holds in a sequential queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueNode {
    pub dir: String,
    pub name: String,
    pub sequence: i64,
}

impl QueueNode {
    /// The node's full path.
    pub fn path(&self) -> String {
        format!("{}/{}", self.dir, self.name)
    }
}

/// Where a node stands among the queue's nodes.
#[derive(Debug, PartialEq, Eq)]
pub enum Standing<'a> {
    /// No node with a lower sequence exists: this one holds the lock or leads.
    First,
    /// The node immediately before this one, the only one it needs to watch.
    Behind(&'a str),
}

/// Finds where `node` stands among `children` (names under its directory, in any order).
///
/// Children without `prefix` are not part of the queue and are ignored.
pub fn standing<'a>(
    node: &QueueNode,
    prefix: &str,
    children: &'a [String],
) -> Result<Standing<'a>, BenchError> {
    let mut present = false;
    let mut predecessor: Option<(i64, &'a str)> = None;
    for child in children {
        let Some(suffix) = child.strip_prefix(prefix) else {
            continue;
        };
        let sequence: i64 = suffix.parse().map_err(|_| BenchError::BadSequentialName {
            dir: node.dir.clone(),
            name: child.clone(),
        })?;
        if sequence == node.sequence {
            present = true;
        } else if sequence < node.sequence && predecessor.is_none_or(|(best, _)| sequence > best) {
            predecessor = Some((sequence, child));
        }
    }
    if !present {
        return Err(BenchError::OwnNodeMissing { path: node.path() });
    }
    Ok(predecessor.map_or(Standing::First, |(_, name)| Standing::Behind(name)))
}

/// Joins the queue under `dir` with an ephemeral sequential node named `prefix<sequence>`.
pub async fn join(
    client: &Client,
    dir: &str,
    prefix: &str,
    data: &[u8],
) -> Result<QueueNode, BenchError> {
    let path = format!("{dir}/{prefix}");
    let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let (_, sequence) = client
        .create(&path, data, &options)
        .await
        .map_err(BenchError::op("create", &path))?;
    Ok(QueueNode {
        dir: dir.to_owned(),
        name: format!("{prefix}{sequence}"),
        sequence: sequence.into_i64(),
    })
}

/// Waits until `node` is first in its queue, watching only its predecessor; fails after `limit`.
pub async fn wait_until_first(
    client: &Client,
    node: &QueueNode,
    prefix: &str,
    limit: Duration,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + limit;
    let timed_out = || BenchError::Timeout {
        what: format!("{} reaching the head of its queue", node.path()),
        timeout: limit,
    };
    loop {
        let children = timeout_at(deadline, client.list_children(&node.dir))
            .await
            .map_err(|_| timed_out())?
            .map_err(BenchError::op("getChildren", &node.dir))?;
        let predecessor = match standing(node, prefix, &children)? {
            Standing::First => return Ok(()),
            Standing::Behind(name) => format!("{}/{name}", node.dir),
        };
        let (stat, watcher) = client
            .check_and_watch_stat(&predecessor)
            .await
            .map_err(BenchError::op("exists", &predecessor))?;
        if stat.is_none() {
            // Gone between the listing and the watch: look again rather than wait forever.
            continue;
        }
        let event = timeout_at(deadline, watcher.changed())
            .await
            .map_err(|_| timed_out())?;
        if event.event_type == EventType::Session {
            return Err(BenchError::SessionEnded {
                path: node.path(),
                state: event.session_state,
            });
        }
    }
}

/// A fair, herd-free exclusive lock whose contenders live under one directory.
#[derive(Clone, Debug)]
pub struct FairLock {
    dir: String,
}

impl FairLock {
    const PREFIX: &'static str = "lock-";

    /// A lock whose contenders queue under `dir` (which must exist).
    pub fn new(dir: impl Into<String>) -> Self {
        FairLock { dir: dir.into() }
    }

    /// Blocks until this session holds the lock; the node is withdrawn if that takes over `limit`.
    pub async fn acquire(&self, client: &Client, limit: Duration) -> Result<QueueNode, BenchError> {
        let node = join(client, &self.dir, Self::PREFIX, &[]).await?;
        match wait_until_first(client, &node, Self::PREFIX, limit).await {
            Ok(()) => Ok(node),
            Err(err) => {
                // Best effort: a node left behind would block every later contender until our
                // session ends.
                let _ = client.delete(&node.path(), None).await;
                Err(err)
            }
        }
    }

    /// Releases a lock granted by [`FairLock::acquire`].
    pub async fn release(&self, client: &Client, node: QueueNode) -> Result<(), BenchError> {
        let path = node.path();
        client
            .delete(&path, None)
            .await
            .map_err(BenchError::op("delete", &path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(sequence: i64) -> QueueNode {
        QueueNode {
            dir: "/l".into(),
            name: format!("lock-{sequence:010}"),
            sequence,
        }
    }

    fn names(sequences: &[i64]) -> Vec<String> {
        sequences.iter().map(|s| format!("lock-{s:010}")).collect()
    }

    #[test]
    fn lowest_node_is_first() {
        let children = names(&[7, 3, 9]);
        assert_eq!(
            standing(&node(3), "lock-", &children).ok(),
            Some(Standing::First)
        );
    }

    #[test]
    fn waiter_watches_only_its_immediate_predecessor() {
        let children = names(&[9, 1, 4, 7, 12]);
        assert_eq!(
            standing(&node(9), "lock-", &children).ok(),
            Some(Standing::Behind("lock-0000000007"))
        );
    }

    #[test]
    fn sequences_compare_numerically_past_ten_digits() {
        // Lexically "lock-1000…" sorts before "lock-9999…"; numerically it comes after.
        let children = names(&[9_999_999_999, 10_000_000_000_000_000]);
        let me = node(10_000_000_000_000_000);
        assert_eq!(
            standing(&me, "lock-", &children).ok(),
            Some(Standing::Behind("lock-9999999999"))
        );
    }

    #[test]
    fn foreign_children_are_ignored_and_bad_names_rejected() {
        let mut children = names(&[2, 5]);
        children.push("readme".into());
        assert_eq!(
            standing(&node(5), "lock-", &children).ok(),
            Some(Standing::Behind("lock-0000000002"))
        );
        children.push("lock-x".into());
        assert!(matches!(
            standing(&node(5), "lock-", &children),
            Err(BenchError::BadSequentialName { .. })
        ));
    }

    #[test]
    fn missing_own_node_is_an_error() {
        let children = names(&[1, 2]);
        assert!(matches!(
            standing(&node(3), "lock-", &children),
            Err(BenchError::OwnNodeMissing { .. })
        ));
    }
}
