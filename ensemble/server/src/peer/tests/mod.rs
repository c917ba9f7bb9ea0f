//! Transport tests over real loopback TCP. They wait on events (messages, `PeerEvent`s,
//! closed sockets), never on sleeps; `within` only turns a hang into a failure.

mod control;
mod hostile;
mod membership;
mod snapshot;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use raft::eraftpb::{Message, MessageType};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;

use super::handshake::{self, Hello, Lane, Reply};
use super::{PeerConfig, PeerEvent, PeerInbound, PeerTransport};

pub(super) const CLUSTER: &str = "test-cluster";

/// Fails the test instead of hanging it when something never happens.
pub(super) async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(30), fut).await {
        Ok(out) => out,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

pub(super) fn heartbeat(from: u64, to: u64, term: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgHeartbeat);
    m.from = from;
    m.to = to;
    m.term = term;
    m
}

/// One running transport and the channels the Raft core would own.
pub(super) struct Member {
    pub transport: PeerTransport,
    pub inbound: mpsc::Receiver<PeerInbound>,
    pub events: mpsc::UnboundedReceiver<PeerEvent>,
}

impl Member {
    pub(super) fn start(config: PeerConfig) -> Member {
        let (tx, inbound) = mpsc::channel(1024);
        let mut transport = PeerTransport::start(config, tx).expect("valid config");
        let events = transport.take_events().expect("events taken once");
        Member {
            transport,
            inbound,
            events,
        }
    }

    /// The next delivery, Raft message or control payload.
    pub(super) async fn recv_any(&mut self) -> PeerInbound {
        within("an inbound message", self.inbound.recv())
            .await
            .expect("inbound channel open")
    }

    /// The next delivery, which the test expects to be a Raft message.
    pub(super) async fn recv(&mut self) -> Message {
        match self.recv_any().await {
            PeerInbound::Raft(msg) => msg,
            other => panic!("expected a Raft message, got {other:?}"),
        }
    }

    pub(super) async fn event(&mut self) -> PeerEvent {
        within("a peer event", self.events.recv())
            .await
            .expect("events channel open")
    }
}

pub(super) async fn bind() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    (listener, addr)
}

/// A member's config with fast backoff, so reconnect tests do not wait out the 1 s cap.
pub(super) fn config(id: u64, listener: TcpListener, peers: &[(u64, SocketAddr)]) -> PeerConfig {
    let peers: HashMap<u64, String> = peers.iter().map(|(id, a)| (*id, a.to_string())).collect();
    let mut c = PeerConfig::new(id, CLUSTER, listener, peers);
    c.tuning.backoff_initial = Duration::from_millis(5);
    c.tuning.backoff_max = Duration::from_millis(50);
    c
}

/// An address that refuses connections until `listen` is called on the socket.
pub(super) fn reserved_addr() -> (TcpSocket, SocketAddr) {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_reuseaddr(true).expect("reuseaddr");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let addr = socket.local_addr().expect("local addr");
    (socket, addr)
}

/// Plays the accepting side of a handshake by hand, for tests that need a peer which
/// misbehaves or stalls; returns the hello it accepted.
pub(super) async fn accept_by_hand(listener: &TcpListener) -> (Hello, TcpStream) {
    let (mut stream, _) = within("an outbound connection", listener.accept())
        .await
        .expect("accept");
    let hello = within("a hello", handshake::read_hello(&mut stream))
        .await
        .expect("a valid hello");
    handshake::write_reply(&mut stream, hello.version, &Reply::Accepted)
        .await
        .expect("reply");
    (hello, stream)
}

/// Plays the connecting side of a handshake by hand, claiming to be `from`.
pub(super) async fn connect_by_hand(
    addr: SocketAddr,
    from: u64,
    to: u64,
    cluster: &str,
) -> (Reply, TcpStream) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let hello = Hello {
        version: handshake::VERSION,
        lane: Lane::Raft,
        from,
        to,
        cluster_id: cluster.into(),
        max_feature_level: baton_machine::feature::BASE,
    };
    handshake::write_hello(&mut stream, &hello)
        .await
        .expect("hello");
    let (_, reply) = within("a handshake reply", handshake::read_reply(&mut stream))
        .await
        .expect("a valid reply");
    (reply, stream)
}

#[tokio::test]
async fn messages_flow_both_ways_in_order() {
    let (l1, a1) = bind().await;
    let (l2, a2) = bind().await;
    let mut one = Member::start(config(1, l1, &[(2, a2)]));
    let mut two = Member::start(config(2, l2, &[(1, a1)]));

    one.transport.send(heartbeat(1, 2, 1));
    two.transport.send(heartbeat(2, 1, 1));
    let at_two = two.recv().await;
    let at_one = one.recv().await;
    assert_eq!(
        (at_two.from, at_two.to, at_two.get_msg_type()),
        (1, 2, MessageType::MsgHeartbeat)
    );
    assert_eq!((at_one.from, at_one.to), (2, 1));

    for term in 2..=200 {
        one.transport.send(heartbeat(1, 2, term));
    }
    for term in 2..=200 {
        assert_eq!(two.recv().await.term, term, "the Raft lane keeps order");
    }
    let two_stats = two.transport.stats();
    assert_eq!(two_stats.peers[&1].received, 200);
    assert!(two_stats.peers[&1].received_bytes > 200 * 4);
    assert_eq!(one.transport.stats().peers[&2].dropped, 0);
    assert_eq!(two_stats.inbound_refused + two_stats.inbound_bad_frames, 0);
}

