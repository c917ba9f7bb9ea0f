//! The coordination recipes, usable as a library: one supervised session
//! ([`start_session`]), leader election ([`ElectionRecipe`]) and fair locks ([`LockRecipe`]).
//!
//! Every node lives under `/baton` (see DESIGN.md §2): elections in
//! `/baton/elections/<name>/candidate-<seq>`, locks in `/baton/locks/<name>/{lock,read,write}-<seq>`.
//! Fencing tokens are the czxid of the leading or granted node.

mod election;
mod election_task;
mod error;
mod lock;
mod names;
pub mod owned_node;
pub mod queue;
mod session;
pub mod timestamp;

pub use election::{Candidate, CandidateData, ElectionRecipe, ElectionView, LeaderInfo};
pub use error::RecipeError;
pub use lock::{LockData, LockEntry, LockError, LockGrant, LockMode, LockRecipe, LockState};
pub use names::{ELECTIONS, LOCKS, MAX_NAME_LEN, NameError, ROOT, ResourceName};
pub use session::{
    Connection, ConnectionState, SessionControl, SessionHandle, SessionOptions, SessionSnapshot,
    start_session,
};
