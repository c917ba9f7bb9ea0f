//! What connection tasks tell the core, and what the core sends back to them.

use std::net::SocketAddr;

use baton_proto::{ConnectRequest, Request};
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

/// Identifies one client TCP connection on this member.
pub type ConnId = u64;

/// Frames (and the order to close) for a connection's writer task.
#[derive(Debug)]
pub enum Outbound {
    /// A complete frame, length prefix included.
    Frame(Bytes),
    /// Flush what was queued, then close the socket.
    Close,
}

/// The sending half of a connection's outbound queue.
pub type OutboundTx = mpsc::UnboundedSender<Outbound>;

/// How the handshake ended, from the connection task's point of view.
#[derive(Debug)]
pub enum ConnectOutcome {
    /// The ConnectResponse was queued; requests may flow.
    Established { session_id: i64 },
    /// The answer (if any) was queued with a Close after it.
    Refused,
}

/// A message to the core thread. Connection tasks decode; the core decides and encodes.
#[derive(Debug)]
pub enum CoreMsg {
    Connect {
        conn: ConnId,
        peer: SocketAddr,
        out: OutboundTx,
        req: ConnectRequest,
        done: oneshot::Sender<ConnectOutcome>,
    },
    Request {
        conn: ConnId,
        xid: i32,
        request: Request,
    },
    /// A request the decoder refused (unknown opcode, bad record); answered in order with `err`.
    BadRequest {
        conn: ConnId,
        xid: i32,
        err: baton_proto::ErrorCode,
    },
    Disconnected {
        conn: ConnId,
    },
    /// Something from another member.
    Peer(crate::peer::PeerInbound),
    /// The transport's report about a peer (unreachable, snapshot sent or failed).
    PeerEvent(crate::peer::PeerEvent),
    /// An admin API call that needs the core (membership, leadership transfer).
    Admin {
        command: super::admin::AdminCommand,
        reply: oneshot::Sender<Result<serde_json::Value, super::admin::AdminError>>,
    },
    /// Asks for the current status, built fresh.
    Status(oneshot::Sender<crate::status::Status>),
    Tick,
    Shutdown,
}
