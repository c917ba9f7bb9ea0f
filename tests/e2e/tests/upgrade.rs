//! A rolling upgrade on real member processes: one build plays the previous release
//! with `--max-feature-level 1`.
//!
//! Three members, member 3 capped at level 1: the ensemble stays at feature level 1 while it
//! is in the configuration, so null znode data written through any member reads back as empty
//! data on every member (the behaviour before the null-data change), and writes, sessions,
//! watches and snapshots go on; the replicas stay byte-identical (`GET /v1/snapshot` of each
//! member at the same index). The capped member restarts on its level-1 data dir (a rollback
//! before the level rises works). Restarted without the cap, it advertises level 2 and the
//! leader raises the level: from that entry on null data stays null on every member, what was
//! written before stays as it was applied, and the replicas are still identical. Capped again,
//! the member refuses the level-2 data dir with one error naming the level it needs and exit
//! status 78. Before the raise, an upgraded member (whose data dir a level-2-capable member
//! wrote) is rolled back to level 1 and serves. Backups are written in the level's format
//! (snapshot format 2 at level 1, 3 at level 2): the level-1 one restores into a member capped
//! at level 1, the level-2 one is refused there with the data dir's error.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use baton_tests::cluster::{Cluster, Member, Method};
use baton_tests::pki::Pki;
use baton_tests::raw::{self, RawConnection};
use serde_json::Value;

const CAP: &str = "--max-feature-level";
const DEADLINE: Duration = Duration::from_secs(30);
const OP_CREATE: i32 = 1;
const OP_GET_DATA: i32 = 4;
const OP_SET_DATA: i32 = 5;
const OP_SYNC: i32 = 9;
const OP_CLOSE: i32 = -11;
const NODE_DATA_CHANGED: i32 = 3;

async fn status(cluster: &Cluster, id: u64) -> Result<Value> {
    let reply = cluster.admin(id, Method::Get, "/v1/status", None).await?;
    ensure!(reply.status == 200, "GET /v1/status on {id}: {reply}");
    Ok(reply.body)
}

/// `(featureLevel, maxFeatureLevel)` of member `id`'s status.
async fn levels(cluster: &Cluster, id: u64) -> Result<(u64, u64)> {
    let s = status(cluster, id).await?;
    let field = |k: &str| s[k].as_u64().with_context(|| format!("no {k} in {s}"));
    Ok((field("featureLevel")?, field("maxFeatureLevel")?))
}

async fn level_metric(cluster: &Cluster, id: u64) -> Result<Option<String>> {
    let metrics = cluster.admin(id, Method::Get, "/metrics", None).await?;
    Ok(metrics
        .body
        .as_str()
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("baton_feature_level "))
        .map(str::to_owned))
}

/// A buffer as jute writes it; `None` is the null buffer (length -1).
fn jute_buffer(data: Option<&[u8]>) -> Vec<u8> {
    match data {
        None => (-1i32).to_be_bytes().to_vec(),
        Some(d) => {
            let mut out = i32::try_from(d.len())
                .unwrap_or(i32::MAX)
                .to_be_bytes()
                .to_vec();
            out.extend_from_slice(d);
            out
        }
    }
}

/// A session on one member, over the raw protocol (null data needs the -1 length).
struct Session {
    conn: RawConnection,
    xid: i32,
}

impl Session {
    async fn open(cluster: &Cluster, id: u64) -> Result<Session> {
        let (conn, _) = RawConnection::open_session(cluster.member(id)?.client_addr()).await?;
        Ok(Session { conn, xid: 0 })
    }

    /// Sends one request; returns the notifications that came first and the reply's body
    /// (after the header), failing on an error code.
    async fn call(&mut self, op: i32, body: &[u8]) -> Result<(Vec<raw::WatcherEvent>, Vec<u8>)> {
        self.xid += 1;
        let (events, payload) = self.conn.call(self.xid, op, body).await?;
        let header = raw::ReplyHeader::parse(&payload)?;
        ensure!(header.err == 0, "op {op} failed with {}", header.err);
        Ok((events, payload[16..].to_vec()))
    }

    async fn create(&mut self, path: &str, data: Option<&[u8]>) -> Result<()> {
        let mut body = raw::jute_string(path);
        body.extend_from_slice(&jute_buffer(data));
        // world:anyone, all permissions.
        body.extend_from_slice(&1i32.to_be_bytes());
        body.extend_from_slice(&31i32.to_be_bytes());
        body.extend_from_slice(&raw::jute_string("world"));
        body.extend_from_slice(&raw::jute_string("anyone"));
        body.extend_from_slice(&0i32.to_be_bytes());
        self.call(OP_CREATE, &body).await.map(drop)
    }

