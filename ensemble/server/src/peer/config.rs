//! What the transport is started with: identity, peers, limits and tuning, checked once
//! at start so the running transport never meets a nonsensical limit.

use std::collections::HashMap;
use std::time::Duration;

use tokio::net::TcpListener;

use super::handshake::MAX_CLUSTER_ID_BYTES;

/// Default largest Raft message on the Raft lane, in encoded bytes.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Everything the transport needs to start. `L` is the peer-port listener (TCP by default).
pub struct PeerConfig<L = TcpListener> {
    /// This member's Raft id (never 0).
    pub member_id: u64,
    /// The ensemble's id, as recorded in the data dir; peers must present the same one.
    pub cluster_id: String,
    /// The bound peer port.
    pub listener: L,
    /// Other members' peer addresses (HOST:PORT) by id; this member's own entry is ignored.
    pub peers: HashMap<u64, String>,
    /// Largest frame accepted or sent on the message lane: an encoded Raft message or a
    /// control payload, plus its 1-byte kind tag.
    pub max_message_bytes: usize,
    /// The highest feature level this member advertises in its hellos: this build's newest
    /// unless `--max-feature-level` caps it.
    pub max_feature_level: u32,
    /// Limits, timeouts and pacing; the defaults suit a LAN.
    pub tuning: PeerTuning,
}

impl<L> PeerConfig<L> {
    /// A configuration with default limits and tuning.
    pub fn new(
        member_id: u64,
        cluster_id: impl Into<String>,
        listener: L,
        peers: HashMap<u64, String>,
    ) -> Self {
        Self {
            member_id,
            cluster_id: cluster_id.into(),
            listener,
            peers,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_feature_level: *baton_machine::feature::SUPPORTED.end(),
            tuning: PeerTuning::default(),
        }
    }
}

/// Limits, timeouts and pacing of the transport.
#[derive(Debug, Clone)]
pub struct PeerTuning {
    /// Largest encoded `MsgSnapshot` accepted or sent on the snapshot lane (at most 4 GiB - 1).
    pub max_snapshot_bytes: usize,
    /// Raft messages and control payloads queued per peer on the message lane before `send`
    /// and `send_control` start refusing them.
    pub queue_capacity: usize,
    /// Snapshots queued per peer before `send` starts dropping (and reporting failure).
    pub snapshot_queue_capacity: usize,
    /// Bound on opening a connection (name resolution and TCP connect included).
    pub connect_timeout: Duration,
    /// Bound on a handshake, on either side.
    pub handshake_timeout: Duration,
    /// Bound on one batched write on the Raft lane: a peer that stops reading (or vanished
    /// without a reset) is declared unreachable after this, not after TCP's retransmissions.
    pub write_timeout: Duration,
    /// Bound on sending one snapshot and receiving its acknowledgement.
    pub snapshot_timeout: Duration,
    /// First reconnect delay after a failure (jittered).
    pub backoff_initial: Duration,
    /// Largest reconnect delay (jittered).
    pub backoff_max: Duration,
    /// Most inbound connections open at once, handshaking ones included.
    pub max_inbound_connections: usize,
    /// An outbound message-lane connection with nothing to send for this long is closed
    /// (and opened again on the next message), so no connection stays open forever unused.
    pub idle_close: Duration,
    /// An inbound connection on which nothing arrives for this long is closed. Longer than
    /// `idle_close`, so it only ever closes connections whose sender is gone or stuck; a
    /// snapshot-lane frame may take up to `snapshot_timeout` instead.
    pub idle_timeout: Duration,
    /// Seeds the reconnect jitter (mixed with the peer id and lane) so a deterministic
    /// simulation replays; `None` draws it from the OS.
    pub jitter_seed: Option<u64>,
}

impl Default for PeerTuning {
    fn default() -> Self {
        Self {
            max_snapshot_bytes: 1 << 30,
            queue_capacity: 1024,
            snapshot_queue_capacity: 2,
            connect_timeout: Duration::from_secs(3),
            handshake_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            snapshot_timeout: Duration::from_secs(600),
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_secs(1),
            max_inbound_connections: 256,
            idle_close: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(180),
            jitter_seed: None,
        }
    }
}

/// Why the transport refused to start.
#[derive(Debug, thiserror::Error)]
pub enum PeerConfigError {
    #[error("member id 0 is reserved by Raft")]
    ZeroMemberId,
    #[error("peer {addr} has the reserved member id 0")]
    ZeroPeerId { addr: String },
    #[error("cluster id must be 1 to {MAX_CLUSTER_ID_BYTES} bytes, got {0}")]
    ClusterId(usize),
    #[error("{what} must be between {min} and {max}, got {got}")]
    OutOfRange {
        what: &'static str,
        got: usize,
        min: usize,
        max: usize,
    },
    #[error("the peer transport must be started inside a tokio runtime")]
    NoRuntime,
}

pub(crate) fn validate<L>(config: &PeerConfig<L>) -> Result<(), PeerConfigError> {
    if config.member_id == 0 {
        return Err(PeerConfigError::ZeroMemberId);
    }
    if let Some(addr) = config.peers.get(&0) {
        return Err(PeerConfigError::ZeroPeerId { addr: addr.clone() });
    }
    let id_len = config.cluster_id.len();
    if id_len == 0 || id_len > MAX_CLUSTER_ID_BYTES {
        return Err(PeerConfigError::ClusterId(id_len));
    }
    let range = |what, got, min, max| {
        if (min..=max).contains(&got) {
            Ok(())
        } else {
            Err(PeerConfigError::OutOfRange {
                what,
                got,
                min,
                max,
            })
        }
    };
    let frame_max = u32::MAX as usize;
    let t = &config.tuning;
    range(
        "max_message_bytes",
        config.max_message_bytes,
        1024,
        frame_max,
    )?;
    range(
        "max_snapshot_bytes",
        t.max_snapshot_bytes,
        config.max_message_bytes,
        frame_max,
    )?;
    range("queue_capacity", t.queue_capacity, 1, 1 << 20)?;
    range(
        "snapshot_queue_capacity",
        t.snapshot_queue_capacity,
        1,
        1024,
    )?;
    range(
        "max_inbound_connections",
        t.max_inbound_connections,
        1,
        1 << 16,
    )?;
    Ok(())
}
