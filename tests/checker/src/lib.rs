//! Checks a history of ZooKeeper client operations recorded against a real or simulated
//! ensemble: linearizability of znode data and versions per path (a Wing & Gong search with
//! memoisation, as in Knossos and Porcupine), and invariants a linearizability check does not
//! cover (no acknowledged write lost, sequential names never reused, per-session FIFO).
//!
//! ```
//! use baton_checker::{Call, HistoryBuilder, Outcome, Reply, Verdict, check};
//!
//! let mut history = HistoryBuilder::new();
//! history.push(1, "/a", Call::create("x"), 0, Some(10), Outcome::Ok(Reply::Done));
//! history.push(2, "/a", Call::get_data(), 20, Some(30), Outcome::read("x", 0));
//! let history = history.build().expect("well-formed history");
//! assert!(matches!(check(&history, 100_000), Verdict::Ok));
//! ```

mod explanation;
mod history;
mod invariants;
mod linearizability;
mod model;

pub use explanation::{Rejection, Violation};
pub use history::{
    Call, Failure, History, HistoryBuilder, HistoryError, OpId, Operation, Outcome, Reply,
};
pub use invariants::{
    InvariantViolation, check_no_lost_writes, check_sequential_names, check_session_fifo,
};
pub use linearizability::{Verdict, check, check_key};
pub use model::Znode;
