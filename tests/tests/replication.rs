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
use baton_tests::cluster::{Cluster, Method, Status, Statuses, run_cluster_case};
use baton_tests::command::run;
use baton_tests::{EPHEMERAL, PERSISTENT, next_event};
use serde_json::{Value, json};
use tokio::time::Instant;
use zookeeper_client as zk;

/// Bound on a write that must not succeed (no quorum), and on a read that must.
const NO_QUORUM_WAIT: Duration = Duration::from_secs(8);
/// Bound on the writers reaching a number of acks, before and after a failover.
const LOAD_DEADLINE: Duration = Duration::from_secs(90);
/// The longest session timeout members grant; a session must outlive restarting everything.
const LONG_SESSION: Duration = Duration::from_secs(40);
/// Debian's Python, which has kazoo installed.
const PYTHON: &str = "/usr/bin/python3";
const SCRIPT_DEADLINE: Duration = Duration::from_secs(120);

/// `data` of `path` as member `id` has it once it has caught up with the leader (`sync`).
async fn read_synced(cluster: &Cluster, id: u64, path: &str) -> Result<(Vec<u8>, zk::Stat)> {
    let client = cluster.connect_to(id).await?;
    client
        .sync(path)
        .await
        .with_context(|| format!("sync {path} on member {id}"))?;
    client
        .get_data(path)
        .await
        .with_context(|| format!("get {path} on member {id}"))
}

/// `GET /v1/members` of member `id`: (id, role, is leader, peer address) per member.
async fn members_of(cluster: &Cluster, id: u64) -> Result<Vec<(u64, String, bool, String)>> {
    let reply = cluster.admin(id, Method::Get, "/v1/members", None).await?;
    ensure!(reply.status == 200, "GET /v1/members on {id}: {reply}");
    let list = reply.body["members"]
        .as_array()
        .with_context(|| format!("no members array in {reply}"))?;
    list.iter()
        .map(|member| {
            Ok((
                member["id"].as_u64().context("member id")?,
                member["role"].as_str().context("member role")?.to_owned(),
                member["leader"].as_bool().context("member leader flag")?,
                member["peerAddr"]
                    .as_str()
                    .context("member peerAddr")?
                    .to_owned(),
            ))
        })
        .collect::<Result<Vec<_>>>()
        .with_context(|| format!("GET /v1/members on {id}: {reply}"))
}

/// Checks that every running member lists exactly `voters` as voting members with their peer
/// addresses, and exactly one of them as the leader.
async fn ensure_members(cluster: &mut Cluster, voters: &[u64]) -> Result<()> {
    for id in cluster.running_ids() {
        let listed = members_of(cluster, id).await?;
        let ids: Vec<u64> = listed.iter().map(|member| member.0).collect();
        ensure!(
            ids == voters,
            "member {id} lists {listed:?}, expected {voters:?}"
        );
        for (member, role, _, peer) in &listed {
            ensure!(role == "voter", "member {id} lists {member} as {role}");
            let expected = cluster.member(*member)?.peer_addr().to_string();
            ensure!(
                *peer == expected,
                "member {id} lists {member} at {peer}, not {expected}"
            );
        }
        let leaders = listed.iter().filter(|member| member.2).count();
        ensure!(
            leaders == 1,
            "member {id} names {leaders} leaders: {listed:?}"
        );
    }
    Ok(())
}

/// `/v1/status` of member `id`.
async fn status_of(cluster: &Cluster, id: u64) -> Result<Status> {
    cluster.member(id)?.status().await
}

