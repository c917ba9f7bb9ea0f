//! The one error type of the benchmark: every variant names what was being done and where.

use std::time::Duration;

/// Why a benchmark run stopped before producing a report.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("--servers is empty or malformed: {0:?} (expected HOST:PORT[,HOST:PORT..])")]
    InvalidServers(String),

    #[error("connecting worker {worker} to {server}: {source}")]
    Connect {
        worker: usize,
        server: String,
        source: zookeeper_client::Error,
    },

    #[error("{op} {path}: {source}")]
    Operation {
        op: &'static str,
        path: String,
        source: zookeeper_client::Error,
    },

    #[error("{what} did not happen within {timeout:?} (is the server still up?)")]
    Timeout { what: String, timeout: Duration },

    #[error("session of {path} ended while waiting for a watch: {state:?}")]
    SessionEnded {
        path: String,
        state: zookeeper_client::SessionState,
    },

    #[error("server returned an unexpected sequential name {name:?} under {dir}")]
    BadSequentialName { dir: String, name: String },

    #[error("our own node {path} is missing from its parent's children (session lost?)")]
    OwnNodeMissing { path: String },

    #[error("two sessions held the lock at once (this grant: {path})")]
    MutualExclusion { path: String },

    #[error("fencing token {token} granted after token {previous}: tokens must rise")]
    TokenNotRising { previous: i64, token: i64 },

    #[error("election hand-over went to {observed} but {expected} was next in line")]
    WrongLeader { expected: String, observed: String },

    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },

    #[error("latency histogram: {0}")]
    Histogram(String),

    #[error("a worker task failed: {0}")]
    Worker(#[from] tokio::task::JoinError),

    #[error("invalid option: {0}")]
    InvalidOption(String),

    #[error("HTTP {request} to {addr}: {source}")]
    Http {
        addr: String,
        request: String,
        source: hyper::Error,
    },

    #[error("HTTP {request} to {addr} answered {status}: {body}")]
    HttpStatus {
        addr: String,
        request: String,
        status: u16,
        body: String,
    },

    #[error("HTTP {request} to {addr}: unexpected answer ({detail}): {body}")]
    BadReply {
        addr: String,
        request: String,
        detail: String,
        body: String,
    },

    #[error("sidecar {identity}: {detail}")]
    Sidecar { identity: String, detail: String },

    #[cfg(feature = "etcd")]
    #[error("etcd {op} {key}: {source}")]
    Etcd {
        op: &'static str,
        key: String,
        source: etcd_client::Error,
    },

    #[error("{0}")]
    Unexpected(String),

    #[error("ensemble member {member} ({server}): {detail}")]
    Member {
        member: usize,
        server: String,
        detail: String,
    },
}

impl BenchError {
    /// Wraps a client error with the operation and path it came from.
    pub fn op(
        op: &'static str,
        path: impl Into<String>,
    ) -> impl FnOnce(zookeeper_client::Error) -> Self {
        let path = path.into();
        move |source| BenchError::Operation { op, path, source }
    }
}
