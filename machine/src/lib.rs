//! Baton's ZooKeeper semantics as a deterministic, sans-IO state machine.
//!
//! The runtime (sockets, Raft, disks, clocks) lives in `baton-ensemble`; everything here can be
//! driven from a unit test or a simulation: `StateMachine::apply` for committed log entries,
//! `StateMachine::read` for local reads, `WatchManager` for a member's watches,
//! `SessionTracker` for the leader's session deadlines.

pub mod command;

pub use command::{Command, CommandKind};
