//! `setWatches`/`setWatches2`: re-registering a reconnecting client's watches.

use baton_proto::{EventType, SetWatchesRequest, Stat, WatcherEvent};

use super::kind::WatchKind;
use super::manager::{WatchManager, notification};

impl WatchManager {
    /// Re-registers the watches a client held before it reconnected, as ZooKeeper's
    /// `DataTree.setWatches` does, and returns the notifications to send at once for changes
    /// the client missed since `relative_zxid` (its last seen zxid). `stat_of` looks a node up.
    ///
    /// In request order: data watches, then exist, then child watches. A data watch on a node
    /// that is gone fires `NodeDeleted`, on one changed since (`mzxid > relative_zxid`)
    /// `NodeDataChanged`; an exist watch on a node that now exists fires `NodeCreated`; a child
    /// watch on a node that is gone fires `NodeDeleted`, on one whose children changed since
    /// (`pzxid > relative_zxid`) `NodeChildrenChanged`. A watch that fires is not registered
    /// (it was one-shot); any other is. Persistent and recursive watches are re-added without
    /// a catch-up event. Like ZooKeeper, nothing is de-duplicated: a path listed twice fires twice.
    pub fn set_watches(
        &mut self,
        session_id: i64,
        request: &SetWatchesRequest,
        stat_of: impl Fn(&str) -> Option<Stat>,
    ) -> Vec<WatcherEvent> {
        let since = request.relative_zxid;
        let mut events = Vec::new();
        for path in &request.data_watches {
            match stat_of(path) {
                None => events.push(notification(EventType::NodeDeleted, path)),
                Some(stat) if stat.mzxid > since => {
                    events.push(notification(EventType::NodeDataChanged, path));
                }
                Some(_) => {
                    self.add(session_id, path, WatchKind::Data);
                }
            }
        }
        for path in &request.exist_watches {
            if stat_of(path).is_some() {
                events.push(notification(EventType::NodeCreated, path));
            } else {
                self.add(session_id, path, WatchKind::Exist);
            }
        }
        for path in &request.child_watches {
            match stat_of(path) {
                None => events.push(notification(EventType::NodeDeleted, path)),
                Some(stat) if stat.pzxid > since => {
                    events.push(notification(EventType::NodeChildrenChanged, path));
                }
                Some(_) => {
                    self.add(session_id, path, WatchKind::Child);
                }
            }
        }
        for path in &request.persistent_watches {
            self.add(session_id, path, WatchKind::Persistent);
        }
        for path in &request.persistent_recursive_watches {
            self.add(session_id, path, WatchKind::PersistentRecursive);
        }
        events
    }
}
