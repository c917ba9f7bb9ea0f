//! The harness never runs a case against another test's server.
//!
//! `Server::start` picks free ports and releases them before the server binds them; tests run
//! in parallel (one process each under nextest), so another test's server can bind one first.
//! A ZooKeeper JVM takes a second or more to reach its bind, then exits when it fails; a
//! readiness probe that only asks "does something answer `srvr` there" heard the other server
//! meanwhile, and the case ran against it. This is the flake `bad_input
//! unknown_opcode_is_unimplemented::baton` hit on a busy machine: `node already exists`
//! creating `/survived-opcode` on a fresh Baton, because the `::zookeeper` twin of the case had
//! run on that Baton and created the same path first. Here the race is made to happen every
//! time instead of once in a thousand runs: a server is started on a client port another
//! server already holds.

use anyhow::{Result, ensure};
use baton_tests::{PERSISTENT, Server, Target, connect};

/// A node made through `ours` is not on `other`: the two are different servers.
async fn distinct(ours: &Server, other: &Server, marker: &str) -> Result<()> {
    ensure!(
        ours.client_addr() != other.client_addr(),
        "{} started on the client port of the {} it raced ({})",
        ours.target(),
        other.target(),
        other.client_addr()
    );
    let path = format!("/harness-{marker}");
    connect(ours).await?.create(&path, b"", &PERSISTENT).await?;
    let seen = connect(other).await?.check_stat(&path).await?;
    ensure!(
        seen.is_none(),
        "{path} made through the {} is on the {}",
        ours.target(),
        other.target()
    );
    Ok(())
}

#[tokio::test]
async fn a_zookeeper_whose_port_another_server_holds_starts_on_fresh_ports() -> Result<()> {
    let baton = Server::start(Target::Baton).await?;
    let zookeeper =
        Server::start_on_client_port(Target::ZooKeeper, baton.client_addr().port()).await?;
    distinct(&zookeeper, &baton, "zookeeper").await
}

#[tokio::test]
async fn a_baton_whose_port_another_server_holds_starts_on_fresh_ports() -> Result<()> {
    let zookeeper = Server::start(Target::ZooKeeper).await?;
    let baton = Server::start_on_client_port(Target::Baton, zookeeper.client_addr().port()).await?;
    distinct(&baton, &zookeeper, "baton").await
}
