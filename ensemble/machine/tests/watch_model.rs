//! WatchManager against a naive reference: a list of (session, path, kind) scanned linearly,
//! under random sequences of add / trigger / remove / close.

use std::collections::BTreeSet;

use baton_machine::watch::{WatchKind, WatchManager, notification};
use baton_proto::{EventType, WatcherType};
use proptest::prelude::*;

const PATHS: [&str; 8] = [
    "/", "/a", "/a/b", "/a/b/c", "/a/bc", "/b", "/b/a", "/a/b/c/d",
];
const KINDS: [WatchKind; 5] = [
    WatchKind::Data,
    WatchKind::Exist,
    WatchKind::Child,
    WatchKind::Persistent,
    WatchKind::PersistentRecursive,
];
const EVENTS: [EventType; 4] = [
    EventType::NodeCreated,
    EventType::NodeDeleted,
    EventType::NodeDataChanged,
    EventType::NodeChildrenChanged,
];
const TYPES: [WatcherType; 5] = [
    WatcherType::Children,
    WatcherType::Data,
    WatcherType::Any,
    WatcherType::Persistent,
    WatcherType::PersistentRecursive,
];

#[derive(Debug, Clone)]
enum Op {
    Add(i64, usize, usize),
    Trigger(usize, usize),
    Remove(i64, usize, usize),
    CloseSession(i64),
}

fn op() -> impl Strategy<Value = Op> {
    let session = -1i64..3;
    prop_oneof![
        4 => (session.clone(), 0..PATHS.len(), 0..KINDS.len()).prop_map(|(s, p, k)| Op::Add(s, p, k)),
        4 => (0..PATHS.len(), 0..EVENTS.len()).prop_map(|(p, e)| Op::Trigger(p, e)),
        2 => (session.clone(), 0..PATHS.len(), 0..TYPES.len()).prop_map(|(s, p, t)| Op::Remove(s, p, t)),
        1 => session.prop_map(Op::CloseSession),
    ]
}

/// The rules, written as plainly as possible. Exist is stored as Data (one set, as in ZooKeeper).
#[derive(Default)]
struct Reference {
    watches: Vec<(i64, String, WatchKind)>,
}

fn normalize(kind: WatchKind) -> WatchKind {
    if kind == WatchKind::Exist {
        WatchKind::Data
    } else {
        kind
    }
}

fn is_proper_ancestor(ancestor: &str, path: &str) -> bool {
    if ancestor == "/" {
        path != "/" && path.starts_with('/')
    } else {
        path.starts_with(&format!("{ancestor}/"))
    }
}

fn fires(kind: WatchKind, watched: &str, path: &str, event: EventType) -> bool {
    use EventType::*;
    if watched == path {
        match kind {
            WatchKind::Data | WatchKind::Exist => {
                matches!(event, NodeCreated | NodeDeleted | NodeDataChanged)
            }
            WatchKind::Child => matches!(event, NodeDeleted | NodeChildrenChanged),
            WatchKind::Persistent => true,
            WatchKind::PersistentRecursive => event != NodeChildrenChanged,
        }
    } else {
        kind == WatchKind::PersistentRecursive
            && is_proper_ancestor(watched, path)
            && event != NodeChildrenChanged
    }
}

fn type_matches(t: WatcherType, kind: WatchKind) -> bool {
    match t {
        WatcherType::Children => kind == WatchKind::Child,
        WatcherType::Data => kind == WatchKind::Data,
        WatcherType::Any => true,
        WatcherType::Persistent => kind == WatchKind::Persistent,
        WatcherType::PersistentRecursive => kind == WatchKind::PersistentRecursive,
    }
}

impl Reference {
    fn add(&mut self, session: i64, path: &str, kind: WatchKind) -> bool {
        let entry = (session, path.to_string(), normalize(kind));
        if self.watches.contains(&entry) {
            return false;
        }
        self.watches.push(entry);
        true
    }

    fn trigger(&mut self, path: &str, event: EventType) -> Vec<i64> {
        let fired: BTreeSet<i64> = self
            .watches
            .iter()
            .filter(|(_, watched, kind)| fires(*kind, watched, path, event))
            .map(|(session, _, _)| *session)
            .collect();
        self.watches.retain(|(_, watched, kind)| {
            let one_shot = matches!(kind, WatchKind::Data | WatchKind::Child);
            !(one_shot && fires(*kind, watched, path, event))
        });
        fired.into_iter().collect()
    }

