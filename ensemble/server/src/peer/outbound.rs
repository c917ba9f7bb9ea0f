//! One outbound lane to one peer: a task that waits for queued messages, connects lazily,
//! handshakes, writes, and on any failure drops what is queued (Raft retransmits fresher
//! versions; the core detects lost control payloads by their sequence), tells the core the
//! peer is unreachable and backs off before the next attempt.

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use raft::SnapshotStatus;
use raft::eraftpb::{Message, MessageType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};
use tracing::Instrument;

use super::backoff::{Backoff, WarnThrottle};
use super::frame::{Envelope, FrameError, encode_envelope, encode_into};
use super::handshake::{self, HandshakeError, Hello, Lane, RefusalCode, Reply, SNAPSHOT_ACK};
use super::stats::PeerCounters;
use super::{Connector, PeerEvent, PeerTuning, Shared};

/// A batch stops growing past this many bytes: one write, bounded memory.
const BATCH_BYTES: usize = 1 << 20;
/// The write buffer is released after a batch that made it grow beyond this.
const KEEP_BUFFER_BYTES: usize = 256 << 10;

/// Why an outbound connection could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    #[error("connecting to {addr} timed out after {after:?}")]
    ConnectTimeout { addr: String, after: Duration },
    #[error("handshake with {addr} failed: {source}")]
    Handshake {
        addr: String,
        source: HandshakeError,
    },
    #[error("handshake with {addr} timed out after {after:?}")]
    HandshakeTimeout { addr: String, after: Duration },
    #[error("the member at {addr} refused us ({code:?}): {reason}")]
    Refused {
        addr: String,
        code: RefusalCode,
        reason: String,
    },
    #[error("the member at {addr} speaks only peer protocol version {version}: {reason}")]
    RefusedVersion {
        addr: String,
        version: u16,
        reason: String,
    },
    #[error("connection to {addr} broke: {source}")]
    Io { addr: String, source: io::Error },
    #[error("{addr} closed the connection")]
    Closed { addr: String },
    #[error("{addr} sent bytes the protocol does not allow on the {lane} lane")]
    Unexpected { addr: String, lane: &'static str },
    #[error("{addr} took longer than {after:?} to take a write or acknowledge a snapshot")]
    Stalled { addr: String, after: Duration },
}

impl LinkError {
    /// A stable label, so a change in the kind of failure is logged even while throttled.
    fn kind(&self) -> &'static str {
        match self {
            LinkError::Connect { .. } | LinkError::ConnectTimeout { .. } => "connect",
            LinkError::Handshake { .. } | LinkError::HandshakeTimeout { .. } => "handshake",
            LinkError::Refused { .. } | LinkError::RefusedVersion { .. } => "refused",
            LinkError::Io { .. } | LinkError::Closed { .. } | LinkError::Unexpected { .. } => {
                "broken"
            }
            LinkError::Stalled { .. } => "stalled",
        }
    }

    /// Whether the connection never became usable (as opposed to breaking later).
    fn before_use(&self) -> bool {
        matches!(self.kind(), "connect" | "handshake" | "refused")
    }
}

/// An item of one lane's queue: an `Envelope` on the message lane, a `MsgSnapshot` on the
/// snapshot lane.
pub(crate) trait Queued: Send + Sized + 'static {
    /// The Raft message, if this is one (a dropped snapshot must be reported to Raft).
    fn as_raft(&self) -> Option<&Message>;

    /// Writes `first` and then whatever else is queued over a handshaken `stream`, until it
    /// breaks (`Err`) or the queue is closed (`Ok`).
    fn pump<'a, C: Connector>(
        ctx: &'a LaneCtx<C>,
        stream: C::Stream,
        first: Self,
        rx: &'a mut mpsc::Receiver<Self>,
    ) -> impl Future<Output = Result<(), LinkError>> + Send + 'a;

    /// What this is, for logs.
    fn kind(&self) -> Kind {
        match self.as_raft() {
            Some(msg) => Kind::Raft(msg.get_msg_type()),
            None => Kind::Control,
        }
    }
}

/// What kind of item was dropped, for logs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Raft(MessageType),
    Control,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Raft(t) => write!(f, "{t:?}"),
            Kind::Control => f.write_str("control"),
        }
    }
}

