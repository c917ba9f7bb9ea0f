//! Watches: one-shot data/exists/children watches, their order on the wire, and persistent
//! and persistent-recursive watches (addWatch).

use anyhow::{Result, bail, ensure};
use baton_tests::raw::{self, RawConnection, ReplyHeader, WatcherEvent, opcode};
use baton_tests::{PERSISTENT, Server, connect, next_event, target_tests};
use zookeeper_client as zk;

/// `Watcher.Event.EventType` and `KeeperState` codes on the wire.
const NODE_DATA_CHANGED: i32 = 3;
const SYNC_CONNECTED: i32 = 3;
/// `WatcherType` codes of checkWatches and removeWatches.
const WATCHER_CHILDREN: i32 = 1;
const WATCHER_DATA: i32 = 2;
/// Error codes on the wire.
const MARSHALLING_ERROR: i32 = -5;
const NO_WATCHER: i32 = -121;

fn expect_event(got: &zk::WatchedEvent, event_type: zk::EventType, path: &str) -> Result<()> {
    ensure!(
        got.event_type == event_type && got.path == path,
        "expected {event_type:?} on {path}, got {:?} on {}",
        got.event_type,
        got.path
    );
    Ok(())
}

/// Checked on the wire, where nothing can hide a duplicate: a data watch is delivered exactly
/// once, and before the reply to any later request of the same session.
async fn data_watch_fires_once_before_later_replies(server: &mut Server) -> Result<()> {
    let writer = connect(server).await?;
    writer.create("/once", b"0", &PERSISTENT).await?;

    let (mut watcher, _) = RawConnection::open_session(server.client_addr()).await?;
    let (early, reply) = watcher
        .call(1, opcode::GET_DATA, &raw::path_and_watch("/once", true))
        .await?;
    let header = ReplyHeader::parse(&reply)?;
    ensure!(
        early.is_empty() && header.err == 0,
        "getData with watch: {header:?}, events {early:?}"
    );

    writer.set_data("/once", b"1", None).await?;
    writer.set_data("/once", b"2", None).await?;

    let (events, reply) = watcher
        .call(2, opcode::EXISTS, &raw::path_and_watch("/once", false))
        .await?;
    let expected = WatcherEvent {
        event_type: NODE_DATA_CHANGED,
        state: SYNC_CONNECTED,
        path: "/once".into(),
    };
    ensure!(
        events == [expected],
        "events before the next reply: {events:?}"
    );
    ensure!(ReplyHeader::parse(&reply)?.err == 0, "exists failed");

    writer.set_data("/once", b"3", None).await?;
    let (events, _) = watcher
        .call(3, opcode::EXISTS, &raw::path_and_watch("/once", false))
        .await?;
    ensure!(events.is_empty(), "a fired watch fired again: {events:?}");
    Ok(())
}

/// Sends `body` as `opcode` and returns the reply's error code, failing on any notification.
async fn call_err(conn: &mut RawConnection, xid: i32, opcode: i32, body: &[u8]) -> Result<i32> {
    let (events, reply) = conn.call(xid, opcode, body).await?;
    ensure!(
        events.is_empty(),
        "unexpected events before xid {xid}: {events:?}"
    );
    Ok(ReplyHeader::parse(&reply)?.err)
}

