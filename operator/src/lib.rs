//! `baton-operator`: reconciles `CoordinationEnsemble` resources into running, scalable,
//! upgradable Baton ensembles (DESIGN.md §3).
//!
//! The reconciler is a pipeline, one module per stage: [`dereference`] (read what exists),
//! [`validate`], [`build`] (pure: objects from the spec), [`plan`] (pure: the next membership or
//! rollout step), [`apply`] (server-side apply), [`ensemble`] (the admin API steps) and
//! [`status`]; [`pki`] keeps each ensemble's CA and certificates. [`reconcile`] strings them together; [`controller`] runs it. [`webhook`] injects
//! the sidecar into annotated pods.

pub mod apply;
pub mod build;
pub mod cli;
pub mod controller;
pub mod crd;
pub mod dereference;
pub mod ensemble;
pub mod events;
pub mod finalizer;
pub mod http_server;
pub mod leader_lease;
pub mod metadata_keys;
pub mod metrics;
pub mod names;
pub mod operation;
pub mod pem;
pub mod pki;
pub mod plan;
pub mod reconcile;
pub mod render;
pub mod reseed;
pub mod sidecar_audit;
pub mod status;
pub mod validate;
pub mod webhook;