impl Queued for Envelope {
    fn as_raft(&self) -> Option<&Message> {
        match self {
            Envelope::Raft(msg) => Some(msg),
            Envelope::Control(_) => None,
        }
    }

    fn pump<'a, C: Connector>(
        ctx: &'a LaneCtx<C>,
        stream: C::Stream,
        first: Self,
        rx: &'a mut mpsc::Receiver<Self>,
    ) -> impl Future<Output = Result<(), LinkError>> + Send + 'a {
        pump_messages(ctx, stream, first, rx)
    }
}

impl Queued for Message {
    fn as_raft(&self) -> Option<&Message> {
        Some(self)
    }

    fn pump<'a, C: Connector>(
        ctx: &'a LaneCtx<C>,
        stream: C::Stream,
        first: Self,
        rx: &'a mut mpsc::Receiver<Self>,
    ) -> impl Future<Output = Result<(), LinkError>> + Send + 'a {
        pump_snapshots(ctx, stream, first, rx)
    }
}

/// What one lane task owns.
pub(crate) struct LaneCtx<C> {
    pub connector: Arc<C>,
    pub shared: Arc<Shared>,
    pub peer: u64,
    pub addr: String,
    pub lane: Lane,
    pub max_frame: usize,
    pub tuning: Arc<PeerTuning>,
    pub counters: Arc<PeerCounters>,
    pub throttle: Arc<Mutex<WarnThrottle>>,
}

