//! How the core reaches other members: the peer transport in production, a simulated network
//! in `tests/sim/`. The core only queues; delivery, retries and link events are the far side's job.

use bytes::Bytes;
use raft::eraftpb::Message;

use crate::peer::PeerTransport;

/// Outbound queues to the other members. Never blocks: Raft resends what is lost, and the
/// control protocol detects gaps by sequence number.
pub trait PeerLinks: Send + 'static {
    /// Queues a Raft message for `msg.to`; `true` if queued (which promises no delivery).
    fn send(&self, msg: Message) -> bool;
    /// Queues a control payload for `to` on the same ordered lane as its Raft messages.
    fn send_control(&self, to: u64, payload: Bytes) -> bool;
    /// Starts (or re-addresses) the link to member `id`.
    fn add_peer(&self, id: u64, addr: String);
    /// Stops the link to member `id`.
    fn remove_peer(&self, id: u64);
}

impl PeerLinks for PeerTransport {
    fn send(&self, msg: Message) -> bool {
        PeerTransport::send(self, msg)
    }

    fn send_control(&self, to: u64, payload: Bytes) -> bool {
        PeerTransport::send_control(self, to, payload)
    }

    fn add_peer(&self, id: u64, addr: String) {
        PeerTransport::add_peer(self, id, addr)
    }

    fn remove_peer(&self, id: u64) {
        PeerTransport::remove_peer(self, id)
    }
}
