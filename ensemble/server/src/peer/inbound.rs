//! The peer port: accept connections, check the handshake, then decode frames into Raft
//! messages and control payloads for the core, in the order they arrive. Nothing is decoded
//! as Raft protobuf before a good handshake; any malformed input closes that one connection
//! and is never a panic.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::timeout;
use tracing::Instrument;

use super::backoff::WarnThrottle;
use super::frame::{self, Envelope, FrameError, LEN_BYTES};
use super::handshake::{
    self, HandshakeError, Hello, Lane, OLDEST_VERSION, RefusalCode, Reply, SNAPSHOT_ACK, VERSION,
};
use super::stats::PeerCounters;
use super::{Listener, PeerEvent, PeerInbound, PeerStream, Shared};

/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// Read buffer for small Raft frames: many heartbeats and appends per read syscall.
const READ_BUFFER_BYTES: usize = 64 << 10;
/// Distinct senders whose warnings are throttled separately before the table is reset.
const THROTTLE_KEYS: usize = 1024;

/// What every inbound connection needs.
pub(crate) struct InboundCtx {
    pub shared: Arc<Shared>,
    pub tx: mpsc::Sender<PeerInbound>,
    pub max_message_bytes: usize,
    pub max_snapshot_bytes: usize,
    pub handshake_timeout: Duration,
    pub idle_timeout: Duration,
    pub snapshot_timeout: Duration,
    pub max_connections: usize,
    pub throttle: InboundThrottle,
    pub current: CurrentConnections,
}

/// The live inbound connection per (sender, lane). A member reconnects only when it
/// believes its old connection is dead; if that one is merely half-open (the member
/// vanished in a partition and came back), nothing else would ever close it, so the new
/// connection replaces it.
#[derive(Default)]
pub(crate) struct CurrentConnections {
    next_id: AtomicU64,
    by_sender: Mutex<HashMap<(u64, Lane), Current>>,
}

/// The registered connection for one (sender, lane); `replace` tells it to close.
struct Current {
    id: u64,
    replace: oneshot::Sender<()>,
}

/// Holds a connection's place in `CurrentConnections` and gives it up on drop.
struct Registration<'a> {
    current: &'a CurrentConnections,
    key: (u64, Lane),
    id: u64,
}

impl CurrentConnections {
    /// Registers a new connection; the receiver completes when a newer one replaces it.
    fn register(&self, from: u64, lane: Lane) -> (Registration<'_>, oneshot::Receiver<()>) {
        let id = self.next_id.fetch_add(1, Relaxed);
        let (tx, rx) = oneshot::channel();
        let key = (from, lane);
        let previous = self
            .by_sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, Current { id, replace: tx });
        if let Some(previous) = previous {
            // The old connection may already be gone; then there is no one to tell.
            let _ = previous.replace.send(());
        }
        (
            Registration {
                current: self,
                key,
                id,
            },
            rx,
        )
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut map = self
            .current
            .by_sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if map.get(&self.key).is_some_and(|c| c.id == self.id) {
            map.remove(&self.key);
        }
    }
}

/// Warn throttles per claimed sender id (0 for connections that never said who they are),
/// so a misconfigured member retrying every second is one WARN per window, not a flood.
pub(crate) struct InboundThrottle {
    min_gap: Duration,
    by_sender: Mutex<HashMap<u64, WarnThrottle>>,
}

impl InboundThrottle {
    pub(crate) fn new(min_gap: Duration) -> Self {
        Self {
            min_gap,
            by_sender: Mutex::new(HashMap::new()),
        }
    }

    fn should_warn(&self, sender: u64, kind: &'static str) -> Option<u64> {
        let mut map = self
            .by_sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if map.len() >= THROTTLE_KEYS && !map.contains_key(&sender) {
            map.clear();
        }
        map.entry(sender)
            .or_insert_with(|| WarnThrottle::new(self.min_gap))
            .should_warn(kind)
    }
}

