//! Every workload against a live ZooKeeper-compatible server: each run ends at its --ops bound,
//! reports exactly that many operations and leaves no node behind (populate excepted).
//!
//! Needs a server, so it is ignored by default:
//! `BATON_BENCH_SERVERS=127.0.0.1:2181 cargo test -p baton-bench -- --ignored`
//! (`tests/scripts/reference-zookeeper.sh 2181 /tmp/zk &` starts Apache ZooKeeper). The sidecar
//! workloads also need `baton-sidecar`: `cargo build --release -p baton-sidecar`, or point
//! BATON_BENCH_SIDECAR at one.

use std::path::PathBuf;

use baton_bench::budget::Limit;
use baton_bench::ensemble::Ensemble;
use baton_bench::workload::{RunConfig, Workload, run};
use zookeeper_client::{Client, Error};

fn servers() -> String {
    std::env::var("BATON_BENCH_SERVERS").expect("set BATON_BENCH_SERVERS=HOST:PORT[,HOST:PORT..]")
}

fn config(workers: usize, ops: u64) -> RunConfig {
    RunConfig {
        ensemble: Some(Ensemble::parse(&servers()).expect("BATON_BENCH_SERVERS is well formed")),
        workers,
        limit: Limit::Ops(ops),
        data_size: 100,
        label: "test".into(),
        fsync_dir: PathBuf::from("."),
        sidecar_bin: sidecar_bin(),
        members: None,
    }
}

/// The sidecar the sidecar workloads run: $BATON_BENCH_SIDECAR, else the workspace's release
/// build.
fn sidecar_bin() -> PathBuf {
    std::env::var_os("BATON_BENCH_SIDECAR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/baton-sidecar"),
        PathBuf::from,
    )
}

/// The children of `path`, none when it does not exist.
async fn children(client: &Client, path: &str) -> Vec<String> {
    match client.list_children(path).await {
        Ok(children) => children,
        Err(Error::NoNode) => Vec::new(),
        Err(err) => panic!("listing {path}: {err}"),
    }
}

/// Children left under the workload's directory (its run directories).
async fn leftovers(client: &Client, workload: Workload) -> Vec<String> {
    match client
        .list_children(&format!("/baton-bench/{}", workload.name()))
        .await
    {
        Ok(children) => children,
        Err(Error::NoNode) => Vec::new(),
        Err(err) => panic!("listing leftovers of {}: {err}", workload.name()),
    }
}

#[tokio::test]
#[ignore = "needs a server: BATON_BENCH_SERVERS=127.0.0.1:2181 cargo test -p baton-bench -- --ignored"]
async fn every_workload_stops_at_its_bound_and_cleans_up() {
    let observer = Client::connect(&servers()).await.expect("connect observer");
    let cases = [
        (Workload::CreateDelete, 3, 40),
        (Workload::GetData, 4, 50),
        (Workload::Mixed90_10, 4, 50),
        (Workload::Mixed50_50, 4, 50),
        (Workload::LockUncontended, 3, 30),
        (Workload::LockContended, 5, 30),
        (Workload::ElectionFailover, 3, 6),
        (Workload::WatchFanout, 4, 20),
    ];
    for (workload, workers, ops) in cases {
        let before = leftovers(&observer, workload).await;
        let report = run(workload, &config(workers, ops))
            .await
            .unwrap_or_else(|err| panic!("{}: {err}", workload.name()));
        assert_eq!(report.ops, ops, "{}", workload.name());
        assert_eq!(report.workers, workers, "{}", workload.name());
        assert!(
            report.latency.p50.0 > 0.0,
            "{}: {report:?}",
            workload.name()
        );
        assert_eq!(
            leftovers(&observer, workload).await,
            before,
            "{}",
            workload.name()
        );
    }
}

#[tokio::test]
#[ignore = "needs a server: BATON_BENCH_SERVERS=127.0.0.1:2181 cargo test -p baton-bench -- --ignored"]
async fn populate_leaves_exactly_the_requested_nodes() {
    let observer = Client::connect(&servers()).await.expect("connect observer");
    let before = leftovers(&observer, Workload::Populate).await;
    let report = run(Workload::Populate, &config(4, 25))
        .await
        .expect("populate");
    assert_eq!(report.ops, 25);
    let after = leftovers(&observer, Workload::Populate).await;
    let new: Vec<&String> = after.iter().filter(|dir| !before.contains(dir)).collect();
    assert_eq!(new.len(), 1, "one run directory: {new:?}");
    let dir = format!("/baton-bench/populate/{}", new[0]);
    let nodes = observer
        .list_children(&dir)
        .await
        .expect("list populated nodes");
    assert_eq!(nodes.len(), 25);
    for node in nodes {
        let (data, _) = observer
            .get_data(&format!("{dir}/{node}"))
            .await
            .expect("read node");
        assert_eq!(data.len(), 100);
        observer
            .delete(&format!("{dir}/{node}"), None)
            .await
            .expect("clean up");
    }
    observer.delete(&dir, None).await.expect("clean up");
}

#[tokio::test]
#[ignore = "needs a server: BATON_BENCH_SERVERS=127.0.0.1:2181 cargo test -p baton-bench -- --ignored"]
async fn sidecar_workloads_stop_at_their_bound_and_clean_up() {
    let observer = Client::connect(&servers()).await.expect("connect observer");
    let folders = async || {
        (
            children(&observer, "/baton/default/locks").await,
            children(&observer, "/baton/default/elections").await,
        )
    };
    let before = folders().await;
    let cases = [
        (Workload::SidecarLockUncontended, 2, 20),
        (Workload::SidecarLockContended, 3, 20),
        (Workload::SidecarHandover, 3, 4),
    ];
    for (workload, workers, ops) in cases {
        let report = run(workload, &config(workers, ops))
            .await
            .unwrap_or_else(|err| panic!("{}: {err}", workload.name()));
        assert_eq!(report.ops, ops, "{}", workload.name());
        assert!(
            report.latency.p50.0 > 0.0,
            "{}: {report:?}",
            workload.name()
        );
        assert_eq!(folders().await, before, "{}", workload.name());
    }
}
