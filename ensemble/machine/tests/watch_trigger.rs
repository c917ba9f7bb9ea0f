//! WatchManager: which watches each tree change fires, and what stays registered afterwards.

use baton_machine::watch::{WatchKind, WatchManager, notification};
use baton_proto::{EventType, KeeperState, WatcherType};

const EVENTS: [EventType; 4] = [
    EventType::NodeCreated,
    EventType::NodeDeleted,
    EventType::NodeDataChanged,
    EventType::NodeChildrenChanged,
];

/// Where a single watch of `kind` sits relative to the changed path `/a/b`, and which of
/// EVENTS (created, deleted, data changed, children changed) must notify it.
fn fires(kind: WatchKind, watched: &str) -> [bool; 4] {
    EVENTS.map(|event| {
        let mut wm = WatchManager::new();
        wm.add(7, watched, kind);
        !wm.trigger("/a/b", event).is_empty()
    })
}

#[test]
fn each_event_fires_the_kinds_zookeeper_fires_on_the_path() {
    //                                               created deleted data  children
    assert_eq!(fires(WatchKind::Data, "/a/b"), [true, true, true, false]);
    assert_eq!(fires(WatchKind::Exist, "/a/b"), [true, true, true, false]);
    assert_eq!(fires(WatchKind::Child, "/a/b"), [false, true, false, true]);
    assert_eq!(
        fires(WatchKind::Persistent, "/a/b"),
        [true, true, true, true]
    );
    assert_eq!(
        fires(WatchKind::PersistentRecursive, "/a/b"),
        [true, true, true, false]
    );
}

#[test]
fn only_recursive_watches_fire_for_descendants() {
    for watched in ["/a", "/"] {
        assert_eq!(fires(WatchKind::Data, watched), [false; 4], "{watched}");
        assert_eq!(fires(WatchKind::Child, watched), [false; 4], "{watched}");
        assert_eq!(
            fires(WatchKind::Persistent, watched),
            [false; 4],
            "{watched}"
        );
        assert_eq!(
            fires(WatchKind::PersistentRecursive, watched),
            [true, true, true, false],
            "{watched}"
        );
    }
}

#[test]
fn watches_on_other_paths_never_fire() {
    // "/a/bc" shares a string prefix with "/a/b" but is not its ancestor; "/a/b/c" is a child.
    for watched in ["/a/bc", "/a/b/c", "/x", "/a/"] {
        for kind in [
            WatchKind::Data,
            WatchKind::Child,
            WatchKind::Persistent,
            WatchKind::PersistentRecursive,
        ] {
            assert_eq!(fires(kind, watched), [false; 4], "{kind:?} on {watched}");
        }
    }
}

#[test]
fn notification_carries_the_changed_path_and_sync_connected() {
    let mut wm = WatchManager::new();
    wm.add(1, "/a", WatchKind::PersistentRecursive);
    let fired = wm.trigger("/a/b/c", EventType::NodeDataChanged);
    assert_eq!(fired.len(), 1);
    let (session, event) = &fired[0];
    assert_eq!(*session, 1);
    assert_eq!(event.event_type, EventType::NodeDataChanged as i32);
    assert_eq!(event.state, KeeperState::SyncConnected as i32);
    assert_eq!(event.state, 3);
    assert_eq!(event.path, "/a/b/c");
}

#[test]
fn one_shot_watches_fire_once() {
    let mut wm = WatchManager::new();
    wm.add(1, "/n", WatchKind::Data);
    wm.add(1, "/n", WatchKind::Child);
    assert_eq!(wm.trigger("/n", EventType::NodeDataChanged).len(), 1);
    assert!(wm.trigger("/n", EventType::NodeDataChanged).is_empty());
    // The child watch did not fire on a data change, so it is still there.
    assert!(wm.has(1, "/n", WatcherType::Children));
    assert!(!wm.has(1, "/n", WatcherType::Data));
    assert_eq!(wm.trigger("/n", EventType::NodeChildrenChanged).len(), 1);
    assert!(wm.trigger("/n", EventType::NodeChildrenChanged).is_empty());
    assert_eq!(wm.paths(), 0);
    assert_eq!(wm.sessions(), 0);
    assert_eq!(wm.count(), 0);
}

