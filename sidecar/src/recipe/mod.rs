//! The coordination recipes, usable as a library: one supervised session
//! ([`start_session`]), leader election ([`ElectionRecipe`]) and fair locks ([`LockRecipe`]).
//!
//! Every node lives under `/baton/<namespace>` (see DESIGN.md §2 and §4): elections in
//! `/baton/<namespace>/elections/<name>/candidate-<seq>`, locks in
//! `/baton/<namespace>/locks/<name>/{lock,read,write}-<seq>`; the namespace is the session's
//! ([`start_session_as`]; `default` for [`start_session`]). Only live ephemeral nodes count in
//! a queue ([`trust`]). Fencing tokens are the czxid of the leading or granted node.
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

pub mod access;
mod barrier;
mod election;
mod election_folder;
mod election_task;
mod election_types;
mod error;
mod liveness;
mod lock;
mod lock_types;
mod members;
mod names;
pub mod owned_node;
mod pending_node;
pub mod queue;
mod session;
pub mod timestamp;
pub mod trust;

pub use access::{Access, DigestCredentials, TokenFileError};
pub use barrier::{BarrierError, BarrierRecipe, PartyData};
pub use election::{ElectionRecipe, LeaderInterest};
pub use election_types::{Candidate, CandidateData, ElectionView, LeaderInfo};
pub use error::RecipeError;
pub use lock::{LockGrant, LockRecipe};
pub use lock_types::{LockData, LockEntry, LockError, LockMode, LockState};
pub use members::{Member, Members, read_members};
pub use names::{
    DEFAULT_NAMESPACE, MAX_NAME_LEN, NameError, Namespace, NamespaceError, ROOT, ResourceName,
};
pub use session::{
    Connection, ConnectionState, EnsembleCaError, SessionControl, SessionHandle, SessionOptions,
    SessionSnapshot, ensemble_tls, start_session, start_session_as,
};
