//! What connection tasks tell the core, and what the core sends back to them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use baton_proto::{ConnectRequest, Id, Request};
use bytes::Bytes;
use futures::StreamExt;
use futures::channel::mpsc as queue;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::oneshot;

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

/// The reply bytes a connection has queued that its writer has not yet written to the socket.
///
/// The core never blocks on a connection (one slow client must not stall the ensemble), and it
/// never drops or reorders a reply (ZooKeeper's per-session FIFO). So the queue itself is
/// unbounded, and the bound comes from here: past `limit` the core holds back the reads whose
/// replies would add to it (`should_hold`) and the connection stops reading the socket; once
/// the writer has caught up to half the limit it wakes the core (`written`). Only small
/// replies (writes' results, watch notifications) are added past the limit.
#[derive(Debug)]
pub struct ReplyBudget {
    queued: AtomicUsize,
    limit: usize,
    /// The core held a reply back and waits for `CoreMsg::Drained`.
    held: AtomicBool,
    /// The member-wide total of queued reply bytes (`baton_client_reply_queue_bytes`).
    total: Gauge,
}

impl ReplyBudget {
    /// A budget that holds replies back once `limit` bytes are queued; `total` adds up the
    /// queued bytes of every connection.
    pub fn new(limit: usize, total: Gauge) -> Self {
        ReplyBudget {
            queued: AtomicUsize::new(0),
            limit: limit.max(1),
            held: AtomicBool::new(false),
            total,
        }
    }

    /// A budget that never holds anything back (the simulation's in-memory clients).
    pub fn unlimited() -> Self {
        ReplyBudget::new(usize::MAX, Gauge::default())
    }

    /// Bytes queued and not yet written.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// Whether the core must hold back a large reply now. When it must, the writer is asked
    /// to wake the core once it has caught up. The flag is set before the second look so
    /// that a writer finishing in between is either seen here or sees the flag.
    pub fn should_hold(&self) -> bool {
        if self.queued() < self.limit {
            return false;
        }
        self.held.store(true, Ordering::SeqCst);
        self.queued() >= self.limit
    }

    fn queue(&self, bytes: usize) {
        self.queued.fetch_add(bytes, Ordering::SeqCst);
        self.total.inc_by(bytes as i64);
    }

    fn unqueue(&self, bytes: usize) -> usize {
        self.total.dec_by(bytes as i64);
        self.queued.fetch_sub(bytes, Ordering::SeqCst)
    }

    /// The writer wrote `bytes`; true when it must wake the core (`CoreMsg::Drained`) because
    /// the core holds replies back and the queue is down to half the limit.
    pub fn written(&self, bytes: usize) -> bool {
        let before = self.unqueue(bytes);
        let left = before.saturating_sub(bytes);
        left <= self.limit / 2 && self.held.swap(false, Ordering::SeqCst)
    }
}

/// A connection's outbound queue, whose bytes `budget` counts; the writer reports what it wrote
/// to the same budget. An empty queue holds no room for messages: tokio's unbounded channel
/// reserved a block of 32 slots (1 KiB) for each of 10,000 idle sessions' connections.
pub fn outbound_queue(budget: Arc<ReplyBudget>) -> (OutboundTx, OutboundRx) {
    let (tx, rx) = queue::unbounded();
    (OutboundTx { tx, budget }, OutboundRx(rx))
}

/// A queue without a byte limit (the simulation's clients, which read everything at once).
pub fn unlimited_outbound_queue() -> (OutboundTx, OutboundRx) {
    outbound_queue(Arc::new(ReplyBudget::unlimited()))
}

/// The sending half of a connection's outbound queue, counting what it holds.
#[derive(Debug, Clone)]
pub struct OutboundTx {
    tx: queue::UnboundedSender<Outbound>,
    budget: Arc<ReplyBudget>,
}

impl OutboundTx {
    /// Queues a frame or the order to close; gives it back only when the writer has gone away.
    pub fn send(&self, msg: Outbound) -> Result<(), Outbound> {
        let bytes = match &msg {
            Outbound::Frame(f) => f.len(),
            Outbound::Close => 0,
        };
        // Counted before it is queued: the writer may take and write it at once.
        self.budget.queue(bytes);
        self.tx.unbounded_send(msg).map_err(|e| {
            self.budget.unqueue(bytes);
            e.into_inner()
        })
    }

    /// The byte count shared with the connection's writer.
    pub fn budget(&self) -> &ReplyBudget {
        &self.budget
    }
}

/// The receiving half of a connection's outbound queue: its writer's.
#[derive(Debug)]
pub struct OutboundRx(queue::UnboundedReceiver<Outbound>);

impl OutboundRx {
    /// The next message; `None` once every sender is gone and nothing is left.
    pub async fn recv(&mut self) -> Option<Outbound> {
        self.0.next().await
    }

    /// A message already queued, without waiting.
    pub fn try_recv(&mut self) -> Option<Outbound> {
        self.0.try_recv().ok()
    }

    /// Refuses every later message; those already queued can still be taken.
    pub fn close(&mut self) {
        self.0.close();
    }
}

/// How the handshake ended, from the connection task's point of view.
#[derive(Debug)]
pub enum ConnectOutcome {
    /// The ConnectResponse was queued; requests may flow.
    Established { session_id: i64 },
    /// The answer (if any) was queued with a Close after it.
    Refused,
}

/// What the connection task found out about an auth packet the core cannot check itself
/// (scheme `k8s`: a TokenReview call, network I/O the core thread never does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityVerdict {
    /// The session's identity from now on (replacing any earlier `k8s` one).
    Accepted(Id),
    /// Refused (not authenticated, wrong audience, not a pod's token): AuthFailed, then close.
    Rejected(String),
    /// Expired by its own `exp`: acknowledged and ignored, granting nothing. ZooKeeper clients
    /// (zookeeper-client, kazoo) re-send every auth packet a session ever sent, oldest first,
    /// on each reconnect; failing the kubelet's rotated-out token would end the session even
    /// though the fresh token follows it on the same connection.
    Expired,
    /// No verdict (the API server failed or is unreachable): the connection is closed without
    /// an answer, so the client reconnects and sends its auth again; never an accept.
    Unavailable(String),
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
    /// The verdict on an auth packet, answered in order in place of the packet (xid `xid`).
    Identity {
        conn: ConnId,
        xid: i32,
        verdict: IdentityVerdict,
    },
    Disconnected {
        conn: ConnId,
    },
    /// The connection's writer caught up after the core held replies back (`ReplyBudget`).
    Drained {
        conn: ConnId,
    },
    /// Something from another member.
    Peer(crate::peer::PeerInbound),
    /// The transport's report about a peer (unreachable, snapshot sent or failed).
    PeerEvent(crate::peer::PeerEvent),
    /// An admin API call that needs the core (membership, leadership transfer).
    Admin {
        command: super::membership::AdminCommand,
        reply: oneshot::Sender<Result<serde_json::Value, super::membership::AdminError>>,
    },
    /// Asks for a snapshot of the state, confirmed up to date with the leader (a backup).
    Backup(super::backup::BackupReply),
    /// Asks for the current status, built fresh.
    Status(oneshot::Sender<crate::status::Status>),
    /// Free bytes on this member's data volume, measured by the runtime (the disk alarm).
    DiskSpace {
        free_bytes: u64,
    },
    Tick,
    Shutdown,
}
