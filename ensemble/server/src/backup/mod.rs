//! Backup and restore (`baton-ensemble snapshot save|restore`, DESIGN.md §1).
//!
//! `save` asks a member's admin API for `GET /v1/snapshot` (the state machine as applied through
//! at least the commit index the leader confirmed, `core::backup`), checks it, and writes the
//! backup file (`format`) to a file or to S3 (`s3`). `restore` turns a backup into the data dir
//! of one member of a new ensemble (`restore`): every member of that ensemble is restored from
//! the same backup with its own `--id`, then started as usual.

pub mod cmd;
pub mod format;
// Backup names in a bucket are read only by `s3`, which the `s3` feature leaves out.
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
mod location;
mod restore;
// Without the `s3` feature (baton-playground's build) a stub that refuses every S3 location.
#[cfg_attr(not(feature = "s3"), path = "s3_off.rs")]
mod s3;
mod save;

pub use cmd::{SnapshotArgs, run};
