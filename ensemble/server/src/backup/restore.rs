//! `snapshot restore`: one member's data dir of a new ensemble, from a backup.
//!
//! The data dir gets what `baton-ensemble` itself would have written had this member received
//! the backup's state as a Raft snapshot from a leader: the identity file (the NEW cluster id
//! and `--id`), a snapshot at the backup's index and term whose configuration is `--members`
//! (all voters), the hard state committing it, and the tree in it. The tree loses the old
//! ensemble's sessions and their ephemeral nodes (they belonged to clients of another
//! ensemble), and its address book becomes `--members`. Every member restored from the same
//! backup with the same `--members` holds the same snapshot, so they start as one ensemble
//! with a common log prefix, and its indexes (zxids, fencing tokens) go on rising from the
//! backup's.

use std::path::{Path, PathBuf};

use baton_machine::feature::LevelTooHigh;
use baton_machine::{SnapshotError, StateMachine};
use baton_raftlog::{LogOptions, RaftLog};
use bytes::Bytes;
use raft::eraftpb::{ConfState, HardState, Snapshot};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::Serialize;

use super::cmd::RestoreArgs;
use super::format;
use super::location::Source;
use super::s3::{self, S3Options};

/// What `restore` prints, as one JSON line.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreReport {
    pub data_dir: String,
    pub id: u64,
    pub cluster_id: String,
    /// Where the backup came from (the newest one's key for an S3 prefix).
    pub from: String,
    /// The cluster id the backup was taken of.
    pub backup_cluster_id: String,
    pub index: u64,
    /// Nodes in the restored tree (the root and `/zookeeper` included).
    pub znodes: usize,
    pub sessions_dropped: usize,
    pub ephemerals_dropped: usize,
}

/// The new ensemble's cluster id: `--cluster-id`, or the one the member certificate names
/// (which must be this `--id`'s).
fn new_cluster_id(args: &RestoreArgs) -> Result<String, String> {
    let id = match (&args.cluster_id, &args.tls_cert) {
        (Some(id), _) => id.clone(),
        (None, Some(cert)) => {
            let der = CertificateDer::pem_file_iter(cert)
                .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?
                .next()
                .ok_or_else(|| format!("--tls-cert {}: no certificate in it", cert.display()))?
                .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
            let identity = baton_tls::Identity::of_certificate(&der)
                .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
            if identity.role != baton_tls::Role::Member(args.id) {
                return Err(format!(
                    "--tls-cert names {identity}, but this is member {} (--id)",
                    args.id
                ));
            }
            identity.cluster
        }
        (None, None) => return Err("give --cluster-id NEW or --tls-cert MEMBER.crt".into()),
    };
    // What the raft log accepts (it is stricter than certificates: at most 128 bytes).
    let ok = (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !ok {
        return Err(format!(
            "cluster id {id:?}: 1 to 128 letters, digits, '.', '_' or '-'"
        ));
    }
    Ok(id)
}

fn check_members(args: &RestoreArgs) -> Result<(), String> {
    if !args.members.iter().any(|(id, _)| *id == args.id) {
        return Err(format!(
            "--members does not include this member's --id {}",
            args.id
        ));
    }
    let mut ids: Vec<u64> = args.members.iter().map(|(id, _)| *id).collect();
    ids.sort_unstable();
    if ids.windows(2).any(|w| w[0] == w[1]) {
        return Err("--members names the same id twice".into());
    }
    Ok(())
}

/// Refuses a data dir that holds anything: a restore never mixes with existing state.
fn check_empty(dir: &Path) -> Result<(), String> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(format!(
                "--data-dir {} is not empty: a restore makes the data dir of a new member and \
                 never writes over existing state",
                dir.display()
            )),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            Err(format!("--data-dir {} is not a directory", dir.display()))
        }
        Err(e) => Err(format!("--data-dir {}: {e}", dir.display())),
    }
}

async fn read_source(args: &RestoreArgs) -> Result<(String, Bytes), String> {
    match Source::parse(&args.from)? {
        Source::File(path) => {
            let bytes = tokio::fs::read(&path)
                .await
                .map_err(|e| format!("--from {}: {e}", path.display()))?;
            let shown = std::path::absolute(&path).unwrap_or(path);
            Ok((shown.display().to_string(), Bytes::from(bytes)))
        }
        Source::S3(url) => {
            let opts = S3Options {
                endpoint: args.s3_endpoint.clone(),
                region: args.s3_region.clone(),
            };
            s3::fetch(&url, &opts).await
        }
    }
}

