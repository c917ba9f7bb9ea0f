//! The order of sequential znodes in one folder, and whom each of them waits for.
//!
//! Pure functions: the recipes list a folder's children, parse them here, and ask which node
//! (if any) must go before theirs may proceed. Each waiter watches exactly that one node, so a
//! release wakes one waiter (or, for a writer's release, the readers right behind it), never
//! the whole queue.

/// What a queue node asks for, known from its name prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// `candidate-<seq>`: a leader-election candidate.
    Candidate,
    /// `lock-<seq>`: an exclusive lock request.
    Exclusive,
    /// `read-<seq>`: a shared (read) lock request.
    Read,
    /// `write-<seq>`: an exclusive (write) lock request.
    Write,
    /// `permit-<seq>`: a semaphore permit request (one of N holders).
    Permit,
    /// `party-<seq>`: a pod in a barrier.
    Party,
}

impl NodeKind {
    /// The name prefix the node is created with (the server appends the sequence).
    pub fn prefix(self) -> &'static str {
        match self {
            NodeKind::Candidate => "candidate-",
            NodeKind::Exclusive => "lock-",
            NodeKind::Read => "read-",
            NodeKind::Write => "write-",
            NodeKind::Permit => "permit-",
            NodeKind::Party => "party-",
        }
    }

    /// Whether this request excludes every other one (everything but a read).
    pub fn is_exclusive(self) -> bool {
        !matches!(self, NodeKind::Read)
    }

    /// The kinds that share a lock folder: `lock-`, `read-` and `write-` all order against each
    /// other, and a plain `lock-` behaves as a writer.
    pub const LOCK_KINDS: &'static [NodeKind] =
        &[NodeKind::Exclusive, NodeKind::Read, NodeKind::Write];
    /// The kinds of a semaphore folder.
    pub const SEMAPHORE_KINDS: &'static [NodeKind] = &[NodeKind::Permit];
    /// The kinds of a barrier folder.
    pub const BARRIER_KINDS: &'static [NodeKind] = &[NodeKind::Party];
    /// The kinds of an election folder.
    pub const ELECTION_KINDS: &'static [NodeKind] = &[NodeKind::Candidate];
}

/// One parsed child of a queue folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueNode {
    /// The child's name, e.g. `read-0000000042`.
    pub name: String,
    pub kind: NodeKind,
    /// The server-assigned sequence: the folder's total order across all prefixes.
    pub sequence: i64,
}

/// Parses `name` as one of `kinds`; `None` for anything else (a foreign node is not ours to
/// order against).
///
/// The sequence is the digits after the prefix: ZooKeeper writes ten (`%010d`), and this also
/// accepts the nineteen some servers use past `i32::MAX`.
pub fn parse_node(name: &str, kinds: &[NodeKind]) -> Option<QueueNode> {
    kinds.iter().find_map(|&kind| {
        let digits = name.strip_prefix(kind.prefix())?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let sequence = digits.parse::<i64>().ok()?;
        Some(QueueNode {
            name: name.to_owned(),
            kind,
            sequence,
        })
    })
}

/// A folder's nodes in sequence order (the order the server created them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Queue {
    nodes: Vec<QueueNode>,
}

impl Queue {
    /// Parses and orders `children`, skipping names that are not one of `kinds`.
    pub fn new<S: AsRef<str>>(children: &[S], kinds: &[NodeKind]) -> Self {
        let mut nodes: Vec<QueueNode> = children
            .iter()
            .filter_map(|c| parse_node(c.as_ref(), kinds))
            .collect();
        // The name breaks ties so the order is total even if a folder ever held two nodes with
        // one sequence (different prefixes, a server bug): every client then agrees on it.
        nodes.sort_by(|a, b| {
            a.sequence
                .cmp(&b.sequence)
                .then_with(|| a.name.cmp(&b.name))
        });
        Self { nodes }
    }

    /// All nodes, lowest sequence first.
    pub fn nodes(&self) -> &[QueueNode] {
        &self.nodes
    }

