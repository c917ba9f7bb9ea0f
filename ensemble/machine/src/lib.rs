//! Baton's ZooKeeper semantics as a deterministic, sans-IO state machine.
//!
//! The runtime (sockets, Raft, disks, clocks) lives in `baton-ensemble`; everything here can be
//! driven from a unit test or a simulation: `StateMachine::apply` for committed log entries,
//! `StateMachine::read` for local reads, `WatchManager` for a member's watches,
//! `SessionTracker` for the leader's session deadlines.

pub mod acl;
mod children;
pub mod command;
pub mod deliberate;
pub mod feature;
pub mod path;
pub mod quota;
mod read;
pub mod session_tracker;
pub mod settings;
pub mod snapshot;
pub mod state;
pub mod tenancy;
pub mod tree;
mod txn;
pub mod watch;

pub use command::{Command, CommandKind};
pub use feature::FeatureLevel;
pub use quota::QuotaRefusal;
pub use session_tracker::SessionTracker;
pub use settings::{AlarmKind, ClusterSettings, Setting};
pub use snapshot::{FrozenState, SnapshotError};
pub use state::{Applied, SessionInfo, StateMachine};
pub use tenancy::TenancyPolicy;
pub use watch::{WatchKind, WatchManager};
