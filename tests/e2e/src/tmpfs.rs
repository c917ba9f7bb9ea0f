//! Small volumes for the members of disk tests: a tmpfs per data dir, mounted by the test
//! (root only, so such tests are `#[ignore]`d and `tests/scripts/test.sh` runs them as root).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};

use anyhow::{Context, Result, ensure};

/// The tmpfs mounts a test made, unmounted when dropped. Drop it after the cluster, which
/// kills its members first: a busy mount point would stay mounted.
#[derive(Debug, Default)]
pub struct TmpfsMounts(Mutex<Vec<PathBuf>>);

impl TmpfsMounts {
    /// Mounts a tmpfs of `mib` MiB on `dir` (made if missing) and remembers it.
    pub fn mount(&self, dir: &Path, mib: u64) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir)
            .status()
            .context("run mount")?;
        ensure!(
            status.success(),
            "mount a tmpfs on {} (root only): {status}",
            dir.display()
        );
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(dir.to_path_buf());
        Ok(())
    }
}

impl Drop for TmpfsMounts {
    fn drop(&mut self) {
        for dir in self
            .0
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let _ = Command::new("umount").arg(dir).status();
        }
    }
}
