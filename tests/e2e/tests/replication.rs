//! A replicated ensemble end to end (DESIGN.md §1, Replication, Sessions, Membership): real
//! `baton-ensemble` processes on loopback, real clients, members killed with SIGKILL.
//!
//! Run: `cargo nextest run -p baton-tests --test replication` (after `cargo build -p
//! baton-ensemble`). Measurements are printed (`--no-capture` shows them); nothing is timed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use baton_tests::cluster::write_load::{SequentialWriters, children_with_data};
use baton_tests::cluster::{Cluster, run_cluster_case};
use baton_tests::command::run;
use baton_tests::{EPHEMERAL, PERSISTENT, next_event};
use tokio::time::Instant;
use zookeeper_client as zk;

/// Bound on a write that must not succeed (no quorum), and on a read without a quorum.
const NO_QUORUM_WAIT: Duration = Duration::from_secs(8);
/// Bound on the writers reaching a number of acks, before and after a failover.
const LOAD_DEADLINE: Duration = Duration::from_secs(90);
/// The longest session timeout members grant; a session must outlive restarting everything.
const LONG_SESSION: Duration = Duration::from_secs(40);
/// Debian's Python, which has kazoo installed.
const PYTHON: &str = "/usr/bin/python3";
const SCRIPT_DEADLINE: Duration = Duration::from_secs(120);