/// The member whose status says it leads, if exactly one does.
fn sole_leader(statuses: &Statuses) -> Option<&Status> {
    let mut leaders = statuses.values().filter(|status| status.role == "leader");
    let leader = leaders.next()?;
    leaders.next().is_none().then_some(leader)
}

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
    ensure_members(cluster, &[1, 2, 3]).await?;
    println!("leader {leader}, term {}", first.term);

    let followers: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    let via_leader = cluster.connect_to(leader).await?;
    let (created, _) = via_leader.create("/replicated", b"v1", &PERSISTENT).await?;
    for &id in &followers {
        let (data, stat) = read_synced(cluster, id, "/replicated").await?;
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
    let (data, _) = read_synced(cluster, leader, "/from-follower").await?;
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
    let term = status_of(cluster, leader).await?.term;
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
    let new_term = status_of(cluster, new_leader).await?.term;
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
    let read = tokio::time::timeout(NO_QUORUM_WAIT, reader.get_data("/quorum"))
        .await
        .with_context(|| format!("a read of committed data unanswered after {NO_QUORUM_WAIT:?}"))?
        .context("a read of committed data without a quorum")?;
    ensure!(read.0 == b"committed", "read {:?}", read.0);

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

/// Waits until `id` is a voter on every running member and has applied what the leader has
/// committed; returns how long that took.
async fn wait_until_caught_up_voter(cluster: &mut Cluster, id: u64) -> Result<Duration> {
    let since = Instant::now();
    let voters = {
        let mut voters = cluster.ids();
        voters.sort_unstable();
        voters
    };
    cluster
        .wait_for(&format!("member {id} to catch up and vote"), |statuses| {
            let Some(leader) = sole_leader(statuses) else {
                return false;
            };
            statuses.len() == voters.len()
                && statuses.values().all(|status| status.voters() == voters)
                && statuses.get(&id).is_some_and(|new| {
                    new.applied_index >= leader.commit_index && new.role == "follower"
                })
        })
        .await?;
    Ok(since.elapsed())
}

async fn add_and_remove_case(cluster: &mut Cluster) -> Result<()> {
    let client = cluster.connect().await?;
    client.create("/grow", b"", &PERSISTENT).await?;
    for i in 0..50 {
        client
            .create(&format!("/grow/before-{i}"), &[7; 512], &PERSISTENT)
            .await?;
    }
    let leader = cluster.leader().await?;
    let cluster_id = status_of(cluster, leader).await?.cluster_id;

    for expected_id in [4, 5] {
        let id = cluster.add_member().await?;
        ensure!(
            id == expected_id,
            "added member {id}, expected {expected_id}"
        );
        let took = wait_until_caught_up_voter(cluster, id).await?;
        println!("MEASURED member {id} added: caught up and promoted to voter after {took:?}");
        let status = cluster.member(id)?.status().await?;
        ensure!(
            status.cluster_id == cluster_id,
            "member {id} is in cluster {}",
            status.cluster_id
        );
        let voters = cluster.ids();
        ensure_members(cluster, &voters).await?;
        client
            .create(&format!("/grow/with-{id}"), b"", &PERSISTENT)
            .await?;
        let newcomer = cluster.connect_to(id).await?;
        newcomer.sync("/grow").await?;
        let children = newcomer.list_children("/grow").await?;
        ensure!(
            children.len() == 50 + (id as usize - 3),
            "member {id} has {} children under /grow",
            children.len()
        );
    }

    let leader = cluster.leader().await?;
    let removed = cluster
        .ids()
        .into_iter()
        .find(|id| *id <= 3 && *id != leader)
        .context("no original follower")?;
    cluster.remove_member(removed).await?;
    let remaining = cluster.ids();
    ensure!(
        remaining.len() == 4,
        "members after the removal: {remaining:?}"
    );
    cluster
        .wait_for(
            "every member to agree on the smaller membership",
            |statuses| statuses.values().all(|status| status.voters() == remaining),
        )
        .await?;
    cluster.wait_for_leader().await?;
    ensure_members(cluster, &remaining).await?;
    client
        .create("/grow/after-removal", b"", &PERSISTENT)
        .await?;
    for id in cluster.running_ids() {
        let (_, stat) = read_synced(cluster, id, "/grow").await?;
        ensure!(stat.num_children == 53, "member {id}: {stat:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_fourth_and_fifth_then_remove_one() {
    run_cluster_case(3, add_and_remove_case).await;
}

async fn quorum_refusal_case(cluster: &mut Cluster) -> Result<()> {
    // A leader elected after the kill has never heard from the dead member, so its view of who
    // is live is exact (no race with the check-quorum rounds of the old leader).
    let old = cluster.leader().await?;
    cluster.kill9(old)?;
    let leader = cluster.wait_for_leader().await?;
    let other = cluster
        .running_ids()
        .into_iter()
        .find(|id| *id != leader)
        .context("no live follower")?;

    let reply = cluster
        .admin(other, Method::Delete, &format!("/v1/members/{old}"), None)
        .await?;
    ensure!(
        reply.status == 421
            && reply.error_code() == Some("NotLeader")
            && reply.body["error"]["leaderId"] == leader,
        "DELETE on follower {other}: {reply}"
    );
    let reply = cluster
        .admin(
            leader,
            Method::Delete,
            &format!("/v1/members/{other}"),
            None,
        )
        .await?;
    ensure!(
        reply.status == 409 && reply.error_code() == Some("Conflict"),
        "removing live member {other} with {old} down would lose the quorum, yet: {reply}"
    );
    let statuses = cluster.statuses().await?;
    ensure!(
        statuses.values().all(|status| status.voters() == [1, 2, 3]),
        "membership changed after a refusal: {statuses:?}"
    );
    let client = cluster.connect().await?;
    client.create("/still-writable", b"", &PERSISTENT).await?;

    // Removing the dead member instead leaves two live voters of two: allowed.
    cluster.remove_member(old).await?;
    let mut survivors = vec![leader, other];
    survivors.sort_unstable();
    cluster.wait_for_leader().await?;
    ensure_members(cluster, &survivors).await?;
    client
        .create("/after-removing-the-dead", b"", &PERSISTENT)
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removal_that_would_lose_quorum_is_refused() {
    run_cluster_case(3, quorum_refusal_case).await;
}

async fn leader_transfer_case(cluster: &mut Cluster) -> Result<()> {
    let leader = cluster.leader().await?;
    let followers: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    let target = followers[0];
    let transfer_to = |to: u64| json!({ "to": to });

    let reply = cluster
        .admin(
            followers[1],
            Method::Post,
            "/v1/leader/transfer",
            Some(&transfer_to(target)),
        )
        .await?;
    ensure!(
        reply.status == 421 && reply.body["error"]["leaderId"] == leader,
        "transfer asked of a follower: {reply}"
    );

    let asked = Instant::now();
    let reply = cluster
        .admin(
            leader,
            Method::Post,
            "/v1/leader/transfer",
            Some(&transfer_to(target)),
        )
        .await?;
    ensure!(reply.status == 202, "transfer to {target}: {reply}");
    cluster
        .wait_for(&format!("member {target} to lead"), |statuses| {
            statuses.len() == 3 && statuses.values().all(|status| status.leader_id == target)
        })
        .await?;
    ensure!(
        cluster.leader().await? == target,
        "leadership moved on again"
    );
    println!(
        "MEASURED leadership transferred {leader} -> {target} in {:?}",
        asked.elapsed()
    );
    let client = cluster.connect().await?;
    client.create("/after-transfer", b"", &PERSISTENT).await?;

    // Without a target the leader picks another voter.
    let reply = cluster
        .admin(
            target,
            Method::Post,
            "/v1/leader/transfer",
            Some(&Value::Object(Default::default())),
        )
        .await?;
    ensure!(reply.status == 202, "transfer to anyone: {reply}");
    cluster
        .wait_for(
            "leadership to leave the member that gave it up",
            |statuses| {
                let leaders: Vec<u64> = statuses.values().map(|status| status.leader_id).collect();
                statuses.len() == 3
                    && leaders
                        .iter()
                        .all(|l| *l == leaders[0] && *l != target && *l != 0)
            },
        )
        .await?;
    client
        .create("/after-second-transfer", b"", &PERSISTENT)
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_transfer() {
    run_cluster_case(3, leader_transfer_case).await;
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