/// Runs `snapshot restore`. Refusals (a damaged backup, a non-empty data dir, a bad flag)
/// write nothing.
pub async fn restore(args: RestoreArgs) -> Result<RestoreReport, String> {
    check_members(&args)?;
    let cluster_id = new_cluster_id(&args)?;
    check_empty(&args.data_dir)?;
    let (from, bytes) = read_source(&args).await?;
    let members = args.members.clone();
    let (id, dir, cluster) = (args.id, args.data_dir.clone(), cluster_id.clone());
    tokio::task::spawn_blocking(move || {
        let backup = format::decode(&bytes).map_err(|e| format!("{from}: {e}"))?;
        if backup.cluster_id == cluster {
            return Err(format!(
                "{from} is a backup of cluster {cluster}: a restore makes a NEW ensemble, \
                 whose cluster id must differ from the backup's (give another --cluster-id, or \
                 certificates of a new CA)"
            ));
        }
        let mut sm = StateMachine::restore(backup.body).map_err(|e| match e {
            // A newer release's backup: the data dir's own refusal, about the backup.
            SnapshotError::FeatureLevel(e) => format!(
                "{from}: {}",
                LevelTooHigh {
                    what: "this backup",
                    ..e
                }
            ),
            e => format!("{from}: the state machine snapshot is unusable: {e}"),
        })?;
        if sm.last_applied() != backup.index as i64 {
            return Err(format!(
                "{from}: the header says index {} but the state is at {}",
                backup.index,
                sm.last_applied()
            ));
        }
        let (sessions_dropped, ephemerals_dropped) = sm.drop_all_sessions();
        let old: Vec<u64> = sm.members().keys().copied().collect();
        for member in old {
            sm.remove_member(member);
        }
        for (member, addr) in &members {
            sm.set_member(*member, addr.clone());
        }
        let voters: Vec<u64> = members.iter().map(|(member, _)| *member).collect();
        let mut snap = Snapshot::default();
        snap.set_data(sm.snapshot().into());
        let meta = snap.mut_metadata();
        meta.index = backup.index;
        meta.term = backup.term.max(1);
        meta.set_conf_state(ConfState::from((voters, Vec::<u64>::new())));
        write_data_dir(&dir, id, &cluster, &snap)?;
        Ok(RestoreReport {
            data_dir: std::path::absolute(&dir)
                .unwrap_or(dir)
                .display()
                .to_string(),
            id,
            cluster_id: cluster,
            from,
            backup_cluster_id: backup.cluster_id.to_string(),
            index: backup.index,
            znodes: sm.node_count(),
            sessions_dropped,
            ephemerals_dropped,
        })
    })
    .await
    .map_err(|e| e.to_string())?
}

/// Writes the data dir through the raft log's own API, then opens it again as the server
/// will. On failure, removes what it wrote.
fn write_data_dir(dir: &Path, id: u64, cluster: &str, snap: &Snapshot) -> Result<(), String> {
    let created = !dir.exists();
    let written = (|| {
        let log = RaftLog::open(dir, id, Some(cluster), LogOptions::default())?;
        log.apply_snapshot(snap)?;
        let meta = snap.get_metadata();
        let hard_state = HardState {
            term: meta.term,
            commit: meta.index,
            ..Default::default()
        };
        log.persist(&[], Some(&hard_state))?;
        drop(log);
        let reopened = RaftLog::open(dir, id, Some(cluster), LogOptions::default())?;
        let index = reopened
            .latest_snapshot()
            .map_or(0, |s| s.get_metadata().index);
        if index != meta.index {
            return Err(baton_raftlog::LogError::InvalidRequest {
                dir: dir.to_path_buf(),
                reason: format!("reopened at snapshot index {index}, not {}", meta.index),
            });
        }
        Ok(())
    })();
    written.map_err(|e: baton_raftlog::LogError| {
        remove_written(dir, created);
        format!("writing the data dir {}: {e}", dir.display())
    })
}

/// Undoes a failed restore: the directory if this run made it, else what it put inside.
fn remove_written(dir: &Path, created: bool) {
    if created {
        let _ = std::fs::remove_dir_all(dir);
        return;
    }
    let entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|it| it.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    for path in entries {
        let _ = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backup whose snapshot names a feature level this build does not support (a newer
    /// release's format) is refused with the data dir's own sentence about the backup, and
    /// nothing is written.
    #[test]
    fn a_backup_in_a_newer_levels_format_is_refused_naming_the_level() {
        let mut sm = StateMachine::new();
        let noop = baton_machine::Command {
            session_id: 0,
            xid: 0,
            time_ms: 0,
            kind: baton_machine::CommandKind::Noop,
        };
        sm.apply(1, &noop);
        let mut body = sm.snapshot();
        body[8..12].copy_from_slice(&9u32.to_be_bytes());
        let file = format::Backup {
            cluster_id: "old",
            index: 1,
            term: 1,
            body: &body,
        }
        .encode();
        let dir = tempfile::tempdir().expect("temp dir");
        let from = dir.path().join("newer.baton-backup");
        std::fs::write(&from, file).expect("backup written");
        let data_dir = dir.path().join("data");
        let args = RestoreArgs {
            from: from.display().to_string(),
            s3_endpoint: None,
            s3_region: None,
            data_dir: data_dir.clone(),
            id: 1,
            members: vec![(1, "127.0.0.1:2888".into())],
            cluster_id: Some("new".into()),
            tls_cert: None,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let refused = runtime
            .block_on(restore(args))
            .expect_err("a newer format is refused");
        for part in [
            "this backup is at feature level 8",
            "supports feature levels up to 2",
            "run a release that supports level 8",
        ] {
            assert!(refused.contains(part), "{refused}");
        }
        assert!(!data_dir.exists(), "nothing written");
    }
}
