//! A sick disk under real members: each member's data dir is a `baton_tests::faulty_disk`
//! (FUSE over a real directory) that can lose every write not yet fsynced, fail fsyncs with
//! EIO, or stall them, while sequential writers on every member record what the ensemble
//! acknowledged. After each case every member's tree holds every acknowledged create, once.
//!
//! - Power loss (kill -9, then the disk drops what was not fsynced) of the whole ensemble, of
//!   the leader alone and of a follower alone, over rounds: no acknowledged write is lost.
//! - The same with `--unsafe-no-fsync` (acknowledging before fsync, deliberately) must be caught.
//! - A failed fsync stops its member with an error naming it, never a retry that carries on
//!   (fsyncgate); the others go on, and with the disk well again the member catches up.
//! - A stalled fsync holds its member only: the others elect a leader and go on; released, the
//!   member catches up.
//!
//! Needs root (FUSE mounts), so the tests are ignored by default:
//! `cargo build -p baton-ensemble --bins && cargo nextest run -p baton-tests --run-ignored only
//! -E 'binary(disk_faults)'`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use baton_tests::PERSISTENT;
use baton_tests::cluster::write_load::{SequentialWriters, WriteLog, children_with_data};
use baton_tests::cluster::{CLUSTER_CASE_DEADLINE, Cluster, Member};
use baton_tests::faulty_disk::{FaultyDisk, Fsync, Loss};
use tokio::time::Instant;

const PARENT: &str = "/disk";
const PREFIX: &str = "/disk/n-";
/// Acknowledged creates wanted from every writer between two faults.
const ACKS_BETWEEN: usize = 15;
const ACKS_DEADLINE: Duration = Duration::from_secs(60);

/// Each member's disk, by member id.
type Disks = BTreeMap<u64, FaultyDisk>;

/// Starts `n` members, each on a faulty disk of its own, with `flags`.
async fn start_on_faulty_disks(n: usize, flags: &[&str]) -> Result<(Cluster, Disks)> {
    let mut disks = Disks::new();
    let pki = baton_tests::pki::Pki::new(
        baton_tests::cluster::CLUSTER_ID,
        &(1..=n as u64).collect::<Vec<_>>(),
    )?;
    let cluster = Cluster::start_prepared(n, pki, flags, async |member: &Member| {
        let data = member.data_dir();
        let backing = data.with_file_name("disk");
        // On a retry the harness makes new dirs; the old mount goes with its entry.
        disks.insert(member.id(), FaultyDisk::mount(&data, &backing)?);
        Ok(())
    })
    .await?;
    Ok((cluster, disks))
}

/// Runs `case` on a 3-member cluster on faulty disks within the case deadline; on failure,
/// panics with the error and every member's log tail.
async fn run<F>(flags: &[&str], case: F)
where
    F: AsyncFnOnce(&mut Cluster, &Disks) -> Result<()>,
{
    let (mut cluster, disks) = match start_on_faulty_disks(3, flags).await {
        Ok(started) => started,
        Err(err) => panic!("could not start members on faulty disks: {err:#}"),
    };
    let outcome = tokio::time::timeout(CLUSTER_CASE_DEADLINE * 2, case(&mut cluster, &disks))
        .await
        .unwrap_or_else(|_| Err(anyhow!("case did not finish in time")));
    for (id, disk) in &disks {
        let c = disk.counts();
        println!(
            "member {id}'s disk: {} fsyncs, {} failed, {} stalled",
            c.fsyncs, c.failed_fsyncs, c.stalled_fsyncs
        );
    }
    if let Err(err) = outcome {
        cluster.dump_logs();
        // Members first: a disk unmounted under a live member would hang its file calls.
        drop(cluster);
        drop(disks);
        panic!("{err:?}");
    }
    drop(cluster);
}

/// Writers on sessions that may move between members, one per member.
async fn start_writers(cluster: &Cluster) -> Result<SequentialWriters> {
    let mut clients = Vec::new();
    for _ in cluster.ids() {
        clients.push(cluster.connect().await?);
    }
    Ok(SequentialWriters::start(clients, PREFIX))
}