/// Serves the peer port until `stop` turns true, then closes every inbound connection.
pub(crate) async fn serve<L: Listener>(
    mut listener: L,
    ctx: Arc<InboundCtx>,
    mut stop: watch::Receiver<bool>,
) {
    if *stop.borrow() {
        return;
    }
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            // Only ever set to true; a dropped sender means the transport is gone too.
            _ = stop.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((pending, remote)) => {
                    PeerCounters::add(&ctx.shared.inbound.accepted, 1);
                    if conns.len() >= ctx.max_connections {
                        if let Some(n) = ctx.throttle.should_warn(0, "too many") {
                            tracing::warn!(
                                me = ctx.shared.me, %remote, limit = ctx.max_connections, earlier = n,
                                "too many inbound peer connections; refusing"
                            );
                        }
                        continue;
                    }
                    let span = tracing::info_span!(
                        "peer_conn", me = ctx.shared.me, %remote,
                        from = tracing::field::Empty, lane = tracing::field::Empty
                    );
                    conns.spawn(serve_connection::<L>(pending, remote, ctx.clone()).instrument(span));
                }
                Err(error) => {
                    if let Some(n) = ctx.throttle.should_warn(0, "accept") {
                        tracing::warn!(
                            me = ctx.shared.me, %error, earlier = n, "cannot accept peer connections"
                        );
                    }
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            },
        }
    }
    conns.shutdown().await;
}

