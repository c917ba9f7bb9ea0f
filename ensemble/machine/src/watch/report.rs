//! The views behind ZooKeeper's `wchs`, `wchc` and `wchp` four-letter words.
//!
//! ZooKeeper builds all three from its data watch table only, so watches set by `getChildren`
//! never show there (checked against 3.8); these views do the same, so the words read alike.

use std::collections::BTreeMap;
use std::fmt;

use super::kind::Modes;
use super::manager::WatchManager;

/// The numbers `wchs` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WatchSummary {
    /// Sessions with at least one data-table watch.
    pub sessions: usize,
    /// Paths with at least one data-table watch.
    pub paths: usize,
    /// (session, path) pairs with a data-table watch.
    pub watches: usize,
}

impl fmt::Display for WatchSummary {
    /// ZooKeeper's wording, without the final newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} connections watching {} paths\nTotal watches:{}",
            self.sessions, self.paths, self.watches
        )
    }
}

impl WatchManager {
    /// `wchs`: how many sessions watch how many paths (data-table watches only).
    pub fn summary(&self) -> WatchSummary {
        let by_session = self.watches_by_session();
        WatchSummary {
            sessions: by_session.len(),
            paths: self.watches_by_path().len(),
            watches: by_session.iter().map(|(_, paths)| paths.len()).sum(),
        }
    }

    /// `wchc`: each session with the paths it watches, sessions and paths sorted.
    pub fn watches_by_session(&self) -> Vec<(i64, Vec<String>)> {
        let mut by_session: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        for (path, session_id) in self.data_table() {
            by_session
                .entry(session_id)
                .or_default()
                .push(path.to_owned());
        }
        let mut out: Vec<_> = by_session.into_iter().collect();
        for (_, paths) in &mut out {
            paths.sort_unstable();
        }
        out
    }

    /// `wchp`: each watched path with the sessions watching it, paths and sessions sorted.
    pub fn watches_by_path(&self) -> Vec<(String, Vec<i64>)> {
        let mut by_path: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        // Sessions come out of each path's map already sorted.
        for (path, session_id) in self.data_table() {
            by_path.entry(path).or_default().push(session_id);
        }
        by_path
            .into_iter()
            .map(|(path, sessions)| (path.to_owned(), sessions))
            .collect()
    }

    fn data_table(&self) -> impl Iterator<Item = (&str, i64)> {
        self.by_path().iter().flat_map(|(path, watchers)| {
            watchers
                .iter()
                .filter(|(_, modes)| modes.intersects(Modes::DATA_TABLE))
                .map(move |(&session_id, _)| (path.as_str(), session_id))
        })
    }
}
