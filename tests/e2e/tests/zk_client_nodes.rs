//! Znodes through the `zookeeper-client` crate: create modes, sequential names, versions and
//! their errors, Stat fields, children, multi and multiRead, size limits.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use baton_tests::{EPHEMERAL, PERSISTENT, Server, connect, target_tests};
use zookeeper_client as zk;

const PERSISTENT_SEQUENTIAL: zk::CreateOptions<'static> =
    zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
const EPHEMERAL_SEQUENTIAL: zk::CreateOptions<'static> =
    zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
const CONTAINER: zk::CreateOptions<'static> =
    zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());

/// Largest frame ZooKeeper reads from a client: `jute.maxbuffer`, 0xfffff bytes.
const MAX_FRAME: usize = 0xfffff;

/// Asserts `result` failed with exactly `expected`.
fn expect_err<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, zk::Error>,
    expected: zk::Error,
) -> Result<()> {
    match result {
        Err(err) if err == expected => Ok(()),
        other => bail!("{what}: expected Err({expected:?}), got {other:?}"),
    }
}

async fn create_modes_set_owner_and_flags(server: &mut Server) -> Result<()> {
    let client = connect(server).await?;
    let session_id = client.session_id().0;

    let (persistent, seq) = client
        .create("/modes-persistent", b"p", &PERSISTENT)
        .await?;
    ensure!(
        persistent.ephemeral_owner == 0,
        "persistent node has owner {:#x}",
        persistent.ephemeral_owner
    );
    ensure!(
        seq.into_i64() == -1,
        "a non-sequential create reported sequence {seq}"
    );

    let (ephemeral, _) = client.create("/modes-ephemeral", b"e", &EPHEMERAL).await?;
    ensure!(
        ephemeral.ephemeral_owner == session_id,
        "ephemeral owner {:#x} is not the session {session_id:#x}",
        ephemeral.ephemeral_owner
    );

    let (container, _) = client.create("/modes-container", b"", &CONTAINER).await?;
    ensure!(
        container.ephemeral_owner == 0,
        "container has owner {:#x}",
        container.ephemeral_owner
    );
    client
        .create("/modes-container/child", b"", &PERSISTENT)
        .await?;
    ensure!(
        client
            .check_stat("/modes-container")
            .await?
            .is_some_and(|stat| stat.num_children == 1)
    );

    let ttl = PERSISTENT.clone().with_ttl(Duration::from_secs(3600));
    let (ttl_stat, _) = client.create("/modes-ttl", b"t", &ttl).await?;
    // ZooKeeper keeps the TTL in the owner field internally but shows clients 0.
    ensure!(
        ttl_stat.ephemeral_owner == 0,
        "TTL node shows owner {:#x}",
        ttl_stat.ephemeral_owner
    );
    let (data, read) = client.get_data("/modes-ttl").await?;
    ensure!(
        data == b"t" && read == ttl_stat,
        "TTL node read back {data:?} {read:?}"
    );
    let (_, read) = client.get_data("/modes-container").await?;
    ensure!(
        read.ephemeral_owner == 0,
        "container shows owner {:#x}",
        read.ephemeral_owner
    );
    Ok(())
}

async fn sequential_names_count_creates(server: &mut Server) -> Result<()> {
    let client = connect(server).await?;
    client.create("/seq", b"", &PERSISTENT).await?;

    let (_, first) = client
        .create("/seq/job-", b"", &PERSISTENT_SEQUENTIAL)
        .await?;
    ensure!(
        first.to_string() == "0000000000",
        "first sequence under a new parent: {first}"
    );
    let (_, second) = client
        .create("/seq/job-", b"", &EPHEMERAL_SEQUENTIAL)
        .await?;
    ensure!(
        second.to_string() == "0000000001",
        "second sequence: {second}"
    );

    // The counter counts every child ever created under the parent (plain creates too), but
    // not deletes, although deletes do move the cversion clients see.
    client.create("/seq/plain", b"", &PERSISTENT).await?;
    client.delete("/seq/plain", None).await?;
    let parent = client.check_stat("/seq").await?.context("/seq vanished")?;
    ensure!(
        parent.cversion == 4,
        "cversion after 3 creates and a delete: {}",
        parent.cversion
    );
    let (_, after_churn) = client
        .create("/seq/job-", b"", &PERSISTENT_SEQUENTIAL)
        .await?;
    ensure!(
        after_churn.to_string() == "0000000003",
        "sequence after a create and a delete: {after_churn}"
    );

    // A sequential name may end in "/" (the child is named by its number alone).
    let (_, bare) = client.create("/seq/", b"", &PERSISTENT_SEQUENTIAL).await?;
    ensure!(
        bare.to_string() == "0000000004",
        "bare sequential name: {bare}"
    );

    let mut children = client.list_children("/seq").await?;
    children.sort();
    let expected = [
        "0000000004",
        "job-0000000000",
        "job-0000000001",
        "job-0000000003",
    ];
    ensure!(children == expected, "children of /seq: {children:?}");

    // The counter belongs to the parent: a re-created parent starts again from zero.
    for child in children {
        client.delete(&format!("/seq/{child}"), None).await?;
    }
    client.delete("/seq", None).await?;
    client.create("/seq", b"", &PERSISTENT).await?;
    let (_, restarted) = client
        .create("/seq/job-", b"", &PERSISTENT_SEQUENTIAL)
        .await?;
    ensure!(
        restarted.to_string() == "0000000000",
        "sequence under a re-created parent: {restarted}"
    );
    Ok(())
}