/// Runs one lane until its queue is closed or the task is aborted (peer removed).
pub(crate) async fn run_lane<C: Connector, T: Queued>(ctx: LaneCtx<C>, mut rx: mpsc::Receiver<T>) {
    let span = tracing::info_span!(
        "peer_link", me = ctx.shared.me, peer = ctx.peer, addr = %ctx.addr, lane = ctx.lane.as_str()
    );
    async move {
        let seed = ctx
            .tuning
            .jitter_seed
            .map(|s| s ^ ctx.peer.rotate_left(8) ^ ctx.lane as u64);
        let mut backoff = Backoff::new(ctx.tuning.backoff_initial, ctx.tuning.backoff_max, seed);
        while let Some(first) = rx.recv().await {
            let failure = match connect(&ctx).await {
                Ok(stream) => {
                    let up_since = Instant::now();
                    let _connected = ctx.on_connected();
                    let result = T::pump(&ctx, stream, first, &mut rx).await;
                    if up_since.elapsed() >= backoff.max() {
                        backoff.reset();
                    }
                    match result {
                        Ok(()) => continue,
                        Err(e) => e,
                    }
                }
                Err(e) => {
                    ctx.shared.dropped(Some(&ctx.counters), &first);
                    e
                }
            };
            while let Ok(stale) = rx.try_recv() {
                ctx.shared.dropped(Some(&ctx.counters), &stale);
            }
            ctx.on_failure(&failure);
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }
    .instrument(span)
    .await
}

/// Clears the peer's "connected" flag however the connection ends, abort included.
struct ConnectedFlag(Option<Arc<PeerCounters>>);

impl Drop for ConnectedFlag {
    fn drop(&mut self) {
        if let Some(c) = &self.0 {
            c.connected.store(false, Relaxed);
        }
    }
}

impl<C: Connector> LaneCtx<C> {
    fn on_connected(&self) -> ConnectedFlag {
        PeerCounters::add(&self.counters.connects, 1);
        let was_down = self
            .throttle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recovered();
        if was_down {
            tracing::info!("connected to peer again");
        } else {
            tracing::debug!("connected to peer");
        }
        if self.lane == Lane::Raft {
            self.counters.connected.store(true, Relaxed);
            ConnectedFlag(Some(self.counters.clone()))
        } else {
            ConnectedFlag(None)
        }
    }

    fn on_failure(&self, error: &LinkError) {
        if error.before_use() {
            PeerCounters::add(&self.counters.connect_failures, 1);
        }
        if matches!(
            error,
            LinkError::Refused { .. } | LinkError::RefusedVersion { .. }
        ) {
            PeerCounters::add(&self.counters.refusals, 1);
        }
        self.counters.set_last_error(error.to_string());
        if self.lane == Lane::Raft {
            let _ = self
                .shared
                .events
                .send(PeerEvent::Unreachable { peer: self.peer });
        }
        let suppressed = self
            .throttle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .should_warn(error.kind());
        match (suppressed, error) {
            (Some(n), LinkError::Refused { .. }) => tracing::warn!(
                %error, earlier_failures = n,
                "peer refused the handshake (check --id, --members and the data dir's cluster id); \
                 retrying with backoff"
            ),
            (Some(n), _) => {
                tracing::warn!(%error, earlier_failures = n, "peer unreachable; retrying with backoff")
            }
            (None, _) => tracing::debug!(%error, "peer still unreachable"),
        }
    }
}

/// Connects and handshakes; a refusal carries the peer's reason. A peer of the previous
/// protocol version refuses our hello as `UnsupportedVersion`, answering in its own version:
/// we connect again at once speaking that version (`handshake.rs`, one step either way).
async fn connect<C: Connector>(ctx: &LaneCtx<C>) -> Result<C::Stream, LinkError> {
    match connect_speaking(ctx, handshake::VERSION).await {
        Err(LinkError::RefusedVersion { version, .. }) if version == handshake::OLDEST_VERSION => {
            tracing::debug!(
                version,
                "peer speaks the previous protocol version; speaking it"
            );
            connect_speaking(ctx, version).await
        }
        other => other,
    }
}

async fn connect_speaking<C: Connector>(
    ctx: &LaneCtx<C>,
    version: u16,
) -> Result<C::Stream, LinkError> {
    let addr = || ctx.addr.clone();
    let after = ctx.tuning.connect_timeout;
    let mut stream = match timeout(after, ctx.connector.connect(&ctx.addr, ctx.peer)).await {
        Ok(Ok(s)) => s,
        Ok(Err(source)) => {
            return Err(LinkError::Connect {
                addr: addr(),
                source,
            });
        }
        Err(_) => {
            return Err(LinkError::ConnectTimeout {
                addr: addr(),
                after,
            });
        }
    };
    let hello = Hello {
        version,
        lane: ctx.lane,
        from: ctx.shared.me,
        to: ctx.peer,
        cluster_id: ctx.shared.cluster_id.clone(),
        max_feature_level: ctx.shared.max_feature_level,
    };
    let after = ctx.tuning.handshake_timeout;
    let exchange = async {
        handshake::write_hello(&mut stream, &hello).await?;
        handshake::read_reply(&mut stream).await
    };
    match timeout(after, exchange).await {
        Ok(Ok((_, Reply::Accepted))) => Ok(stream),
        Ok(Ok((answered_in, Reply::Refused { code, reason })))
            if code == RefusalCode::UnsupportedVersion && answered_in < version =>
        {
            Err(LinkError::RefusedVersion {
                addr: addr(),
                version: answered_in,
                reason,
            })
        }
        Ok(Ok((_, Reply::Refused { code, reason }))) => Err(LinkError::Refused {
            addr: addr(),
            code,
            reason,
        }),
        Ok(Err(source)) => Err(LinkError::Handshake {
            addr: addr(),
            source,
        }),
        Err(_) => Err(LinkError::HandshakeTimeout {
            addr: addr(),
            after,
        }),
    }
}

/// Writes everything queued in batches, in queue order, until the connection breaks (`Err`)
/// or the queue is closed (`Ok`). While idle it watches the socket, so a peer that restarts
/// is noticed before the next message is written into a dead connection.
async fn pump_messages<C: Connector>(
    ctx: &LaneCtx<C>,
    mut stream: C::Stream,
    first: Envelope,
    rx: &mut mpsc::Receiver<Envelope>,
) -> Result<(), LinkError> {
    let mut buf = Vec::with_capacity(64 << 10);
    let mut next = Some(first);
    let mut probe = [0u8; 1];
    loop {
        let (mut batch, mut controls) = (0u64, 0u64);
        while let Some(envelope) = next.take() {
            match encode_envelope(&envelope, ctx.max_frame, &mut buf) {
                Ok(_) => {
                    batch += 1;
                    controls += u64::from(matches!(envelope, Envelope::Control(_)));
                }
                Err(e) => ctx.unsendable(&envelope, &e),
            }
            if buf.len() < BATCH_BYTES {
                next = rx.try_recv().ok();
            }
        }
        if batch > 0 {
            let after = ctx.tuning.write_timeout;
            let written = timeout(after, async {
                stream.write_all(&buf).await?;
                stream.flush().await
            })
            .await;
            let error = match written {
                Ok(Ok(())) => None,
                Ok(Err(source)) => Some(LinkError::Io {
                    addr: ctx.addr.clone(),
                    source,
                }),
                Err(_) => Some(LinkError::Stalled {
                    addr: ctx.addr.clone(),
                    after,
                }),
            };
            if let Some(error) = error {
                PeerCounters::add(&ctx.counters.dropped, batch);
                return Err(error);
            }
            PeerCounters::add(&ctx.counters.sent, batch);
            PeerCounters::add(&ctx.counters.control_sent, controls);
            PeerCounters::add(&ctx.counters.sent_bytes, buf.len() as u64);
            buf.clear();
            if buf.capacity() > KEEP_BUFFER_BYTES {
                buf = Vec::with_capacity(64 << 10);
            }
        }
        tokio::select! {
            biased;
            read = stream.read(&mut probe) => {
                return Err(match read {
                    Ok(0) => LinkError::Closed { addr: ctx.addr.clone() },
                    Ok(_) => LinkError::Unexpected { addr: ctx.addr.clone(), lane: ctx.lane.as_str() },
                    Err(source) => LinkError::Io { addr: ctx.addr.clone(), source },
                });
            }
            msg = rx.recv() => match msg {
                Some(msg) => next = Some(msg),
                None => return Ok(()),
            },
            () = tokio::time::sleep(ctx.tuning.idle_close) => {
                tracing::debug!("closing an idle peer connection; the next message reopens it");
                return Ok(());
            }
        }
    }
}

/// Sends queued snapshots one at a time, each acknowledged by the receiver once it has
/// handed the message to its Raft core, then closes the connection (snapshots are rare).
async fn pump_snapshots<C: Connector>(
    ctx: &LaneCtx<C>,
    mut stream: C::Stream,
    first: Message,
    rx: &mut mpsc::Receiver<Message>,
) -> Result<(), LinkError> {
    let mut next = Some(first);
    while let Some(msg) = next.take() {
        let mut buf = Vec::new();
        if let Err(e) = encode_into(&msg, ctx.max_frame, &mut buf) {
            ctx.unsendable(&msg, &e);
            next = rx.try_recv().ok();
            continue;
        }
        let after = ctx.tuning.snapshot_timeout;
        let delivered = timeout(after, async {
            stream.write_all(&buf).await?;
            stream.flush().await?;
            stream.read_u8().await
        })
        .await;
        let error = match delivered {
            Ok(Ok(SNAPSHOT_ACK)) => None,
            Ok(Ok(_)) => Some(LinkError::Unexpected {
                addr: ctx.addr.clone(),
                lane: ctx.lane.as_str(),
            }),
            Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Some(LinkError::Closed {
                addr: ctx.addr.clone(),
            }),
            Ok(Err(source)) => Some(LinkError::Io {
                addr: ctx.addr.clone(),
                source,
            }),
            Err(_) => Some(LinkError::Stalled {
                addr: ctx.addr.clone(),
                after,
            }),
        };
        if let Some(error) = error {
            ctx.shared.dropped(Some(&ctx.counters), &msg);
            return Err(error);
        }
        PeerCounters::add(&ctx.counters.sent, 1);
        PeerCounters::add(&ctx.counters.sent_bytes, buf.len() as u64);
        PeerCounters::add(&ctx.counters.snapshots_sent, 1);
        tracing::info!(
            bytes = buf.len(),
            index = msg.get_snapshot().get_metadata().index,
            "snapshot delivered"
        );
        let _ = ctx.shared.events.send(PeerEvent::Snapshot {
            peer: ctx.peer,
            status: SnapshotStatus::Finish,
        });
        next = rx.try_recv().ok();
    }
    Ok(())
}

impl<C> LaneCtx<C> {
    /// A message this lane can never carry (too large for the peer's limit): dropped loudly,
    /// since retransmitting it will fail the same way.
    fn unsendable(&self, item: &impl Queued, error: &FrameError) {
        let kind = item.kind();
        match self
            .throttle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .should_warn("unsendable")
        {
            Some(n) => {
                tracing::warn!(%error, %kind, earlier = n, "dropping a message the peer would refuse")
            }
            None => tracing::debug!(%error, %kind, "dropping a message the peer would refuse"),
        }
        self.shared.dropped(Some(&self.counters), item);
    }
}
