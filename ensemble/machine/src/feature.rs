//! The ensemble's feature level: which behaviour changes every member applies.
//!
//! A behaviour that changes what an entry does at apply (what it stores, what a read of it
//! answers) is switched on by the cluster together, never per binary: during a rolling
//! upgrade the replicas of one log must reach byte-identical states whatever build each runs.
//! So each build knows the levels it can apply ([`SUPPORTED`]); the level in force is part of
//! the replicated settings (`ClusterSettings::feature_level`, a `SetSettings` entry with
//! `Setting::FeatureLevel`), raised by the leader only once every voter and learner
//! advertises support for it (etcd's cluster version and capabilities), and from that entry's
//! index on every member applies the new behaviour. The level never goes down by an entry: a
//! data dir at level N needs a build that supports N (a member refuses to start otherwise).
//!
//! Levels:
//! - **1**: the behaviour of releases before the feature level existed. Null znode data (a
//!   create or setData with jute's null buffer) is stored as empty data, so it reads back as
//!   an empty buffer with `dataLength` 0.
//! - **2**: null data is kept apart from empty data, as Apache ZooKeeper does: getData
//!   answers the null buffer (length -1).

use std::ops::RangeInclusive;

/// The levels this build can apply: from the oldest a data dir may be at to the newest.
pub const SUPPORTED: RangeInclusive<u32> = 1..=2;

/// The level before any level entry: what a new ensemble, an old snapshot or an old log has.
pub const BASE: u32 = *SUPPORTED.start();

/// The first level at which null znode data is kept apart from empty data.
pub const NULL_DATA: u32 = 2;

/// The ensemble's replicated feature level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FeatureLevel(pub u32);

impl Default for FeatureLevel {
    fn default() -> Self {
        FeatureLevel(BASE)
    }
}

impl FeatureLevel {
    /// The number, as status and metrics show it.
    pub fn get(self) -> u32 {
        self.0
    }

    /// Whether null znode data is kept apart from empty data at this level.
    pub fn keeps_null_data(self) -> bool {
        self.0 >= NULL_DATA
    }

    /// The data a create or setData stores: at levels before [`NULL_DATA`] a null buffer is
    /// stored as empty data, as those releases did, so that a member of either build applying
    /// the same entry stores the same bytes.
    pub fn stored_data(self, data: Option<Vec<u8>>) -> Option<Vec<u8>> {
        match data {
            None if !self.keeps_null_data() && !crate::deliberate::null_data_early() => {
                Some(Vec::new())
            }
            data => data,
        }
    }
}

/// Data at a feature level above what this member supports: the one refusal a data dir, a
/// snapshot and a backup get alike, naming the level needed and how to get on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} is at feature level {level}{reached}, but this baton-ensemble supports feature levels up to {max}{capped}: run a release that supports level {level} (baton-ensemble --version lists them), or restore a backup taken before the level was raised into an empty data dir (docs/src/tasks/upgrade.md)",
    reached = index.map(|i| format!(" (reached by index {i})")).unwrap_or_default(),
    capped = if *max < *SUPPORTED.end() { " (capped by --max-feature-level)" } else { "" }
)]
pub struct LevelTooHigh {
    /// What is refused: "this data dir", "this snapshot", "this backup".
    pub what: &'static str,
    pub level: u32,
    pub max: u32,
    /// The index at which the level was reached, when known.
    pub index: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_data_is_empty_before_level_2_and_null_from_it() {
        assert_eq!(FeatureLevel::default(), FeatureLevel(1));
        assert_eq!(FeatureLevel(1).stored_data(None), Some(vec![]));
        assert_eq!(FeatureLevel(1).stored_data(Some(vec![7])), Some(vec![7]));
        assert_eq!(FeatureLevel(2).stored_data(None), None);
        assert_eq!(FeatureLevel(2).stored_data(Some(vec![])), Some(vec![]));
    }
}