async fn versions_and_errors_match(server: &mut Server) -> Result<()> {
    let client = connect(server).await?;
    let (created, _) = client.create("/ver", b"v0", &PERSISTENT).await?;
    ensure!(created.version == 0, "new node version {}", created.version);

    expect_err(
        "create an existing node",
        client.create("/ver", b"", &PERSISTENT).await,
        zk::Error::NodeExists,
    )?;
    expect_err(
        "create under a missing parent",
        client.create("/nope/x", b"", &PERSISTENT).await,
        zk::Error::NoNode,
    )?;
    expect_err(
        "get a missing node",
        client.get_data("/nope").await,
        zk::Error::NoNode,
    )?;
    expect_err(
        "set a missing node",
        client.set_data("/nope", b"", None).await,
        zk::Error::NoNode,
    )?;
    expect_err(
        "delete a missing node",
        client.delete("/nope", None).await,
        zk::Error::NoNode,
    )?;
    // NoNode wins over a version mismatch.
    expect_err(
        "delete a missing node, bad version",
        client.delete("/nope", Some(7)).await,
        zk::Error::NoNode,
    )?;

    let set = client.set_data("/ver", b"v1", Some(0)).await?;
    ensure!(set.version == 1, "version after one set: {}", set.version);
    expect_err(
        "set with a stale version",
        client.set_data("/ver", b"x", Some(0)).await,
        zk::Error::BadVersion,
    )?;
    let unconditional = client.set_data("/ver", b"v2", None).await?;
    ensure!(
        unconditional.version == 2,
        "version after an unconditional set: {}",
        unconditional.version
    );
    let (data, stat) = client.get_data("/ver").await?;
    ensure!(
        data == b"v2" && stat.version == 2,
        "read back {data:?} at version {}",
        stat.version
    );

    client.create("/ver/child", b"", &PERSISTENT).await?;
    expect_err(
        "delete a parent with children",
        client.delete("/ver", None).await,
        zk::Error::NotEmpty,
    )?;
    // BadVersion wins over NotEmpty: the version is checked first.
    expect_err(
        "delete a parent, bad version",
        client.delete("/ver", Some(0)).await,
        zk::Error::BadVersion,
    )?;
    expect_err(
        "delete with a stale version",
        client.delete("/ver/child", Some(3)).await,
        zk::Error::BadVersion,
    )?;
    client.delete("/ver/child", Some(0)).await?;
    client.delete("/ver", Some(2)).await?;
    ensure!(
        client.check_stat("/ver").await?.is_none(),
        "/ver still exists after delete"
    );

    client.create("/eph", b"", &EPHEMERAL).await?;
    expect_err(
        "create under an ephemeral",
        client.create("/eph/child", b"", &PERSISTENT).await,
        zk::Error::NoChildrenForEphemerals,
    )?;
    Ok(())
}

