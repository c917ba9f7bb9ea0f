//! The coordination recipes, usable as a library: one supervised session
//! ([`start_session`]), leader election ([`ElectionRecipe`]) and fair locks ([`LockRecipe`]).
//!
//! Every node lives under `/baton` (see DESIGN.md §2): elections in
//! `/baton/elections/<name>/candidate-<seq>`, locks in `/baton/locks/<name>/{lock,read,write}-<seq>`.
//! Fencing tokens are the czxid of the leading or granted node.
//!
//! ```no_run
//! use std::time::Duration;
//! use baton_sidecar::recipe::*;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let (session, control) = start_session(SessionOptions {
//!     ensemble: "127.0.0.1:2181".into(),
//!     session_timeout: Duration::from_secs(10),
//!     tls: None,
//! });
//! let me = Candidate { identity: "pod-0".into(), address: Some("10.0.0.7:8080".into()), pod: None };
//! let election = ElectionRecipe::start(session.clone(), ResourceName::new("orders")?, me);
//! if election.is_leader() {
//!     // Lead; stamp writes with election.view().leader_token() so a deposed leader is refused.
//! }
//! let lock = LockRecipe::new(session.clone(), ResourceName::new("db")?, "pod-0");
//! let grant = lock.acquire(LockMode::Exclusive, Duration::from_secs(10), None).await?;
//! // Use the resource with grant.token() as the fencing token.
//! grant.release(Duration::from_secs(5)).await?;
//! election.leave().await;
//! control.close(Duration::from_secs(5)).await;
//! # Ok(())
//! # }
//! ```

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
    Connection, ConnectionState, EnsembleCaError, SessionControl, SessionHandle, SessionOptions,
    SessionSnapshot, ensemble_tls, start_session,
};
