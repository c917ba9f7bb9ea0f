//! Replicated settings, quotas and the disk-space alarm on real member processes (DESIGN.md §4
//! "What one tenant can take"):
//! - a client past its namespace's znode quota is refused (BadArguments) by every member, and the
//!   other namespaces and the shared pool go on;
//! - `PUT /v1/settings` at the leader takes effect on every member (421 elsewhere);
//! - members started with different `--check-identities` never diverge: the flag only gives a
//!   new ensemble its first value, which then is replicated state;
//! - a member whose disk runs low raises the NOSPACE alarm: every member refuses writes that
//!   add data, reads and deletes go on, and the alarm clears by itself once space is back
//!   (through a test-only file that stands for the volume's free space; and, ignored by
//!   default because it mounts a tmpfs per member, on a real volume the test fills:
//!   `cargo test -p baton-tests --test settings -- --ignored`, as root, which test.sh runs).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use baton_tests::PERSISTENT;
use baton_tests::cluster::{Cluster, Member, Method};
use serde_json::{Value, json};
use zookeeper_client as zk;

const DEADLINE: Duration = Duration::from_secs(30);
/// `addauth digest super:secret` matches this.
const SUPER_DIGEST: &str = "super:lK75jTNcA+U9vtVEw5vB51mj/w4=";

async fn settings_of(cluster: &Cluster, id: u64) -> Result<Value> {
    let reply = cluster.admin(id, Method::Get, "/v1/settings", None).await?;
    ensure!(reply.status == 200, "GET /v1/settings on {id}: {reply}");
    Ok(reply.body)
}