    fn has(&self, session: i64, path: &str, t: WatcherType) -> bool {
        self.watches
            .iter()
            .any(|(s, p, k)| *s == session && p == path && type_matches(t, *k))
    }

    fn remove(&mut self, session: i64, path: &str, t: WatcherType) -> bool {
        let before = self.watches.len();
        self.watches
            .retain(|(s, p, k)| !(*s == session && p == path && type_matches(t, *k)));
        self.watches.len() != before
    }

    fn pairs(&self) -> BTreeSet<(i64, String)> {
        self.watches
            .iter()
            .map(|(s, p, _)| (*s, p.clone()))
            .collect()
    }

    fn count(&self) -> usize {
        self.pairs()
            .iter()
            .map(|(s, p)| {
                let kinds: Vec<WatchKind> = self
                    .watches
                    .iter()
                    .filter(|(s2, p2, _)| s2 == s && p2 == p)
                    .map(|(_, _, k)| *k)
                    .collect();
                let data = kinds.iter().any(|k| *k != WatchKind::Child);
                let child = kinds.iter().any(|k| *k != WatchKind::Data);
                usize::from(data) + usize::from(child)
            })
            .sum()
    }

    fn by_path(&self) -> Vec<(String, Vec<i64>)> {
        let mut out: Vec<(String, Vec<i64>)> = Vec::new();
        let visible: BTreeSet<(String, i64)> = self
            .watches
            .iter()
            .filter(|(_, _, k)| *k != WatchKind::Child)
            .map(|(s, p, _)| (p.clone(), *s))
            .collect();
        for (path, session) in visible {
            match out.last_mut() {
                Some((last, sessions)) if *last == path => sessions.push(session),
                _ => out.push((path, vec![session])),
            }
        }
        out
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn matches_the_reference(ops in proptest::collection::vec(op(), 1..80)) {
        let mut wm = WatchManager::new();
        let mut reference = Reference::default();
        for op in ops {
            match op {
                Op::Add(s, p, k) => {
                    prop_assert_eq!(wm.add(s, PATHS[p], KINDS[k]), reference.add(s, PATHS[p], KINDS[k]));
                }
                Op::Trigger(p, e) => {
                    let got = wm.trigger(PATHS[p], EVENTS[e]);
                    let want: Vec<_> = reference
                        .trigger(PATHS[p], EVENTS[e])
                        .into_iter()
                        .map(|s| (s, notification(EVENTS[e], PATHS[p])))
                        .collect();
                    prop_assert_eq!(got, want, "{:?} on {}", EVENTS[e], PATHS[p]);
                }
                Op::Remove(s, p, t) => {
                    prop_assert_eq!(
                        wm.remove(s, PATHS[p], TYPES[t]).is_ok(),
                        reference.remove(s, PATHS[p], TYPES[t])
                    );
                }
                Op::CloseSession(s) => {
                    wm.remove_session(s);
                    reference.watches.retain(|(session, _, _)| *session != s);
                }
            }
            for session in -1..3 {
                for path in PATHS {
                    for t in TYPES {
                        prop_assert_eq!(wm.has(session, path, t), reference.has(session, path, t));
                    }
                }
            }
            let pairs = reference.pairs();
            prop_assert_eq!(wm.count(), reference.count());
            prop_assert_eq!(wm.paths(), pairs.iter().map(|(_, p)| p).collect::<BTreeSet<_>>().len());
            prop_assert_eq!(wm.sessions(), pairs.iter().map(|(s, _)| s).collect::<BTreeSet<_>>().len());
            prop_assert_eq!(wm.watches_by_path(), reference.by_path());
            // What the per-session watch-bytes limit counts: each watched path once.
            for session in -1..3 {
                let bytes: usize = pairs
                    .iter()
                    .filter(|(s, _)| *s == session)
                    .map(|(_, p)| p.len())
                    .sum();
                prop_assert_eq!(wm.session_path_bytes(session), bytes);
            }
        }
    }
}
