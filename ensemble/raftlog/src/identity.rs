//! Who a data directory belongs to, and an exclusive lock so only one process uses it.
//!
//! The identity file is small human-readable text so an SRE can `cat` it when a member refuses to
//! start:
//! ```text
//! baton-raftlog identity v1
//! member_id=3
//! cluster_id=6f1c0e2a9b7d4c3e8a5b1f0d2c4e6a8b
//! ```

use std::collections::hash_map::RandomState;
use std::fs::{self, File};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::LogError;
use crate::fsutil::Durability;

pub(crate) const IDENTITY_FILE: &str = "identity";
const LOCK_FILE: &str = "LOCK";
const HEADER: &str = "baton-raftlog identity v1";

/// Takes the directory's advisory lock; it is released when the returned file is dropped.
pub(crate) fn lock_dir(dir: &Path) -> Result<File, LogError> {
    let path = dir.join(LOCK_FILE);
    let file = crate::fsutil::private_file()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| LogError::io("open lock file", &path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(fs::TryLockError::WouldBlock) => Err(LogError::Locked {
            path,
            source: io::Error::from(io::ErrorKind::WouldBlock),
        }),
        Err(fs::TryLockError::Error(e)) => Err(LogError::io("lock data directory", &path, e)),
    }
}

/// Checks that `dir` belongs to this member and cluster, recording the identity on first use.
/// `first_use` says whether the directory holds no log yet; returns the cluster id in force.
pub(crate) fn check_or_record(
    dir: &Path,
    member_id: u64,
    cluster_id: Option<&str>,
    first_use: bool,
    durability: Durability,
) -> Result<String, LogError> {
    if let Some(id) = cluster_id {
        validate_cluster_id(id)?;
    }
    let path = dir.join(IDENTITY_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound && first_use => {
            let cluster = cluster_id.map_or_else(new_cluster_id, str::to_string);
            let contents = format!("{HEADER}\nmember_id={member_id}\ncluster_id={cluster}\n");
            durability.write_atomically(dir, IDENTITY_FILE, contents.as_bytes())?;
            tracing::info!(dir = %dir.display(), member_id, cluster_id = %cluster, "recorded identity of new data directory");
            return Ok(cluster);
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(LogError::corrupt(
                &path,
                0,
                "identity file is missing but the directory holds a raft log; refusing to guess whose it is",
            ));
        }
        Err(e) => return Err(LogError::io("read identity file", &path, e)),
    };
    let (found_member, found_cluster) =
        parse(&text).ok_or_else(|| LogError::corrupt(&path, 0, format!("not a {HEADER} file")))?;
    if found_member != member_id || cluster_id.is_some_and(|c| c != found_cluster) {
        return Err(LogError::IdentityMismatch {
            path,
            expected_member: member_id,
            expected_cluster: cluster_id.map(str::to_string),
            found_member,
            found_cluster,
        });
    }
    Ok(found_cluster)
}

fn parse(text: &str) -> Option<(u64, String)> {
    let mut lines = text.lines();
    if lines.next()? != HEADER {
        return None;
    }
    let member = lines.next()?.strip_prefix("member_id=")?.parse().ok()?;
    let cluster = lines.next()?.strip_prefix("cluster_id=")?;
    validate_cluster_id(cluster).ok()?;
    Some((member, cluster.to_string()))
}

fn validate_cluster_id(id: &str) -> Result<(), LogError> {
    let ok = (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(LogError::InvalidClusterId(id.to_string()))
    }
}

/// A fresh 128-bit id. `RandomState` is seeded from the OS per process, which is all the
/// uniqueness a cluster id needs; mixing in time and pid guards against a weak seed.
fn new_cluster_id() -> String {
    let mut words = [0u64; 2];
    for (i, word) in words.iter_mut().enumerate() {
        let mut h = RandomState::new().build_hasher();
        h.write_usize(i);
        h.write_u32(std::process::id());
        h.write_u128(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        *word = h.finish();
    }
    format!("{:016x}{:016x}", words[0], words[1])
}

/// Whether `dir` already belongs to a member (its identity is recorded), i.e. whether opening it
/// will keep the recorded cluster id rather than record a new one.
pub fn is_initialized(dir: &Path) -> bool {
    dir.join(IDENTITY_FILE).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_valid_and_distinct() {
        let a = new_cluster_id();
        let b = new_cluster_id();
        assert_ne!(a, b);
        assert!(validate_cluster_id(&a).is_ok());
        assert_eq!(a.len(), 32);
    }

    #[test]
    fn cluster_id_validation() {
        assert!(validate_cluster_id("prod-east.1_a").is_ok());
        assert!(validate_cluster_id("").is_err());
        assert!(validate_cluster_id("has space").is_err());
        assert!(validate_cluster_id("line\nbreak").is_err());
        assert!(validate_cluster_id(&"x".repeat(129)).is_err());
    }

    #[test]
    fn parse_round_trip_and_garbage() {
        assert_eq!(
            parse(&format!("{HEADER}\nmember_id=7\ncluster_id=abc\n")),
            Some((7, "abc".to_string()))
        );
        assert_eq!(parse("member_id=7\n"), None);
        assert_eq!(
            parse(&format!("{HEADER}\nmember_id=x\ncluster_id=abc\n")),
            None
        );
    }
}
