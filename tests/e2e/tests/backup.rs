//! Backup and restore with real processes (DESIGN §1, `baton-ensemble snapshot`): 10,000 znodes,
//! sessions and ephemerals written to a 3-member ensemble, `snapshot save` from a follower to a
//! file or to S3 (moto, a real S3-compatible server), `snapshot restore` into the data dirs of a
//! NEW 3-member ensemble (new cluster id, new certificates), which then starts as usual and holds
//! every persistent node with its data and Stat, and none of the ephemerals. And the refusals: a
//! certificate other than the admin's gets 403, a damaged backup, a non-empty data dir and the
//! backup's own cluster id are refused with nothing written.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use baton_tests::cluster::{Cluster, Member, Method};
use baton_tests::command::{self, Finished};
use baton_tests::moto::{Moto, MotoTls};
use baton_tests::pki::Pki;
use baton_tests::{EPHEMERAL, PERSISTENT};
use serde_json::Value;
use zookeeper_client as zk;

/// Groups of nodes under `/backup`, and nodes in each: 10,000 in all.
const GROUPS: usize = 100;
const PER_GROUP: usize = 100;
/// Creates (or setData) per multi.
const BATCH: usize = 200;
/// Reads per multiRead.
const READ_BATCH: usize = 500;
/// One `baton-ensemble snapshot` run.
const CLI_DEADLINE: Duration = Duration::from_secs(120);
/// A whole case: two 3-member ensembles, 10,000 nodes written and read twice.
const CASE_DEADLINE: Duration = Duration::from_secs(420);

/// What `populate` wrote, and the sessions that own the ephemerals (kept open through the save).
struct Written {
    persistent: Vec<String>,
    ephemerals: Vec<String>,
    /// Parents that lose children when the ephemerals are dropped.
    ephemeral_parents: BTreeSet<String>,
    /// Open until the test ends: the backup must catch their ephemerals.
    _sessions: Vec<zk::Client>,
    /// The session that wrote the persistent nodes, open too: four sessions in all.
    writer: zk::Client,
}

/// Sessions open when the backups are taken.
const SESSIONS: u64 = 4;

fn node(g: usize, n: usize) -> String {
    format!("/backup/g-{g:02}/n-{n:03}")
}

/// Writes `/backup`, 100 groups of 100 nodes (every 7th node's data set twice more, so versions
/// differ), and 4 ephemerals on each of 3 sessions, one session per member.
async fn populate(cluster: &Cluster) -> Result<Written> {
    let client = cluster.connect().await?;
    client
        .create("/backup", b"root of the backup test", &PERSISTENT)
        .await?;
    let mut persistent = vec!["/backup".to_string()];
    let mut paths = Vec::with_capacity(GROUPS * (PER_GROUP + 1));
    for g in 0..GROUPS {
        paths.push(format!("/backup/g-{g:02}"));
        for n in 0..PER_GROUP {
            paths.push(node(g, n));
        }
    }
    for chunk in paths.chunks(BATCH) {
        let mut multi = client.new_multi_writer();
        for path in chunk {
            // Data of varied length, some empty.
            let data = path.repeat(path.len() % 4);
            multi.add_create(path, data.as_bytes(), &PERSISTENT)?;
        }
        multi
            .commit()
            .await
            .map_err(|e| anyhow!("create batch: {e}"))?;
    }
    persistent.extend(paths.iter().cloned());
    let touched: Vec<String> = (0..GROUPS * PER_GROUP)
        .step_by(7)
        .map(|i| node(i / PER_GROUP, i % PER_GROUP))
        .collect();
    for round in 0..2 {
        for chunk in touched.chunks(BATCH) {
            let mut multi = client.new_multi_writer();
            for path in chunk {
                multi.add_set_data(path, format!("{path} set {round}").as_bytes(), None)?;
            }
            multi
                .commit()
                .await
                .map_err(|e| anyhow!("setData batch: {e}"))?;
        }
    }
    let mut ephemerals = Vec::new();
    let mut sessions = Vec::new();
    for id in cluster.ids() {
        let session = cluster.connect_to(id).await?;
        for k in 0..4 {
            let path = if k < 2 {
                format!("/backup/g-00/eph-{id}-{k}")
            } else {
                format!("/eph-{id}-{k}")
            };
            session
                .create(&path, b"owned by a session of the old ensemble", &EPHEMERAL)
                .await
                .with_context(|| format!("create {path}"))?;
            ephemerals.push(path);
        }
        sessions.push(session);
    }
    Ok(Written {
        persistent,
        ephemerals,
        ephemeral_parents: ["/backup/g-00".to_string(), "/".to_string()].into(),
        _sessions: sessions,
        writer: client,
    })
}

