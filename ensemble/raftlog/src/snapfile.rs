//! Snapshot files `snap-<term:020>-<index:020>.snap`:
//! `[magic 8][meta_len u32][data_len u64][crc32 u32][SnapshotMetadata protobuf][state machine bytes]`,
//! little-endian, the checksum covering both lengths, the metadata and the data.

use std::fs;
use std::path::{Path, PathBuf};

use protobuf::Message as _;
use raft::eraftpb::{Snapshot, SnapshotMetadata};

use crate::error::LogError;
use crate::fsutil::{self, Durability};

const MAGIC: &[u8; 8] = b"BTNSNAP1";
const HEADER_LEN: usize = 8 + 4 + 8 + 4;

/// File name of the snapshot at (`term`, `index`).
pub(crate) fn file_name(term: u64, index: u64) -> String {
    format!("snap-{term:020}-{index:020}.snap")
}

fn parse_name(name: &str) -> Option<(u64, u64)> {
    let rest = name.strip_prefix("snap-")?.strip_suffix(".snap")?;
    let (term, index) = rest.split_once('-')?;
    Some((term.parse().ok()?, index.parse().ok()?))
}

/// Snapshot files in `dir` as (index, term, path), oldest first.
pub(crate) fn list(dir: &Path) -> Result<Vec<(u64, u64, PathBuf)>, LogError> {
    let mut found: Vec<_> = fsutil::list_dir(dir)?
        .into_iter()
        .filter_map(|name| parse_name(&name).map(|(term, index)| (index, term, dir.join(name))))
        .collect();
    found.sort();
    Ok(found)
}

/// Appended to a damaged snapshot's name when startup sets it aside: no longer `*.snap`, so it is
/// never read again, but kept for a post-mortem.
pub(crate) const SET_ASIDE_SUFFIX: &str = ".corrupt";

/// Renames a damaged snapshot file out of the way (`<name>.corrupt`) and makes that durable.
pub(crate) fn set_aside(
    dir: &Path,
    durability: Durability,
    path: &Path,
) -> Result<PathBuf, LogError> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(SET_ASIDE_SUFFIX);
    let aside = path.with_file_name(name);
    fs::rename(path, &aside).map_err(|e| LogError::io("set aside damaged snapshot", path, e))?;
    crate::crash_model::renamed(path, &aside);
    durability.sync_dir(dir)?;
    Ok(aside)
}

/// Writes `snap` durably (temp file, fsync, rename, fsync directory); returns its path.
pub(crate) fn write(
    dir: &Path,
    durability: Durability,
    snap: &Snapshot,
) -> Result<PathBuf, LogError> {
    let meta = snap.get_metadata();
    let name = file_name(meta.term, meta.index);
    let meta_bytes = meta
        .write_to_bytes()
        .map_err(|e| LogError::InvalidRequest {
            dir: dir.to_path_buf(),
            reason: format!("cannot encode snapshot metadata: {e}"),
        })?;
    let data = &snap.data[..];
    let mut header = Vec::with_capacity(HEADER_LEN + meta_bytes.len());
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&(meta_bytes.len() as u32).to_le_bytes());
    header.extend_from_slice(&(data.len() as u64).to_le_bytes());
    header.extend_from_slice(&[0; 4]);
    header.extend_from_slice(&meta_bytes);
    let mut h = crc32fast::Hasher::new();
    h.update(&header[8..20]);
    h.update(&header[HEADER_LEN..]);
    h.update(data);
    header[20..24].copy_from_slice(&h.finalize().to_le_bytes());
    // Written from its parts: the data (a hundred MiB and more) is not copied again.
    durability.write_atomically_parts(dir, &name, &[&header, data])
}

fn checksum(file: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&file[8..20]);
    h.update(&file[HEADER_LEN..]);
    h.finalize()
}

