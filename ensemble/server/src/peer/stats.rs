//! Counters the transport keeps so the admin API can export them: plain atomics bumped on
//! the hot path, read as a consistent-enough snapshot by `PeerTransport::stats`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// Counters about one peer, shared by its two outbound lanes and the inbound connections
/// that handshook as that peer.
#[derive(Debug, Default)]
pub(crate) struct PeerCounters {
    pub sent: AtomicU64,
    pub sent_bytes: AtomicU64,
    pub dropped: AtomicU64,
    pub received: AtomicU64,
    pub received_bytes: AtomicU64,
    pub control_sent: AtomicU64,
    pub control_received: AtomicU64,
    pub connects: AtomicU64,
    pub connect_failures: AtomicU64,
    pub refusals: AtomicU64,
    pub snapshots_sent: AtomicU64,
    pub snapshots_failed: AtomicU64,
    pub connected: AtomicBool,
    pub last_error: Mutex<Option<String>>,
}

impl PeerCounters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub(crate) fn set_last_error(&self, error: String) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(error);
    }

    pub(crate) fn snapshot(&self, addr: &str) -> PeerStats {
        PeerStats {
            addr: addr.to_owned(),
            connected: self.connected.load(Relaxed),
            sent: self.sent.load(Relaxed),
            sent_bytes: self.sent_bytes.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
            received: self.received.load(Relaxed),
            received_bytes: self.received_bytes.load(Relaxed),
            control_sent: self.control_sent.load(Relaxed),
            control_received: self.control_received.load(Relaxed),
            connects: self.connects.load(Relaxed),
            connect_failures: self.connect_failures.load(Relaxed),
            refusals: self.refusals.load(Relaxed),
            snapshots_sent: self.snapshots_sent.load(Relaxed),
            snapshots_failed: self.snapshots_failed.load(Relaxed),
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }
}

/// Counters about inbound connections as a whole, before (or regardless of) who they are.
#[derive(Debug, Default)]
pub(crate) struct InboundCounters {
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
    pub failed_handshakes: AtomicU64,
    pub bad_frames: AtomicU64,
    pub wrong_sender: AtomicU64,
    pub received_from_unknown: AtomicU64,
}

/// One peer's counters at one moment. Counters only grow while the peer stays configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// The address messages are sent to (HOST:PORT).
    pub addr: String,
    /// Whether the Raft lane currently has an open, handshaken connection.
    pub connected: bool,
    /// Messages written to the peer's socket (not proof of delivery), control payloads included.
    pub sent: u64,
    /// Bytes of those messages, framing included.
    pub sent_bytes: u64,
    /// Messages and control payloads dropped on the way out: queue full, peer unreachable,
    /// too large, or lost with a broken connection. Raft retransmits; lost control payloads
    /// are the core's to detect.
    pub dropped: u64,
    /// Messages received from this peer and handed to the core, control payloads included.
    pub received: u64,
    /// Bytes of those messages, framing included.
    pub received_bytes: u64,
    /// Of `sent`, the control payloads.
    pub control_sent: u64,
    /// Of `received`, the control payloads.
    pub control_received: u64,
    /// Outbound connections that completed the handshake.
    pub connects: u64,
    /// Outbound attempts that failed (connect, handshake, refusal).
    pub connect_failures: u64,
    /// Outbound attempts the peer refused at the handshake (wrong cluster or member id).
    pub refusals: u64,
    /// Snapshots the peer acknowledged.
    pub snapshots_sent: u64,
    /// Snapshots that could not be delivered.
    pub snapshots_failed: u64,
    /// The last outbound failure, for operators asking why a peer is unreachable.
    pub last_error: Option<String>,
}

/// The transport's counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Per configured peer, by member id.
    pub peers: BTreeMap<u64, PeerStats>,
    /// Messages and control payloads dropped because their receiver is not a configured peer.
    pub dropped_unknown_peer: u64,
    /// Inbound connections accepted at the socket level.
    pub inbound_accepted: u64,
    /// Inbound handshakes refused (wrong cluster, wrong member id, unsupported version).
    pub inbound_refused: u64,
    /// Inbound connections that did not complete a handshake (garbage, timeout, closed).
    pub inbound_failed_handshakes: u64,
    /// Inbound connections closed for a bad frame (too large, truncated, undecodable).
    pub inbound_bad_frames: u64,
    /// Inbound messages dropped because their `from` or `to` contradicts the handshake.
    pub inbound_wrong_sender: u64,
    /// Inbound messages from members that are not configured peers (still delivered).
    pub received_from_unknown: u64,
}

impl InboundCounters {
    pub(crate) fn fill(&self, stats: &mut TransportStats) {
        stats.inbound_accepted = self.accepted.load(Relaxed);
        stats.inbound_refused = self.refused.load(Relaxed);
        stats.inbound_failed_handshakes = self.failed_handshakes.load(Relaxed);
        stats.inbound_bad_frames = self.bad_frames.load(Relaxed);
        stats.inbound_wrong_sender = self.wrong_sender.load(Relaxed);
        stats.received_from_unknown = self.received_from_unknown.load(Relaxed);
    }
}