/// Data and Stat of every path in `paths` (multiRead in batches), after a `sync`.
async fn read_all(
    client: &zk::Client,
    paths: &[String],
) -> Result<BTreeMap<String, (Vec<u8>, zk::Stat)>> {
    client.sync("/").await.context("sync")?;
    let mut found = BTreeMap::new();
    for chunk in paths.chunks(READ_BATCH) {
        let mut reader = client.new_multi_reader();
        for path in chunk {
            reader.add_get_data(path)?;
        }
        let results = reader.commit().await.context("multiRead")?;
        ensure!(
            results.len() == chunk.len(),
            "multiRead answered {} of {}",
            results.len(),
            chunk.len()
        );
        for (path, result) in chunk.iter().zip(results) {
            match result {
                zk::MultiReadResult::Data { data, stat } => {
                    found.insert(path.clone(), (data, stat));
                }
                other => bail!("read {path}: {other:?}"),
            }
        }
    }
    Ok(found)
}

/// Runs `baton-ensemble snapshot ARGS` with `env` added. The S3 client's extra trust
/// (`SSL_CERT_FILE`, `SSL_CERT_DIR`) is only what `env` gives, never the test runner's.
async fn snapshot_cmd(args: Vec<OsString>, env: &[(&str, String)]) -> Result<Finished> {
    let mut command = Command::new(baton_tests::baton_binary()?);
    command
        .arg("snapshot")
        .args(args)
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR");
    for (key, value) in env {
        command.env(key, value);
    }
    command::run(command, CLI_DEADLINE).await
}

/// Its stdout's one JSON line, once it succeeded.
fn report(what: &str, finished: &Finished) -> Result<Value> {
    ensure!(finished.success(), "{what} failed:\n{finished}");
    let lines: Vec<&str> = finished.stdout.lines().collect();
    ensure!(
        lines.len() == 1,
        "{what} printed {} lines:\n{finished}",
        lines.len()
    );
    serde_json::from_str(lines[0]).with_context(|| format!("{what} printed no JSON:\n{finished}"))
}