/// Reads and verifies one snapshot file.
fn read(path: &Path) -> Result<Snapshot, LogError> {
    let buf = fs::read(path).map_err(|e| LogError::io("read snapshot", path, e))?;
    let corrupt = |offset: u64, reason: &str| LogError::corrupt(path, offset, reason);
    if buf.len() < HEADER_LEN || &buf[..8] != MAGIC {
        return Err(corrupt(0, "not a snapshot file (bad magic or too short)"));
    }
    let meta_len = u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]) as u64;
    let data_len = u64::from_le_bytes([
        buf[12], buf[13], buf[14], buf[15], buf[16], buf[17], buf[18], buf[19],
    ]);
    let stored_crc = u32::from_le_bytes([buf[20], buf[21], buf[22], buf[23]]);
    let body_len = (buf.len() - HEADER_LEN) as u64;
    if meta_len.checked_add(data_len) != Some(body_len) {
        return Err(corrupt(
            8,
            "lengths in the header do not match the file size",
        ));
    }
    if checksum(&buf) != stored_crc {
        return Err(corrupt(20, "checksum mismatch"));
    }
    let meta_end = HEADER_LEN + meta_len as usize;
    let meta = SnapshotMetadata::parse_from_bytes(&buf[HEADER_LEN..meta_end])
        .map_err(|e| corrupt(HEADER_LEN as u64, &format!("bad metadata: {e}")))?;
    Ok(Snapshot {
        data: buf[meta_end..].to_vec().into(),
        metadata: Some(meta).into(),
        ..Default::default()
    })
}

/// Reads and verifies the snapshot file listed as (`index`, `term`) at `path`: checksum, and a
/// name that agrees with the metadata inside.
pub(crate) fn load(path: &Path, index: u64, term: u64) -> Result<Snapshot, LogError> {
    let snap = read(path)?;
    let meta = snap.get_metadata();
    if (meta.index, meta.term) != (index, term) {
        return Err(LogError::corrupt(
            path,
            0,
            format!(
                "metadata says index {} term {}, the name disagrees",
                meta.index, meta.term
            ),
        ));
    }
    Ok(snap)
}

/// Deletes all but the newest `keep` snapshot files.
pub(crate) fn prune(dir: &Path, durability: Durability, keep: usize) -> Result<(), LogError> {
    let files = list(dir)?;
    let excess = files.len().saturating_sub(keep);
    for (_, _, path) in &files[..excess] {
        fs::remove_file(path).map_err(|e| LogError::io("remove old snapshot", path, e))?;
    }
    if excess > 0 {
        durability.sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(index: u64, term: u64, data: &[u8]) -> Snapshot {
        let mut s = Snapshot::default();
        s.mut_metadata().index = index;
        s.mut_metadata().term = term;
        s.mut_metadata().mut_conf_state().voters = vec![1, 2];
        s.data = data.to_vec().into();
        s
    }

    #[test]
    fn write_load_prune() -> Result<(), LogError> {
        let dir = tempfile::tempdir().map_err(|e| LogError::io("tempdir", "/tmp", e))?;
        let d = Durability { sync: false };
        assert_eq!(list(dir.path())?, vec![]);
        for (index, term) in [(5, 1), (10, 2), (100, 2)] {
            write(dir.path(), d, &snapshot(index, term, b"state"))?;
        }
        let (index, term, path) = list(dir.path())?.pop().expect("a snapshot");
        assert_eq!(load(&path, index, term)?, snapshot(100, 2, b"state"));
        assert!(matches!(load(&path, 100, 3), Err(LogError::Corrupt { .. })));
        prune(dir.path(), d, 2)?;
        let left: Vec<u64> = list(dir.path())?.iter().map(|f| f.0).collect();
        assert_eq!(left, vec![10, 100]);
        let aside = set_aside(dir.path(), d, &path)?;
        assert!(aside.exists() && !path.exists());
        let left: Vec<u64> = list(dir.path())?.iter().map(|f| f.0).collect();
        assert_eq!(left, vec![10]);
        Ok(())
    }

    #[test]
    fn every_flipped_byte_is_detected() -> Result<(), LogError> {
        let dir = tempfile::tempdir().map_err(|e| LogError::io("tempdir", "/tmp", e))?;
        let path = write(
            dir.path(),
            Durability { sync: false },
            &snapshot(3, 1, b"abc"),
        )?;
        let good = fs::read(&path).map_err(|e| LogError::io("read", &path, e))?;
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x01;
            fs::write(&path, &bad).map_err(|e| LogError::io("write", &path, e))?;
            assert!(
                matches!(load(&path, 3, 1), Err(LogError::Corrupt { .. })),
                "flip at {at}"
            );
        }
        Ok(())
    }
}
