//! Baton's sidecar: one ZooKeeper session per pod, the election and lock recipes on it, and a
//! localhost HTTP API so any application can use them (DESIGN.md §2).
//!
//! [`recipe`] is usable on its own by Rust applications; the rest wires it to HTTP,
//! Prometheus metrics and the pod's labels.

pub mod app_health;
pub mod cli;
pub mod config;
/// The duration grammar of every flag and query parameter (the crate `baton-duration`, shared
/// with the ensemble and the operator), re-exported for the fuzz targets.
pub use baton_duration as duration;
pub mod events;
pub mod handoff;
pub mod http;
pub mod leases;
pub mod metrics;
pub mod pod;
pub mod recipe;
pub mod sidecar;