    async fn set_data(&mut self, path: &str, data: Option<&[u8]>) -> Result<()> {
        let mut body = raw::jute_string(path);
        body.extend_from_slice(&jute_buffer(data));
        body.extend_from_slice(&(-1i32).to_be_bytes());
        self.call(OP_SET_DATA, &body).await.map(drop)
    }

    /// getData after a sync, so a follower answers with everything committed before.
    async fn get_data(&mut self, path: &str, watch: bool) -> Result<Option<Vec<u8>>> {
        self.call(OP_SYNC, &raw::jute_string(path)).await?;
        let (_, body) = self
            .call(OP_GET_DATA, &raw::path_and_watch(path, watch))
            .await?;
        let len = i32::from_be_bytes(body[..4].try_into().context("data length")?);
        Ok(usize::try_from(len).ok().map(|n| body[4..4 + n].to_vec()))
    }

    async fn close(mut self) -> Result<()> {
        self.call(OP_CLOSE, &[]).await.map(drop)
    }
}

/// Every member's `GET /v1/snapshot`, once they all answer at the same applied index (the
/// index is the body's first 8 bytes, after the 24-byte header): equal states give equal bytes.
async fn snapshots_at_one_index(cluster: &Cluster) -> Result<Vec<Vec<u8>>> {
    let admin = cluster.pki().admin_client(DEADLINE)?;
    let mut found = Vec::new();
    baton_tests::eventually(
        "every member's snapshot at one index",
        DEADLINE,
        async || {
            let mut snaps = Vec::new();
            for id in cluster.ids() {
                let addr = cluster.member(id)?.admin_addr().to_string();
                let answer = admin
                    .request(&addr, http::Method::GET, "/v1/snapshot", None)
                    .await?;
                ensure!(answer.status == 200, "snapshot of {id}: {}", answer.status);
                snaps.push(answer.body.to_vec());
            }
            let index = |s: &Vec<u8>| s.get(24..32).map(<[u8]>::to_vec);
            if snaps.iter().all(|s| index(s) == index(&snaps[0])) {
                found = snaps;
                return Ok(true);
            }
            Ok(false)
        },
    )
    .await?;
    Ok(found)
}

async fn assert_replicas_identical(cluster: &Cluster, when: &str) -> Result<()> {
    let snaps = snapshots_at_one_index(cluster).await?;
    for (i, snap) in snaps.iter().enumerate().skip(1) {
        ensure!(
            *snap == snaps[0],
            "{when}: member {} holds another state than member 1 at the same index ({} and {} bytes)",
            i + 1,
            snap.len(),
            snaps[0].len()
        );
    }
    Ok(())
}

/// What getData answers for `path` through each member.
async fn data_everywhere(cluster: &Cluster, path: &str) -> Result<Vec<Option<Vec<u8>>>> {
    let mut out = Vec::new();
    for id in cluster.ids() {
        let mut s = Session::open(cluster, id).await?;
        out.push(s.get_data(path, false).await?);
        s.close().await?;
    }
    Ok(out)
}

/// The format version of the state machine snapshot inside a backup file: the feature level
/// it was written at plus one.
fn snapshot_format(backup: &[u8]) -> Result<u32> {
    let at = backup
        .windows(8)
        .position(|w| w == b"BATNSNAP")
        .context("no snapshot in the backup")?;
    let version = backup.get(at + 8..at + 12).context("snapshot header")?;
    Ok(u32::from_be_bytes(version.try_into()?))
}

/// A NEW one-member ensemble restored (`snapshot restore`) from `backup`, started with
/// `--max-feature-level 1`: a member of a release that supports level 1 only.
async fn restored_capped_member(backup: &[u8], cluster_id: &str) -> Result<Cluster> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("upgrade.baton-backup");
    std::fs::write(&file, backup)?;
    let pki = Pki::new(cluster_id, &[1])?;
    Cluster::start_prepared(1, pki, &[CAP, "1"], async |member: &Member| {
        let mut restore = std::process::Command::new(baton_tests::baton_binary()?);
        restore
            .args(["snapshot", "restore", "--from"])
            .arg(&file)
            .arg("--data-dir")
            .arg(member.data_dir())
            .args(["--id", "1", "--members", member.members_flag()])
            .args(["--cluster-id", cluster_id]);
        let finished = baton_tests::command::run(restore, DEADLINE).await?;
        ensure!(finished.success(), "restore: {finished}");
        Ok(())
    })
    .await
}

async fn all_at_level(cluster: &Cluster, level: u64) -> Result<bool> {
    for id in cluster.ids() {
        if levels(cluster, id).await?.0 != level {
            return Ok(false);
        }
    }
    Ok(true)
}

