//! Damaged files on a real member: while a follower is down (kill -9), one byte of one of its
//! files is flipped or the file is cut short, at a position drawn from a printed seed
//! (`BATON_CORRUPT_SEED` replays one), and the member is started again.
//!
//! - Damage to acknowledged data (a record of a sealed segment, a record of the newest segment
//!   that a valid record follows, a sealed segment cut short even at a record boundary, the
//!   identity file) is refused: the member exits non-zero and its log names the file (and, for a
//!   segment, the byte offset). With the file put back it starts and catches up.
//! - A damaged or cut final record of the newest segment is what a crash mid-write leaves: it
//!   is truncated with a warning naming the file and offset, and the member catches up from the
//!   leader. When that record held entries the member had acknowledged, the leader's commit
//!   index is past the truncated log: the member stops, saying it lost entries it had
//!   acknowledged and how to reseed it, at every start while that leader leads (under a new one
//!   it catches up). Loud, nothing wrong served; the case accepts that or a catch-up at once,
//!   and prints which.
//! - A snapshot flipped anywhere or cut short is set aside and the older one used.
//!
//! After every case each member's tree (read with a client after `sync`) equals the others', and
//! every write acknowledged before the kill is there. Lost un-fsynced writes and failed or
//! stalled fsyncs are `disk_faults.rs`'s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use baton_tests::PERSISTENT;
use baton_tests::cluster::{CLUSTER_CASE_DEADLINE, Cluster, Method};
use baton_tests::registers::Rng;

/// Bytes of one large value: 36 of them fill one 16 MiB segment, so a sealed one follows.
const BIG: usize = 512 * 1024;
/// Large znodes rewritten in turn, so the tree (and with it any snapshot) stays small.
const BIG_NODES: usize = 4;
/// Magic at the start of a segment, then records of `[len u32][kind u8][crc u32][crc u32]`.
const SEGMENT_MAGIC: usize = 8;
const RECORD_HEADER: usize = 13;
/// Status of a member whose data cannot be recovered from its own directory.
const EXIT_UNRECOVERABLE: &str = "exit status: 65";

fn seed() -> u64 {
    let seed = std::env::var("BATON_CORRUPT_SEED")
        .ok()
        .and_then(|s| match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        })
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("corrupt_files: BATON_CORRUPT_SEED={seed}");
    seed
}

async fn run<F>(flags: &[&str], case: F)
where
    F: AsyncFnOnce(&mut Cluster, &mut Rng) -> Result<()>,
{
    let mut rng = Rng(seed());
    let mut cluster = Cluster::start_with_flags(3, flags)
        .await
        .unwrap_or_else(|e| panic!("could not start a 3-member cluster: {e:#}"));
    let outcome = tokio::time::timeout(CLUSTER_CASE_DEADLINE, case(&mut cluster, &mut rng))
        .await
        .unwrap_or_else(|_| Err(anyhow!("case did not finish in time")));
    if let Err(e) = outcome {
        cluster.dump_logs();
        panic!("{e:?}");
    }
}

/// Files in `dir` named `<prefix>...<suffix>`, sorted (segments and snapshots sort oldest first).
fn files(dir: &Path, prefix: &str, suffix: &str) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("list {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with(prefix) && name.ends_with(suffix) {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

fn segments(dir: &Path) -> Result<Vec<PathBuf>> {
    files(dir, "log-", ".wal")
}

fn name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `(offset, total length)` of every record of a segment, read with the framing alone. The
/// newest segment's blocks are allocated ahead of its records: zeros to its end follow them.
fn records(path: &Path) -> Result<Vec<(usize, usize)>> {
    let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    let mut out = Vec::new();
    let mut at = SEGMENT_MAGIC;
    while at + RECORD_HEADER <= bytes.len() {
        if bytes[at..].iter().all(|&b| b == 0) {
            return Ok(out);
        }
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into()?) as usize;
        let end = at + RECORD_HEADER + len;
        ensure!(
            end <= bytes.len(),
            "{}: record at {at} runs past the end",
            path.display()
        );
        out.push((at, RECORD_HEADER + len));
        at = end;
    }
    ensure!(
        at == bytes.len(),
        "{}: trailing bytes at {at}",
        path.display()
    );
    Ok(out)
}

