//! WatchManager: checkWatches/removeWatches by watcher type, counts and four-letter-word views.

use baton_machine::watch::{WatchError, WatchKind, WatchManager, WatchSummary};
use baton_proto::{ErrorCode, EventType, WatcherType};

const TYPES: [WatcherType; 5] = [
    WatcherType::Children,
    WatcherType::Data,
    WatcherType::Any,
    WatcherType::Persistent,
    WatcherType::PersistentRecursive,
];

/// For a single watch of `kind`, which of TYPES (children, data, any, persistent, recursive)
/// check and remove it.
fn matching_types(kind: WatchKind) -> [bool; 5] {
    TYPES.map(|t| {
        let mut wm = WatchManager::new();
        wm.add(1, "/n", kind);
        let has = wm.has(1, "/n", t);
        assert_eq!(wm.check(1, "/n", t).is_ok(), has, "{kind:?} {t:?}");
        let removed = wm.remove(1, "/n", t).is_ok();
        assert_eq!(removed, has, "check and remove agree for {kind:?} {t:?}");
        assert_eq!(wm.has(1, "/n", WatcherType::Any), !removed);
        has
    })
}

#[test]
fn each_watcher_type_names_its_own_kind() {
    //                                                        child  data   any   pers   rec
    assert_eq!(
        matching_types(WatchKind::Data),
        [false, true, true, false, false]
    );
    assert_eq!(
        matching_types(WatchKind::Exist),
        [false, true, true, false, false]
    );
    assert_eq!(
        matching_types(WatchKind::Child),
        [true, false, true, false, false]
    );
    assert_eq!(
        matching_types(WatchKind::Persistent),
        [false, false, true, true, false]
    );
    assert_eq!(
        matching_types(WatchKind::PersistentRecursive),
        [false, false, true, false, true]
    );
}

#[test]
fn no_watcher_error_names_session_path_and_type() {
    let mut wm = WatchManager::new();
    let err = wm
        .remove(0x1234, "/missing", WatcherType::Data)
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoWatcher);
    assert_eq!(
        err,
        WatchError::NoWatcher {
            session_id: 0x1234,
            path: "/missing".into(),
            watcher_type: WatcherType::Data
        }
    );
    let text = err.to_string();
    assert!(text.contains("0x1234") && text.contains("/missing") && text.contains("Data"));
    assert_eq!(
        wm.check(1, "/x", WatcherType::Any).unwrap_err().code(),
        ErrorCode::NoWatcher
    );
}

#[test]
fn checks_look_at_the_exact_path_and_session() {
    let mut wm = WatchManager::new();
    wm.add(1, "/a", WatchKind::PersistentRecursive);
    wm.add(1, "/a/b", WatchKind::Data);
    assert!(
        !wm.has(1, "/a/b/c", WatcherType::Any),
        "recursive cover is not a watch"
    );
    assert!(!wm.has(2, "/a/b", WatcherType::Any));
    assert!(wm.remove(2, "/a/b", WatcherType::Any).is_err());
    assert!(wm.has(1, "/a/b", WatcherType::Data));
}

#[test]
fn remove_any_takes_every_kind_and_a_second_remove_fails() {
    let mut wm = WatchManager::new();
    for kind in [
        WatchKind::Data,
        WatchKind::Child,
        WatchKind::Persistent,
        WatchKind::PersistentRecursive,
    ] {
        wm.add(1, "/n", kind);
    }
    assert_eq!(wm.remove(1, "/n", WatcherType::Any), Ok(()));
    assert!(wm.remove(1, "/n", WatcherType::Any).is_err());
    assert_eq!(wm.paths(), 0);
    assert_eq!(wm.sessions(), 0);
    assert!(wm.trigger("/n/x", EventType::NodeCreated).is_empty());
}

#[test]
fn removing_one_kind_keeps_the_others() {
    let mut wm = WatchManager::new();
    wm.add(1, "/n", WatchKind::Data);
    wm.add(1, "/n", WatchKind::Persistent);
    wm.add(1, "/n", WatchKind::PersistentRecursive);
    wm.remove(1, "/n", WatcherType::Persistent).unwrap();
    assert_eq!(
        wm.kinds(1, "/n"),
        vec![WatchKind::Data, WatchKind::PersistentRecursive]
    );
    // The recursive watch still covers descendants.
    assert_eq!(wm.trigger("/n/c", EventType::NodeCreated).len(), 1);
    wm.remove(1, "/n", WatcherType::PersistentRecursive)
        .unwrap();
    assert!(wm.trigger("/n/c", EventType::NodeCreated).is_empty());
    assert!(wm.has(1, "/n", WatcherType::Data));
}

#[test]
fn count_matches_zookeeper_watch_count() {
    // Values seen from ZooKeeper 3.8's mntr zk_watch_count for the same watches.
    let mut wm = WatchManager::new();
    wm.add(1, "/t", WatchKind::Child);
    assert_eq!(wm.count(), 1);
    wm.add(1, "/", WatchKind::PersistentRecursive);
    assert_eq!(wm.count(), 3);
    wm.remove(1, "/", WatcherType::Any).unwrap();
    wm.add(1, "/t", WatchKind::Persistent);
    assert_eq!(
        wm.count(),
        2,
        "child + persistent on one path: one entry per table"
    );
    wm.add(2, "/u", WatchKind::Data);
    assert_eq!(wm.count(), 3);
    assert_eq!(wm.paths(), 2);
    assert_eq!(wm.sessions(), 2);
}

#[test]
fn reports_show_data_table_watches_sorted() {
    let mut wm = WatchManager::new();
    // Child-only watches are invisible to wchs/wchc/wchp, as in ZooKeeper 3.8.
    wm.add(3, "/only-children", WatchKind::Child);
    assert_eq!(wm.summary(), WatchSummary::default());
    assert!(wm.watches_by_session().is_empty());
    assert!(wm.watches_by_path().is_empty());

    wm.add(3, "/z", WatchKind::Data);
    wm.add(3, "/a", WatchKind::Persistent);
    wm.add(-1, "/z", WatchKind::Exist);
    wm.add(2, "/", WatchKind::PersistentRecursive);
    assert_eq!(
        wm.summary(),
        WatchSummary {
            sessions: 3,
            paths: 3,
            watches: 4
        }
    );
    assert_eq!(
        wm.summary().to_string(),
        "3 connections watching 3 paths\nTotal watches:4"
    );
    assert_eq!(
        wm.watches_by_session(),
        vec![
            (-1, vec!["/z".to_string()]),
            (2, vec!["/".to_string()]),
            (3, vec!["/a".to_string(), "/z".to_string()]),
        ]
    );
    assert_eq!(
        wm.watches_by_path(),
        vec![
            ("/".to_string(), vec![2]),
            ("/a".to_string(), vec![3]),
            ("/z".to_string(), vec![-1, 3]),
        ]
    );
}
