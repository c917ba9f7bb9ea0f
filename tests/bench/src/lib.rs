//! baton-bench: the same ZooKeeper workloads against any ZooKeeper-compatible server, so Baton
//! and Apache ZooKeeper can be compared side by side on one machine.
//!
//! Every workload speaks the real client protocol through the `zookeeper-client` crate (which
//! does not set TCP_NODELAY: a server that does not set it on its side pays for Nagle here),
//! spreads its sessions round-robin over `--servers`, and is bounded by `--duration` or `--ops`.
//! The sidecar workloads run real `baton-sidecar` processes on those servers and go through
//! their HTTP API; ensemble-failover kills and restarts ensemble members. With the `etcd` feature,
//! `--etcd` runs the rows that carry over against etcd's v3 API instead.

pub mod app_child;
pub mod budget;
pub mod ensemble;
pub mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod fair_lock;
pub mod four_letter;
pub mod http_client;
pub mod latency;
pub mod members;
pub mod process;
pub mod report;
pub mod sidecar;
pub mod workload;