/// Operation codes of the batch in the record at `at` of `len` bytes: `[op u8][len u32][body]`...
fn ops(bytes: &[u8], at: usize, len: usize) -> Vec<u8> {
    let payload = &bytes[at + RECORD_HEADER..at + len];
    let mut codes = Vec::new();
    let mut i = 0;
    while i + 5 <= payload.len() {
        codes.push(payload[i]);
        i += 5 + u32::from_le_bytes([
            payload[i + 1],
            payload[i + 2],
            payload[i + 3],
            payload[i + 4],
        ]) as usize;
    }
    codes
}

const OP_ENTRY: u8 = 1;
const OP_HARD_STATE: u8 = 2;
/// Stops tried for a newest record holding the commit index alone.
const COMMIT_RECORD_ATTEMPTS: usize = 10;

fn flip(path: &Path, at: usize, mask: u8) -> Result<()> {
    let mut bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    bytes[at] ^= mask;
    std::fs::write(path, bytes).with_context(|| format!("write {}", path.display()))
}

fn cut(path: &Path, len: usize) -> Result<()> {
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    file.set_len(len as u64)
        .with_context(|| format!("truncate {}", path.display()))
}

/// A bit mask with one bit set.
fn bit(rng: &mut Rng) -> u8 {
    1 << rng.below(8)
}

/// What the ensemble acknowledged: small nodes by name with their data, and the number of
/// rewrites of the large ones.
#[derive(Default)]
struct Acked {
    small: BTreeMap<String, Vec<u8>>,
    big_writes: usize,
}

impl Acked {
    async fn write_small(&mut self, cluster: &Cluster, count: usize) -> Result<()> {
        let client = cluster.connect().await?;
        for _ in 0..count {
            let name = format!("s-{:05}", self.small.len());
            let data = format!("{name} data").into_bytes();
            client
                .create(&format!("/corrupt/{name}"), &data, &PERSISTENT)
                .await
                .with_context(|| format!("create {name}"))?;
            self.small.insert(name, data);
        }
        Ok(())
    }

    async fn write_big(&mut self, cluster: &Cluster, count: usize) -> Result<()> {
        let client = cluster.connect().await?;
        for _ in 0..count {
            let i = self.big_writes;
            let node = format!("/corrupt/big-{}", i % BIG_NODES);
            let data = vec![b'a' + (i % 26) as u8; BIG];
            if i < BIG_NODES {
                client.create(&node, &data, &PERSISTENT).await.map(|_| ())
            } else {
                client.set_data(&node, &data, None).await.map(|_| ())
            }
            .with_context(|| format!("write {node}"))?;
            self.big_writes += 1;
        }
        Ok(())
    }
}

/// Every node under `/corrupt` with its data, as member `id` answers after a `sync`.
async fn tree_of(cluster: &Cluster, id: u64) -> Result<BTreeMap<String, Vec<u8>>> {
    let client = cluster.connect_to(id).await?;
    client.sync("/corrupt").await?;
    let mut tree = BTreeMap::new();
    for child in client.list_children("/corrupt").await? {
        let (data, _) = client
            .get_data(&format!("/corrupt/{child}"))
            .await
            .with_context(|| format!("get {child} on member {id}"))?;
        tree.insert(child, data);
    }
    Ok(tree)
}

/// The `running` members running applied the same index, hold the same tree, and that tree
/// holds every acknowledged write.
async fn converged(cluster: &mut Cluster, acked: &Acked, running: usize) -> Result<()> {
    let statuses = cluster
        .wait_for("the running members at the same applied index", |s| {
            let applied = s.values().next().map(|st| st.applied_index);
            s.len() == running && s.values().all(|st| Some(st.applied_index) == applied)
        })
        .await?;
    let mut trees = Vec::new();
    for &id in statuses.keys() {
        trees.push((id, tree_of(cluster, id).await?));
    }
    let (first, reference) = &trees[0];
    for (id, tree) in &trees[1..] {
        ensure!(
            tree == reference,
            "member {id} holds {} nodes, member {first} {}; they differ",
            tree.len(),
            reference.len()
        );
    }
    for (name, data) in &acked.small {
        let held = reference
            .get(name)
            .with_context(|| format!("acknowledged {name} is missing"))?;
        ensure!(held == data, "{name} holds {held:?}, want {data:?}");
    }
    let last = acked.big_writes - 1;
    let newest = &reference[&format!("big-{}", last % BIG_NODES)];
    ensure!(
        newest.len() == BIG && newest[0] == b'a' + (last % 26) as u8,
        "the last large write is not what was acknowledged"
    );
    Ok(())
}

