//! The log under a real `raft::RawNode`: a one-member group commits proposals, snapshots, and
//! restarts from the directory with `Config::applied` at the snapshot.

mod common;

use std::path::Path;

use baton_raftlog::RaftLog;
use common::*;
use raft::eraftpb::EntryType;
use raft::{Config, RawNode, Storage};

struct Member {
    node: RawNode<RaftLog>,
    log: RaftLog,
    /// Indexes of the applied proposals (entries with data), in apply order.
    applied: Vec<u64>,
    last_applied: u64,
}

fn start(dir: &Path) -> Member {
    let mut o = opts(true);
    o.keep_entries = 3;
    let log = open(dir, o).expect("open");
    if !log.initial_state().expect("state").initialized() {
        log.set_conf_state(&voters(&[1])).expect("bootstrap");
    }
    let applied = log.latest_snapshot().map_or(0, |s| s.get_metadata().index);
    let config = Config {
        id: 1,
        applied,
        ..Config::default()
    };
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    let mut node = RawNode::new(&config, log.clone(), &logger).expect("raw node");
    node.campaign().expect("campaign");
    let mut member = Member {
        node,
        log,
        applied: Vec::new(),
        last_applied: applied,
    };
    member.drive();
    member
}

impl Member {
    /// Handles readies until none is left. Like a lazy driver, it never persists the commit
    /// index of a `LightReady`, so the durable commit lags what was applied.
    fn drive(&mut self) {
        while self.node.has_ready() {
            let mut ready = self.node.ready();
            if !ready.snapshot().is_empty() {
                self.log
                    .apply_snapshot(ready.snapshot())
                    .expect("apply snapshot");
            }
            self.apply(ready.take_committed_entries());
            self.log
                .persist(ready.entries(), ready.hs())
                .expect("persist");
            let mut light = self.node.advance(ready);
            self.apply(light.take_committed_entries());
            self.node.advance_apply();
        }
    }

    fn apply(&mut self, entries: Vec<raft::eraftpb::Entry>) {
        for e in entries {
            assert!(
                e.index > self.last_applied,
                "entry {} applied twice",
                e.index
            );
            self.last_applied = e.index;
            if e.get_entry_type() == EntryType::EntryNormal && !e.data.is_empty() {
                self.applied.push(e.index);
            }
        }
    }

    fn propose(&mut self, n: usize) {
        for i in 0..n {
            self.node
                .propose(vec![], format!("command {i}").into_bytes())
                .expect("propose");
            self.drive();
        }
    }
}

#[test]
fn commits_snapshots_and_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let snapshot_index;
    {
        let mut member = start(dir.path());
        member.propose(20);
        assert_eq!(member.applied.len(), 20);
        snapshot_index = member.last_applied;
        for index in [snapshot_index - 5, snapshot_index] {
            member
                .log
                .create_snapshot(index, voters(&[1]), b"tree".to_vec())
                .expect("snapshot");
        }
        member.propose(5);
        assert_eq!(member.applied.len(), 25);
        assert!(
            member.log.hard_state().commit < member.last_applied,
            "the durable commit lags, as this test intends"
        );
    }
    let mut member = start(dir.path());
    // Compacted to the older snapshot, which is below `keep_entries` back from the newest.
    assert_eq!(member.log.first_index(), Ok(snapshot_index - 4));
    // Entries after the snapshot are committed again and applied once each.
    assert_eq!(member.applied.len(), 5);
    assert!(member.applied.iter().all(|&i| i > snapshot_index));
    member.propose(3);
    assert_eq!(member.applied.len(), 8);
    assert_eq!(member.log.last_index(), Ok(member.last_applied));
}