    /// The lowest node: the leader of an election, the first holder of a lock.
    pub fn head(&self) -> Option<&QueueNode> {
        self.nodes.first()
    }

    /// Drops `name` from the order: a node found not to be trusted (see [`super::trust`]).
    /// Whoever stood behind it then waits as if it had never been there.
    pub fn remove(&mut self, name: &str) -> Option<QueueNode> {
        let index = self.position(name)?;
        Some(self.nodes.remove(index))
    }

    /// Where `name` stands in the queue.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The node `self.nodes()[index]` must wait for, or `None` when it may proceed now.
    ///
    /// - a candidate, exclusive lock or writer waits for its immediate predecessor of any
    ///   kind (so writers are served in order and never overtake readers queued before them);
    /// - a reader waits only for the closest earlier exclusive node: readers with no writer
    ///   ahead hold the lock together.
    pub fn blocker(&self, index: usize) -> Option<&QueueNode> {
        let me = self.nodes.get(index)?;
        let earlier = &self.nodes[..index];
        if me.kind.is_exclusive() {
            earlier.last()
        } else {
            earlier.iter().rev().find(|n| n.kind.is_exclusive())
        }
    }

    /// Whether the node at `index` holds one of `permits` permits: fewer than `permits` nodes
    /// precede it (first come, first served; a later node never overtakes an earlier one).
    pub fn holds_permit(&self, index: usize, permits: u32) -> bool {
        index < self.nodes.len() && index < permits as usize
    }