/// A follower of the cluster.
async fn a_follower(cluster: &mut Cluster) -> Result<u64> {
    let leader = cluster.leader().await?;
    cluster
        .ids()
        .into_iter()
        .find(|m| *m != leader)
        .context("a follower")
}

/// Restarts `id`, which must refuse to start: exits with `status` and logs a line naming
/// every one of `needles`. Returns that line.
async fn refuses(cluster: &mut Cluster, id: u64, status: &str, needles: &[&str]) -> Result<String> {
    refuses_with(cluster, id, status, &[needles]).await
}

/// `refuses`, with a line naming every needle of one of `choices`.
async fn refuses_with(
    cluster: &mut Cluster,
    id: u64,
    status: &str,
    choices: &[&[&str]],
) -> Result<String> {
    let before = cluster.member(id)?.log_lines_containing("").len();
    let err = match cluster.restart(id).await {
        Ok(()) => return Err(anyhow!("member {id} started on damaged data")),
        Err(e) => format!("{e:#}"),
    };
    ensure!(err.contains(status), "want {status}: {err}");
    let lines = cluster.member(id)?.log_lines_containing("");
    let line = lines[before.min(lines.len())..]
        .iter()
        .find(|l| {
            choices
                .iter()
                .any(|needles| needles.iter().all(|n| l.contains(n)))
        })
        .with_context(|| format!("no line of member {id} names all of one of {choices:?}"))?;
    Ok(line.clone())
}

/// Writes until follower `id` has a sealed segment, then some small nodes into the newest one,
/// and stops it.
async fn fill_then_stop(cluster: &mut Cluster, id: u64, acked: &mut Acked) -> Result<()> {
    let dir = cluster.member(id)?.data_dir();
    while segments(&dir)?.len() < 2 {
        ensure!(acked.big_writes < 200, "member {id} never sealed a segment");
        acked.write_big(cluster, 4).await?;
        acked.write_small(cluster, 2).await?;
    }
    acked.write_small(cluster, 20).await?;
    // The follower has appended what the leader acknowledged with a quorum that may not include it.
    cluster
        .wait_for("the follower caught up", |s| {
            s.len() == 3
                && s.values()
                    .all(|st| st.applied_index == s[&id].applied_index)
        })
        .await?;
    cluster.kill9(id)?;
    Ok(())
}

/// Saved copies of files, put back before the next case.
struct Saved(Vec<(PathBuf, Vec<u8>)>);

impl Saved {
    fn of(paths: &[PathBuf]) -> Result<Saved> {
        let mut saved = Vec::new();
        for path in paths {
            saved.push((path.clone(), std::fs::read(path)?));
        }
        Ok(Saved(saved))
    }

    fn restore(&self) -> Result<()> {
        for (path, bytes) in &self.0 {
            std::fs::write(path, bytes)?;
        }
        Ok(())
    }
}

