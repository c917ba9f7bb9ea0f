//! Member-to-member transport for Raft messages and the ensemble's own control payloads
//! (forwarded writes, session claims and the like, opaque to the transport).
//!
//! Every member listens on its peer port and keeps, per peer, two outbound connections opened
//! lazily: the message lane, `Lane::Raft` (heartbeats, votes, appends and control payloads,
//! in the order they were queued; writes batched) and the snapshot lane
//! (`MsgSnapshot` only, much larger frame limit, one acknowledged transfer at a time), so a
//! snapshot of hundreds of megabytes never delays a heartbeat. Each connection opens with a
//! handshake naming the cluster and both member ids (see `handshake`); a member refuses peers
//! of another cluster or connections meant for another member. Inbound connections only
//! deliver; replies travel on the receiver's own outbound connection.
//!
//! The Raft core runs on its own thread and must never wait on the network: `send` and
//! `send_control` only queue (bounded, per peer and lane) and drop when full, since Raft
//! retransmits and the core checks control payloads' sequence. What the
//! core must learn back (unreachable peers, snapshot outcomes) arrives as `PeerEvent`s.
//! The network sits behind `seam::{Connector, Listener}` so TLS or a simulation can replace TCP.

mod backoff;
mod config;
mod frame;
mod handshake;
mod inbound;
mod outbound;
pub mod protobuf_guard;
mod seam;
mod stats;
#[cfg(test)]
mod tests;
mod tls;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use bytes::Bytes;
use raft::SnapshotStatus;
use raft::eraftpb::{Message, MessageType};
use tokio::runtime::Handle;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::{DEFAULT_MAX_MESSAGE_BYTES, PeerConfig, PeerConfigError, PeerTuning};
pub use frame::FrameError;
pub use handshake::{HandshakeError, Lane, MAX_CLUSTER_ID_BYTES, RefusalCode};
pub use outbound::LinkError;
pub use seam::{Accepted, Connector, Listener, PeerStream, TcpConnector};
pub use stats::{PeerStats, TransportStats};
pub use tls::{TlsPeerConnector, TlsPeerListener, peer_tls};

/// Entry points for the fuzz targets and property tests (see `crate::fuzzing`).
#[doc(hidden)]
pub mod decoders {
    use std::future::Future;

    use bytes::Bytes;

    pub use super::frame::FrameError;
    pub use super::handshake::HandshakeError;

    /// A message-lane frame's payload, decoded as the peer port decodes it.
    pub fn message_lane(payload: &[u8]) -> Result<(), FrameError> {
        super::frame::decode_envelope(&Bytes::copy_from_slice(payload)).map(drop)
    }

    /// A snapshot-lane frame's payload.
    pub fn snapshot_lane(payload: &[u8]) -> Result<(), FrameError> {
        super::frame::decode(&Bytes::copy_from_slice(payload)).map(drop)
    }

    /// A hello as the accepting side reads it, from a reader that has all the bytes there are.
    pub fn hello(bytes: &[u8]) -> Result<(), HandshakeError> {
        let mut reader = bytes;
        let read = super::handshake::read_hello(&mut reader);
        let mut read = std::pin::pin!(read);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match read.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(result) => result.map(drop),
            // A slice reader never waits: at its end it reports UnexpectedEof instead.
            std::task::Poll::Pending => unreachable!("reading a slice never waits"),
        }
    }
}

use backoff::WarnThrottle;
use frame::Envelope;
use outbound::Queued;
use stats::{InboundCounters, PeerCounters};

/// What the transport delivers to the core, per sender in the order it was sent (snapshots
/// excepted: they travel on their own lane).
#[derive(Debug, Clone, PartialEq)]
pub enum PeerInbound {
    /// A Raft message whose `from` matches the member that sent it.
    Raft(Message),
    /// An opaque control payload from member `from` (as authenticated by the handshake).
    Control { from: u64, payload: Bytes },
}

/// What the Raft core must hear back from the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerEvent {
    /// Connecting to the peer failed or its connection broke: call
    /// `RawNode::report_unreachable(peer)`. At most one per reconnect attempt.
    Unreachable { peer: u64 },
    /// A snapshot was acknowledged by the peer (`Finish`) or could not be delivered
    /// (`Failure`): call `RawNode::report_snapshot(peer, status)`. Exactly one per
    /// `MsgSnapshot` given to `send`.
    Snapshot { peer: u64, status: SnapshotStatus },
    /// A peer connected and said which feature level it supports at most (its hello; the
    /// base level for a peer of the previous protocol version). Sent at every connection.
    FeatureLevel { peer: u64, max: u32 },
}