fn os(parts: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<OsString> {
    parts.iter().map(|p| p.as_ref().to_os_string()).collect()
}

/// `snapshot save` flags up to the destination: member `id`'s admin URL and the certificate in
/// `pki`'s folder named `holder` (`admin`, or `member-N` to be refused).
fn save_args(cluster: &Cluster, id: u64, holder: &str) -> Result<Vec<OsString>> {
    let url = format!("https://{}", cluster.member(id)?.admin_addr());
    let dir = cluster.pki().dir();
    Ok(os(&[
        &"save",
        &"--admin-url",
        &url,
        &"--tls-ca",
        &dir.join("ca.crt"),
        &"--tls-cert",
        &dir.join(format!("{holder}.crt")),
        &"--tls-key",
        &dir.join(format!("{holder}.key")),
    ]))
}

/// A member that does not lead: saving from it goes through ReadIndex at the leader.
async fn a_follower(cluster: &mut Cluster) -> Result<u64> {
    let leader = cluster.leader().await?;
    cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .context("no follower")
}

/// Starts a NEW 3-member ensemble of cluster `cluster_id` whose members are restored from
/// `from` with `extra` flags (`--tls-cert` is added unless `by_cluster_id`, which passes
/// `--cluster-id` instead); returns it with the restore reports.
async fn restore_new_ensemble(
    from: &str,
    cluster_id: &str,
    by_cluster_id: bool,
    extra: &[OsString],
    env: &[(&str, String)],
) -> Result<(Cluster, Vec<Value>)> {
    let pki = Pki::new(cluster_id, &[1, 2, 3])?;
    let certs = pki.dir().to_path_buf();
    let mut reports = Vec::new();
    let cluster = Cluster::start_prepared(3, pki, &[], async |member: &Member| {
        let id = member.id().to_string();
        let mut args = os(&[
            &"restore",
            &"--from",
            &from,
            &"--data-dir",
            &member.data_dir(),
            &"--id",
            &id,
            &"--members",
            &member.members_flag(),
        ]);
        if by_cluster_id {
            args.extend(os(&[&"--cluster-id", &cluster_id]));
        } else {
            let cert = certs.join(format!("member-{id}.crt"));
            args.extend(os(&[&"--tls-cert", &cert]));
        }
        args.extend(extra.iter().cloned());
        let finished = snapshot_cmd(args, env).await?;
        reports.push(report(&format!("restore of member {id}"), &finished)?);
        Ok(())
    })
    .await?;
    Ok((cluster, reports))
}

/// The new ensemble: its own cluster id, no session, every persistent node as `expected` (the
/// whole Stat, except what dropping ephemerals changes on their parents), no ephemeral; and
/// new writes get zxids above the backup's index.
async fn check_restored(
    new: &mut Cluster,
    cluster_id: &str,
    written: &Written,
    expected: &BTreeMap<String, (Vec<u8>, zk::Stat)>,
    index: u64,
) -> Result<()> {
    let leader = new.leader().await?;
    let status = new.status(leader).await?;
    ensure!(
        status.cluster_id == cluster_id,
        "cluster id {}",
        status.cluster_id
    );
    ensure!(
        status.members == vec![1, 2, 3],
        "members {:?}",
        status.members
    );
    ensure!(
        status.sessions == 0,
        "{} sessions of the old ensemble survived",
        status.sessions
    );
    ensure!(
        status.applied_index >= index,
        "applied {} < backup {index}",
        status.applied_index
    );
    for id in new.ids() {
        let client = new.connect_to(id).await?;
        let paths: Vec<String> = expected.keys().cloned().collect();
        let found = read_all(&client, &paths)
            .await
            .with_context(|| format!("member {id}"))?;
        for (path, (data, stat)) in expected {
            let (new_data, new_stat) = &found[path];
            ensure!(new_data == data, "member {id}: {path} has other data");
            if written.ephemeral_parents.contains(path) {
                let same = (
                    stat.version,
                    stat.aversion,
                    stat.czxid,
                    stat.mzxid,
                    stat.ctime,
                    stat.mtime,
                ) == (
                    new_stat.version,
                    new_stat.aversion,
                    new_stat.czxid,
                    new_stat.mzxid,
                    new_stat.ctime,
                    new_stat.mtime,
                );
                ensure!(same, "member {id}: {path} was {stat:?}, is {new_stat:?}");
            } else {
                ensure!(
                    new_stat == stat,
                    "member {id}: {path} was {stat:?}, is {new_stat:?}"
                );
            }
        }
        for path in &written.ephemerals {
            ensure!(
                client.check_stat(path).await?.is_none(),
                "member {id}: ephemeral {path} of the old ensemble survived"
            );
        }
        let (_, g00) = client.get_data("/backup/g-00").await?;
        ensure!(
            g00.num_children as usize == PER_GROUP,
            "/backup/g-00 has {} children",
            g00.num_children
        );
    }
    let client = new.connect().await?;
    let (stat, _) = client
        .create("/backup/after-restore", b"", &PERSISTENT)
        .await?;
    ensure!(
        stat.czxid > index as i64,
        "a new write got zxid {} <= the backup's {index}",
        stat.czxid
    );
    Ok(())
}

async fn with_deadline<F>(case: F)
where
    F: AsyncFnOnce() -> Result<()>,
{
    match tokio::time::timeout(CASE_DEADLINE, case()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{e:?}"),
        Err(_) => panic!("case did not finish within {CASE_DEADLINE:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_backup_restores_into_a_new_ensemble() {
    with_deadline(async || {
        let mut old = Cluster::start(3).await?;
        let written = populate(&old).await?;
        let follower = a_follower(&mut old).await?;
        let dir = tempfile::tempdir()?;
        // A folder that does not exist yet: the save makes it.
        let file = dir.path().join("backups/old.baton-backup");
        let mut args = save_args(&old, follower, "admin")?;
        args.extend(os(&[&"--out", &file]));
        let saved = report("save", &snapshot_cmd(args, &[]).await?)?;
        let bytes = std::fs::read(&file)?;
        // It holds every session's password: the owner's alone, in a folder that is too.
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| -> Result<u32> {
                Ok(std::fs::metadata(p)?.permissions().mode() & 0o777)
            };
            ensure!(mode(&file)? == 0o600, "backup file mode {:o}", mode(&file)?);
            let folder = dir.path().join("backups");
            ensure!(
                mode(&folder)? == 0o700,
                "backup folder mode {:o}",
                mode(&folder)?
            );
        }
        ensure!(saved["location"] == file.display().to_string(), "{saved}");
        ensure!(saved["clusterId"] == old.pki().cluster(), "{saved}");
        ensure!(saved["bytes"] == bytes.len() as u64, "{saved}");
        let index = saved["index"].as_u64().context("index")?;
        let reader = old.connect().await?;
        let expected = read_all(&reader, &written.persistent).await?;
        ensure!(expected.len() == GROUPS * (PER_GROUP + 1) + 1);
        // Every write acknowledged before the save is in it.
        let newest = expected.values().map(|(_, s)| s.mzxid).max().unwrap_or(0);
        ensure!(
            index as i64 >= newest,
            "backup at {index}, a write at {newest}"
        );

        let (mut new, reports) = restore_new_ensemble(
            &file.display().to_string(),
            "baton-tests-restored",
            false,
            &[],
            &[],
        )
        .await?;
        for r in &reports {
            ensure!(
                r["clusterId"] == "baton-tests-restored" && r["index"] == index,
                "{r}"
            );
            ensure!(r["backupClusterId"] == old.pki().cluster(), "{r}");
            ensure!(
                r["sessionsDropped"] == SESSIONS && r["ephemeralsDropped"] == 12,
                "{r}"
            );
        }
        check_restored(&mut new, "baton-tests-restored", &written, &expected, index).await?;
        // The sequence counters came along: the same sequential create names the same node.
        let seq = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
        let (_, in_old) = reader.create("/backup/g-00/s-", b"", &seq).await?;
        let (_, in_new) = new
            .connect()
            .await?
            .create("/backup/g-00/s-", b"", &seq)
            .await?;
        ensure!(
            in_old.to_string() == in_new.to_string(),
            "sequence {in_old} vs {in_new}"
        );
        Ok(())
    })
    .await;
}

/// One byte flipped in the middle of a copy of `file`.
fn damaged_copy(file: &Path, to: &Path) -> Result<()> {
    let mut bytes = std::fs::read(file)?;
    let at = bytes.len() / 2;
    bytes[at] ^= 0x10;
    std::fs::write(to, bytes)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_write_nothing() {
    with_deadline(async || {
        let old = Cluster::start(1).await?;
        old.connect()
            .await?
            .create("/kept", b"x", &PERSISTENT)
            .await?;
        let admin_addr = old.member(1)?.admin_addr().to_string();

        // Only the admin certificate: no certificate and a member's are both refused.
        let anonymous = old.pki().anonymous_client(Duration::from_secs(10))?;
        let answer = anonymous
            .request(&admin_addr, http::Method::GET, "/v1/snapshot", None)
            .await?;
        ensure!(answer.status == 403, "no certificate: {}", answer.status);
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("b.baton-backup");
        let mut args = save_args(&old, 1, "member-1")?;
        args.extend(os(&[&"--out", &file]));
        let refused = snapshot_cmd(args, &[]).await?;
        ensure!(
            !refused.success() && refused.stderr.contains("403"),
            "member certificate:\n{refused}"
        );
        ensure!(!file.exists(), "a refused save wrote {}", file.display());
        let admin = old.admin(1, Method::Get, "/v1/snapshot", None).await?;
        ensure!(admin.status == 200, "the admin: {admin}");

        let mut args = save_args(&old, 1, "admin")?;
        args.extend(os(&[&"--out", &file]));
        report("save", &snapshot_cmd(args, &[]).await?)?;
        let restore = |from: &Path, data_dir: &Path, cluster: &str| {
            os(&[
                &"restore",
                &"--from",
                &from,
                &"--data-dir",
                &data_dir,
                &"--id",
                &"1",
                &"--members",
                &"1=127.0.0.1:1",
                &"--cluster-id",
                &cluster,
            ])
        };

        // A damaged backup: refused, naming the damage, nothing written.
        let bad = dir.path().join("bad.baton-backup");
        damaged_copy(&file, &bad)?;
        let target = dir.path().join("data-bad");
        let out = snapshot_cmd(restore(&bad, &target, "fresh"), &[]).await?;
        ensure!(
            !out.success() && out.stderr.contains("damaged"),
            "damaged backup:\n{out}"
        );
        ensure!(
            !target.exists(),
            "a refused restore made {}",
            target.display()
        );
        // Truncated: refused too.
        let bytes = std::fs::read(&file)?;
        let short = dir.path().join("short.baton-backup");
        std::fs::write(&short, &bytes[..bytes.len() - 1])?;
        let out = snapshot_cmd(restore(&short, &target, "fresh"), &[]).await?;
        ensure!(
            !out.success() && out.stderr.contains("truncated"),
            "truncated backup:\n{out}"
        );
        ensure!(
            !target.exists(),
            "a refused restore made {}",
            target.display()
        );

        // A data dir that holds anything: refused, left as it was.
        let busy = dir.path().join("data-busy");
        std::fs::create_dir(&busy)?;
        std::fs::write(busy.join("keep-me"), b"x")?;
        let out = snapshot_cmd(restore(&file, &busy, "fresh"), &[]).await?;
        ensure!(
            !out.success() && out.stderr.contains("not empty"),
            "non-empty data dir:\n{out}"
        );
        let left: Vec<PathBuf> = std::fs::read_dir(&busy)?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<_>>()?;
        ensure!(
            left == vec![busy.join("keep-me")],
            "the data dir now holds {left:?}"
        );

        // The backup's own cluster id: a restore always makes a new ensemble.
        let out = snapshot_cmd(restore(&file, &target, old.pki().cluster()), &[]).await?;
        ensure!(
            !out.success() && out.stderr.contains("NEW ensemble"),
            "same cluster id:\n{out}"
        );
        ensure!(
            !target.exists(),
            "a refused restore made {}",
            target.display()
        );

        // And the same flags with a fresh id work.
        let out = snapshot_cmd(restore(&file, &target, "fresh"), &[]).await?;
        report("restore", &out)?;
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_backup_restores_the_newest_and_keep_prunes() {
    with_deadline(async || {
        let moto = Moto::start().await?;
        let bucket = "baton-backups";
        moto.create_bucket(bucket).await?;
        let env = moto.env();
        let s3 = |url: &str| {
            os(&[
                &"--s3-url",
                &url,
                &"--s3-endpoint",
                &moto.endpoint(),
                &"--s3-region",
                &baton_tests::moto::REGION,
            ])
        };

        let mut old = Cluster::start(3).await?;
        let written = populate(&old).await?;
        let follower = a_follower(&mut old).await?;
        let writer = &written.writer;
        // Another cluster's backup under the same prefix: never pruned, never restored.
        let other = "prod/other-cluster-00000000000000000001-20000101T000000Z.baton-backup";
        moto.put(bucket, other, b"not ours").await?;
        let mut locations = Vec::new();
        for round in 0..3 {
            let mut args = save_args(&old, follower, "admin")?;
            args.extend(s3(&format!("s3://{bucket}/prod/")));
            args.extend(os(&[&"--keep", &"2"]));
            let saved = report("save to S3", &snapshot_cmd(args, &env).await?)?;
            let location = saved["location"].as_str().context("location")?.to_string();
            ensure!(
                location.starts_with(&format!("s3://{bucket}/prod/{}-", old.pki().cluster())),
                "{saved}"
            );
            ensure!(location.ends_with(".baton-backup"), "{saved}");
            locations.push(location);
            if round < 2 {
                writer
                    .create(&format!("/backup/after-{round}"), b"", &PERSISTENT)
                    .await?;
            }
        }
        let keys = moto.keys(bucket, "prod/").await?;
        let key = |location: &str| {
            location
                .trim_start_matches(&format!("s3://{bucket}/"))
                .to_string()
        };
        let mut kept = vec![key(&locations[1]), key(&locations[2]), other.to_string()];
        kept.sort();
        ensure!(keys == kept, "after --keep 2: {keys:?}, expected {kept:?}");

        let mut paths = written.persistent.clone();
        paths.extend(["/backup/after-0".to_string(), "/backup/after-1".to_string()]);
        let expected = read_all(writer, &paths).await?;
        let index = expected
            .values()
            .map(|(_, s)| s.mzxid.max(s.pzxid))
            .max()
            .unwrap_or(0) as u64;

        // The pruned one is gone: refused, nothing written.
        let gone = tempfile::tempdir()?;
        let target = gone.path().join("data");
        let mut args = os(&[
            &"restore",
            &"--from",
            &locations[0],
            &"--data-dir",
            &target,
            &"--id",
            &"1",
            &"--members",
            &"1=127.0.0.1:1",
            &"--cluster-id",
            &"fresh",
        ]);
        args.extend(os(&[
            &"--s3-endpoint",
            &moto.endpoint(),
            &"--s3-region",
            &baton_tests::moto::REGION,
        ]));
        let out = snapshot_cmd(args, &env).await?;
        ensure!(!out.success(), "restored a pruned backup:\n{out}");
        ensure!(
            !target.exists(),
            "a refused restore made {}",
            target.display()
        );

        // The prefix: the newest backup, which holds the writes before the last save.
        let extra = os(&[
            &"--s3-endpoint",
            &moto.endpoint(),
            &"--s3-region",
            &baton_tests::moto::REGION,
        ]);
        let (mut new, reports) = restore_new_ensemble(
            &format!("s3://{bucket}/prod/"),
            "baton-tests-s3-restored",
            true,
            &extra,
            &env,
        )
        .await?;
        for r in &reports {
            ensure!(r["from"] == locations[2].as_str(), "{r}");
            ensure!(
                r["sessionsDropped"] == SESSIONS && r["ephemeralsDropped"] == 12,
                "{r}"
            );
        }
        let backup_index = reports[0]["index"].as_u64().context("index")?;
        ensure!(
            backup_index >= index,
            "backup at {backup_index}, a write at {index}"
        );
        check_restored(
            &mut new,
            "baton-tests-s3-restored",
            &written,
            &expected,
            backup_index,
        )
        .await?;
        Ok(())
    })
    .await;
}

/// An S3 endpoint over HTTPS with a certificate of a private CA (MinIO or Ceph inside a
/// company): `baton-ensemble snapshot` trusts the system's roots (the image's
/// ca-certificates), which do not hold that CA, so the save is refused; with `SSL_CERT_FILE`
/// naming the CA, as a pod's env would, the save and a restore from it go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_backup_over_https_trusts_the_ca_in_ssl_cert_file() {
    with_deadline(async || {
        // The endpoint's CA, made here: not the ensemble's, and in no system store. Its member
        // certificate names 127.0.0.1, where moto serves it.
        let endpoint_pki = Pki::new("baton-tests-s3-endpoint", &[1])?;
        let dir = endpoint_pki.dir();
        let moto = Moto::start_tls(MotoTls {
            cert: &dir.join("member-1.crt"),
            key: &dir.join("member-1.key"),
            ca: &endpoint_pki.ca(),
        })
        .await?;
        ensure!(
            moto.endpoint().starts_with("https://"),
            "{}",
            moto.endpoint()
        );
        let bucket = "baton-backups-tls";
        moto.create_bucket(bucket).await?;
        let s3 = os(&[
            &"--s3-endpoint",
            &moto.endpoint(),
            &"--s3-region",
            &baton_tests::moto::REGION,
        ]);
        let system_roots = moto.env();
        let mut private_ca = moto.env();
        private_ca.push(("SSL_CERT_FILE", endpoint_pki.ca().display().to_string()));

        let old = Cluster::start(1).await?;
        old.connect()
            .await?
            .create("/over-https", b"round trip", &PERSISTENT)
            .await?;
        let mut save = save_args(&old, 1, "admin")?;
        save.extend(os(&[&"--s3-url", &format!("s3://{bucket}/tls/")]));
        save.extend(s3.iter().cloned());

        let refused = snapshot_cmd(save.clone(), &system_roots).await?;
        ensure!(
            !refused.success(),
            "saved over HTTPS to an endpoint whose CA only the test knows:\n{refused}"
        );
        ensure!(
            refused.stderr.to_lowercase().contains("certificate"),
            "refused, but not for the certificate:\n{refused}"
        );
        let keys = moto.keys(bucket, "tls/").await?;
        ensure!(keys.is_empty(), "a refused save stored {keys:?}");

        let saved = report(
            "save to S3 over HTTPS",
            &snapshot_cmd(save, &private_ca).await?,
        )?;
        let location = saved["location"].as_str().context("location")?.to_string();
        let keys = moto.keys(bucket, "tls/").await?;
        ensure!(
            keys.len() == 1 && location == format!("s3://{bucket}/{}", keys[0]),
            "saved {location}, the bucket holds {keys:?}"
        );

        let pki = Pki::new("baton-tests-s3-tls-restored", &[1])?;
        let new = Cluster::start_prepared(1, pki, &[], async |member: &Member| {
            let mut args = os(&[
                &"restore",
                &"--from",
                &location,
                &"--data-dir",
                &member.data_dir(),
                &"--id",
                &"1",
                &"--members",
                &member.members_flag(),
                &"--cluster-id",
                &"baton-tests-s3-tls-restored",
            ]);
            args.extend(s3.iter().cloned());
            let restored = report(
                "restore from S3 over HTTPS",
                &snapshot_cmd(args, &private_ca).await?,
            )?;
            ensure!(restored["from"] == location.as_str(), "{restored}");
            Ok(())
        })
        .await?;
        let (data, _) = new.connect().await?.get_data("/over-https").await?;
        ensure!(data == b"round trip", "restored data {data:?}");
        Ok(())
    })
    .await;
}

/// The trust the test above relies on is in the image: its run stage (the last `FROM`) installs
/// Debian's `ca-certificates`, the bundle the S3 client reads when `SSL_CERT_FILE` is not set.
#[test]
fn the_image_has_the_system_ca_bundle() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile"))?;
    let run_stage = dockerfile
        .rsplit("\nFROM ")
        .next()
        .context("the Dockerfile has no FROM")?;
    let commands = run_stage.replace("\\\n", " ");
    let installs = commands.lines().any(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        line.trim_start().starts_with("RUN ")
            && words.windows(2).any(|w| w == ["apt-get", "install"])
            && words.contains(&"ca-certificates")
    });
    ensure!(
        installs,
        "the image's run stage does not install ca-certificates:\n{run_stage}"
    );
    Ok(())
}
