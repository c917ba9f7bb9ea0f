//! Memory given back to the kernel after the tree frees a lot of it.
//!
//! glibc keeps freed memory in its heap for reuse: a member that held 150 MiB of znodes kept
//! that RSS after they were deleted, however long it waited. Once the tree's data has shrunk by
//! [`TRIM_AFTER_BYTES`] since the last return, the next tick asks for it to be returned
//! (`malloc_trim`, tens of ms, on a thread of its own, so never in the core's way).

/// How much the tree's data must shrink before its memory is returned.
const TRIM_AFTER_BYTES: u64 = 8 << 20;

/// The tree's data size at its peak since memory was last returned.
#[derive(Debug, Default)]
pub(super) struct FreedMemory {
    peak: u64,
}

impl FreedMemory {
    /// Notes the tree's data size now; `true` when enough was freed to return it.
    pub fn note(&mut self, tree_bytes: u64) -> bool {
        self.peak = self.peak.max(tree_bytes);
        if self.peak - tree_bytes >= TRIM_AFTER_BYTES {
            self.peak = tree_bytes;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_once_per_large_shrink() {
        let mut f = FreedMemory::default();
        assert!(!f.note(100 << 20));
        assert!(!f.note(95 << 20));
        assert!(f.note(90 << 20));
        assert!(!f.note(85 << 20), "measured from the last return");
        assert!(!f.note(200 << 20));
        assert!(f.note(0));
    }
}