/// A running transport. Dropping it stops every task and closes every connection.
pub struct PeerTransport {
    shared: Arc<Shared>,
    spawn_link: Box<dyn Fn(u64, String, Arc<PeerCounters>) -> Link + Send + Sync>,
    stop: watch::Sender<bool>,
    accept_task: Option<JoinHandle<()>>,
    events: Option<mpsc::UnboundedReceiver<PeerEvent>>,
}

/// State shared by the handle, the lane tasks and the inbound connections.
pub(crate) struct Shared {
    me: u64,
    cluster_id: String,
    /// What this member advertises in its hellos (`--max-feature-level`).
    max_feature_level: u32,
    max_message_bytes: usize,
    links: RwLock<HashMap<u64, Link>>,
    dropped_unknown: AtomicU64,
    send_throttle: Mutex<WarnThrottle>,
    inbound: InboundCounters,
    events: mpsc::UnboundedSender<PeerEvent>,
}

/// One configured peer: its queues and the two tasks draining them.
struct Link {
    addr: String,
    raft_tx: mpsc::Sender<Envelope>,
    snapshot_tx: mpsc::Sender<Message>,
    counters: Arc<PeerCounters>,
    throttle: Arc<Mutex<WarnThrottle>>,
    tasks: [JoinHandle<()>; 2],
}

impl Shared {
    /// Counters of a configured peer, for inbound traffic that handshook as `id`.
    fn counters_for(&self, id: u64) -> Option<Arc<PeerCounters>> {
        self.links
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .map(|l| l.counters.clone())
    }

    /// Counts an item that will not be sent; a snapshot's failure is reported to Raft.
    fn dropped(&self, counters: Option<&PeerCounters>, item: &impl Queued) {
        match counters {
            Some(c) => PeerCounters::add(&c.dropped, 1),
            None => PeerCounters::add(&self.dropped_unknown, 1),
        }
        if let Some(msg) = item.as_raft()
            && msg.get_msg_type() == MessageType::MsgSnapshot
        {
            if let Some(c) = counters {
                PeerCounters::add(&c.snapshots_failed, 1);
            }
            let _ = self.events.send(PeerEvent::Snapshot {
                peer: msg.to,
                status: SnapshotStatus::Failure,
            });
        }
    }
}

impl PeerTransport {
    /// Starts a transport over plain TCP: serves the listener and connects to peers lazily.
    /// Must be called inside a tokio runtime; later calls may come from any thread.
    pub fn start(
        config: PeerConfig,
        inbound: mpsc::Sender<PeerInbound>,
    ) -> Result<Self, PeerConfigError> {
        Self::start_with(config, TcpConnector, inbound)
    }

