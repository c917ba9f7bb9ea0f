//! Membership and leadership of a running ensemble through the admin API (DESIGN.md §1,
//! Membership): members added at run time catch up and become voters, removals keep a quorum,
//! leadership moves on request. Real `baton-ensemble` processes on loopback.
//!
//! Run: `cargo nextest run -p baton-tests --test membership` (after `cargo build -p
//! baton-ensemble`). Measurements are printed (`--no-capture` shows them); nothing is timed.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use baton_tests::PERSISTENT;
use baton_tests::cluster::{Cluster, Method, run_cluster_case, sole_leader};
use serde_json::{Value, json};
use tokio::time::Instant;

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
    let cluster_id = cluster.status(leader).await?.cluster_id;

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
        cluster.check_member_lists(&voters).await?;
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
    cluster.check_member_lists(&remaining).await?;
    client
        .create("/grow/after-removal", b"", &PERSISTENT)
        .await?;
    for id in cluster.running_ids() {
        let (_, stat) = cluster.read_synced(id, "/grow").await?;
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
    cluster.check_member_lists(&survivors).await?;
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
