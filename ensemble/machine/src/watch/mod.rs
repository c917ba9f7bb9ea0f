//! A member's watches: registration, triggering on tree changes, removal, reconnection.
//!
//! Sans-IO: the runtime registers watches as reads succeed, feeds every applied change to
//! [`WatchManager::trigger`], and sends the notifications it returns.

mod kind;
mod manager;
mod reconnect;
mod report;

pub use kind::WatchKind;
pub use manager::{Fired, WatchError, WatchManager, notification};
pub use report::WatchSummary;
