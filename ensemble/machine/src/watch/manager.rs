//! The watch table of one member: which session watches what, and who is notified of a change.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use baton_proto::{ErrorCode, EventType, KeeperState, WatcherEvent, WatcherType};

use super::kind::{Modes, WatchKind};

/// Why a `checkWatches` or `removeWatches` request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    #[error("session 0x{session_id:x} has no {watcher_type:?} watch on {path}")]
    NoWatcher {
        session_id: i64,
        path: String,
        watcher_type: WatcherType,
    },
}

impl WatchError {
    /// The ZooKeeper error code to answer the request with.
    pub fn code(&self) -> ErrorCode {
        match self {
            WatchError::NoWatcher { .. } => ErrorCode::NoWatcher,
        }
    }
}

/// A member's watches, with ZooKeeper's trigger rules (3.9 semantics, which agree with 3.6–3.8
/// except where 3.8 let watch kinds on one path overwrite each other).
///
/// Watches are not replicated: they live on the member holding the session's connection, and
/// the runtime feeds every applied change to `trigger` before answering any later read.
/// Deterministic: notifications come out sorted by session id.
#[derive(Debug, Default)]
pub struct WatchManager {
    /// Path → session → registrations. The single source of truth for modes.
    by_path: HashMap<String, BTreeMap<i64, Modes>>,
    /// Session → paths it has any registration on, so closing a session is O(its watches).
    by_session: HashMap<i64, BTreeSet<String>>,
    /// Session → the bytes of the paths in its `by_session` set: what a per-session limit on
    /// watch memory counts (a path is held once per session, however many ways it is watched).
    session_bytes: HashMap<i64, usize>,
    /// Number of (session, path) pairs holding a recursive watch: while zero, a trigger
    /// skips the walk up the ancestors.
    recursive: usize,
}

/// One session's notification of a change, from [`WatchManager::fire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    pub session_id: i64,
    pub event: WatcherEvent,
    /// A one-shot watch (getData, exists, getChildren) the session set on the event's own path
    /// fired, and is now gone. Its read was allowed when it was set, as ZooKeeper checks a
    /// watch only then; persistent and recursive watches go on firing, so they alone are
    /// checked again at each event.
    pub one_shot: bool,
}

/// The notification ZooKeeper sends for `event` on `path` (state SyncConnected).
pub fn notification(event: EventType, path: &str) -> WatcherEvent {
    WatcherEvent {
        event_type: event as i32,
        state: KeeperState::SyncConnected as i32,
        path: path.to_owned(),
    }
}

impl WatchManager {
    /// An empty watch table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a watch; returns false if the session already had this kind on this path
    /// (registering twice is idempotent: it still fires once).
    pub fn add(&mut self, session_id: i64, path: &str, kind: WatchKind) -> bool {
        let added = Modes::of_kind(kind);
        let watchers = match self.by_path.get_mut(path) {
            Some(watchers) => watchers,
            None => self.by_path.entry(path.to_owned()).or_default(),
        };
        let modes = watchers.entry(session_id).or_default();
        let before = *modes;
        *modes = before.union(added);
        if *modes == before {
            return false;
        }
        if added == Modes::RECURSIVE {
            self.recursive += 1;
        }
        if before.is_empty() {
            self.by_session
                .entry(session_id)
                .or_default()
                .insert(path.to_owned());
            *self.session_bytes.entry(session_id).or_default() += path.len();
        }
        true
    }

    /// Fires the watches that `event` on `path` triggers and returns one notification per
    /// session to notify, sorted by session id. One-shot watches that fired are removed;
    /// persistent ones stay. Event types that are not tree changes notify nobody.
    ///
    /// - `NodeCreated`, `NodeDataChanged`: data/exist and persistent watches on the path.
    /// - `NodeDeleted`: data/exist, child and persistent watches on the path.
    /// - `NodeChildrenChanged`: child and persistent watches on the path.
    /// - Recursive watches on the path or any ancestor: every event but `NodeChildrenChanged`.
    pub fn trigger(&mut self, path: &str, event: EventType) -> Vec<(i64, WatcherEvent)> {
        self.fire(path, event)
            .into_iter()
            .map(|f| (f.session_id, f.event))
            .collect()
    }

