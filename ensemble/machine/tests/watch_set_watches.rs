//! WatchManager::set_watches: re-registering a reconnecting client's watches (DataTree.setWatches).

use std::collections::HashMap;

use baton_machine::watch::{WatchKind, WatchManager, notification};
use baton_proto::{EventType, SetWatchesRequest, Stat, WatcherEvent, WatcherType};

const SESSION: i64 = 0x77;

/// A tree of node → (mzxid, pzxid) for the lookups.
fn tree(nodes: &[(&str, i64, i64)]) -> HashMap<String, Stat> {
    nodes
        .iter()
        .map(|&(path, mzxid, pzxid)| {
            (
                path.to_string(),
                Stat {
                    czxid: mzxid.min(pzxid),
                    mzxid,
                    pzxid,
                    ..Stat::default()
                },
            )
        })
        .collect()
}

fn set(
    wm: &mut WatchManager,
    nodes: &HashMap<String, Stat>,
    request: SetWatchesRequest,
) -> Vec<WatcherEvent> {
    wm.set_watches(SESSION, &request, |path| nodes.get(path).cloned())
}

fn paths(list: &[&str]) -> Vec<String> {
    list.iter().map(|p| p.to_string()).collect()
}

#[test]
fn data_watches_fire_for_deleted_or_changed_nodes_and_register_otherwise() {
    let nodes = tree(&[("/same", 10, 10), ("/changed", 11, 5), ("/edge", 10, 99)]);
    let mut wm = WatchManager::new();
    let events = set(
        &mut wm,
        &nodes,
        SetWatchesRequest {
            relative_zxid: 10,
            data_watches: paths(&["/gone", "/same", "/changed", "/edge"]),
            ..Default::default()
        },
    );
    assert_eq!(
        events,
        vec![
            notification(EventType::NodeDeleted, "/gone"),
            notification(EventType::NodeDataChanged, "/changed"),
        ]
    );
    // mzxid == relativeZxid is not a change; pzxid does not matter for data watches.
    assert!(wm.has(SESSION, "/same", WatcherType::Data));
    assert!(wm.has(SESSION, "/edge", WatcherType::Data));
    assert!(!wm.has(SESSION, "/gone", WatcherType::Any));
    assert!(!wm.has(SESSION, "/changed", WatcherType::Any));
}

#[test]
fn exist_watches_fire_for_nodes_that_now_exist() {
    let nodes = tree(&[("/born", 3, 3)]);
    let mut wm = WatchManager::new();
    let events = set(
        &mut wm,
        &nodes,
        SetWatchesRequest {
            relative_zxid: 100,
            exist_watches: paths(&["/born", "/still-missing"]),
            ..Default::default()
        },
    );
    assert_eq!(events, vec![notification(EventType::NodeCreated, "/born")]);
    assert!(wm.has(SESSION, "/still-missing", WatcherType::Data));
    assert!(!wm.has(SESSION, "/born", WatcherType::Any));
    assert_eq!(
        wm.trigger("/still-missing", EventType::NodeCreated).len(),
        1
    );
}

#[test]
fn child_watches_fire_for_deleted_nodes_or_changed_children() {
    let nodes = tree(&[("/quiet", 50, 10), ("/busy", 1, 11)]);
    let mut wm = WatchManager::new();
    let events = set(
        &mut wm,
        &nodes,
        SetWatchesRequest {
            relative_zxid: 10,
            child_watches: paths(&["/quiet", "/busy", "/gone"]),
            ..Default::default()
        },
    );
    assert_eq!(
        events,
        vec![
            notification(EventType::NodeChildrenChanged, "/busy"),
            notification(EventType::NodeDeleted, "/gone"),
        ]
    );
    // A data change (mzxid 50) does not matter to a child watch.
    assert!(wm.has(SESSION, "/quiet", WatcherType::Children));
    assert!(!wm.has(SESSION, "/busy", WatcherType::Any));
}

#[test]
fn persistent_watches_are_re_added_without_catch_up_events() {
    let nodes = tree(&[("/p", 99, 99)]);
    let mut wm = WatchManager::new();
    let events = set(
        &mut wm,
        &nodes,
        SetWatchesRequest {
            relative_zxid: 1,
            persistent_watches: paths(&["/p", "/absent"]),
            persistent_recursive_watches: paths(&["/", "/absent"]),
            ..Default::default()
        },
    );
    assert!(events.is_empty());
    assert_eq!(wm.kinds(SESSION, "/p"), vec![WatchKind::Persistent]);
    assert_eq!(
        wm.kinds(SESSION, "/absent"),
        vec![WatchKind::Persistent, WatchKind::PersistentRecursive]
    );
    assert_eq!(wm.trigger("/x/y", EventType::NodeCreated).len(), 1);
}

#[test]
fn events_follow_zookeeper_order_without_deduplication() {
    // Matches what ZooKeeper 3.8 sent for the same request (checked with a raw client):
    // data list, then exist list, then child list, each in request order, duplicates kept.
    let nodes = tree(&[("/s", 22, 25), ("/s/k", 26, 23)]);
    let mut wm = WatchManager::new();
    let events = set(
        &mut wm,
        &nodes,
        SetWatchesRequest {
            relative_zxid: 24,
            data_watches: paths(&["/s/gone", "/s/k", "/s", "/s/k"]),
            exist_watches: paths(&["/s/k", "/nope"]),
            child_watches: paths(&["/s/gone", "/s", "/s/k"]),
            persistent_watches: paths(&["/s"]),
            persistent_recursive_watches: paths(&["/s"]),
        },
    );
    assert_eq!(
        events,
        vec![
            notification(EventType::NodeDeleted, "/s/gone"),
            notification(EventType::NodeDataChanged, "/s/k"),
            notification(EventType::NodeDataChanged, "/s/k"),
            notification(EventType::NodeCreated, "/s/k"),
            notification(EventType::NodeDeleted, "/s/gone"),
            notification(EventType::NodeChildrenChanged, "/s"),
        ]
    );
    assert_eq!(
        wm.kinds(SESSION, "/s"),
        vec![
            WatchKind::Data,
            WatchKind::Persistent,
            WatchKind::PersistentRecursive
        ]
    );
    assert_eq!(wm.kinds(SESSION, "/nope"), vec![WatchKind::Data]);
    assert_eq!(wm.kinds(SESSION, "/s/k"), vec![WatchKind::Child]);
}

#[test]
fn registered_watches_then_fire_like_any_other() {
    let nodes = tree(&[("/n", 5, 5)]);
    let mut wm = WatchManager::new();
    set(
        &mut wm,
        &nodes,
        SetWatchesRequest {
            relative_zxid: 5,
            data_watches: paths(&["/n"]),
            child_watches: paths(&["/n"]),
            ..Default::default()
        },
    );
    assert_eq!(
        wm.trigger("/n", EventType::NodeDeleted),
        vec![(SESSION, notification(EventType::NodeDeleted, "/n"))]
    );
    assert_eq!(wm.sessions(), 0);
}