    /// Whether the node at `index` may proceed (holds the lock, leads the election).
    pub fn is_granted(&self, index: usize) -> bool {
        index < self.nodes.len() && self.blocker(index).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use NodeKind::*;

    fn name(kind: NodeKind, seq: i64) -> String {
        format!("{}{seq:010}", kind.prefix())
    }

    #[test]
    fn parses_ten_and_nineteen_digit_sequences() {
        let node = parse_node("read-0000000042", NodeKind::LOCK_KINDS).expect("parses");
        assert_eq!((node.kind, node.sequence), (Read, 42));
        let node = parse_node("lock-2147483648000000001", NodeKind::LOCK_KINDS).expect("parses");
        assert_eq!(
            (node.kind, node.sequence),
            (Exclusive, 2_147_483_648_000_000_001)
        );
        let node = parse_node("candidate-0000000000", NodeKind::ELECTION_KINDS).expect("parses");
        assert_eq!((node.kind, node.sequence), (Candidate, 0));
    }

    #[test]
    fn rejects_foreign_and_malformed_names() {
        for bad in [
            "read-",
            "read-12a",
            "read--000000001",
            "read-+000000001",
            "readers-0000000001",
            "candidate-0000000001",
            "lock-99999999999999999999",
            "lock",
            "",
        ] {
            assert_eq!(parse_node(bad, NodeKind::LOCK_KINDS), None, "{bad}");
        }
        assert_eq!(
            parse_node("lock-0000000001", NodeKind::ELECTION_KINDS),
            None
        );
    }

    #[test]
    fn orders_by_sequence_not_by_name() {
        let children = [
            name(Write, 3),
            name(Read, 1),
            "junk".to_owned(),
            name(Exclusive, 2),
        ];
        let queue = Queue::new(&children, NodeKind::LOCK_KINDS);
        let order: Vec<_> = queue.nodes().iter().map(|n| n.sequence).collect();
        assert_eq!(order, [1, 2, 3]);
        assert_eq!(queue.head().map(|n| n.kind), Some(Read));
        assert_eq!(queue.position(&name(Write, 3)), Some(2));
        assert_eq!(queue.position("junk"), None);
    }

    #[test]
    fn election_candidates_watch_their_predecessor_only() {
        let children: Vec<_> = [7, 3, 5].iter().map(|&s| name(Candidate, s)).collect();
        let queue = Queue::new(&children, NodeKind::ELECTION_KINDS);
        assert!(queue.is_granted(0));
        assert_eq!(queue.blocker(0), None);
        assert_eq!(queue.blocker(1).map(|n| n.sequence), Some(3));
        assert_eq!(queue.blocker(2).map(|n| n.sequence), Some(5));
        assert!(!queue.is_granted(2));
        assert!(!queue.is_granted(3), "out of range is never granted");
    }

    /// The blocker rule checked against a brute-force statement of it for every mix of
    /// read/write/exclusive nodes up to length 6: a reader waits for the closest earlier
    /// exclusive node, anything else for its immediate predecessor.
    #[test]
    fn every_mix_of_readers_and_writers_waits_for_the_right_node() {
        let kinds = [Read, Write, Exclusive];
        for len in 1..=6u32 {
            for mut code in 0..3usize.pow(len) {
                let mut mix = Vec::new();
                for _ in 0..len {
                    mix.push(kinds[code % 3]);
                    code /= 3;
                }
                let children: Vec<_> = mix
                    .iter()
                    .enumerate()
                    .map(|(i, &k)| name(k, 10 * i as i64))
                    .collect();
                let queue = Queue::new(&children, NodeKind::LOCK_KINDS);
                for (i, &kind) in mix.iter().enumerate() {
                    let expected = if kind == Read {
                        (0..i).rev().find(|&j| mix[j] != Read)
                    } else {
                        i.checked_sub(1)
                    };
                    let got = queue.blocker(i).map(|n| n.sequence as usize / 10);
                    assert_eq!(got, expected, "mix {mix:?}, node {i}");
                }
                // Granted nodes: a leading run of readers, or the single first exclusive node.
                let granted: Vec<_> = (0..mix.len()).filter(|&i| queue.is_granted(i)).collect();
                let expected: Vec<_> = if mix[0] == Read {
                    (0..mix.len()).take_while(|&i| mix[i] == Read).collect()
                } else {
                    vec![0]
                };
                assert_eq!(granted, expected, "mix {mix:?}");
            }
        }
    }

    #[test]
    fn a_removed_node_is_skipped_by_whoever_stood_behind_it() {
        let children = [name(Write, 1), name(Read, 2), name(Write, 3), name(Read, 4)];
        let mut queue = Queue::new(&children, NodeKind::LOCK_KINDS);
        assert_eq!(queue.blocker(3).map(|n| n.sequence), Some(3));
        assert!(queue.remove(&name(Write, 3)).is_some());
        assert!(queue.remove(&name(Write, 3)).is_none());
        // The reader now waits for the first writer; with it gone too, both readers hold.
        let reader = queue.position(&name(Read, 4)).expect("still queued");
        assert_eq!(queue.blocker(reader).map(|n| n.sequence), Some(1));
        queue.remove(&name(Write, 1));
        assert_eq!(queue.head().map(|n| n.sequence), Some(2));
        assert!(queue.is_granted(0) && queue.is_granted(1));
    }

    #[test]
    fn the_first_permits_nodes_hold_a_semaphore() {
        let children: Vec<_> = [9, 4, 6, 2].iter().map(|&s| name(Permit, s)).collect();
        let mut queue = Queue::new(&children, NodeKind::SEMAPHORE_KINDS);
        let held: Vec<_> = (0..4).filter(|&i| queue.holds_permit(i, 2)).collect();
        assert_eq!(held, [0, 1]);
        assert!(!queue.holds_permit(4, 9), "out of range never holds");
        queue.remove(&name(Permit, 2));
        assert!(queue.holds_permit(queue.position(&name(Permit, 6)).unwrap(), 2));
        assert!(!queue.holds_permit(queue.position(&name(Permit, 9)).unwrap(), 2));
    }

    #[test]
    fn a_writer_behind_readers_waits_for_the_last_reader_only() {
        let children = [
            name(Read, 1),
            name(Read, 2),
            name(Read, 3),
            name(Write, 4),
            name(Read, 5),
        ];
        let queue = Queue::new(&children, NodeKind::LOCK_KINDS);
        assert_eq!(queue.blocker(3).map(|n| n.sequence), Some(3));
        // The reader after the writer waits for the writer, not for the readers before it.
        assert_eq!(queue.blocker(4).map(|n| n.sequence), Some(4));
    }
}