/// Waits until every member's `GET /v1/settings` satisfies `check`.
async fn on_every_member(
    cluster: &Cluster,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Result<()> {
    for id in cluster.ids() {
        baton_tests::eventually(&format!("{what} on member {id}"), DEADLINE, async || {
            Ok(check(&settings_of(cluster, id).await?))
        })
        .await?;
    }
    Ok(())
}

async fn create(client: &zk::Client, path: &str) -> Result<(), zk::Error> {
    client.create(path, b"", &PERSISTENT).await.map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_past_its_quota_gets_quota_exceeded_on_every_member() {
    let flags = ["--quota-namespace-znodes", "4"];
    baton_tests::cluster::run_cluster_case_with_flags(3, &flags, async |cluster: &mut Cluster| {
        // The flag gave the new ensemble its first value.
        on_every_member(cluster, "the flag's quota", |s| {
            s["set"] == true && s["namespaceZnodes"] == 4
        })
        .await?;
        let first = cluster.connect_to(1).await?;
        create(&first, "/baton").await?;
        create(&first, "/baton/a").await?;
        create(&first, "/baton/b").await?;
        // /baton/a itself and three children are the namespace's four znodes, made through
        // three different members.
        for id in cluster.ids() {
            let client = cluster.connect_to(id).await?;
            create(&client, &format!("/baton/a/n{id}")).await?;
        }
        for id in cluster.ids() {
            let client = cluster.connect_to(id).await?;
            match create(&client, &format!("/baton/a/more{id}")).await {
                Err(zk::Error::BadArguments(_)) => {}
                other => bail!("a fifth znode in /baton/a through member {id}: {other:?}"),
            }
            // A multi is refused whole, whichever op passes the quota.
            let mut writer = client.new_multi_writer();
            writer.add_create(&format!("/elsewhere-multi{id}"), b"", &PERSISTENT)?;
            writer.add_create(&format!("/baton/a/multi{id}"), b"", &PERSISTENT)?;
            let multi = writer.commit().await;
            ensure!(
                matches!(
                    multi,
                    Err(zk::MultiWriteError::OperationFailed {
                        index: 1,
                        source: zk::Error::BadArguments(_)
                    })
                ),
                "a multi past the quota through member {id}: {multi:?}"
            );
        }
        // Another namespace and the shared pool are charged apart.
        create(&first, "/baton/b/x").await?;
        create(&first, "/outside").await?;
        // Deleting frees room.
        first.delete("/baton/a/n1", None).await?;
        create(&first, "/baton/a/again").await?;
        let metrics = cluster.admin(1, Method::Get, "/metrics", None).await?;
        let text = metrics.body.as_str().unwrap_or_default().to_owned();
        ensure!(
            text.lines().any(|l| {
                l.starts_with("baton_quota_refusals_total{reason=\"namespace_znodes\"}")
                    && !l.ends_with(" 0")
            }),
            "no namespace_znodes refusal counted on member 1:\n{text}"
        );
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settings_change_through_the_admin_api_applies_on_every_member() {
    baton_tests::cluster::run_cluster_case(3, async |cluster: &mut Cluster| {
        let leader = cluster.wait_for_leader().await?;
        let follower = cluster
            .ids()
            .into_iter()
            .find(|id| *id != leader)
            .context("a follower")?;
        let body = json!({ "namespaceZnodes": 2, "ephemeralsPerSession": 1 });
        let refused = cluster
            .admin(follower, Method::Put, "/v1/settings", Some(&body))
            .await?;
        ensure!(
            refused.status == 421 && refused.error_code() == Some("NotLeader"),
            "PUT on a follower: {refused}"
        );
        let unknown = json!({ "namespaceZnodez": 2 });
        let bad = cluster
            .admin(leader, Method::Put, "/v1/settings", Some(&unknown))
            .await?;
        ensure!(bad.status == 400, "an unknown setting: {bad}");
        let changed = cluster
            .admin(leader, Method::Put, "/v1/settings", Some(&body))
            .await?;
        ensure!(
            changed.status == 200 && changed.body["namespaceZnodes"] == 2,
            "PUT on the leader: {changed}"
        );
        on_every_member(cluster, "the new quota", |s| {
            s["namespaceZnodes"] == 2 && s["ephemeralsPerSession"] == 1
        })
        .await?;
        let status = cluster
            .admin(follower, Method::Get, "/v1/status", None)
            .await?;
        ensure!(
            status.body["settings"]["namespaceZnodes"] == 2,
            "status shows the settings: {status}"
        );
        // In force on every member: each refuses what the new quotas refuse.
        let first = cluster.connect_to(leader).await?;
        create(&first, "/baton").await?;
        create(&first, "/baton/a").await?;
        create(&first, "/baton/a/one").await?;
        for id in cluster.ids() {
            let client = cluster.connect_to(id).await?;
            let second = create(&client, "/baton/a/two").await;
            ensure!(
                matches!(second, Err(zk::Error::BadArguments(_))),
                "member {id}: {second:?}"
            );
            let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
            client.create(&format!("/e{id}-1"), b"", &ephemeral).await?;
            let over = client.create(&format!("/e{id}-2"), b"", &ephemeral).await;
            ensure!(
                matches!(over, Err(zk::Error::BadArguments(_))),
                "a second ephemeral through member {id}: {over:?}"
            );
        }
        Ok(())
    })
    .await;
}

/// The rolling `--check-identities` split: members 1 and 2 have the flag, member 3 not.
/// Whichever leads first gives the ensemble its value; anonymous creates below a namespace,
/// one through each member, are then applied by all or by none, and the super identity lists
/// the same children on every member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_started_with_different_check_identities_never_diverge() {
    let flags = ["--super-digest", SUPER_DIGEST];
    let result: Result<()> = async {
        let mut cluster = Cluster::start_with_member_flags(3, &flags, |m: &Member| {
            if m.id() == 3 {
                vec![]
            } else {
                vec!["--check-identities".to_owned()]
            }
        })
        .await?;
        let outcome = async {
            on_every_member(&cluster, "settings set", |s| s["set"] == true).await?;
            let admin = cluster.connect_to(1).await?;
            admin.auth("digest", b"super:secret").await?;
            create(&admin, "/baton").await?;
            create(&admin, "/baton/a").await?;
            let mut outcomes = BTreeMap::new();
            for id in cluster.ids() {
                let anonymous = cluster.connect_to(id).await?;
                let created = create(&anonymous, &format!("/baton/a/from-{id}")).await;
                outcomes.insert(id, created);
                // The write's outcome is applied everywhere before the next goes.
                anonymous.sync("/baton/a").await?;
            }
            let first = outcomes.values().next().cloned().context("outcomes")?;
            ensure!(
                outcomes.values().all(|o| *o == first),
                "members answered the same create differently: {outcomes:?}"
            );
            let mut listings = BTreeMap::new();
            for id in cluster.ids() {
                let reader = cluster.connect_to(id).await?;
                reader.auth("digest", b"super:secret").await?;
                reader.sync("/baton/a").await?;
                let (mut children, _) = reader.get_children("/baton/a").await?;
                children.sort();
                listings.insert(id, children);
            }
            let first = listings.values().next().cloned().unwrap_or_default();
            ensure!(
                listings.values().all(|l| *l == first),
                "the members' trees differ: {listings:?}"
            );
            let settings = settings_of(&cluster, 3).await?;
            let on = settings["checkIdentities"] == true;
            ensure!(
                first.is_empty() == on,
                "with checkIdentities {on}, the children are {first:?}"
            );
            Ok(())
        }
        .await;
        if outcome.is_err() {
            cluster.dump_logs();
        }
        outcome
    }
    .await;
    if let Err(err) = result {
        panic!("{err:?}");
    }
}

/// Writes `bytes` as the free space the member reads (`--unsafe-testing-free-disk-bytes-file`).
fn set_free(member: &Member, bytes: u64) -> Result<()> {
    let file = free_file(member);
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, bytes.to_string())?;
    std::fs::rename(&tmp, &file).with_context(|| format!("write {}", file.display()))
}

fn free_file(member: &Member) -> std::path::PathBuf {
    member.data_dir().with_file_name("free-disk-bytes")
}

async fn alarm_metric(cluster: &Cluster, id: u64) -> Result<Option<String>> {
    let metrics = cluster.admin(id, Method::Get, "/metrics", None).await?;
    Ok(metrics
        .body
        .as_str()
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("baton_alarm{kind=\"nospace\"}"))
        .map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_low_on_disk_raises_the_alarm_and_it_clears_by_itself() {
    const WATERMARK: u64 = 1_000_000;
    let result: Result<()> = async {
        let mut cluster =
            Cluster::start_with_member_flags(3, &["--min-free-disk-bytes", "1000000"], |m| {
                // Plenty of room until the test says otherwise.
                let _ = set_free(m, 100 * WATERMARK);
                vec![
                    "--unsafe-testing-free-disk-bytes-file".to_owned(),
                    free_file(m).display().to_string(),
                ]
            })
            .await?;
        let outcome = async {
            let client = cluster.connect_to(1).await?;
            create(&client, "/kept").await?;
            create(&client, "/doomed").await?;
            client.set_data("/kept", b"0123456789", None).await?;
            ensure!(
                alarm_metric(&cluster, 1).await?.as_deref()
                    == Some("baton_alarm{kind=\"nospace\"} 0"),
                "no alarm at first"
            );

            // Member 2's disk "fills".
            set_free(cluster.member(2)?, WATERMARK - 1)?;
            on_every_member(&cluster, "member 2's alarm", |s| {
                s["alarms"] == json!([{ "member": 2, "kind": "nospace" }])
            })
            .await?;
            for id in cluster.ids() {
                let line = alarm_metric(&cluster, id).await?;
                ensure!(
                    line.as_deref() == Some("baton_alarm{kind=\"nospace\"} 1"),
                    "member {id}: {line:?}"
                );
                let c = cluster.connect_to(id).await?;
                let refused = create(&c, &format!("/new-{id}")).await;
                ensure!(
                    matches!(refused, Err(zk::Error::BadArguments(_))),
                    "a create through member {id} during the alarm: {refused:?}"
                );
                let grow = c.set_data("/kept", b"0123456789+", None).await;
                ensure!(
                    matches!(grow, Err(zk::Error::BadArguments(_))),
                    "a growing setData through member {id}: {grow:?}"
                );
                let (data, _) = c.get_data("/kept").await?;
                ensure!(
                    data == b"0123456789",
                    "a read through member {id}: {data:?}"
                );
            }
            client.delete("/doomed", None).await?;
            client.set_data("/kept", b"short", None).await?;
            ensure!(
                cluster
                    .member(2)?
                    .log_lines_containing("alarm raised")
                    .len()
                    == 1,
                "member 2 logs the alarm once"
            );

            // Space is back (twice the watermark: the hysteresis): it clears by itself.
            set_free(cluster.member(2)?, 2 * WATERMARK)?;
            on_every_member(&cluster, "the alarm cleared", |s| s["alarms"] == json!([])).await?;
            for id in cluster.ids() {
                let c = cluster.connect_to(id).await?;
                create(&c, &format!("/after-{id}")).await?;
            }
            Ok(())
        }
        .await;
        if outcome.is_err() {
            cluster.dump_logs();
        }
        outcome
    }
    .await;
    if let Err(err) = result {
        panic!("{err:?}");
    }
}

/// Each member's volume in the real-disk alarm test, and its watermark.
const VOLUME_MIB: u64 = 64;
const MIB: u64 = 1 << 20;
const REAL_WATERMARK: u64 = 8 * MIB;

/// Bytes an unprivileged writer may still use on the filesystem of `dir` (`stat -f`).
fn free_bytes(dir: &std::path::Path) -> Result<u64> {
    let out = std::process::Command::new("stat")
        .args(["-f", "--format=%a %S"])
        .arg(dir)
        .output()
        .context("run stat -f")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    match (fields.next(), fields.next()) {
        (Some(Ok(blocks)), Some(Ok(size))) => Ok(blocks * size),
        _ => bail!("stat -f {} said {text:?}", dir.display()),
    }
}

/// Fills the volume of `dir` with a file until `leave` bytes are free.
fn fill_until(dir: &std::path::Path, leave: u64) -> Result<std::path::PathBuf> {
    use std::io::Write as _;
    let filler = dir.join("filler");
    let mut file = std::fs::File::create(&filler)?;
    let chunk = vec![0x5a; MIB as usize];
    loop {
        let free = free_bytes(dir)?;
        if free <= leave {
            return Ok(filler);
        }
        let n = (free - leave).min(MIB) as usize;
        file.write_all(&chunk[..n])?;
        file.sync_data()?;
    }
}

/// The alarm on a real volume: member 2's data dir is a tmpfs that the test fills to below
/// `--min-free-disk-bytes` with a file of its own; the member measures it (statvfs), the
/// alarm goes up on every member, writes are refused and reads and deletes served, and
/// removing the file clears it without a restart. Mounts tmpfs, so it needs root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "mounts a tmpfs per member (root only); tests/scripts/test.sh runs it"]
async fn a_real_volume_below_its_watermark_raises_the_alarm_until_space_is_freed() -> Result<()> {
    let mounts = std::sync::Arc::new(baton_tests::tmpfs::TmpfsMounts::default());
    let pki = baton_tests::pki::Pki::new(baton_tests::cluster::CLUSTER_ID, &[1, 2, 3])?;
    let prepare_mounts = mounts.clone();
    let watermark = REAL_WATERMARK.to_string();
    let flags = ["--min-free-disk-bytes", watermark.as_str()];
    let mut cluster = Cluster::start_prepared(3, pki, &flags, async move |m: &Member| {
        let dir = m.data_dir();
        prepare_mounts.mount(&dir, VOLUME_MIB)
    })
    .await?;
    let outcome = async {
        let client = cluster.connect_to(1).await?;
        create(&client, "/doomed").await?;
        let dir = cluster.member(2)?.data_dir();
        let filler = fill_until(&dir, REAL_WATERMARK / 2)?;
        on_every_member(&cluster, "member 2's alarm", |s| {
            s["alarms"] == json!([{ "member": 2, "kind": "nospace" }])
        })
        .await?;
        for id in cluster.ids() {
            let c = cluster.connect_to(id).await?;
            let refused = create(&c, &format!("/new-{id}")).await;
            ensure!(
                matches!(refused, Err(zk::Error::BadArguments(_))),
                "a create through member {id}: {refused:?}"
            );
            c.get_data("/doomed").await?;
        }
        client.delete("/doomed", None).await?;
        std::fs::remove_file(&filler)?;
        on_every_member(&cluster, "the alarm cleared", |s| s["alarms"] == json!([])).await?;
        create(&client, "/after").await?;
        Ok(())
    }
    .await;
    if outcome.is_err() {
        cluster.dump_logs();
    }
    drop(cluster);
    drop(mounts);
    outcome
}

/// A tenant that fills every volume and then cleans up after itself must not leave the
/// ensemble refusing writes: each member's 300 MiB data dir is a tmpfs, one client creates
/// ~1 MiB znodes until the alarm refuses one, then deletes them all. The deletes add almost
/// nothing to the log, so only a compaction that notices the tree shrank frees the volumes;
/// a small create must then pass on every member, with no restart. Mounts tmpfs (root only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "mounts a tmpfs per member (root only); tests/scripts/test.sh runs it"]
async fn the_alarm_clears_once_a_tenant_that_filled_the_volumes_deletes_its_data() -> Result<()> {
    const FILLED_VOLUME_MIB: u64 = 300;
    // Under the 1 MiB frame with the request's header.
    const ZNODE_BYTES: usize = 1_000_000;
    let mounts = std::sync::Arc::new(baton_tests::tmpfs::TmpfsMounts::default());
    let pki = baton_tests::pki::Pki::new(baton_tests::cluster::CLUSTER_ID, &[1, 2, 3])?;
    let prepare_mounts = mounts.clone();
    let mut cluster = Cluster::start_prepared(3, pki, &[], async move |m: &Member| {
        prepare_mounts.mount(&m.data_dir(), FILLED_VOLUME_MIB)
    })
    .await?;
    let outcome = async {
        let client = cluster.connect_to(1).await?;
        let data = vec![0x5a; ZNODE_BYTES];
        let mut created = Vec::new();
        loop {
            let path = format!("/fill-{}", created.len());
            match client.create(&path, &data, &PERSISTENT).await {
                Ok(_) => created.push(path),
                Err(zk::Error::BadArguments(_)) => break,
                Err(e) => bail!("create {path} after {} others: {e}", created.len()),
            }
            ensure!(
                created.len() < 2 * FILLED_VOLUME_MIB as usize,
                "{} MiB written to {FILLED_VOLUME_MIB} MiB volumes and never refused",
                created.len()
            );
        }
        ensure!(!created.is_empty(), "the first create was refused");
        for path in &created {
            client.delete(path, None).await?;
        }
        for id in cluster.ids() {
            let c = cluster.connect_to(id).await?;
            let small = format!("/after-{id}");
            baton_tests::eventually(
                &format!("a small create through member {id} after the deletes"),
                DEADLINE,
                async || match create(&c, &small).await {
                    Ok(()) => Ok(true),
                    Err(zk::Error::BadArguments(_)) => Ok(false),
                    Err(e) => Err(e.into()),
                },
            )
            .await?;
        }
        on_every_member(&cluster, "no alarm", |s| s["alarms"] == json!([])).await?;
        Ok(())
    }
    .await;
    if outcome.is_err() {
        for id in cluster.ids() {
            let dir = cluster.member(id)?.data_dir();
            let listing = std::process::Command::new("ls")
                .args(["-la"])
                .arg(&dir)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            eprintln!("member {id}'s data dir:\n{listing}");
        }
        cluster.dump_logs();
    }
    drop(cluster);
    drop(mounts);
    outcome
}