async fn segment_damage(cluster: &mut Cluster, rng: &mut Rng) -> Result<()> {
    cluster
        .connect()
        .await?
        .create("/corrupt", b"", &PERSISTENT)
        .await?;
    let mut acked = Acked::default();
    let id = a_follower(cluster).await?;
    fill_then_stop(cluster, id, &mut acked).await?;
    let dir = cluster.member(id)?.data_dir();
    let segs = segments(&dir)?;
    let sealed = segs[0].clone();
    let newest = segs.last().context("a segment")?.clone();
    let identity = dir.join("identity");
    let saved = Saved::of(&[sealed.clone(), newest.clone(), identity.clone()])?;
    let sealed_records = records(&sealed)?;
    let newest_records = records(&newest)?;
    ensure!(sealed_records.len() > 4 && newest_records.len() > 4);

    // (1a) A flipped bit in a record in the middle of the sealed segment (an entry committed and
    // acknowledged): refused, naming the file and the record's offset.
    let (at, len) = sealed_records[1 + rng.below(sealed_records.len() as u64 - 2) as usize];
    flip(&sealed, at + rng.below(len as u64) as usize, bit(rng))?;
    let line = refuses(
        cluster,
        id,
        EXIT_UNRECOVERABLE,
        &[
            &name(&sealed),
            &format!("at byte {at}"),
            "in a sealed segment",
        ],
    )
    .await?;
    eprintln!("sealed segment, flipped bit: {line}");
    saved.restore()?;

    // (2a) The sealed segment cut inside a record.
    let (at, len) = sealed_records[1 + rng.below(sealed_records.len() as u64 - 1) as usize];
    cut(&sealed, at + 1 + rng.below(len as u64 - 1) as usize)?;
    let line = refuses(
        cluster,
        id,
        EXIT_UNRECOVERABLE,
        &[
            &name(&sealed),
            &format!("at byte {at}"),
            "in a sealed segment",
        ],
    )
    .await?;
    eprintln!("sealed segment, cut inside a record: {line}");
    saved.restore()?;

    // (2b) The sealed segment cut at a record boundary, before one of its last records holding
    // entries: every record left is intact, but the entries cut off are missing, which the next
    // segment's entries reveal. (Cutting only trailing commit-index records loses nothing: the
    // next segment opens with a checkpoint of the hard state.)
    let sealed_bytes = std::fs::read(&sealed)?;
    let with_entries: Vec<usize> = sealed_records
        .iter()
        .filter(|&&(at, len)| ops(&sealed_bytes, at, len).contains(&OP_ENTRY))
        .map(|&(at, _)| at)
        .collect();
    ensure!(with_entries.len() > 3, "too few records with entries");
    let at = with_entries[with_entries.len() - 1 - rng.below(3) as usize];
    cut(&sealed, at)?;
    let line = refuses(cluster, id, EXIT_UNRECOVERABLE, &["cannot be recovered"]).await?;
    eprintln!("sealed segment, cut at a record boundary: {line}");
    saved.restore()?;

    // (1b') A flipped bit in the newest segment with a valid record after it: acknowledged.
    let (at, len) = newest_records[1 + rng.below(newest_records.len() as u64 - 2) as usize];
    flip(&newest, at + rng.below(len as u64) as usize, bit(rng))?;
    let line = refuses(
        cluster,
        id,
        EXIT_UNRECOVERABLE,
        &[
            &name(&newest),
            &format!("at byte {at}"),
            "acknowledged data is damaged",
        ],
    )
    .await?;
    eprintln!("newest segment, flipped bit before the last record: {line}");
    saved.restore()?;

    // (1d) The identity file (member and cluster id), the only metadata outside the segments
    // (the hard state is a record of each segment). Not checksummed: any flip is still caught,
    // as unparsable, as another member's, or as another cluster's than the certificate's.
    let text = std::fs::read(&identity)?;
    flip(&identity, rng.below(text.len() as u64) as usize, bit(rng))?;
    let line = refuses_with(
        cluster,
        id,
        "exit status: 1",
        &[&["identity"], &["the data dir belongs to cluster"]],
    )
    .await?;
    eprintln!("identity file, flipped bit: {line}");
    saved.restore()?;

    // Put back, it starts and everything agrees.
    cluster.restart(id).await?;
    converged(cluster, &acked, 3).await?;

    // (1b) A flipped bit in the newest segment's last record (after an idle moment, a record of
    // the commit index alone, written without an fsync): indistinguishable from a torn write,
    // so truncated with a warning, and the member catches up from the leader.
    acked.write_small(cluster, 5).await?;
    let (newest, at, len) = stop_with_commit_record_last(cluster, id, &mut acked).await?;
    flip(&newest, at + rng.below(len as u64) as usize, bit(rng))?;
    tail_truncated(cluster, id, &newest, at, &acked).await?;

    // (2c) The newest segment cut inside its last record: a torn write, recovered.
    acked.write_small(cluster, 5).await?;
    let (newest, at, len) = stop_with_commit_record_last(cluster, id, &mut acked).await?;
    cut(&newest, at + 1 + rng.below(len as u64 - 1) as usize)?;
    tail_truncated(cluster, id, &newest, at, &acked).await?;

    // (1b, an entry) A flipped bit in the newest segment's last record when that record holds
    // entries: an append this member fsynced and acknowledged to the leader. The commit-index
    // records after it (written without an fsync, so a power loss may take them) are cut off
    // first. The log cannot tell it from a torn write, so it truncates it with the same
    // warning; but the leader knows this member holds the entry, and its heartbeat's commit
    // index is past the member's log: the member stops with an error saying it lost entries it
    // had acknowledged (rather than raft-rs's panic), at every start while that leader leads. Loud, and
    // nothing wrong is served; the other two agree and hold every acknowledged write, and after
    // a leadership transfer the member starts and catches up. Either outcome (that, or catching
    // up at once) passes; which one happened is printed.
    let leader = cluster.leader().await?;
    let term = cluster.status(leader).await?.term;
    acked.write_small(cluster, 5).await?;
    stop_caught_up(cluster, id).await?;
    let newest = segments(&dir)?.last().context("a segment")?.clone();
    let bytes = std::fs::read(&newest)?;
    let recs = records(&newest)?;
    let last_entry = recs
        .iter()
        .rposition(|&(at, len)| ops(&bytes, at, len).contains(&OP_ENTRY))
        .context("no record with an entry")?;
    for &(at, len) in &recs[last_entry + 1..] {
        let codes = ops(&bytes, at, len);
        ensure!(
            codes.iter().all(|&c| c == OP_HARD_STATE),
            "record at {at} after the last entry holds ops {codes:?}"
        );
    }
    let (at, len) = recs[last_entry];
    cut(&newest, at + len)?;
    flip(&newest, at + rng.below(len as u64) as usize, bit(rng))?;
    let before = cluster.member(id)?.log_lines_containing("").len();
    // It may be ready before the leader's first heartbeat reaches it.
    let outcome = match cluster.restart(id).await {
        Ok(()) => converged(cluster, &acked, 3).await,
        Err(e) => Err(e),
    };
    let lines = cluster.member(id)?.log_lines_containing("");
    let lines = &lines[before.min(lines.len())..];
    let warning = lines
        .iter()
        .find(|l| l.contains("truncating the damaged tail"))
        .with_context(|| format!("member {id} gave no warning of a truncated tail"))?;
    ensure!(
        warning.contains(&name(&newest)) && warning.contains(&format!("offset={at}")),
        "the warning does not name {} at {at}: {warning}",
        newest.display()
    );
    eprintln!("newest segment, damaged last record holding an entry: {warning}");
    match outcome {
        Ok(()) => eprintln!("  and member {id} caught up"),
        Err(e) => {
            let err = format!("{e:#}");
            ensure!(
                err.contains("exited by itself with exit status: 1")
                    && !cluster.running_ids().contains(&id),
                "{err}"
            );
            let stop = lines
                .iter()
                .find(|l| l.contains("says this member acknowledged the log up to entry"))
                .with_context(|| format!("member {id} exited without saying why: {err}"))?;
            ensure!(
                !lines.iter().any(|l| l.contains("panicked")),
                "member {id} panicked rather than stopping with its error"
            );
            eprintln!("  and member {id} stops at every start: {stop}");
            converged(cluster, &acked, 2).await?;
            let now = cluster.status(leader).await?.term;
            ensure!(
                now == term,
                "an election (term {term} to {now}) happened meanwhile"
            );
            // A new leader knows nothing of what the member held, so it brings it back.
            let other = cluster
                .ids()
                .into_iter()
                .find(|m| *m != leader && *m != id)
                .context("a third member")?;
            let reply = cluster
                .admin(
                    leader,
                    Method::Post,
                    "/v1/leader/transfer",
                    Some(&serde_json::json!({ "to": other })),
                )
                .await?;
            ensure!(reply.status == 202, "transfer to {other}: {reply}");
            cluster
                .wait_for(&format!("member {other} to lead"), |s| {
                    s.len() == 2 && s.values().all(|st| st.leader_id == other)
                })
                .await?;
            cluster.restart(id).await?;
            eprintln!("  and under a new leader it starts and catches up");
            converged(cluster, &acked, 3).await?;
        }
    }
    Ok(())
}

