//! Snapshot fallback with real processes: a member whose newest snapshot file is damaged while
//! it is down starts from the snapshot before it plus its log, sets the damaged file aside,
//! rejoins and catches up, losing nothing. With both snapshots damaged it refuses to start, with
//! exit status 65 and a message that says to reseed it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use baton_tests::PERSISTENT;
use baton_tests::cluster::{CLUSTER_CASE_DEADLINE, Cluster};

/// Small, so a few hundred writes leave every member two snapshot files.
const SNAPSHOT_ENTRIES: &str = "40";

async fn run<F>(case: F)
where
    F: AsyncFnOnce(&mut Cluster) -> Result<()>,
{
    let mut cluster = Cluster::start_with_flags(3, &["--snapshot-entries", SNAPSHOT_ENTRIES])
        .await
        .unwrap_or_else(|e| panic!("could not start a 3-member cluster: {e:#}"));
    let outcome = tokio::time::timeout(CLUSTER_CASE_DEADLINE, case(&mut cluster))
        .await
        .unwrap_or_else(|_| Err(anyhow!("case did not finish in time")));
    if let Err(e) = outcome {
        cluster.dump_logs();
        panic!("{e:?}");
    }
}

/// Snapshot files in `dir` ending in `suffix`, oldest first.
fn snapshot_files(dir: &Path, suffix: &str) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("list {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("snap-") && name.ends_with(suffix) {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// Flips one byte in the middle of `path` (in the state machine's bytes, past the header).
fn damage(path: &Path) -> Result<()> {
    let mut bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(path, bytes).with_context(|| format!("write {}", path.display()))
}

/// Writes `/fallback/n-{from..to}` through the ensemble.
async fn write_nodes(cluster: &Cluster, from: usize, to: usize) -> Result<()> {
    let client = cluster.connect().await?;
    for i in from..to {
        client
            .create(
                &format!("/fallback/n-{i:04}"),
                i.to_string().as_bytes(),
                &PERSISTENT,
            )
            .await
            .with_context(|| format!("create n-{i:04}"))?;
    }
    Ok(())
}

/// Writes until follower `id` holds two snapshot files, then stops it; returns nodes written.
async fn two_snapshots_then_stop(cluster: &mut Cluster, id: u64) -> Result<usize> {
    cluster
        .connect()
        .await?
        .create("/fallback", b"", &PERSISTENT)
        .await?;
    let dir = cluster.member(id)?.data_dir();
    let mut written = 0;
    while snapshot_files(&dir, ".snap")?.len() < 2 {
        ensure!(written < 2_000, "member {id} took no two snapshots");
        write_nodes(cluster, written, written + 50).await?;
        written += 50;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.kill9(id)?;
    Ok(written)
}

async fn a_member_falls_back_to_its_older_snapshot_and_catches_up(
    cluster: &mut Cluster,
) -> Result<()> {
    let leader = cluster.leader().await?;
    let id = cluster
        .ids()
        .into_iter()
        .find(|m| *m != leader)
        .context("a follower")?;
    let written = two_snapshots_then_stop(cluster, id).await?;
    let dir = cluster.member(id)?.data_dir();
    let snaps = snapshot_files(&dir, ".snap")?;
    let newest = snaps.last().context("a snapshot")?.clone();
    damage(&newest)?;
    // The others carry on meanwhile: the restarted member must catch up on these too.
    write_nodes(cluster, written, written + 30).await?;
    let total = written + 30;

    cluster.restart(id).await?;
    let member = cluster.member(id)?;
    let set_aside = member.log_lines_containing("set aside a damaged snapshot");
    ensure!(
        set_aside.len() == 1,
        "member {id} logged no set-aside: {set_aside:?}"
    );
    let why = member.log_lines_containing("snapshot file is damaged");
    ensure!(
        why.iter().any(|l| l.contains("checksum mismatch")),
        "member {id} did not say why: {why:?}"
    );
    ensure!(!newest.exists(), "{} is still in place", newest.display());
    ensure!(
        snapshot_files(&dir, ".snap.corrupt")?
            == [PathBuf::from(format!("{}.corrupt", newest.display()))],
        "the damaged snapshot was not kept aside"
    );

    // It answers with everything the ensemble acknowledged, including what it missed.
    let client = cluster.connect_to(id).await?;
    client.sync("/fallback").await?;
    let mut children = client.list_children("/fallback").await?;
    children.sort();
    let want: Vec<String> = (0..total).map(|i| format!("n-{i:04}")).collect();
    ensure!(
        children == want,
        "member {id} holds {} nodes, want {total}",
        children.len()
    );
    for i in [0, written / 2, written - 1, total - 1] {
        let (data, _) = client.get_data(&format!("/fallback/n-{i:04}")).await?;
        ensure!(data == i.to_string().as_bytes(), "n-{i:04} holds {data:?}");
    }
    // And it is a voter of a healthy ensemble again.
    let statuses = cluster
        .wait_for("every member at the same applied index", |s| {
            s.len() == 3
                && s.values()
                    .all(|st| st.applied_index == s[&leader].applied_index)
        })
        .await?;
    ensure!(statuses[&id].members.contains(&id) && statuses[&id].learners.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_newest_snapshot_falls_back_and_the_member_catches_up() {
    run(a_member_falls_back_to_its_older_snapshot_and_catches_up).await;
}

async fn a_member_with_no_usable_snapshot_refuses_to_start(cluster: &mut Cluster) -> Result<()> {
    let leader = cluster.leader().await?;
    let id = cluster
        .ids()
        .into_iter()
        .find(|m| *m != leader)
        .context("a follower")?;
    two_snapshots_then_stop(cluster, id).await?;
    let dir = cluster.member(id)?.data_dir();
    for snap in snapshot_files(&dir, ".snap")? {
        damage(&snap)?;
    }
    let err = match cluster.restart(id).await {
        Ok(()) => return Err(anyhow!("member {id} started without a usable snapshot")),
        Err(e) => format!("{e:#}"),
    };
    ensure!(err.contains("exit status: 65"), "{err}");
    let refusals = cluster
        .member(id)?
        .log_lines_containing("cannot be recovered");
    let refusal = refusals.last().context("no refusal in the log")?;
    for needle in ["checksum mismatch", "reseed", "baton.dev/reseed-member"] {
        ensure!(refusal.contains(needle), "no {needle:?} in {refusal}");
    }
    // Nothing was renamed: the evidence stays as it was.
    ensure!(snapshot_files(&dir, ".snap")?.len() == 2);
    ensure!(snapshot_files(&dir, ".corrupt")?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_without_a_usable_snapshot_refuses_to_start_with_status_65() {
    run(a_member_with_no_usable_snapshot_refuses_to_start).await;
}