/// Every member applied the same index, and each holds every acknowledged create once.
async fn check_every_member(cluster: &mut Cluster, log: &WriteLog) -> Result<()> {
    cluster
        .wait_for("every member at the same applied index", |s| {
            let applied = s.values().next().map(|st| st.applied_index);
            s.len() == 3 && s.values().all(|st| Some(st.applied_index) == applied)
        })
        .await?;
    for id in cluster.ids() {
        let client = cluster.connect_to(id).await?;
        client.sync(PARENT).await?;
        let nodes = children_with_data(&client, PARENT).await?;
        let unacked = log
            .check_against(PARENT, &nodes)
            .with_context(|| format!("on member {id}"))?;
        println!(
            "member {id}: {} acknowledged creates all there ({unacked} more applied whose answer was lost)",
            log.acks.len()
        );
    }
    Ok(())
}

/// Kills `ids` at once, has their disks lose what was not fsynced, and starts them again.
async fn power_loss(cluster: &mut Cluster, disks: &Disks, ids: &[u64]) -> Result<Loss> {
    for &id in ids {
        cluster.kill9(id)?;
    }
    let mut total = Loss::default();
    for id in ids {
        let loss = disks[id].power_loss()?;
        println!(
            "  member {id}'s disk lost {} bytes at the ends of {} files, {} overwritten bytes",
            loss.bytes_cut, loss.files, loss.bytes_restored
        );
        total.files += loss.files;
        total.bytes_cut += loss.bytes_cut;
        total.bytes_restored += loss.bytes_restored;
    }
    cluster.restart_all(ids).await?;
    Ok(total)
}

/// The member a case aims at: "the leader", or "a follower".
async fn victim(cluster: &mut Cluster, which: &str) -> Result<u64> {
    let leader = cluster.leader().await?;
    match which {
        "the leader" => Ok(leader),
        _ => cluster
            .ids()
            .into_iter()
            .find(|&m| m != leader)
            .context("a follower"),
    }
}

async fn create_parent(cluster: &Cluster) -> Result<()> {
    cluster
        .connect()
        .await?
        .create(PARENT, b"", &PERSISTENT)
        .await
        .context("create the writers' parent")?;
    Ok(())
}