    /// Starts a transport over any listener and connector (TLS, simulation).
    pub fn start_with<L: Listener, C: Connector>(
        config: PeerConfig<L>,
        connector: C,
        inbound: mpsc::Sender<PeerInbound>,
    ) -> Result<Self, PeerConfigError> {
        config::validate(&config)?;
        let runtime = Handle::try_current().map_err(|_| PeerConfigError::NoRuntime)?;
        let tuning = Arc::new(config.tuning);
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            me: config.member_id,
            cluster_id: config.cluster_id,
            max_feature_level: config.max_feature_level,
            max_message_bytes: config.max_message_bytes,
            links: RwLock::new(HashMap::new()),
            dropped_unknown: AtomicU64::new(0),
            send_throttle: Mutex::new(WarnThrottle::new(tuning.backoff_max)),
            inbound: InboundCounters::default(),
            events: events_tx,
        });

        let connector = Arc::new(connector);
        let spawn_link = {
            let shared = shared.clone();
            let tuning = tuning.clone();
            let runtime = runtime.clone();
            let max_message_bytes = config.max_message_bytes;
            move |peer: u64, addr: String, counters: Arc<PeerCounters>| {
                let throttle = Arc::new(Mutex::new(WarnThrottle::new(tuning.backoff_max)));
                let lane = |lane: Lane, max_frame: usize| outbound::LaneCtx {
                    connector: connector.clone(),
                    shared: shared.clone(),
                    peer,
                    addr: addr.clone(),
                    lane,
                    max_frame,
                    tuning: tuning.clone(),
                    counters: counters.clone(),
                    throttle: throttle.clone(),
                };
                let (raft_tx, raft_rx) = mpsc::channel(tuning.queue_capacity);
                let (snapshot_tx, snapshot_rx) = mpsc::channel(tuning.snapshot_queue_capacity);
                let raft_lane = lane(Lane::Raft, max_message_bytes);
                let snapshot_lane = lane(Lane::Snapshot, tuning.max_snapshot_bytes);
                let tasks = [
                    runtime.spawn(outbound::run_lane(raft_lane, raft_rx)),
                    runtime.spawn(outbound::run_lane(snapshot_lane, snapshot_rx)),
                ];
                Link {
                    addr: addr.clone(),
                    raft_tx,
                    snapshot_tx,
                    counters: counters.clone(),
                    throttle,
                    tasks,
                }
            }
        };

        let (stop, stop_rx) = watch::channel(false);
        let inbound_ctx = Arc::new(inbound::InboundCtx {
            shared: shared.clone(),
            tx: inbound,
            max_message_bytes: config.max_message_bytes,
            max_snapshot_bytes: tuning.max_snapshot_bytes,
            handshake_timeout: tuning.handshake_timeout,
            idle_timeout: tuning.idle_timeout,
            snapshot_timeout: tuning.snapshot_timeout,
            max_connections: tuning.max_inbound_connections,
            throttle: inbound::InboundThrottle::new(tuning.backoff_max),
            current: inbound::CurrentConnections::default(),
        });
        let accept_task = runtime.spawn(inbound::serve(config.listener, inbound_ctx, stop_rx));

        let transport = Self {
            shared,
            spawn_link: Box::new(spawn_link),
            stop,
            accept_task: Some(accept_task),
            events: Some(events_rx),
        };
        for (id, addr) in config.peers {
            transport.add_peer(id, addr);
        }
        let (me, cluster) = (transport.shared.me, &transport.shared.cluster_id);
        tracing::info!(me, %cluster, "peer transport started");
        Ok(transport)
    }

    /// Queues `msg` for `msg.to` without waiting; `true` if it was queued. If the peer is
    /// unknown or its queue is full the message is dropped and counted (a dropped snapshot
    /// is reported as failed). Queued is no promise of delivery; Raft retransmits what is lost.
    pub fn send(&self, msg: Message) -> bool {
        let to = msg.to;
        if msg.get_msg_type() == MessageType::MsgSnapshot {
            self.enqueue(to, msg, |link| &link.snapshot_tx)
        } else {
            self.enqueue(to, Envelope::Raft(msg), |link| &link.raft_tx)
        }
    }

    /// Queues a control payload for member `to` on the same ordered lane as its Raft
    /// messages, never waiting; `false` if it was dropped (unknown peer, full queue, larger
    /// than the message limit), and the caller must treat it as lost.
    ///
    /// Payloads and Raft messages to one peer are delivered in the order `send` and
    /// `send_control` were called, unless dropped. `true` promises no delivery: if the
    /// connection breaks, whatever was queued or in flight is lost while what is queued
    /// after the reconnect arrives, so of two payloads the first may be lost and the second
    /// delivered. The receiver must detect such gaps (e.g. by sequence number).
    #[must_use = "a dropped control payload is lost unless the caller handles it"]
    pub fn send_control(&self, to: u64, payload: Bytes) -> bool {
        let max = self.shared.max_message_bytes;
        // The peer would close the connection over it, losing the messages around it too,
        // so it is refused here, where the caller still learns of it.
        if frame::TAG_BYTES + payload.len() > max {
            let warn = self.send_warning("oversized");
            let (me, bytes) = (self.shared.me, payload.len());
            match warn {
                Some(n) => tracing::warn!(
                    me,
                    to,
                    bytes,
                    max,
                    earlier = n,
                    "dropping a control payload larger than the peer message limit"
                ),
                None => tracing::debug!(me, to, bytes, "dropping an oversized control payload"),
            }
            let counters = self.shared.counters_for(to);
            self.shared
                .dropped(counters.as_deref(), &Envelope::Control(payload));
            return false;
        }
        self.enqueue(to, Envelope::Control(payload), |link| &link.raft_tx)
    }

    /// Puts `item` on the peer's queue chosen by `queue`, or drops and counts it.
    fn enqueue<T: Queued>(
        &self,
        to: u64,
        item: T,
        queue: impl FnOnce(&Link) -> &mpsc::Sender<T>,
    ) -> bool {
        let links = self
            .shared
            .links
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(link) = links.get(&to) else {
            drop(links);
            let (me, kind) = (self.shared.me, item.kind());
            match self.send_warning("unknown") {
                Some(n) => tracing::warn!(
                    me,
                    to,
                    %kind,
                    earlier_drops = n,
                    "dropping a message to a member that is not a configured peer"
                ),
                None => tracing::debug!(me, to, %kind, "dropping a message to an unknown peer"),
            }
            self.shared.dropped(None, &item);
            return false;
        };
        match queue(link).try_send(item) {
            Ok(()) => true,
            Err(TrySendError::Full(item) | TrySendError::Closed(item)) => {
                let suppressed = link
                    .throttle
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .should_warn("queue full");
                match suppressed {
                    Some(n) => {
                        tracing::warn!(
                            me = self.shared.me, peer = to, addr = %link.addr, earlier = n,
                            "peer queue full: dropping messages (peer slow or unreachable)"
                        )
                    }
                    None => tracing::debug!(
                        me = self.shared.me,
                        peer = to,
                        kind = %item.kind(),
                        "peer queue full: message dropped"
                    ),
                }
                self.shared.dropped(Some(&link.counters), &item);
                false
            }
        }
    }

    /// Throttles warnings about sends that never reach a link (unknown peer, oversized).
    fn send_warning(&self, kind: &'static str) -> Option<u64> {
        self.shared
            .send_throttle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .should_warn(kind)
    }

    /// Adds a peer or moves it to a new address; a no-op if it is already at `addr`, and for
    /// this member's own id.
    pub fn add_peer(&self, id: u64, addr: String) {
        if id == self.shared.me {
            return;
        }
        let mut links = self
            .shared
            .links
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if links.get(&id).is_some_and(|l| l.addr == addr) {
            return;
        }
        let counters = links
            .get(&id)
            .map(|l| l.counters.clone())
            .unwrap_or_default();
        let link = (self.spawn_link)(id, addr.clone(), counters);
        if let Some(old) = links.insert(id, link) {
            old.abort();
            let (me, from) = (self.shared.me, &old.addr);
            tracing::info!(me, peer = id, %from, to = %addr, "peer address changed");
        } else {
            tracing::info!(me = self.shared.me, peer = id, %addr, "peer added");
        }
    }

    /// Forgets a peer: its queued messages are dropped and its connections closed.
    pub fn remove_peer(&self, id: u64) {
        let removed = self
            .shared
            .links
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        if let Some(link) = removed {
            link.abort();
            tracing::info!(me = self.shared.me, peer = id, addr = %link.addr, "peer removed");
        }
    }

    /// Hands over the event stream (once; later calls return `None`). Events are produced at a
    /// bounded rate but kept until read, so the Raft core should drain them every loop.
    pub fn take_events(&mut self) -> Option<mpsc::UnboundedReceiver<PeerEvent>> {
        self.events.take()
    }

    /// A snapshot of every counter, for metrics and the admin API.
    pub fn stats(&self) -> TransportStats {
        let mut stats = TransportStats::default();
        for (id, link) in self
            .shared
            .links
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            stats.peers.insert(*id, link.counters.snapshot(&link.addr));
        }
        stats.dropped_unknown_peer = self.shared.dropped_unknown.load(Relaxed);
        self.shared.inbound.fill(&mut stats);
        stats
    }

    /// Stops accepting, closes every connection and waits until the listener is closed.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        let links: Vec<Link> = {
            let mut map = self
                .shared
                .links
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            map.drain().map(|(_, link)| link).collect()
        };
        for link in links {
            link.abort();
            for task in link.tasks {
                let _ = task.await;
            }
        }
        if let Some(task) = self.accept_task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for PeerTransport {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.accept_task.take() {
            task.abort();
        }
        for link in self
            .shared
            .links
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            link.abort();
        }
    }
}

impl Link {
    fn abort(&self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