#[test]
fn delete_consumes_data_and_child_watches_with_one_notification() {
    let mut wm = WatchManager::new();
    wm.add(1, "/n", WatchKind::Data);
    wm.add(1, "/n", WatchKind::Exist);
    wm.add(1, "/n", WatchKind::Child);
    let fired = wm.trigger("/n", EventType::NodeDeleted);
    assert_eq!(fired, vec![(1, notification(EventType::NodeDeleted, "/n"))]);
    assert!(!wm.has(1, "/n", WatcherType::Any));
    assert!(wm.trigger("/n", EventType::NodeCreated).is_empty());
}

#[test]
fn children_changed_leaves_data_watches_alone() {
    let mut wm = WatchManager::new();
    wm.add(1, "/n", WatchKind::Data);
    assert!(wm.trigger("/n", EventType::NodeChildrenChanged).is_empty());
    assert!(wm.has(1, "/n", WatcherType::Data));
}

#[test]
fn persistent_watches_stay_after_firing() {
    let mut wm = WatchManager::new();
    wm.add(1, "/p", WatchKind::Persistent);
    wm.add(1, "/", WatchKind::PersistentRecursive);
    for _ in 0..3 {
        for event in EVENTS {
            assert_eq!(wm.trigger("/p", event).len(), 1, "{event:?}");
        }
    }
    assert!(wm.has(1, "/p", WatcherType::Persistent));
    assert!(wm.has(1, "/", WatcherType::PersistentRecursive));
}

#[test]
fn persistent_and_one_shot_on_one_path_do_not_interfere() {
    // ZooKeeper 3.8 let the getData watch overwrite the persistent one (ZOOKEEPER-4466);
    // the fixed behaviour keeps both.
    let mut wm = WatchManager::new();
    wm.add(1, "/m", WatchKind::Persistent);
    wm.add(1, "/m", WatchKind::Data);
    assert_eq!(wm.trigger("/m", EventType::NodeDataChanged).len(), 1);
    assert!(!wm.has(1, "/m", WatcherType::Data));
    assert_eq!(wm.trigger("/m", EventType::NodeDataChanged).len(), 1);
    assert_eq!(wm.kinds(1, "/m"), vec![WatchKind::Persistent]);
}

#[test]
fn one_notification_per_session_even_with_several_matching_watches() {
    let mut wm = WatchManager::new();
    wm.add(5, "/", WatchKind::PersistentRecursive);
    wm.add(5, "/a", WatchKind::PersistentRecursive);
    wm.add(5, "/a/b", WatchKind::PersistentRecursive);
    wm.add(5, "/a/b", WatchKind::Persistent);
    wm.add(5, "/a/b", WatchKind::Data);
    wm.add(5, "/a/b", WatchKind::Child);
    wm.add(2, "/a/b", WatchKind::Exist);
    let fired = wm.trigger("/a/b", EventType::NodeDeleted);
    assert_eq!(
        fired.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        vec![2, 5],
        "one per session, sorted by session id"
    );
    // The one-shot watches were consumed even though the session was notified through others.
    assert_eq!(
        wm.kinds(5, "/a/b"),
        vec![WatchKind::Persistent, WatchKind::PersistentRecursive]
    );
}

#[test]
fn notifications_are_sorted_by_session_id() {
    let mut wm = WatchManager::new();
    for session in [9, -3, 4, 0, i64::MAX, i64::MIN] {
        wm.add(session, "/s", WatchKind::Data);
    }
    wm.add(1, "/", WatchKind::PersistentRecursive);
    let sessions: Vec<i64> = wm
        .trigger("/s", EventType::NodeCreated)
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(sessions, vec![i64::MIN, -3, 0, 1, 4, 9, i64::MAX]);
}