/// Kills `id` once it has applied what the others have and no session is open. A dropped
/// client closes its session in the background, and that close is an entry: were one in
/// flight, the member's newest record could hold an entry it acknowledged rather than the
/// commit index alone, which is a different case.
async fn stop_caught_up(cluster: &mut Cluster, id: u64) -> Result<()> {
    cluster
        .wait_for("the follower caught up with no session open", |s| {
            s.len() == 3
                && s.values().all(|st| {
                    st.applied_index == s[&id].applied_index
                        && st.commit_index == st.applied_index
                        && st.sessions == 0
                })
        })
        .await?;
    cluster.kill9(id)
}

/// Stops `id` caught up with a record of the commit index alone last in its newest segment,
/// and returns that segment with the record's offset and length. The commit index of the last
/// entries is written after them, but not always before the member reports them applied; when
/// the last record holds an entry, the member is started again and one more write made.
async fn stop_with_commit_record_last(
    cluster: &mut Cluster,
    id: u64,
    acked: &mut Acked,
) -> Result<(PathBuf, usize, usize)> {
    let dir = cluster.member(id)?.data_dir();
    for _ in 0..COMMIT_RECORD_ATTEMPTS {
        stop_caught_up(cluster, id).await?;
        let newest = segments(&dir)?.last().context("a segment")?.clone();
        let bytes = std::fs::read(&newest)?;
        let &(at, len) = records(&newest)?.last().context("a record")?;
        if ops(&bytes, at, len).iter().all(|&c| c == OP_HARD_STATE) {
            return Ok((newest, at, len));
        }
        cluster.restart(id).await?;
        converged(cluster, acked, 3).await?;
        acked.write_small(cluster, 1).await?;
    }
    Err(anyhow!(
        "member {id}'s newest record held an entry at each of {COMMIT_RECORD_ATTEMPTS} stops"
    ))
}

