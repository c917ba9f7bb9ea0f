//! baton-bench: the same ZooKeeper workloads against any ZooKeeper-compatible server, so Baton
//! and Apache ZooKeeper can be compared side by side on one machine.
//!
//! Every workload speaks the real client protocol through the `zookeeper-client` crate (which
//! does not set TCP_NODELAY: a server that does not set it on its side pays for Nagle here),
//! spreads its sessions round-robin over `--servers`, and is bounded by `--duration` or `--ops`.

pub mod budget;
pub mod ensemble;
pub mod error;
pub mod fair_lock;
pub mod latency;
pub mod report;
pub mod workload;