async fn stat_fields_follow_changes(server: &mut Server) -> Result<()> {
    let client = connect(server).await?;
    let (created, _) = client.create("/stat", b"hello", &PERSISTENT).await?;
    ensure!(created.czxid > 0, "czxid {}", created.czxid);
    ensure!(
        created.mzxid == created.czxid && created.pzxid == created.czxid,
        "new node zxids: {created:?}"
    );
    ensure!(
        created.ctime == created.mtime && created.ctime > 0,
        "new node times: {created:?}"
    );
    ensure!(
        (created.version, created.cversion, created.aversion) == (0, 0, 0),
        "new node versions: {created:?}"
    );
    ensure!(
        (created.data_length, created.num_children) == (5, 0),
        "new node sizes: {created:?}"
    );
    let (_, read) = client.get_data("/stat").await?;
    ensure!(
        read == created,
        "create returned {created:?} but a read returned {read:?}"
    );

    let set = client.set_data("/stat", b"hi", None).await?;
    ensure!(
        set.czxid == created.czxid && set.mzxid > created.mzxid,
        "zxids after set: {set:?}"
    );
    ensure!(
        set.pzxid == created.pzxid,
        "a data change moved pzxid: {set:?}"
    );
    ensure!(
        set.mtime >= set.ctime && set.ctime == created.ctime,
        "times after set: {set:?}"
    );
    ensure!(
        (set.version, set.data_length) == (1, 2),
        "after set: {set:?}"
    );

    let (child, _) = client.create("/stat/child", b"", &PERSISTENT).await?;
    ensure!(
        child.czxid > set.mzxid,
        "zxids must rise: child {} after set {}",
        child.czxid,
        set.mzxid
    );
    let parent = client
        .check_stat("/stat")
        .await?
        .context("/stat vanished")?;
    ensure!(
        parent.pzxid == child.czxid,
        "parent pzxid {} != child czxid {}",
        parent.pzxid,
        child.czxid
    );
    ensure!(
        (parent.cversion, parent.num_children) == (1, 1),
        "parent after a child create: {parent:?}"
    );
    ensure!(
        parent.mzxid == set.mzxid && parent.version == 1,
        "a child create changed parent data stat: {parent:?}"
    );

    client.delete("/stat/child", None).await?;
    let parent = client
        .check_stat("/stat")
        .await?
        .context("/stat vanished")?;
    ensure!(
        parent.pzxid > child.czxid,
        "pzxid did not move on child delete: {parent:?}"
    );
    ensure!(
        (parent.cversion, parent.num_children) == (2, 0),
        "parent after a child delete: {parent:?}"
    );

    let (empty, _) = client.create("/stat-empty", b"", &PERSISTENT).await?;
    ensure!(
        empty.data_length == 0,
        "empty data length {}",
        empty.data_length
    );
    Ok(())
}

async fn children_listing_and_counts(server: &mut Server) -> Result<()> {
    let client = connect(server).await?;
    client.create("/kids", b"", &PERSISTENT).await?;
    for name in ["b", "a", "c"] {
        client
            .create(&format!("/kids/{name}"), b"", &PERSISTENT)
            .await?;
    }
    client.create("/kids/a/deep", b"", &PERSISTENT).await?;
    client.create("/kids/e1", b"", &EPHEMERAL).await?;
    client.create("/kids/a/e2", b"", &EPHEMERAL).await?;

    let mut names = client.list_children("/kids").await?;
    names.sort();
    ensure!(names == ["a", "b", "c", "e1"], "list_children: {names:?}");
    let (mut names2, stat) = client.get_children("/kids").await?;
    names2.sort();
    ensure!(
        names2 == names && stat.num_children == 4,
        "get_children: {names2:?} {stat:?}"
    );
    ensure!(
        client.list_children("/kids/b").await?.is_empty(),
        "leaf has children"
    );
    expect_err(
        "children of a missing node",
        client.list_children("/nope").await,
        zk::Error::NoNode,
    )?;

    // getAllChildrenNumber counts every descendant, not only direct children.
    let descendants = client.count_descendants_number("/kids").await?;
    ensure!(descendants == 6, "descendants of /kids: {descendants}");

    // getEphemerals lists this session's ephemerals whose path starts with the prefix.
    let mut ephemerals = client.list_ephemerals("/kids").await?;
    ephemerals.sort();
    ensure!(
        ephemerals == ["/kids/a/e2", "/kids/e1"],
        "ephemerals under /kids: {ephemerals:?}"
    );
    let other = connect(server).await?;
    ensure!(
        other.list_ephemerals("/").await?.is_empty(),
        "another session sees foreign ephemerals"
    );
    Ok(())
}