async fn rolling_upgrade(cluster: &mut Cluster) -> Result<()> {
    cluster.wait_for_leader().await?;
    // Give the leader every hello it needs: the capped member holds the level at 1.
    baton_tests::eventually(
        "every member reports its supported level",
        DEADLINE,
        async || {
            let mut seen = Vec::new();
            for id in cluster.ids() {
                seen.push(levels(cluster, id).await?);
            }
            Ok(seen == [(1, 2), (1, 2), (1, 1)])
        },
    )
    .await?;

    // Writes through the capped member and the others: creates and setData with null data,
    // a watch on one member fired by a write through another, enough entries for snapshots.
    let mut old = Session::open(cluster, 3).await?;
    let mut new = Session::open(cluster, 1).await?;
    old.create("/up", Some(b"root")).await?;
    for i in 0..30 {
        let s = if i % 2 == 0 { &mut old } else { &mut new };
        s.create(&format!("/up/n{i:02}"), None).await?;
    }
    new.set_data("/up", None).await?;
    ensure!(old.get_data("/up/n01", true).await? == Some(vec![]));
    new.set_data("/up/n01", Some(b"x")).await?;
    let (events, _) = old.call(OP_SYNC, &raw::jute_string("/up/n01")).await?;
    let fired = if events.is_empty() {
        match old.conn.receive().await? {
            raw::Outcome::Frame(p) => raw::WatcherEvent::parse(&p)?.into_iter().collect(),
            other => bail!("no watch notification: {other:?}"),
        }
    } else {
        events
    };
    ensure!(
        fired
            .iter()
            .any(|e| e.event_type == NODE_DATA_CHANGED && e.path == "/up/n01"),
        "the watch set through member 3 did not fire: {fired:?}"
    );
    old.close().await?;
    new.close().await?;

    // Level 1: null data reads back as empty data through every member.
    for path in ["/up", "/up/n00", "/up/n29"] {
        let seen = data_everywhere(cluster, path).await?;
        ensure!(
            seen.iter().all(|d| *d == Some(vec![])),
            "{path} at level 1: {seen:?}"
        );
    }
    assert_replicas_identical(cluster, "at level 1").await?;
    ensure!(
        all_at_level(cluster, 1).await?,
        "the level rose with a capped member"
    );
    ensure!(
        level_metric(cluster, 1).await? == Some("baton_feature_level 1".into()),
        "metric at level 1"
    );

    // A rollback before the level rises: the capped member restarts on its level-1 dir.
    cluster.restart(3).await?;
    ensure!(levels(cluster, 3).await? == (1, 1));

    // A backup at level 1 holds the level-1 format (the one a level-1 release reads).
    let level_1_backup = snapshots_at_one_index(cluster).await?.swap_remove(0);
    ensure!(snapshot_format(&level_1_backup)? == 2, "format at level 1");

    // Downgrading an upgraded member one version before the level rises: member 1, whose
    // data dir (log and snapshots) a level-2-capable member wrote, restarts capped at level 1
    // and serves, then is upgraded again.
    cluster.change_flags(1, &[], &[CAP, "1"])?;
    cluster.restart(1).await?;
    ensure!(levels(cluster, 1).await? == (1, 1), "member 1 rolled back");
    let mut s = Session::open(cluster, 1).await?;
    s.create("/up/rolled-back", None).await?;
    s.close().await?;
    let seen = data_everywhere(cluster, "/up/rolled-back").await?;
    ensure!(
        seen.iter().all(|d| *d == Some(vec![])),
        "after the rollback of member 1: {seen:?}"
    );
    assert_replicas_identical(cluster, "after the rollback of member 1").await?;
    cluster.change_flags(1, &[CAP], &[])?;
    cluster.restart(1).await?;

    // The last member is upgraded: the leader raises the level.
    cluster.change_flags(3, &[CAP], &[])?;
    cluster.restart(3).await?;
    baton_tests::eventually(
        "the level rises to 2 on every member",
        DEADLINE,
        async || all_at_level(cluster, 2).await,
    )
    .await?;
    ensure!(
        level_metric(cluster, 3).await? == Some("baton_feature_level 2".into()),
        "metric at level 2"
    );
    let mut s = Session::open(cluster, 3).await?;
    s.create("/up/after", None).await?;
    s.close().await?;
    let seen = data_everywhere(cluster, "/up/after").await?;
    ensure!(
        seen.iter().all(Option::is_none),
        "null at level 2: {seen:?}"
    );
    let seen = data_everywhere(cluster, "/up/n00").await?;
    ensure!(
        seen.iter().all(|d| *d == Some(vec![])),
        "kept as applied: {seen:?}"
    );
    assert_replicas_identical(cluster, "at level 2").await?;
    let level_2_backup = snapshots_at_one_index(cluster).await?.swap_remove(0);
    ensure!(snapshot_format(&level_2_backup)? == 3, "format at level 2");

    // A rollback after the level rose is refused, with one clear error and exit status 78.
    cluster.change_flags(3, &[], &[CAP, "1"])?;
    let refused = match cluster.restart(3).await {
        Ok(()) => bail!("a member capped at level 1 started on a level-2 data dir"),
        Err(e) => format!("{e:#}"),
    };
    ensure!(refused.contains("exit status: 78"), "{refused}");
    let member = cluster.member(3)?;
    let errors = member.log_lines_containing("this data dir is at feature level 2");
    ensure!(
        !errors.is_empty()
            && errors[0].contains("supports feature levels up to 1")
            && errors[0].contains("--max-feature-level"),
        "the refusal: {errors:?}"
    );

    // Backups: the one taken at level 1 restores into a member of a level-1 release, which
    // serves it; the one taken at level 2 is refused there with the data dir's error.
    let restored = restored_capped_member(&level_1_backup, "upgrade-restored-1").await?;
    ensure!(levels(&restored, 1).await? == (1, 1));
    let seen = data_everywhere(&restored, "/up/n00").await?;
    ensure!(seen == [Some(vec![])], "restored at level 1: {seen:?}");
    drop(restored);
    let refused = match restored_capped_member(&level_2_backup, "upgrade-restored-2").await {
        Ok(_) => bail!("a member capped at level 1 started on a level-2 backup"),
        Err(e) => format!("{e:#}"),
    };
    ensure!(
        refused.contains("exit status: 78")
            && refused.contains("this data dir is at feature level 2")
            && refused.contains("supports feature levels up to 1"),
        "the refusal of the level-2 backup: {refused}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_keeps_replicas_identical_and_a_late_rollback_is_refused() {
    let mut cluster = Cluster::start_with_member_flags(3, &["--snapshot-entries", "20"], |m| {
        if m.id() == 3 {
            vec![CAP.to_owned(), "1".to_owned()]
        } else {
            Vec::new()
        }
    })
    .await
    .expect("three members, member 3 capped at level 1");
    let outcome = tokio::time::timeout(
        baton_tests::cluster::CLUSTER_CASE_DEADLINE,
        rolling_upgrade(&mut cluster),
    )
    .await
    .unwrap_or_else(|_| bail!("the case did not finish in time"));
    if let Err(e) = outcome {
        cluster.dump_logs();
        panic!("{e:?}");
    }
}

/// What `binary --version` prints.
fn version_of(binary: &std::path::Path) -> Result<String> {
    if !binary.exists() {
        bail!("{} is not built", binary.display());
    }
    let out = std::process::Command::new(binary)
        .arg("--version")
        .output()?;
    ensure!(
        out.status.success(),
        "{} --version failed",
        binary.display()
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The `(MIN, MAX)` feature levels a `--version` line names ("... (feature levels 1 to 2)").
fn levels_of(version: &str) -> Result<(u32, u32)> {
    let range = version
        .split("(feature levels ")
        .nth(1)
        .and_then(|r| r.strip_suffix(')'))
        .with_context(|| format!("no feature levels in {version:?}"))?;
    let (min, max) = range.split_once(" to ").context("MIN to MAX")?;
    Ok((min.parse()?, max.parse()?))
}

/// `--version` of the member, the sidecar and the operator: the release and the feature levels,
/// the member's from the levels it applies (`baton_machine::feature::SUPPORTED`), the other two
/// the same; the image's labels say the same (`Dockerfile`: `org.opencontainers.image.version`
/// and `baton.dev/feature-levels`), so a release bump or a new level that misses one fails here.
#[test]
fn versions_and_the_image_labels_name_the_release_and_the_feature_levels() -> Result<()> {
    let ensemble = baton_tests::baton_binary()?;
    let member = version_of(&ensemble)?;
    let (min, max) = levels_of(&member)?;
    ensure!(min == 1 && max >= 2, "{member}");
    ensure!(member.contains(env!("CARGO_PKG_VERSION")), "{member}");
    for other in ["baton-sidecar", "baton-operator"] {
        let text = version_of(&ensemble.with_file_name(other))?;
        ensure!(
            text.contains(env!("CARGO_PKG_VERSION")) && levels_of(&text)? == (min, max),
            "{other} --version says {text:?}, baton-ensemble {member:?}"
        );
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile"))?;
    let label = |key: &str| {
        let at = dockerfile.find(&format!("{key}=\""))? + key.len() + 2;
        let end = dockerfile[at..].find('"')?;
        Some(dockerfile[at..at + end].to_owned())
    };
    ensure!(
        label("org.opencontainers.image.version").as_deref() == Some(env!("CARGO_PKG_VERSION")),
        "the image's version label: {:?}",
        label("org.opencontainers.image.version")
    );
    ensure!(
        label("baton.dev/feature-levels") == Some(format!("{min}-{max}")),
        "the image's feature-levels label: {:?}",
        label("baton.dev/feature-levels")
    );
    Ok(())
}
