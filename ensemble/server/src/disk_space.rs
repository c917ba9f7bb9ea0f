//! The free space of this member's data volume, for the disk-space alarm (DESIGN.md §4).
//!
//! Measured here, outside the core (a `statvfs` may block on a sick disk), once a second, and
//! handed to the core as `CoreMsg::DiskSpace`; the core decides whether this member wants its
//! NOSPACE alarm and asks the leader to raise or clear it (`core/settings.rs`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::config::Config;
use crate::core::CoreMsg;
use crate::core::settings::DiskWatermark;

/// `--min-free-disk-bytes` unless given: 64 MiB, room for a snapshot of a tree near the
/// namespace quota while the alarm stops the writes that would take it. etcd's NOSPACE comes
/// from a quota of the database instead; a volume's free space is what actually runs out here.
pub const DEFAULT_MIN_FREE_BYTES: u64 = 64 << 20;

/// How often the volume is measured.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The watermark `--min-free-disk-bytes` gives: raised below it, cleared at twice it.
pub fn watermark(cfg: &Config) -> DiskWatermark {
    DiskWatermark {
        min_free_bytes: cfg.min_free_disk_bytes,
        hysteresis_bytes: cfg.min_free_disk_bytes,
    }
}

/// Bytes an unprivileged writer may still use on the filesystem that holds `path`.
pub fn free_bytes(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c_path` is a valid NUL-terminated string and `stats` a properly sized,
    // writable struct that statvfs fills on success.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &mut stats) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((stats.f_bavail as u64).saturating_mul(stats.f_frsize as u64))
}

/// What the test-only override file says, if it holds a number.
fn overridden(file: &Path) -> Option<u64> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// Measures the volume of `data_dir` every second and reports it to the core, until the core
/// is gone. With `override_file` (test-only) the number in that file is the free space.
pub async fn watch(data_dir: PathBuf, override_file: Option<PathBuf>, core: mpsc::Sender<CoreMsg>) {
    let mut interval = tokio::time::interval(CHECK_EVERY);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failed_before = false;
    loop {
        interval.tick().await;
        let dir = data_dir.clone();
        let file = override_file.clone();
        let measured = tokio::task::spawn_blocking(move || match file {
            Some(file) => overridden(&file).ok_or_else(|| {
                std::io::Error::other(format!("{} holds no number", file.display()))
            }),
            None => free_bytes(&dir),
        })
        .await;
        let free_bytes = match measured {
            Ok(Ok(free)) => {
                failed_before = false;
                free
            }
            Ok(Err(e)) => {
                if !failed_before {
                    tracing::warn!(dir = %data_dir.display(), error = %e, "cannot measure the data volume's free space; the disk alarm keeps its last state");
                }
                failed_before = true;
                continue;
            }
            Err(_) => continue,
        };
        if core.send(CoreMsg::DiskSpace { free_bytes }).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_volume_has_some_free_space_and_a_bad_path_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(free_bytes(dir.path()).expect("statvfs") > 0);
        assert!(free_bytes(&dir.path().join("missing")).is_err());
    }
}