/// Restarts `id`, whose newest segment `path` has a damaged last record at `at`: it must warn
/// that it truncated the file there, rejoin, and agree with the others.
async fn tail_truncated(
    cluster: &mut Cluster,
    id: u64,
    path: &Path,
    at: usize,
    acked: &Acked,
) -> Result<()> {
    let before = cluster
        .member(id)?
        .log_lines_containing("truncating the damaged tail")
        .len();
    cluster.restart(id).await?;
    let warnings = cluster
        .member(id)?
        .log_lines_containing("truncating the damaged tail");
    let line = warnings
        .get(before)
        .with_context(|| format!("member {id} gave no warning of a truncated tail"))?;
    ensure!(
        line.contains(&name(path)) && line.contains(&format!("offset={at}")),
        "the warning does not name {} at {at}: {line}",
        path.display()
    );
    eprintln!("newest segment, damaged last record: {line}");
    let len = std::fs::metadata(path)?.len();
    ensure!(len >= at as u64, "{} cut below the damage", path.display());
    converged(cluster, acked, 3).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_log_segments_are_refused_or_a_torn_tail_truncated() {
    run(&[], segment_damage).await;
}

/// Writes until follower `id` holds two snapshots, then stops it.
async fn two_snapshots_then_stop(cluster: &mut Cluster, id: u64, acked: &mut Acked) -> Result<()> {
    let dir = cluster.member(id)?.data_dir();
    while files(&dir, "snap-", ".snap")?.len() < 2 {
        ensure!(
            acked.small.len() < 2_000,
            "member {id} took no two snapshots"
        );
        acked.write_small(cluster, 30).await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.kill9(id)
}

async fn snapshot_damage(cluster: &mut Cluster, rng: &mut Rng) -> Result<()> {
    cluster
        .connect()
        .await?
        .create("/corrupt", b"", &PERSISTENT)
        .await?;
    let mut acked = Acked::default();
    acked.write_big(cluster, 1).await?;
    let id = a_follower(cluster).await?;
    let dir = cluster.member(id)?.data_dir();
    for damage in ["flipped anywhere", "cut short"] {
        two_snapshots_then_stop(cluster, id, &mut acked).await?;
        let newest = files(&dir, "snap-", ".snap")?.pop().context("a snapshot")?;
        let len = std::fs::metadata(&newest)?.len() as usize;
        if damage == "cut short" {
            cut(&newest, rng.below(len as u64) as usize)?;
        } else {
            flip(&newest, rng.below(len as u64) as usize, bit(rng))?;
        }
        let damaged = std::fs::read(&newest)?;
        acked.write_small(cluster, 10).await?;
        let before = cluster
            .member(id)?
            .log_lines_containing("set aside a damaged snapshot")
            .len();
        cluster.restart(id).await?;
        let member = cluster.member(id)?;
        let why = member.log_lines_containing("snapshot file is damaged");
        let line = why
            .iter()
            .rfind(|l| l.contains(&name(&newest)))
            .with_context(|| format!("no line names {}", newest.display()))?;
        eprintln!("snapshot {damage}: {line}");
        ensure!(
            member
                .log_lines_containing("set aside a damaged snapshot")
                .len()
                == before + 1,
            "member {id} set nothing aside"
        );
        // Kept aside as it was. (The file's own name may be back already: the member can take
        // its next snapshot at the same index.)
        let aside = PathBuf::from(format!("{}.corrupt", newest.display()));
        ensure!(
            std::fs::read(&aside).ok() == Some(damaged),
            "{} does not hold the damaged snapshot",
            aside.display()
        );
        converged(cluster, &acked, 3).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_or_short_snapshot_is_set_aside_and_the_member_catches_up() {
    run(&["--snapshot-entries", "40"], snapshot_damage).await;
}