    /// [`WatchManager::trigger`], saying for each session whether a one-shot watch of its own
    /// on `path` fired (see [`Fired::one_shot`]).
    pub fn fire(&mut self, path: &str, event: EventType) -> Vec<Fired> {
        let (on_path, one_shot, recursive_fires) = match event {
            EventType::NodeCreated | EventType::NodeDataChanged => {
                (Modes::DATA_TABLE, Modes::DATA, true)
            }
            EventType::NodeDeleted => (Modes::ALL, Modes::DATA.union(Modes::CHILD), true),
            EventType::NodeChildrenChanged => {
                (Modes::CHILD.union(Modes::PERSISTENT), Modes::CHILD, false)
            }
            EventType::None
            | EventType::DataWatchRemoved
            | EventType::ChildWatchRemoved
            | EventType::PersistentWatchRemoved => return Vec::new(),
        };

        // Session → whether a one-shot watch of its own on `path` fired.
        let mut fired: BTreeMap<i64, bool> = BTreeMap::new();
        if let Some(watchers) = self.by_path.get_mut(path) {
            watchers.retain(|&session_id, modes| {
                if !modes.intersects(on_path) {
                    return true;
                }
                fired.insert(session_id, modes.intersects(one_shot));
                *modes = modes.without(one_shot);
                if modes.is_empty() {
                    forget_path(
                        &mut self.by_session,
                        &mut self.session_bytes,
                        session_id,
                        path,
                    );
                    return false;
                }
                true
            });
            if watchers.is_empty() {
                self.by_path.remove(path);
            }
        }
        if recursive_fires && self.recursive > 0 {
            for ancestor in ancestors(path) {
                if let Some(watchers) = self.by_path.get(ancestor) {
                    for (&session_id, modes) in watchers {
                        if modes.intersects(Modes::RECURSIVE) {
                            fired.entry(session_id).or_insert(false);
                        }
                    }
                }
            }
        }

        fired
            .into_iter()
            .map(|(session_id, one_shot)| Fired {
                session_id,
                event: notification(event, path),
                one_shot,
            })
            .collect()
    }

    /// Drops every watch of a session (its connection closed or moved, or it expired).
    pub fn remove_session(&mut self, session_id: i64) {
        self.session_bytes.remove(&session_id);
        let Some(paths) = self.by_session.remove(&session_id) else {
            return;
        };
        for path in paths {
            let Some(watchers) = self.by_path.get_mut(&path) else {
                continue;
            };
            if let Some(modes) = watchers.remove(&session_id)
                && modes.intersects(Modes::RECURSIVE)
            {
                self.recursive -= 1;
            }
            if watchers.is_empty() {
                self.by_path.remove(&path);
            }
        }
    }

    /// Whether the session has a watch of this type on exactly this path (`checkWatches`).
    /// `Data` and `Children` mean the one-shot watches; `Any` means any watch.
    pub fn has(&self, session_id: i64, path: &str, watcher_type: WatcherType) -> bool {
        self.modes(session_id, path)
            .intersects(Modes::of_watcher_type(watcher_type))
    }

    /// `checkWatches`: `Ok` if `has` would say true, else the `NoWatcher` error to answer with.
    pub fn check(
        &self,
        session_id: i64,
        path: &str,
        watcher_type: WatcherType,
    ) -> Result<(), WatchError> {
        if self.has(session_id, path, watcher_type) {
            Ok(())
        } else {
            Err(no_watcher(session_id, path, watcher_type))
        }
    }