async fn three_members_case(cluster: &mut Cluster) -> Result<()> {
    let leader = cluster.leader().await?;
    let statuses = cluster.statuses().await?;
    let roles: Vec<(u64, &str)> = statuses.values().map(|s| (s.id, s.role.as_str())).collect();
    ensure!(
        roles.iter().filter(|(_, role)| *role == "leader").count() == 1
            && roles.iter().filter(|(_, role)| *role == "follower").count() == 2,
        "roles {roles:?}"
    );
    let first = statuses
        .get(&leader)
        .with_context(|| format!("leader {leader} did not answer"))?;
    ensure!(!first.cluster_id.is_empty(), "empty cluster id: {first}");
    for status in statuses.values() {
        ensure!(status.term == first.term, "terms differ: {statuses:?}");
        ensure!(
            status.cluster_id == first.cluster_id,
            "cluster ids differ: {statuses:?}"
        );
        ensure!(
            status.voters() == [1, 2, 3] && status.learners.is_empty(),
            "membership: {status}"
        );
    }
    cluster.check_member_lists(&[1, 2, 3]).await?;
    println!("leader {leader}, term {}", first.term);

    let followers: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    let via_leader = cluster.connect_to(leader).await?;
    let (created, _) = via_leader.create("/replicated", b"v1", &PERSISTENT).await?;
    for &id in &followers {
        let (data, stat) = cluster.read_synced(id, "/replicated").await?;
        ensure!(
            data == b"v1" && stat == created,
            "member {id} has {data:?} {stat:?} after sync, the leader created {created:?}"
        );
    }

    // A follower's client reads its own writes at once: the follower answers a write only after
    // it has applied it.
    let on_follower = cluster.connect_to(followers[0]).await?;
    let (mine, _) = on_follower
        .create("/from-follower", b"f1", &PERSISTENT)
        .await?;
    let (data, stat) = on_follower.get_data("/from-follower").await?;
    ensure!(
        data == b"f1" && stat == mine,
        "own create read back as {data:?} {stat:?}"
    );
    let updated = on_follower
        .set_data("/from-follower", b"f2", Some(0))
        .await?;
    let (data, stat) = on_follower.get_data("/from-follower").await?;
    ensure!(
        data == b"f2" && stat == updated && stat.version == 1,
        "own update read back as {data:?} {stat:?}"
    );
    let children = on_follower.list_children("/").await?;
    ensure!(
        children.contains(&"from-follower".to_owned()),
        "own create missing from the root's children {children:?}"
    );
    let (data, _) = cluster.read_synced(leader, "/from-follower").await?;
    ensure!(
        data == b"f2",
        "the leader has {data:?} for a follower's write"
    );

    // Another session's write through the leader is visible on the follower after sync.
    let by_other = via_leader.set_data("/replicated", b"v2", Some(0)).await?;
    on_follower.sync("/replicated").await?;
    let (data, stat) = on_follower.get_data("/replicated").await?;
    ensure!(
        data == b"v2" && stat == by_other,
        "after sync the follower has {data:?} {stat:?}, the leader wrote {by_other:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_elect_one_leader_and_replicate() {
    run_cluster_case(3, three_members_case).await;
}

async fn kill_leader_under_write_load_case(cluster: &mut Cluster) -> Result<()> {
    const CLIENTS_PER_MEMBER: usize = 2;
    const ACKS_PER_PHASE: usize = 20;
    let leader = cluster.leader().await?;
    let term = cluster.status(leader).await?.term;
    cluster
        .connect()
        .await?
        .create("/load", b"", &PERSISTENT)
        .await?;
    let mut clients = Vec::new();
    let mut placement = Vec::new();
    for id in cluster.ids() {
        for _ in 0..CLIENTS_PER_MEMBER {
            clients.push(cluster.connect_on(id).await?);
            placement.push(id);
        }
    }
    println!("leader {leader}; writer i starts on member {placement:?}[i]");

    let started = Instant::now();
    let writers = SequentialWriters::start(clients, "/load/seq-");
    writers
        .wait_for_acks(ACKS_PER_PHASE, started, LOAD_DEADLINE)
        .await
        .context("before the failover")?;
    let killed_at = Instant::now();
    cluster.kill9(leader)?;
    // Every writer carries on, including those whose member is gone.
    let carried_on = writers
        .wait_for_acks(ACKS_PER_PHASE, killed_at, LOAD_DEADLINE)
        .await
        .context("after killing the leader");
    let log = writers.stop().await?;
    carried_on?;
    let new_leader = cluster.wait_for_leader().await?;
    let new_term = cluster.status(new_leader).await?.term;
    ensure!(
        new_leader != leader,
        "the killed member {leader} still leads"
    );
    ensure!(
        new_term > term,
        "new leader {new_leader} in term {new_term}, was {term}"
    );

    let failover = log
        .acks
        .iter()
        .filter(|ack| ack.issued >= killed_at)
        .map(|ack| ack.acked - killed_at)
        .min()
        .context("no create acknowledged after the kill")?;
    let mut errors: BTreeMap<&str, usize> = BTreeMap::new();
    for failure in log.failures.iter().filter(|f| f.at >= killed_at) {
        *errors.entry(failure.error.as_str()).or_default() += 1;
    }
    println!(
        "MEASURED failover (leader {leader} SIGKILLed -> first create issued after it acknowledged): \
         {failover:?}; new leader {new_leader} in term {new_term}"
    );
    println!(
        "{} creates acknowledged, {} failed; failures after the kill: {errors:?}",
        log.acks.len(),
        log.failures.len()
    );

    let mut replicas = Vec::new();
    for id in cluster.running_ids() {
        let client = cluster.connect_to(id).await?;
        client.sync("/load").await?;
        let nodes = children_with_data(&client, "/load").await?;
        let unacked = log
            .check_against("/load", &nodes)
            .with_context(|| format!("on member {id}"))?;
        println!(
            "member {id}: {} nodes, {unacked} applied without an ack",
            nodes.len()
        );
        replicas.push((id, nodes));
    }
    if let [(a, first), (b, second)] = replicas.as_slice() {
        ensure!(first == second, "members {a} and {b} differ after sync");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_leader_under_write_load() {
    run_cluster_case(3, kill_leader_under_write_load_case).await;
}

async fn five_members_case(cluster: &mut Cluster) -> Result<()> {
    let leader = cluster.leader().await?;
    let client = cluster.connect().await?;
    client.create("/five", b"", &PERSISTENT).await?;
    for i in 0..10 {
        client
            .create(&format!("/five/before-{i}"), b"b", &PERSISTENT)
            .await?;
    }
    let follower = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .context("no follower")?;
    let killed_at = Instant::now();
    cluster.kill9(leader)?;
    cluster.kill9(follower)?;
    let new_leader = cluster.wait_for_leader().await?;
    println!(
        "killed leader {leader} and follower {follower}; member {new_leader} leads after {:?}",
        killed_at.elapsed()
    );
    let writer = cluster.connect().await?;
    for i in 0..10 {
        writer
            .create(&format!("/five/after-{i}"), b"a", &PERSISTENT)
            .await
            .with_context(|| format!("write {i} with two of five members down"))?;
    }
    for id in cluster.running_ids() {
        let reader = cluster.connect_to(id).await?;
        reader.sync("/five").await?;
        let children = reader.list_children("/five").await?;
        ensure!(children.len() == 20, "member {id} has {children:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_members_survive_two_failures() {
    run_cluster_case(5, five_members_case).await;
}

async fn majority_loss_case(cluster: &mut Cluster) -> Result<()> {
    // The survivor is the leader: a deposed leader must not acknowledge anything alone.
    let survivor = cluster.leader().await?;
    let writer = cluster.connect_to(survivor).await?;
    let reader = cluster.connect_to(survivor).await?;
    writer.create("/quorum", b"committed", &PERSISTENT).await?;
    for i in 0..5 {
        writer
            .create(&format!("/quorum/acked-{i}"), b"", &PERSISTENT)
            .await?;
    }
    let others: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != survivor)
        .collect();
    for &id in &others {
        cluster.kill9(id)?;
    }

    let attempt = tokio::time::timeout(
        NO_QUORUM_WAIT,
        writer.create("/quorum/without-quorum", b"", &PERSISTENT),
    )
    .await;
    match &attempt {
        Ok(Ok(created)) => bail!("a write was acknowledged by one member of three: {created:?}"),
        Ok(Err(err)) => println!("write without a quorum failed: {err}"),
        Err(_) => println!("write without a quorum unanswered after {NO_QUORUM_WAIT:?}"),
    }
    // The survivor closes its clients' connections a third of their session timeout after it
    // lost the quorum (DESIGN §1 Sessions), as ZooKeeper's servers stop serving: a read is
    // answered with the committed data before that; after, the client is told the connection
    // was lost, and its reconnect to this member waits for a leader. Never other data.
    match tokio::time::timeout(NO_QUORUM_WAIT, reader.get_data("/quorum")).await {
        Ok(Ok(read)) => ensure!(read.0 == b"committed", "read {:?}", read.0),
        Ok(Err(zk::Error::ConnectionLoss)) => {
            println!("read without a quorum: told the connection was lost")
        }
        Ok(Err(err)) => bail!("a read of committed data without a quorum: {err}"),
        Err(_) => println!(
            "read without a quorum: the connection was closed and the reconnect waits for a \
             leader ({NO_QUORUM_WAIT:?})"
        ),
    }

    cluster.restart_all(&others).await?;
    let leader = cluster.wait_for_leader().await?;
    let fresh = cluster.connect().await?;
    fresh
        .create("/quorum/after-recovery", b"", &PERSISTENT)
        .await
        .context("a write after the quorum came back")?;
    for id in cluster.running_ids() {
        let client = cluster.connect_to(id).await?;
        client.sync("/quorum").await?;
        let children = client.list_children("/quorum").await?;
        for expected in (0..5)
            .map(|i| format!("acked-{i}"))
            .chain(["after-recovery".to_owned()])
        {
            ensure!(
                children.contains(&expected),
                "member {id} lost {expected}: {children:?}"
            );
        }
        println!(
            "member {id} (leader {leader}): unacknowledged write present: {}",
            children.contains(&"without-quorum".to_owned())
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_loss_stops_writes_then_recovers() {
    run_cluster_case(3, majority_loss_case).await;
}

async fn restart_every_member_case(cluster: &mut Cluster) -> Result<()> {
    let owner = cluster
        .connect_all_with(
            zk::Client::connector()
                .with_session_timeout(LONG_SESSION)
                .with_detached(),
        )
        .await?;
    owner.create("/durable", b"root", &PERSISTENT).await?;
    let mut expected = BTreeMap::new();
    for i in 0..20 {
        let name = format!("node-{i:02}");
        let data = format!("data {i}").into_bytes();
        owner
            .create(&format!("/durable/{name}"), &data, &PERSISTENT)
            .await?;
        expected.insert(name, data);
    }
    owner.create("/durable/owned", b"mine", &EPHEMERAL).await?;
    expected.insert("owned".to_owned(), b"mine".to_vec());
    let session_id = owner.session_id();
    let session = owner.into_session();

    let ids = cluster.ids();
    let killed_at = Instant::now();
    for &id in &ids {
        cluster.kill9(id)?;
    }
    cluster.restart_all(&ids).await?;
    let leader = cluster.wait_for_leader().await?;
    println!(
        "MEASURED all {} members SIGKILLed and restarted: ready with leader {leader} after {:?}",
        ids.len(),
        killed_at.elapsed()
    );

    for &id in &ids {
        let client = cluster.connect_to(id).await?;
        client.sync("/durable").await?;
        let nodes = children_with_data(&client, "/durable").await?;
        ensure!(
            nodes == expected,
            "member {id} has {nodes:?} after the restart"
        );
        let (_, stat) = client.get_data("/durable/owned").await?;
        ensure!(
            stat.ephemeral_owner == session_id.0,
            "member {id}: ephemeral owner {:#x}, session {session_id}",
            stat.ephemeral_owner
        );
    }

    let resumed = cluster
        .connect_all_with(
            zk::Client::connector()
                .with_session_timeout(LONG_SESSION)
                .with_session(session),
        )
        .await
        .context("resume the session after restarting every member")?;
    ensure!(
        resumed.session_id() == session_id,
        "resumed {}",
        resumed.session_id()
    );
    let (data, stat) = resumed.get_data("/durable/owned").await?;
    ensure!(
        data == b"mine" && stat.ephemeral_owner == session_id.0,
        "{stat:?}"
    );
    resumed.create("/durable/after", b"", &PERSISTENT).await?;

    let observer = cluster.connect().await?;
    let (_, deleted) = observer.check_and_watch_stat("/durable/owned").await?;
    drop(resumed);
    let event = next_event("the resumed session's ephemeral to go", deleted.changed()).await?;
    ensure!(
        event.event_type == zk::EventType::NodeDeleted,
        "observer got {event:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_every_member() {
    run_cluster_case(3, restart_every_member_case).await;
}

async fn kazoo_case(cluster: &mut Cluster) -> Result<()> {
    for script in ["lock", "watches"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("python")
            .join(format!("{script}.py"));
        let mut command = Command::new(PYTHON);
        command.arg(&path).arg(cluster.connect_string());
        let finished = run(command, SCRIPT_DEADLINE).await?;
        ensure!(
            finished.success(),
            "{script}.py against {}\n{finished}",
            cluster.connect_string()
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_against_three_members() {
    run_cluster_case(3, kazoo_case).await;
}

/// Every member starts with the same Raft state, so this also catches ReadIndex requests of
/// different members that the leader cannot tell apart.
async fn concurrent_syncs_case(cluster: &mut Cluster) -> Result<()> {
    const SESSIONS_PER_MEMBER: usize = 10;
    let ids = cluster.ids();
    let writer = cluster.connect().await?;
    writer.create("/synced", b"v0", &PERSISTENT).await?;
    let mut sessions = Vec::new();
    for &id in &ids {
        for _ in 0..SESSIONS_PER_MEMBER {
            sessions.push((id, cluster.connect_to(id).await?));
        }
    }
    let written = writer.set_data("/synced", b"v1", None).await?;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (id, client) in sessions {
        tasks.spawn(async move {
            let answered = tokio::time::timeout(NO_QUORUM_WAIT, async {
                client.sync("/synced").await?;
                client.get_data("/synced").await
            })
            .await;
            (id, answered)
        });
    }
    let mut failed = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined.context("a sync task panicked")? {
            (_, Ok(Ok((data, stat)))) => ensure!(
                data == b"v1" && stat == written,
                "read {data:?} {stat:?} after sync, {written:?} was written before it"
            ),
            (id, Ok(Err(err))) => failed.push(format!("member {id}: {err}")),
            (id, Err(_)) => {
                failed.push(format!("member {id}: unanswered after {NO_QUORUM_WAIT:?}"))
            }
        }
    }
    ensure!(
        failed.is_empty(),
        "{} of {} concurrent syncs failed: {failed:?}",
        failed.len(),
        ids.len() * SESSIONS_PER_MEMBER
    );
    println!(
        "{} concurrent sync+get across {} members answered in {:?}",
        ids.len() * SESSIONS_PER_MEMBER,
        ids.len(),
        started.elapsed()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_syncs_on_every_member_are_answered() {
    run_cluster_case(3, concurrent_syncs_case).await;
}