#[tokio::test]
async fn full_queue_drops_and_counts_instead_of_blocking() {
    let (l1, _) = bind().await;
    let (_socket, nobody) = reserved_addr();
    let mut c = config(1, l1, &[(2, nobody)]);
    c.tuning.queue_capacity = 4;
    c.tuning.snapshot_queue_capacity = 1;
    let mut one = Member::start(c);

    // No await between start and these sends: on this single-threaded runtime the lane
    // tasks have not run yet, so exactly the queue's capacity is accepted.
    let queued: Vec<bool> = (0..10)
        .map(|term| one.transport.send(heartbeat(1, 2, term)))
        .collect();
    let fits: Vec<bool> = (0..10).map(|i| i < 4).collect();
    assert_eq!(queued, fits, "the first 4 are queued, the rest refused");
    let mut snap = heartbeat(1, 2, 1);
    snap.set_msg_type(MessageType::MsgSnapshot);
    assert!(one.transport.send(snap.clone()));
    assert!(!one.transport.send(snap.clone()));
    snap.to = 9;
    assert!(!one.transport.send(snap));
    assert!(!one.transport.send(heartbeat(1, 9, 1)));

    let stats = one.transport.stats();
    assert_eq!(stats.peers[&2].dropped, 6 + 1);
    assert_eq!(stats.peers[&2].snapshots_failed, 1);
    assert_eq!(stats.dropped_unknown_peer, 2);
    let failure = raft::SnapshotStatus::Failure;
    assert_eq!(
        one.events.try_recv().ok(),
        Some(PeerEvent::Snapshot {
            peer: 2,
            status: failure
        })
    );
    assert_eq!(
        one.events.try_recv().ok(),
        Some(PeerEvent::Snapshot {
            peer: 9,
            status: failure
        })
    );
}

#[tokio::test]
async fn late_and_restarted_members_are_reached_after_reconnect() {
    let (l1, _) = bind().await;
    let (socket, addr2) = reserved_addr();
    let mut one = Member::start(config(1, l1, &[(2, addr2)]));

    one.transport.send(heartbeat(1, 2, 1));
    assert_eq!(one.event().await, PeerEvent::Unreachable { peer: 2 });
    let stats = one.transport.stats().peers[&2].clone();
    assert_eq!(
        (stats.connect_failures, stats.dropped, stats.connected),
        (1, 1, false)
    );
    assert!(
        stats
            .last_error
            .is_some_and(|e| e.contains(&addr2.to_string()))
    );

    // Sent during the backoff: kept for the next attempt, which now succeeds.
    let mut two = Member::start(config(2, socket.listen(16).expect("listen"), &[]));
    one.transport.send(heartbeat(1, 2, 2));
    assert_eq!(two.recv().await.term, 2);

    // The idle connection notices the restart by itself; no message is lost to it.
    two.transport.shutdown().await;
    assert_eq!(one.event().await, PeerEvent::Unreachable { peer: 2 });
    let relisten = TcpListener::bind(addr2)
        .await
        .expect("rebind the same port");
    let mut two = Member::start(config(2, relisten, &[]));
    one.transport.send(heartbeat(1, 2, 3));
    assert_eq!(two.recv().await.term, 3);
    let stats = one.transport.stats().peers[&2].clone();
    assert_eq!((stats.connects, stats.sent, stats.connected), (2, 2, true));
}

#[tokio::test]
async fn invalid_configs_are_refused_at_start() {
    let (tx, _rx) = mpsc::channel(1);
    let (l, _) = bind().await;
    let mut c = config(0, l, &[]);
    assert!(matches!(
        PeerTransport::start(c, tx.clone()),
        Err(super::PeerConfigError::ZeroMemberId)
    ));
    let (l, _) = bind().await;
    c = config(1, l, &[]);
    c.cluster_id = "x".repeat(super::MAX_CLUSTER_ID_BYTES + 1);
    assert!(matches!(
        PeerTransport::start(c, tx.clone()),
        Err(super::PeerConfigError::ClusterId(_))
    ));
    let (l, _) = bind().await;
    c = config(1, l, &[]);
    c.tuning.queue_capacity = 0;
    assert!(matches!(
        PeerTransport::start(c, tx),
        Err(super::PeerConfigError::OutOfRange { .. })
    ));
}

#[test]
fn transport_can_be_shared_with_the_core_thread() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<PeerTransport>();
    shareable::<PeerEvent>();
    shareable::<PeerInbound>();
}
