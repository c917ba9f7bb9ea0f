//! A failed write is reported, never half-applied, and stops the log until it is reopened.

use raft::Storage;
use raft::eraftpb::{Entry, HardState};

use crate::{LogError, LogOptions, RaftLog};

fn entry(index: u64, term: u64) -> Entry {
    Entry {
        index,
        term,
        ..Default::default()
    }
}

#[test]
fn a_failed_write_is_an_error_hides_its_entries_and_poisons_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = LogOptions {
        sync: false,
        ..LogOptions::default()
    };
    let log = RaftLog::open(dir.path(), 1, Some("c"), opts.clone()).expect("open");
    log.persist(&[entry(1, 1), entry(2, 1)], None)
        .expect("persist");
    log.break_disk_for_test().expect("break disk");

    let hs = HardState {
        commit: 3,
        ..Default::default()
    };
    let res = log.persist(&[entry(3, 1)], Some(&hs));
    assert!(
        matches!(
            res,
            Err(LogError::Io {
                op: "append to segment",
                ..
            })
        ),
        "{res:?}"
    );
    assert_eq!(log.last_index(), Ok(2), "the failed entry is not visible");
    assert_eq!(
        log.hard_state().commit,
        0,
        "the failed hard state is not visible"
    );
    assert!(log.stats().poisoned);

    let again = log.persist(&[entry(3, 1)], None);
    assert!(matches!(again, Err(LogError::Poisoned { .. })), "{again:?}");
    assert!(matches!(
        log.create_snapshot(2, Default::default(), Vec::new()),
        Err(LogError::Poisoned { .. })
    ));
    // Reads keep working so the node can still answer what it has.
    assert_eq!(log.term(2), Ok(1));

    drop(log);
    let log = RaftLog::open(dir.path(), 1, Some("c"), opts).expect("reopen");
    assert_eq!(log.last_index(), Ok(2));
    log.persist(&[entry(3, 1)], None)
        .expect("writable after reopen");
}
