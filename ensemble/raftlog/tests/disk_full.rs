//! A real ENOSPC: needs a small filesystem, so it is ignored by default. To run it (as root):
//!
//! ```text
//! mkdir -p /tmp/small && mount -t tmpfs -o size=512k tmpfs /tmp/small
//! BATON_SMALL_FS=/tmp/small cargo test -p baton-raftlog --test disk_full -- --ignored
//! umount /tmp/small
//! ```

mod common;

use std::path::PathBuf;

use baton_raftlog::LogError;
use common::*;
use raft::Storage;

#[test]
#[ignore = "needs BATON_SMALL_FS pointing at a small, empty filesystem"]
fn disk_full_is_an_error_never_a_success() {
    let root = PathBuf::from(std::env::var("BATON_SMALL_FS").expect("BATON_SMALL_FS is set"));
    let dir = tempfile::tempdir_in(&root).expect("tempdir on the small filesystem");
    let log = open(dir.path(), opts(true)).expect("open");
    let payload = vec![0x5au8; 16 * 1024];
    let mut acknowledged = 0;
    let failure = loop {
        let index = acknowledged + 1;
        match log.persist(&[entry_with_data(index, 1, &payload)], None) {
            Ok(_) => acknowledged = index,
            Err(e) => break e,
        }
        assert!(acknowledged < 100_000, "the filesystem never filled up");
    };
    assert!(matches!(failure, LogError::Io { .. }), "{failure}");
    assert!(
        failure
            .to_string()
            .contains(&dir.path().display().to_string()),
        "{failure}"
    );
    assert_eq!(
        log.last_index(),
        Ok(acknowledged),
        "nothing unacknowledged is visible"
    );
    drop(log);

    let log = open(dir.path(), opts(true)).expect("reopen after disk full");
    assert_eq!(
        log.last_index(),
        Ok(acknowledged),
        "every acknowledged entry survived"
    );
}