#[test]
fn non_change_events_notify_nobody_and_consume_nothing() {
    let mut wm = WatchManager::new();
    wm.add(1, "/n", WatchKind::Data);
    wm.add(1, "/n", WatchKind::Child);
    wm.add(1, "/", WatchKind::PersistentRecursive);
    for event in [
        EventType::None,
        EventType::DataWatchRemoved,
        EventType::ChildWatchRemoved,
        EventType::PersistentWatchRemoved,
    ] {
        assert!(wm.trigger("/n", event).is_empty(), "{event:?}");
    }
    assert_eq!(wm.kinds(1, "/n"), vec![WatchKind::Data, WatchKind::Child]);
}

#[test]
fn root_changes_and_malformed_paths_do_not_panic() {
    let mut wm = WatchManager::new();
    wm.add(1, "/", WatchKind::PersistentRecursive);
    wm.add(1, "/", WatchKind::Child);
    assert_eq!(wm.trigger("/", EventType::NodeChildrenChanged).len(), 1);
    assert_eq!(wm.trigger("/", EventType::NodeDataChanged).len(), 1);
    for path in ["", "no-slash", "//", "/a//b", "/a/", "/é/ü"] {
        for event in EVENTS {
            let _ = wm.trigger(path, event);
        }
    }
}

#[test]
fn add_reports_whether_the_watch_is_new() {
    let mut wm = WatchManager::new();
    assert!(wm.add(1, "/n", WatchKind::Data));
    assert!(!wm.add(1, "/n", WatchKind::Data));
    assert!(
        !wm.add(1, "/n", WatchKind::Exist),
        "exist and data are one set"
    );
    assert!(wm.add(1, "/n", WatchKind::Child));
    assert!(wm.add(2, "/n", WatchKind::Data));
}

#[test]
fn remove_session_drops_all_its_watches_and_only_its() {
    let mut wm = WatchManager::new();
    wm.add(1, "/a", WatchKind::Data);
    wm.add(1, "/b", WatchKind::Child);
    wm.add(1, "/", WatchKind::PersistentRecursive);
    wm.add(2, "/a", WatchKind::Data);
    wm.remove_session(1);
    wm.remove_session(1);
    wm.remove_session(42);
    assert_eq!(wm.sessions(), 1);
    assert_eq!(wm.paths(), 1);
    let fired = wm.trigger("/a", EventType::NodeDataChanged);
    assert_eq!(fired.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![2]);
    assert!(wm.trigger("/b", EventType::NodeChildrenChanged).is_empty());
    assert!(wm.trigger("/b/c", EventType::NodeCreated).is_empty());
}

/// `fire` tells the core which notifications come from a one-shot watch on the path itself
/// (checked when it was set, delivered whatever the tenancy policy says by then) and which
/// from a persistent or recursive one (checked again at each event).
#[test]
fn fire_says_which_sessions_one_shot_watch_fired() {
    let mut wm = WatchManager::new();
    wm.add(1, "/a/b", WatchKind::Exist);
    wm.add(2, "/", WatchKind::PersistentRecursive);
    wm.add(3, "/a/b", WatchKind::Child);
    wm.add(3, "/a", WatchKind::PersistentRecursive);
    wm.add(4, "/a/b", WatchKind::Persistent);
    let fired: Vec<(i64, bool)> = wm
        .fire("/a/b", EventType::NodeDeleted)
        .into_iter()
        .map(|f| (f.session_id, f.one_shot))
        .collect();
    assert_eq!(fired, vec![(1, true), (2, false), (3, true), (4, false)]);
    // The one-shot watches are gone; the next change fires only what persists.
    let again: Vec<(i64, bool)> = wm
        .fire("/a/b", EventType::NodeCreated)
        .into_iter()
        .map(|f| (f.session_id, f.one_shot))
        .collect();
    assert_eq!(again, vec![(2, false), (3, false), (4, false)]);
}