/// Why an inbound connection ended early; only used for logging.
#[derive(Debug, thiserror::Error)]
enum InboundError {
    #[error("connection setup failed: {0}")]
    Setup(#[source] std::io::Error),
    #[error("handshake failed: {0}")]
    Handshake(#[from] HandshakeError),
    #[error("no handshake within {0:?}")]
    Timeout(Duration),
}

async fn serve_connection<L: Listener>(
    pending: L::Pending,
    remote: SocketAddr,
    ctx: Arc<InboundCtx>,
) {
    let opened = timeout(ctx.handshake_timeout, async {
        let accepted = pending.await.map_err(InboundError::Setup)?;
        let mut stream = accepted.stream;
        let hello = handshake::read_hello(&mut stream).await;
        Ok::<_, InboundError>((stream, accepted.proven_member, hello))
    })
    .await
    .unwrap_or(Err(InboundError::Timeout(ctx.handshake_timeout)));
    let (mut stream, proven_member, hello) = match opened {
        Ok(pair) => pair,
        Err(error) => return handshake_failed(&ctx, remote, &error),
    };
    let hello = match hello {
        Ok(hello) => hello,
        // A newer member deserves to learn why; it will log our answer.
        Err(HandshakeError::UnsupportedVersion(v)) => {
            let reason = format!(
                "member {} speaks peer protocol versions {OLDEST_VERSION} to {VERSION}, not {v}",
                ctx.shared.me
            );
            return refuse(
                &ctx,
                &mut stream,
                remote,
                v.clamp(OLDEST_VERSION, VERSION),
                None,
                RefusalCode::UnsupportedVersion,
                reason,
            )
            .await;
        }
        Err(HandshakeError::UnknownLane(l)) => {
            let reason = format!("member {} has no lane {l}", ctx.shared.me);
            return refuse(
                &ctx,
                &mut stream,
                remote,
                VERSION,
                None,
                RefusalCode::UnknownLane,
                reason,
            )
            .await;
        }
        Err(error) => return handshake_failed(&ctx, remote, &error.into()),
    };
    let span = tracing::Span::current();
    span.record("from", hello.from);
    span.record("lane", hello.lane.as_str());
    if let Some((code, reason)) = verdict(&ctx.shared, &hello, proven_member) {
        return refuse(
            &ctx,
            &mut stream,
            remote,
            hello.version,
            Some(&hello),
            code,
            reason,
        )
        .await;
    }
    let accepted = timeout(
        ctx.handshake_timeout,
        handshake::write_reply(&mut stream, hello.version, &Reply::Accepted),
    )
    .await;
    if !matches!(accepted, Ok(Ok(()))) {
        tracing::debug!("peer went away during the handshake");
        return;
    }
    tracing::debug!(
        version = hello.version,
        max_feature_level = hello.max_feature_level,
        "peer connection accepted"
    );
    // The leader raises the ensemble's feature level only once every member has said, in
    // its hello, that it supports the new level (`core/feature_level.rs`).
    let _ = ctx.shared.events.send(PeerEvent::FeatureLevel {
        peer: hello.from,
        max: hello.max_feature_level,
    });
    let (_registration, superseded) = ctx.current.register(hello.from, hello.lane);
    deliver(&ctx, stream, &hello, superseded).await;
}

/// Decides whether a hello may proceed: `None` to accept, else the refusal to send.
/// `proven_member` is who the connection's certificate proved the sender to be: a hello
/// claiming anyone else is refused, so a member can speak only for itself.
fn verdict(
    shared: &Shared,
    hello: &Hello,
    proven_member: Option<u64>,
) -> Option<(RefusalCode, String)> {
    let me = shared.me;
    if let Some(proven) = proven_member
        && proven != hello.from
    {
        let reason = format!(
            "the certificate proves member {proven}, but the hello claims member {}",
            hello.from
        );
        return Some((RefusalCode::WrongMember, reason));
    }
    if hello.cluster_id != shared.cluster_id {
        let reason = format!(
            "member {me} belongs to cluster {:?}, not {:?}: \
             a member of another ensemble, or a stale data dir",
            shared.cluster_id, hello.cluster_id
        );
        return Some((RefusalCode::WrongCluster, reason));
    }
    if hello.to != me {
        let reason = format!(
            "this address is member {me}, not member {}: check --members",
            hello.to
        );
        return Some((RefusalCode::WrongMember, reason));
    }
    if hello.from == me || hello.from == 0 {
        let reason = format!(
            "sender id {} is invalid here: two members configured with id {me}?",
            hello.from
        );
        return Some((RefusalCode::WrongMember, reason));
    }
    None
}

fn handshake_failed(ctx: &InboundCtx, remote: SocketAddr, error: &InboundError) {
    PeerCounters::add(&ctx.shared.inbound.failed_handshakes, 1);
    match ctx.throttle.should_warn(0, "handshake") {
        Some(n) => {
            tracing::warn!(%error, earlier = n, "closing a peer-port connection that did not handshake")
        }
        None => {
            tracing::debug!(%remote, %error, "closing a peer-port connection that did not handshake")
        }
    }
}

async fn refuse<S: PeerStream>(
    ctx: &InboundCtx,
    stream: &mut S,
    remote: SocketAddr,
    version: u16,
    hello: Option<&Hello>,
    code: RefusalCode,
    reason: String,
) {
    PeerCounters::add(&ctx.shared.inbound.refused, 1);
    let (from, to, cluster) = hello.map_or((0, 0, ""), |h| (h.from, h.to, h.cluster_id.as_str()));
    match ctx.throttle.should_warn(from, "refused") {
        Some(n) => tracing::warn!(
            me = ctx.shared.me, our_cluster = %ctx.shared.cluster_id, from, expected = to,
            their_cluster = %cluster, %remote, ?code, %reason, earlier = n, "refusing a peer connection"
        ),
        None => tracing::debug!(from, %remote, ?code, "refusing a peer connection"),
    }
    let reply = Reply::Refused { code, reason };
    let _ = timeout(
        ctx.handshake_timeout,
        handshake::write_reply(stream, version, &reply),
    )
    .await;
    let _ = stream.shutdown().await;
}

/// Reads frames until the peer closes or misbehaves, handing them to the core in order.
async fn deliver<S: PeerStream>(
    ctx: &InboundCtx,
    stream: S,
    hello: &Hello,
    mut superseded: oneshot::Receiver<()>,
) {
    let (max, silence) = match hello.lane {
        Lane::Raft => (ctx.max_message_bytes, ctx.idle_timeout),
        Lane::Snapshot => (ctx.max_snapshot_bytes, ctx.snapshot_timeout),
    };
    let counters = ctx.shared.counters_for(hello.from);
    let mut stream = BufReader::with_capacity(READ_BUFFER_BYTES, stream);
    let mut wrong_sender = 0u64;
    loop {
        let read = tokio::select! {
            biased;
            _ = &mut superseded => {
                tracing::debug!("a newer connection from this peer replaced this one");
                return;
            }
            read = timeout(silence, frame::read_frame(&mut stream, max)) => match read {
                Ok(read) => read,
                Err(_) => {
                    tracing::debug!(after = ?silence, "nothing from the peer for too long; closing");
                    return;
                }
            },
        };
        let payload = match read {
            Ok(Some(payload)) => payload,
            Ok(None) => {
                tracing::debug!("peer closed the connection");
                return;
            }
            Err(FrameError::Io(error)) => {
                tracing::debug!(%error, "peer connection broke");
                return;
            }
            Err(error) => return bad_frame(ctx, hello, &error),
        };
        let decoded = match hello.lane {
            Lane::Raft => frame::decode_envelope(&payload),
            Lane::Snapshot => frame::decode(&payload).map(Envelope::Raft),
        };
        let inbound = match decoded {
            Ok(Envelope::Raft(msg)) => PeerInbound::Raft(msg),
            // The handshake authenticated the sender; the payload itself is not ours to read.
            Ok(Envelope::Control(payload)) => PeerInbound::Control {
                from: hello.from,
                payload,
            },
            Err(error) => return bad_frame(ctx, hello, &error),
        };
        if let PeerInbound::Raft(msg) = &inbound
            && (msg.from != hello.from || msg.to != ctx.shared.me)
        {
            PeerCounters::add(&ctx.shared.inbound.wrong_sender, 1);
            wrong_sender += 1;
            // Once per connection: the sender is buggy or lying, either way it is persistent.
            if wrong_sender == 1 {
                tracing::warn!(
                    msg_from = msg.from, msg_to = msg.to, kind = ?msg.get_msg_type(),
                    "dropping a Raft message whose sender or receiver contradicts the handshake"
                );
            }
            continue;
        }
        let bytes = (payload.len() + LEN_BYTES) as u64;
        match &counters {
            Some(c) => {
                PeerCounters::add(&c.received, 1);
                PeerCounters::add(&c.received_bytes, bytes);
                if matches!(inbound, PeerInbound::Control { .. }) {
                    PeerCounters::add(&c.control_received, 1);
                }
            }
            None => PeerCounters::add(&ctx.shared.inbound.received_from_unknown, 1),
        }
        if ctx.tx.send(inbound).await.is_err() {
            tracing::debug!("the core is gone; closing the peer connection");
            return;
        }
        if hello.lane == Lane::Snapshot {
            let acked = async {
                stream.write_all(&[SNAPSHOT_ACK]).await?;
                stream.flush().await
            };
            if let Err(error) = acked.await {
                tracing::debug!(%error, "cannot acknowledge a snapshot; closing");
                return;
            }
        }
    }
}

fn bad_frame(ctx: &InboundCtx, hello: &Hello, error: &FrameError) {
    PeerCounters::add(&ctx.shared.inbound.bad_frames, 1);
    match ctx.throttle.should_warn(hello.from, "bad frame") {
        Some(n) => {
            tracing::warn!(%error, earlier = n, "bad frame from a peer; closing its connection")
        }
        None => tracing::debug!(%error, "bad frame from a peer; closing its connection"),
    }
}
