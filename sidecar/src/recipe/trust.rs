//! Which queue nodes the recipes trust: only live ephemeral ones (DESIGN.md §4).
//!
//! A node whose `ephemeralOwner` is 0 is persistent: no session's life bounds it, so it was
//! planted (by hand, or by a client squatting the queue) rather than created by a candidate or
//! a lock request, which are always ephemeral. Such a node never leads, never holds and is
//! never waited for; a warning and `baton_sidecar_ignored_queue_nodes_total{kind}` say so.
//!
//! Only facts that never change over a node's life decide trust: its name (parsed by
//! [`super::queue`]) and its `ephemeralOwner`. Data does not: anyone allowed to `setData` a
//! live node could otherwise make one client skip a holder another still counts, and two
//! would hold. A live node whose data does not parse still orders (its leader info is empty).

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use zookeeper_client as zk;

use super::queue::NodeKind;

/// At most one warning per this long; the next says how many were held back.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// Distinct nodes remembered for counting once; past it the memory starts over.
const REMEMBERED: usize = 10_000;

/// Whether `stat` is a live session's node (ephemeral): the only kind a queue trusts.
pub fn is_trusted(stat: &zk::Stat) -> bool {
    stat.ephemeral_owner != 0
}

/// The label of `baton_sidecar_ignored_queue_nodes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IgnoredLabels {
    /// The node's kind by its name: candidate, lock, read, write.
    pub kind: String,
}

/// Counts and reports the planted nodes the recipes of one session skipped.
#[derive(Debug)]
pub struct IgnoredNodes {
    family: Family<IgnoredLabels, Counter>,
    state: Mutex<ReportState>,
}

#[derive(Debug, Default)]
struct ReportState {
    /// (path, czxid) of every node counted, so a node seen at every look counts once.
    seen: HashSet<(String, i64)>,
    last_warning: Option<Instant>,
    held_back: u64,
}

fn kind_label(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Candidate => "candidate",
        NodeKind::Exclusive => "lock",
        NodeKind::Read => "read",
        NodeKind::Write => "write",
        NodeKind::Permit => "permit",
        NodeKind::Party => "party",
    }
}

impl Default for IgnoredNodes {
    /// Every kind at zero from the start, so the metric shows 0 rather than nothing.
    fn default() -> Self {
        let family = Family::<IgnoredLabels, Counter>::default();
        for kind in [
            NodeKind::Candidate,
            NodeKind::Exclusive,
            NodeKind::Read,
            NodeKind::Write,
            NodeKind::Permit,
            NodeKind::Party,
        ] {
            family
                .get_or_create(&IgnoredLabels {
                    kind: kind_label(kind).to_owned(),
                })
                .inc_by(0);
        }
        IgnoredNodes {
            family,
            state: Mutex::default(),
        }
    }
}

impl IgnoredNodes {
    /// The counter family, to register with the sidecar's metrics.
    pub fn family(&self) -> Family<IgnoredLabels, Counter> {
        self.family.clone()
    }

    /// How many distinct nodes of `kind` were ignored so far.
    pub fn count(&self, kind: NodeKind) -> u64 {
        self.family
            .get_or_create(&IgnoredLabels {
                kind: kind_label(kind).to_owned(),
            })
            .get()
    }

    /// Records that the node at `path` (of `kind`, created at `czxid`) is persistent and was
    /// skipped.
    pub fn report(&self, kind: NodeKind, path: &str, czxid: i64) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.seen.len() >= REMEMBERED {
            state.seen.clear();
        }
        if !state.seen.insert((path.to_owned(), czxid)) {
            return;
        }
        self.family
            .get_or_create(&IgnoredLabels {
                kind: kind_label(kind).to_owned(),
            })
            .inc();
        let now = Instant::now();
        if state
            .last_warning
            .is_some_and(|at| now.duration_since(at) < WARN_EVERY)
        {
            state.held_back += 1;
            return;
        }
        let held_back = std::mem::take(&mut state.held_back);
        state.last_warning = Some(now);
        tracing::warn!(
            node = path,
            czxid,
            kind = kind_label(kind),
            more_since_last_warning = held_back,
            "ignoring a persistent node in a queue: only a live session's (ephemeral) node can \
             lead or hold; someone planted it (delete it, and check who may write under /baton)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(czxid: i64, owner: i64) -> zk::Stat {
        zk::Stat {
            czxid,
            mzxid: czxid,
            pzxid: czxid,
            ctime: 0,
            mtime: 0,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: owner,
            data_length: 0,
            num_children: 0,
        }
    }

    #[test]
    fn only_ephemeral_nodes_are_trusted() {
        assert!(!is_trusted(&stat(5, 0)));
        assert!(is_trusted(&stat(5, 0x1234)));
    }

    #[test]
    fn each_planted_node_counts_once() {
        let ignored = IgnoredNodes::default();
        for _ in 0..3 {
            ignored.report(NodeKind::Candidate, "/baton/d/elections/e/candidate-1", 7);
        }
        assert_eq!(ignored.count(NodeKind::Candidate), 1);
        // The same name made again is another node.
        ignored.report(NodeKind::Candidate, "/baton/d/elections/e/candidate-1", 9);
        ignored.report(NodeKind::Read, "/baton/d/locks/l/read-1", 8);
        assert_eq!(ignored.count(NodeKind::Candidate), 2);
        assert_eq!(ignored.count(NodeKind::Read), 1);
        assert_eq!(ignored.count(NodeKind::Write), 0);
    }
}