/// The watch flags of a multiRead's getData and getChildren ops set no watch (ZooKeeper's
/// `MultiOperationRecord` drops them): checkWatches finds none, and later changes send no
/// event. The same getData alone does watch, so an event would show.
async fn multi_read_sets_no_watch(server: &mut Server) -> Result<()> {
    let writer = connect(server).await?;
    writer.create("/mr", b"0", &PERSISTENT).await?;

    let (mut reader, _) = RawConnection::open_session(server.client_addr()).await?;
    let reads = raw::multi_read_body(&[
        (opcode::GET_DATA, "/mr", true),
        (opcode::GET_CHILDREN, "/mr", true),
    ]);
    let err = call_err(&mut reader, 1, opcode::MULTI_READ, &reads).await?;
    ensure!(err == 0, "multiRead answered {err}");
    for (xid, watcher_type) in [(2, WATCHER_DATA), (3, WATCHER_CHILDREN)] {
        let body = raw::watches_body("/mr", watcher_type);
        let err = call_err(&mut reader, xid, opcode::CHECK_WATCHES, &body).await?;
        ensure!(
            err == NO_WATCHER,
            "checkWatches type {watcher_type} after a multiRead answered {err}"
        );
    }
    writer.set_data("/mr", b"1", None).await?;
    writer.create("/mr/c", b"", &PERSISTENT).await?;
    let (events, _) = reader
        .call(4, opcode::EXISTS, &raw::path_and_watch("/mr", false))
        .await?;
    ensure!(events.is_empty(), "a multiRead left a watch: {events:?}");

    let err = call_err(
        &mut reader,
        5,
        opcode::GET_DATA,
        &raw::path_and_watch("/mr", true),
    )
    .await?;
    ensure!(err == 0, "getData answered {err}");
    writer.set_data("/mr", b"2", None).await?;
    let (events, _) = reader
        .call(6, opcode::EXISTS, &raw::path_and_watch("/mr", false))
        .await?;
    ensure!(
        events.len() == 1 && events[0].event_type == NODE_DATA_CHANGED,
        "the plain getData's watch: {events:?}"
    );
    Ok(())
}

/// checkWatches and removeWatches with a watcher type outside 1..=5: ZooKeeper's
/// `WatcherType.fromInt` throws and the request is answered MarshallingError, before it looks
/// for a watch; the connection stays open and the session's watches stay.
async fn unknown_watcher_type_is_a_marshalling_error(server: &mut Server) -> Result<()> {
    let (mut conn, _) = RawConnection::open_session(server.client_addr()).await?;
    let err = call_err(
        &mut conn,
        1,
        opcode::GET_DATA,
        &raw::path_and_watch("/", true),
    )
    .await?;
    ensure!(err == 0, "getData answered {err}");
    let mut xid = 2;
    for op in [opcode::CHECK_WATCHES, opcode::REMOVE_WATCHES] {
        for watcher_type in [0, 6, -1, 99] {
            let body = raw::watches_body("/", watcher_type);
            let err = call_err(&mut conn, xid, op, &body).await?;
            ensure!(
                err == MARSHALLING_ERROR,
                "opcode {op} with watcher type {watcher_type} answered {err}"
            );
            xid += 1;
        }
    }
    let body = raw::watches_body("/", WATCHER_DATA);
    let err = call_err(&mut conn, xid, opcode::CHECK_WATCHES, &body).await?;
    ensure!(err == 0, "the data watch is gone after the refusals: {err}");
    Ok(())
}

async fn oneshot_watches_report_the_right_event(server: &mut Server) -> Result<()> {
    let client = connect(server).await?;
    let other = connect(server).await?;

    let (stat, created) = client.check_and_watch_stat("/w").await?;
    ensure!(stat.is_none(), "/w exists already");
    other.create("/w", b"", &PERSISTENT).await?;
    expect_event(
        &next_event("exists on a missing node", created.changed()).await?,
        zk::EventType::NodeCreated,
        "/w",
    )?;

    let (_, _, data) = client.get_and_watch_data("/w").await?;
    other.set_data("/w", b"x", None).await?;
    expect_event(
        &next_event("data", data.changed()).await?,
        zk::EventType::NodeDataChanged,
        "/w",
    )?;

    let (_, exists) = client.check_and_watch_stat("/w").await?;
    other.set_data("/w", b"y", None).await?;
    expect_event(
        &next_event("exists on a node", exists.changed()).await?,
        zk::EventType::NodeDataChanged,
        "/w",
    )?;

    let (_, children) = client.list_and_watch_children("/w").await?;
    other.create("/w/c", b"", &PERSISTENT).await?;
    expect_event(
        &next_event("children", children.changed()).await?,
        zk::EventType::NodeChildrenChanged,
        "/w",
    )?;

    let (_, _, child_data) = client.get_and_watch_data("/w/c").await?;
    let (_, _, children) = client.get_and_watch_children("/w").await?;
    other.delete("/w/c", None).await?;
    expect_event(
        &next_event("data of a deleted node", child_data.changed()).await?,
        zk::EventType::NodeDeleted,
        "/w/c",
    )?;
    expect_event(
        &next_event("children after a delete", children.changed()).await?,
        zk::EventType::NodeChildrenChanged,
        "/w",
    )?;

    let (_, children) = client.list_and_watch_children("/w").await?;
    let (_, exists) = client.check_and_watch_stat("/w").await?;
    other.delete("/w", None).await?;
    expect_event(
        &next_event("children of a deleted node", children.changed()).await?,
        zk::EventType::NodeDeleted,
        "/w",
    )?;
    expect_event(
        &next_event("exists of a deleted node", exists.changed()).await?,
        zk::EventType::NodeDeleted,
        "/w",
    )?;
    Ok(())
}

