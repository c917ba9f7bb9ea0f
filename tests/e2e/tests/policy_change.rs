//! The tenancy policy turned on (`PUT /v1/settings`) under a client that loses access while it
//! waits, on real member processes (the simulation's stuck lock client).
//!
//! An anonymous client on one member watches a node below `/baton/default` with `exists`, as
//! a lock waiter watches its predecessor, while the policy is off. The admin turns
//! `checkIdentities` on at the leader; the super identity deletes the node through another
//! member. The waiter's one-shot watch still fires (it was allowed when set, as ZooKeeper
//! fires a watch whatever the ACL says by then), and its next read is refused NoAuth: it
//! learns it lost access instead of waiting for good while its session pings. Fails without
//! the fix in `core/replicate.rs` `route`: the event was withheld and the wait ran out.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use baton_tests::PERSISTENT;
use baton_tests::cluster::{Cluster, Method};
use serde_json::json;
use zookeeper_client as zk;

const DEADLINE: Duration = Duration::from_secs(30);
/// `addauth digest super:secret` matches this.
const SUPER_DIGEST: &str = "super:lK75jTNcA+U9vtVEw5vB51mj/w4=";

async fn waiter_that_loses_access(cluster: &mut Cluster) -> Result<()> {
    let leader = cluster.wait_for_leader().await?;
    let other = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .context("a follower")?;
    let admin = cluster.connect_to(leader).await?;
    admin.auth("digest", b"super:secret").await?;
    for path in ["/baton", "/baton/default", "/baton/default/x"] {
        admin.create(path, b"", &PERSISTENT).await?;
    }
    let waiter = cluster.connect_to(other).await?;
    let (stat, watch) = waiter.check_and_watch_stat("/baton/default/x").await?;
    ensure!(stat.is_some(), "allowed while the policy is off");

    let body = json!({ "checkIdentities": true });
    let changed = cluster
        .admin(leader, Method::Put, "/v1/settings", Some(&body))
        .await?;
    ensure!(changed.status == 200, "PUT /v1/settings: {changed}");
    baton_tests::eventually("the policy on every member", DEADLINE, async || {
        for id in cluster.ids() {
            let s = cluster.admin(id, Method::Get, "/v1/settings", None).await?;
            if s.body["checkIdentities"] != true {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await?;

    admin.delete("/baton/default/x", None).await?;
    let event = tokio::time::timeout(DEADLINE, watch.changed())
        .await
        .context("the waiter's watch never fired after it lost access")?;
    ensure!(
        event.event_type == zk::EventType::NodeDeleted && event.path == "/baton/default/x",
        "{event:?}"
    );
    let read = waiter.get_children("/baton/default").await;
    ensure!(
        matches!(read, Err(zk::Error::NoAuth)),
        "its next read: {read:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_loses_access_hears_its_watch_and_is_then_refused() {
    baton_tests::cluster::run_cluster_case_with_flags(
        3,
        &["--super-digest", SUPER_DIGEST],
        waiter_that_loses_access,
    )
    .await;
}