/// Power losses while writers run: the whole ensemble, the leader, a follower, the whole
/// ensemble again. Fails on any acknowledged create lost; returns the bytes the disks dropped.
async fn power_loss_rounds(cluster: &mut Cluster, disks: &Disks) -> Result<(WriteLog, Loss)> {
    create_parent(cluster).await?;
    let writers = start_writers(cluster).await?;
    let mut lost = Loss::default();
    for round in [
        "the whole ensemble",
        "the leader",
        "a follower",
        "the whole ensemble",
    ] {
        writers
            .wait_for_acks(ACKS_BETWEEN, Instant::now(), ACKS_DEADLINE)
            .await?;
        let ids: Vec<u64> = match round {
            "the whole ensemble" => cluster.ids(),
            one => vec![victim(cluster, one).await?],
        };
        println!("power loss of {round} ({ids:?}) while writers run");
        let loss = power_loss(cluster, disks, &ids).await?;
        lost.files += loss.files;
        lost.bytes_cut += loss.bytes_cut;
        lost.bytes_restored += loss.bytes_restored;
    }
    writers
        .wait_for_acks(ACKS_BETWEEN, Instant::now(), ACKS_DEADLINE)
        .await?;
    Ok((writers.stop().await?, lost))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: FUSE mounts (test.sh runs it as root)"]
async fn power_loss_keeps_every_acknowledged_write() {
    run(&[], async |cluster: &mut Cluster, disks: &Disks| {
        let (log, lost) = power_loss_rounds(cluster, disks).await?;
        // Else the disks lost nothing and the case proved nothing.
        ensure!(
            lost.bytes_cut + lost.bytes_restored > 0,
            "the power losses took no unsynced byte"
        );
        check_every_member(cluster, &log).await
    })
    .await;
}

/// The deliberate bug: members that acknowledge without fsync. The kernel's writeback is
/// taken to have saved everything up to the writers' start; a power loss of the whole ensemble
/// then takes what they were acknowledged, and the check must say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: FUSE mounts (test.sh runs it as root)"]
async fn acknowledging_before_fsync_is_caught() {
    run(&["--unsafe-no-fsync"], async |cluster: &mut Cluster, disks: &Disks| {
        create_parent(cluster).await?;
        for disk in disks.values() {
            disk.write_back()?;
        }
        let writers = start_writers(cluster).await?;
        writers
            .wait_for_acks(ACKS_BETWEEN, Instant::now(), ACKS_DEADLINE)
            .await?;
        let ids = cluster.ids();
        let loss = power_loss(cluster, disks, &ids).await?;
        let log = writers.stop().await?;
        match check_every_member(cluster, &log).await {
            Ok(()) => Err(anyhow!(
                "{} creates acknowledged without fsync survived a power loss that took {} bytes: the check is blind",
                log.acks.len(),
                loss.bytes_cut
            )),
            Err(e) => {
                let e = format!("{e:#}");
                ensure!(e.contains("is lost"), "caught, but not as a lost write: {e}");
                println!("caught, as it must be: {e}");
                Ok(())
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: FUSE mounts (test.sh runs it as root)"]
async fn a_failed_fsync_stops_the_member_and_the_others_go_on() {
    run(&[], async |cluster: &mut Cluster, disks: &Disks| {
        create_parent(cluster).await?;
        let writers = start_writers(cluster).await?;
        for which in ["the leader", "a follower"] {
            writers
                .wait_for_acks(ACKS_BETWEEN, Instant::now(), ACKS_DEADLINE)
                .await?;
            let id = victim(cluster, which).await?;
            println!("fsyncs fail on {which}'s disk (member {id})");
            disks[&id].set_fsync(Fsync::Fails);
            let exit = cluster.wait_for_exit(id).await?;
            let told = exit
                .lines()
                .find(|l| l.contains("fdatasync") && l.contains("Input/output error"))
                .with_context(|| {
                    format!("member {id} exited without naming the failed fsync: {exit}")
                })?;
            println!("  member {id} stopped: {told}");
            // The others go on without it.
            writers
                .wait_for_acks(ACKS_BETWEEN, Instant::now(), ACKS_DEADLINE)
                .await?;
            // What its failed fsyncs did not save is gone; it starts on the rest and catches up.
            disks[&id].set_fsync(Fsync::Works);
            let loss = disks[&id].power_loss()?;
            println!(
                "  its disk dropped {} unsynced bytes; restarting it",
                loss.bytes_cut
            );
            cluster.restart(id).await?;
        }
        let log = writers.stop().await?;
        check_every_member(cluster, &log).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: FUSE mounts (test.sh runs it as root)"]
async fn a_stalled_disk_holds_only_its_member() {
    run(&[], async |cluster: &mut Cluster, disks: &Disks| {
        create_parent(cluster).await?;
        let writers = start_writers(cluster).await?;
        for which in ["the leader", "a follower"] {
            writers
                .wait_for_acks(ACKS_BETWEEN, Instant::now(), ACKS_DEADLINE)
                .await?;
            let id = victim(cluster, which).await?;
            println!("fsyncs stall on {which}'s disk (member {id})");
            disks[&id].set_fsync(Fsync::Stalls);
            // The others elect a leader if need be and acknowledge writes without it.
            writers
                .wait_for_acks(ACKS_BETWEEN, Instant::now(), ACKS_DEADLINE)
                .await?;
            let stalled = disks[&id].counts().stalled_fsyncs;
            ensure!(stalled > 0, "no fsync of member {id} stalled");
            disks[&id].set_fsync(Fsync::Works);
            println!("  writes went on while {stalled} of its fsyncs stalled; released");
        }
        let log = writers.stop().await?;
        check_every_member(cluster, &log).await
    })
    .await;
}