async fn multi_is_atomic(server: &mut Server) -> Result<()> {
    let client = connect(server).await?;
    client.create("/multi", b"old", &PERSISTENT).await?;
    client.create("/multi/gone", b"", &PERSISTENT).await?;

    let mut writer = client.new_multi_writer();
    writer.add_create("/multi/new", b"n", &PERSISTENT)?;
    writer.add_set_data("/multi", b"new", Some(0))?;
    writer.add_check_version("/multi", 1)?;
    writer.add_delete("/multi/gone", None)?;
    let results = writer.commit().await?;
    ensure!(results.len() == 4, "multi results: {results:?}");
    match &results[0] {
        zk::MultiWriteResult::Create { path, .. } if path == "/multi/new" => {}
        other => bail!("first result {other:?}"),
    }
    match &results[1] {
        zk::MultiWriteResult::SetData { stat } if stat.version == 1 => {}
        other => bail!("second result {other:?}"),
    }
    ensure!(
        results[2] == zk::MultiWriteResult::Check && results[3] == zk::MultiWriteResult::Delete
    );

    // The second op fails: the first must be rolled back, the third never applied.
    let mut writer = client.new_multi_writer();
    writer.add_create("/multi/never", b"", &PERSISTENT)?;
    writer.add_check_version("/multi", 99)?;
    writer.add_set_data("/multi", b"never", None)?;
    match writer.commit().await {
        Err(zk::MultiWriteError::OperationFailed {
            index: 1,
            source: zk::Error::BadVersion,
        }) => {}
        other => bail!("failing multi returned {other:?}"),
    }
    ensure!(
        client.check_stat("/multi/never").await?.is_none(),
        "failed multi left /multi/never behind"
    );
    let (data, stat) = client.get_data("/multi").await?;
    ensure!(
        data == b"new" && stat.version == 1,
        "failed multi changed /multi: {data:?} {stat:?}"
    );

    let mut writer = client.new_multi_writer();
    writer.add_create("/multi/dup", b"", &PERSISTENT)?;
    writer.add_create("/multi/dup", b"", &PERSISTENT)?;
    match writer.commit().await {
        Err(zk::MultiWriteError::OperationFailed {
            index: 1,
            source: zk::Error::NodeExists,
        }) => {}
        other => bail!("multi creating a node twice returned {other:?}"),
    }
    ensure!(
        client.check_stat("/multi/dup").await?.is_none(),
        "failed multi left /multi/dup behind"
    );

    let mut reader = client.new_multi_reader();
    reader.add_get_data("/multi")?;
    reader.add_get_children("/multi")?;
    reader.add_get_data("/multi/missing")?;
    let reads = reader.commit().await?;
    match reads.as_slice() {
        [
            zk::MultiReadResult::Data { data, stat },
            zk::MultiReadResult::Children { children },
            zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            },
        ] if data == b"new" && stat.version == 1 && children == &["new"] => {}
        other => bail!("multiRead returned {other:?}"),
    }
    Ok(())
}

async fn data_size_limit_is_jute_maxbuffer(server: &mut Server) -> Result<()> {
    let client = connect(server).await?;
    let bystander = connect(server).await?;
    let path = "/big";
    client.create(path, b"", &PERSISTENT).await?;

    // setData frame: header (8) + path (4 + len) + data (4 + len) + version (4).
    let largest = MAX_FRAME - 20 - path.len();
    let data = vec![b'x'; largest];
    client
        .set_data(path, &data, None)
        .await
        .context("set data at the size limit")?;
    let (read, stat) = bystander.get_data(path).await?;
    ensure!(
        read == data,
        "read back {} bytes instead of {largest}",
        read.len()
    );
    ensure!(
        stat.data_length as usize == largest,
        "data length {}",
        stat.data_length
    );

    let too_big = vec![b'y'; largest + 1];
    match client.set_data(path, &too_big, None).await {
        Err(_) => {}
        Ok(stat) => bail!("a frame one byte over the limit was accepted: {stat:?}"),
    }
    let over_mib = vec![b'z'; 1024 * 1024 + 1];
    let fresh = connect(server).await?;
    ensure!(
        fresh.set_data(path, &over_mib, None).await.is_err(),
        "data over 1 MiB was accepted"
    );

    // Other sessions do not notice, and the node kept its last good value.
    let (read, _) = bystander.get_data(path).await?;
    ensure!(read == data, "the node changed after rejected writes");
    bystander.create("/big-after", b"ok", &PERSISTENT).await?;
    ensure!(server.is_running(), "server died");
    Ok(())
}

target_tests!(
    create_modes_set_owner_and_flags,
    sequential_names_count_creates,
    versions_and_errors_match,
    stat_fields_follow_changes,
    children_listing_and_counts,
    multi_is_atomic,
    data_size_limit_is_jute_maxbuffer,
);