    /// `removeWatches`: removes the session's watches of this type on exactly this path, or
    /// fails with `NoWatcher` if there are none. The server sends no notification for this:
    /// clients raise `DataWatchRemoved`/`ChildWatchRemoved`/`PersistentWatchRemoved` locally.
    pub fn remove(
        &mut self,
        session_id: i64,
        path: &str,
        watcher_type: WatcherType,
    ) -> Result<(), WatchError> {
        let target = Modes::of_watcher_type(watcher_type);
        let Some(watchers) = self.by_path.get_mut(path) else {
            return Err(no_watcher(session_id, path, watcher_type));
        };
        let Some(modes) = watchers.get_mut(&session_id) else {
            return Err(no_watcher(session_id, path, watcher_type));
        };
        if !modes.intersects(target) {
            return Err(no_watcher(session_id, path, watcher_type));
        }
        if target.intersects(Modes::RECURSIVE) && modes.intersects(Modes::RECURSIVE) {
            self.recursive -= 1;
        }
        *modes = modes.without(target);
        if modes.is_empty() {
            watchers.remove(&session_id);
            forget_path(
                &mut self.by_session,
                &mut self.session_bytes,
                session_id,
                path,
            );
            if watchers.is_empty() {
                self.by_path.remove(path);
            }
        }
        Ok(())
    }

    /// The watch count ZooKeeper 3.8 reports as `zk_watch_count`: (session, path) pairs in its
    /// data table plus those in its child table, so a persistent or recursive watch counts twice.
    pub fn count(&self) -> usize {
        self.by_path
            .values()
            .flat_map(|watchers| watchers.values())
            .map(|modes| {
                usize::from(modes.intersects(Modes::DATA_TABLE))
                    + usize::from(modes.intersects(Modes::CHILD_TABLE))
            })
            .sum()
    }

    /// Number of distinct paths with at least one watch of any kind.
    pub fn paths(&self) -> usize {
        self.by_path.len()
    }

    /// Number of distinct paths `session_id` watches in any way: what a per-session watch
    /// limit counts, since each costs this member memory for as long as the session is here.
    pub fn session_paths(&self, session_id: i64) -> usize {
        self.by_session.get(&session_id).map_or(0, BTreeSet::len)
    }

    /// Bytes of the distinct paths `session_id` watches (each counted once): a limit on watch
    /// memory counts these, since a path's name is the bulk of what a watch holds.
    pub fn session_path_bytes(&self, session_id: i64) -> usize {
        self.session_bytes.get(&session_id).copied().unwrap_or(0)
    }

    /// Number of sessions with at least one watch of any kind.
    pub fn sessions(&self) -> usize {
        self.by_session.len()
    }

    /// The kinds a session has registered on exactly this path, in `WatchKind` order
    /// (`Exist` is reported as `Data`: they are one set).
    pub fn kinds(&self, session_id: i64, path: &str) -> Vec<WatchKind> {
        let modes = self.modes(session_id, path);
        [
            WatchKind::Data,
            WatchKind::Child,
            WatchKind::Persistent,
            WatchKind::PersistentRecursive,
        ]
        .into_iter()
        .filter(|&kind| modes.intersects(Modes::of_kind(kind)))
        .collect()
    }

    pub(crate) fn modes(&self, session_id: i64, path: &str) -> Modes {
        self.by_path
            .get(path)
            .and_then(|watchers| watchers.get(&session_id))
            .copied()
            .unwrap_or(Modes::NONE)
    }

    pub(crate) fn by_path(&self) -> &HashMap<String, BTreeMap<i64, Modes>> {
        &self.by_path
    }
}

fn no_watcher(session_id: i64, path: &str, watcher_type: WatcherType) -> WatchError {
    WatchError::NoWatcher {
        session_id,
        path: path.to_owned(),
        watcher_type,
    }
}

fn forget_path(
    by_session: &mut HashMap<i64, BTreeSet<String>>,
    session_bytes: &mut HashMap<i64, usize>,
    session_id: i64,
    path: &str,
) {
    if let Some(paths) = by_session.get_mut(&session_id)
        && paths.remove(path)
    {
        if paths.is_empty() {
            by_session.remove(&session_id);
            session_bytes.remove(&session_id);
        } else if let Some(bytes) = session_bytes.get_mut(&session_id) {
            *bytes = bytes.saturating_sub(path.len());
        }
    }
}

/// The proper ancestors of a path, nearest first: `/a/b/c` → `/a/b`, `/a`, `/`.
/// Never panics, whatever the input (a malformed path just has fewer ancestors).
pub(crate) fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    std::iter::successors(parent(path), |p| parent(p))
}

fn parent(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(slash) => Some(&path[..slash]),
        None => None,
    }
}
