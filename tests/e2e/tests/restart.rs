//! Durability across `kill -9`: every acknowledged write survives a restart on the same data
//! dir, with the same data and Stat; sessions survive too and can be resumed.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use baton_tests::{EPHEMERAL, PERSISTENT, Server, connect, connect_with, next_event, target_tests};
use zookeeper_client as zk;

/// Long enough that the session outlives two restarts of a slow JVM; ZooKeeper caps it at 40 s.
const LONG_SESSION: Duration = Duration::from_secs(40);
const PERSISTENT_NODES: usize = 40;
const EPHEMERAL_NODES: usize = 3;

/// Every node under `root` (and `root` itself) with its data and Stat, as one client sees it.
async fn snapshot(
    client: &zk::Client,
    root: &str,
) -> Result<BTreeMap<String, (Vec<u8>, zk::Stat)>> {
    let mut nodes = BTreeMap::new();
    let mut pending = vec![root.to_owned()];
    while let Some(path) = pending.pop() {
        let (data, stat) = client
            .get_data(&path)
            .await
            .with_context(|| format!("get {path}"))?;
        for child in client
            .list_children(&path)
            .await
            .with_context(|| format!("list {path}"))?
        {
            pending.push(format!("{path}/{child}"));
        }
        nodes.insert(path, (data, stat));
    }
    Ok(nodes)
}

fn ensure_same(
    before: &BTreeMap<String, (Vec<u8>, zk::Stat)>,
    after: &BTreeMap<String, (Vec<u8>, zk::Stat)>,
) -> Result<()> {
    for (path, (data, stat)) in before {
        let (data_after, stat_after) = after
            .get(path)
            .with_context(|| format!("{path} lost in the restart"))?;
        ensure!(
            data_after == data,
            "{path}: data {data:?} became {data_after:?}"
        );
        ensure!(
            stat_after == stat,
            "{path}: stat {stat:?} became {stat_after:?}"
        );
    }
    let extra: Vec<&String> = after
        .keys()
        .filter(|path| !before.contains_key(*path))
        .collect();
    ensure!(extra.is_empty(), "nodes appeared in the restart: {extra:?}");
    Ok(())
}

async fn restart_keeps_nodes_and_sessions(server: &mut Server) -> Result<()> {
    let owner = connect_with(
        server,
        zk::Client::connector()
            .with_session_timeout(LONG_SESSION)
            .with_detached(),
    )
    .await?;
    owner.create("/durable", b"root", &PERSISTENT).await?;
    for i in 0..PERSISTENT_NODES {
        let path = format!("/durable/node-{i:03}");
        owner
            .create(&path, format!("data {i}").as_bytes(), &PERSISTENT)
            .await?;
        // Some nodes get later versions, so mzxid and version differ from creation.
        if i % 4 == 0 {
            owner
                .set_data(&path, format!("data {i} v1").as_bytes(), Some(0))
                .await?;
        }
        if i % 10 == 0 {
            owner
                .create(&format!("{path}/child"), b"", &PERSISTENT)
                .await?;
        }
    }
    owner.create("/durable/deleted", b"", &PERSISTENT).await?;
    owner.delete("/durable/deleted", None).await?;
    for i in 0..EPHEMERAL_NODES {
        owner
            .create(&format!("/durable/ephemeral-{i}"), b"mine", &EPHEMERAL)
            .await?;
    }
    let session_id = owner.session_id();
    let before = snapshot(&owner, "/durable").await?;
    let last_zxid = before
        .values()
        .map(|(_, stat)| stat.mzxid.max(stat.pzxid))
        .max()
        .unwrap_or(0);
    let session = owner.into_session();

    for round in 1..=2 {
        server.kill9()?;
        server
            .restart()
            .await
            .with_context(|| format!("restart #{round}"))?;
        let observer = connect(server).await?;
        let after = snapshot(&observer, "/durable").await?;
        ensure_same(&before, &after).with_context(|| format!("after restart #{round}"))?;
        for i in 0..EPHEMERAL_NODES {
            let (_, stat) = &after[&format!("/durable/ephemeral-{i}")];
            ensure!(
                stat.ephemeral_owner == session_id.0,
                "ephemeral owner {:#x}",
                stat.ephemeral_owner
            );
        }
    }

    // New writes get zxids above everything written before the crashes.
    let observer = connect(server).await?;
    let (fresh, _) = observer.create("/after-restart", b"", &PERSISTENT).await?;
    ensure!(
        fresh.czxid > last_zxid,
        "zxid went backwards: {:#x} after {last_zxid:#x}",
        fresh.czxid
    );

    let resumed = connect_with(
        server,
        zk::Client::connector()
            .with_session_timeout(LONG_SESSION)
            .with_session(session),
    )
    .await?;
    ensure!(
        resumed.session_id() == session_id,
        "resumed {} instead of {session_id}",
        resumed.session_id()
    );
    let (data, stat) = resumed.get_data("/durable/ephemeral-0").await?;
    ensure!(
        data == b"mine" && stat.ephemeral_owner == session_id.0,
        "ephemeral seen by its resumed owner: {stat:?}"
    );

    let (_, deleted) = observer
        .check_and_watch_stat("/durable/ephemeral-0")
        .await?;
    drop(resumed);
    let event = next_event("ephemeral of the resumed session to go", deleted.changed()).await?;
    ensure!(
        event.event_type == zk::EventType::NodeDeleted,
        "observer got {event:?}"
    );
    let children = observer.list_children("/durable").await?;
    ensure!(
        children
            .iter()
            .all(|child| !child.starts_with("ephemeral-")),
        "ephemerals survived closeSession: {children:?}"
    );
    Ok(())
}

target_tests!(restart_keeps_nodes_and_sessions);
