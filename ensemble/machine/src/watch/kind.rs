//! What a watch is registered for, and the per-(session, path) set of registrations.

use baton_proto::{AddWatchMode, WatcherType};

/// The kind of watch a request registers.
///
/// `Data` and `Exist` are one set, as in ZooKeeper: a watch left by `exists` on a missing node
/// and one left by `getData` on a present node fire on the same events and are removed together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WatchKind {
    /// One-shot watch set by `getData`.
    Data,
    /// One-shot watch set by `exists` (the same set as `Data`).
    Exist,
    /// One-shot watch set by `getChildren`.
    Child,
    /// `addWatch` mode 0: every event on the path, never removed by firing.
    Persistent,
    /// `addWatch` mode 1: created/deleted/data-changed on the path and every descendant.
    PersistentRecursive,
}

impl From<AddWatchMode> for WatchKind {
    fn from(mode: AddWatchMode) -> Self {
        match mode {
            AddWatchMode::Persistent => WatchKind::Persistent,
            AddWatchMode::PersistentRecursive => WatchKind::PersistentRecursive,
        }
    }
}

/// The registrations one session holds on one path, as a bit set.
///
/// ZooKeeper 3.6–3.8 kept a single mode per (session, path), so a `getData` watch silently
/// turned a persistent watch into a one-shot one (ZOOKEEPER-4466, fixed in 3.9). Keeping a bit
/// per kind gives the fixed, orthogonal behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Modes(u8);

impl Modes {
    pub(crate) const NONE: Modes = Modes(0);
    /// One-shot data/exist watch (ZooKeeper's STANDARD mode in its data watch table).
    pub(crate) const DATA: Modes = Modes(1);
    /// One-shot child watch (STANDARD mode in its child watch table).
    pub(crate) const CHILD: Modes = Modes(1 << 1);
    pub(crate) const PERSISTENT: Modes = Modes(1 << 2);
    pub(crate) const RECURSIVE: Modes = Modes(1 << 3);
    /// Kinds that ZooKeeper keeps in its data watch table; only these show in `wchs`/`wchc`/`wchp`.
    pub(crate) const DATA_TABLE: Modes =
        Modes(Self::DATA.0 | Self::PERSISTENT.0 | Self::RECURSIVE.0);
    /// Kinds that ZooKeeper 3.8 keeps in its child watch table (recursive ones too, though
    /// they never fire from there); used only for the `zk_watch_count` metric.
    pub(crate) const CHILD_TABLE: Modes =
        Modes(Self::CHILD.0 | Self::PERSISTENT.0 | Self::RECURSIVE.0);
    pub(crate) const ALL: Modes = Modes(0b1111);

    pub(crate) fn of_kind(kind: WatchKind) -> Modes {
        match kind {
            WatchKind::Data | WatchKind::Exist => Modes::DATA,
            WatchKind::Child => Modes::CHILD,
            WatchKind::Persistent => Modes::PERSISTENT,
            WatchKind::PersistentRecursive => Modes::RECURSIVE,
        }
    }

    /// The registrations a `checkWatches`/`removeWatches` of this type refers to (ZooKeeper 3.9:
    /// `Data` and `Children` name only the one-shot watches, `Any` names everything).
    pub(crate) fn of_watcher_type(t: WatcherType) -> Modes {
        match t {
            WatcherType::Children => Modes::CHILD,
            WatcherType::Data => Modes::DATA,
            WatcherType::Any => Modes::ALL,
            WatcherType::Persistent => Modes::PERSISTENT,
            WatcherType::PersistentRecursive => Modes::RECURSIVE,
        }
    }

    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub(crate) fn intersects(self, other: Modes) -> bool {
        self.0 & other.0 != 0
    }

    pub(crate) fn union(self, other: Modes) -> Modes {
        Modes(self.0 | other.0)
    }

    pub(crate) fn without(self, other: Modes) -> Modes {
        Modes(self.0 & !other.0)
    }
}