/// The same guarantee through the client crate: once a later read has its answer, the event
/// of an earlier change is already delivered.
async fn watch_event_arrives_before_a_later_read(server: &mut Server) -> Result<()> {
    let client = connect(server).await?;
    let other = connect(server).await?;
    client.create("/order", b"old", &PERSISTENT).await?;
    let (_, _, watcher) = client.get_and_watch_data("/order").await?;
    other.set_data("/order", b"new", None).await?;
    let (data, _) = client.get_data("/order").await?;
    ensure!(data == b"new", "read after a completed write saw {data:?}");
    let event = tokio::select! {
        biased;
        event = watcher.changed() => event,
        () = std::future::ready(()) => bail!("the read's reply arrived before the watch event"),
    };
    expect_event(&event, zk::EventType::NodeDataChanged, "/order")
}

async fn persistent_watch_keeps_firing(server: &mut Server) -> Result<()> {
    let client = connect(server).await?;
    let other = connect(server).await?;
    client.create("/pw", b"", &PERSISTENT).await?;
    let mut watcher = client.watch("/pw", zk::AddWatchMode::Persistent).await?;

    other.set_data("/pw", b"1", None).await?;
    other.set_data("/pw", b"2", None).await?;
    other.create("/pw/c", b"", &PERSISTENT).await?;
    other.set_data("/pw/c", b"not watched", None).await?;
    other.delete("/pw/c", None).await?;
    other.delete("/pw", None).await?;
    other.create("/pw", b"", &PERSISTENT).await?;

    use zk::EventType::*;
    let expected = [
        NodeDataChanged,
        NodeDataChanged,
        NodeChildrenChanged,
        NodeChildrenChanged,
        NodeDeleted,
        NodeCreated,
    ];
    for (i, event_type) in expected.into_iter().enumerate() {
        let event = next_event(&format!("persistent event #{i}"), watcher.changed()).await?;
        expect_event(&event, event_type, "/pw")?;
    }
    Ok(())
}

async fn recursive_watch_covers_descendants(server: &mut Server) -> Result<()> {
    let client = connect(server).await?;
    let other = connect(server).await?;
    client.create("/rw", b"", &PERSISTENT).await?;
    let mut watcher = client
        .watch("/rw", zk::AddWatchMode::PersistentRecursive)
        .await?;

    other.create("/rw/a", b"", &PERSISTENT).await?;
    other.create("/rw/a/b", b"", &PERSISTENT).await?;
    other.set_data("/rw/a/b", b"x", None).await?;
    other.delete("/rw/a/b", None).await?;
    other.set_data("/rw", b"y", None).await?;
    other.create("/rw-sibling", b"", &PERSISTENT).await?;
    other.create("/rw/last", b"", &PERSISTENT).await?;

    use zk::EventType::*;
    // No NodeChildrenChanged: a recursive watch reports the children themselves instead.
    let expected = [
        (NodeCreated, "/rw/a"),
        (NodeCreated, "/rw/a/b"),
        (NodeDataChanged, "/rw/a/b"),
        (NodeDeleted, "/rw/a/b"),
        (NodeDataChanged, "/rw"),
        (NodeCreated, "/rw/last"),
    ];
    for (i, (event_type, path)) in expected.into_iter().enumerate() {
        let event = next_event(&format!("recursive event #{i}"), watcher.changed()).await?;
        expect_event(&event, event_type, path)?;
    }
    Ok(())
}

target_tests!(
    data_watch_fires_once_before_later_replies,
    oneshot_watches_report_the_right_event,
    watch_event_arrives_before_a_later_read,
    persistent_watch_keeps_firing,
    recursive_watch_covers_descendants,
    multi_read_sets_no_watch,
    unknown_watcher_type_is_a_marshalling_error,
);
