//! Hostile or broken input on the peer port closes that connection only.

use std::io::ErrorKind;

use protobuf::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::peer::frame::{KIND_CONTROL, KIND_RAFT};

/// Waits until the transport closes `stream`: EOF, or a reset when it left bytes unread.
async fn assert_closed_by_peer(mut stream: TcpStream, what: &str) {
    let mut rest = Vec::new();
    match within(what, stream.read_to_end(&mut rest)).await {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("{what}: unexpected error {e}"),
    }
}

/// A message-lane frame: length, kind tag, body.
fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32 + 1).to_be_bytes().to_vec();
    f.push(kind);
    f.extend_from_slice(body);
    f
}

fn raft_frame(msg: &Message) -> Vec<u8> {
    frame(KIND_RAFT, &msg.write_to_bytes().expect("encode"))
}

#[tokio::test]
async fn bad_input_closes_only_that_connection() {
    let (l1, a1) = bind().await;
    let (l2, a2) = bind().await;
    let one = Member::start(config(1, l1, &[(2, a2)]));
    let mut c2 = config(2, l2, &[(1, a1)]);
    c2.max_message_bytes = 4096;
    let mut two = Member::start(c2);

    // A working link first, so the test can show it survives everything below.
    one.transport.send(heartbeat(1, 2, 1));
    assert_eq!(two.recv().await.term, 1);

    // Not our protocol at all (an HTTP probe, a ZooKeeper client on the wrong port).
    let mut stray = TcpStream::connect(a2).await.expect("connect");
    stray
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    assert_closed_by_peer(stray, "a stray client to be dropped").await;

    // A good handshake, then a frame announcing more than the limit.
    let (reply, mut big) = connect_by_hand(a2, 5, 2, CLUSTER).await;
    assert_eq!(reply, Reply::Accepted);
    big.write_all(&(64u32 << 20).to_be_bytes())
        .await
        .expect("write");
    assert_closed_by_peer(big, "an oversized frame to close the connection").await;

    // A good handshake, then bytes that are not a Raft message.
    let (_, mut garbage) = connect_by_hand(a2, 5, 2, CLUSTER).await;
    garbage
        .write_all(&frame(KIND_RAFT, &[0xff; 16]))
        .await
        .expect("write");
    assert_closed_by_peer(garbage, "an undecodable frame to close the connection").await;

    // A kind this version does not know, and a frame too short to carry any kind.
    let (_, mut unknown) = connect_by_hand(a2, 5, 2, CLUSTER).await;
    unknown.write_all(&frame(9, b"??")).await.expect("write");
    assert_closed_by_peer(unknown, "an unknown frame kind to close the connection").await;
    let (_, mut empty) = connect_by_hand(a2, 5, 2, CLUSTER).await;
    empty.write_all(&0u32.to_be_bytes()).await.expect("write");
    assert_closed_by_peer(empty, "an untagged frame to close the connection").await;

    // A message whose `from` contradicts the handshake is dropped, the connection kept; a
    // control payload is attributed to the member the handshake named.
    let (_, mut liar) = connect_by_hand(a2, 5, 2, CLUSTER).await;
    let frames = [
        raft_frame(&heartbeat(6, 2, 100)),
        raft_frame(&heartbeat(5, 2, 101)),
        frame(KIND_CONTROL, b"claim"),
    ];
    liar.write_all(&frames.concat()).await.expect("write");
    let got = two.recv().await;
    assert_eq!(
        (got.from, got.term),
        (5, 101),
        "the forged message never reaches the core"
    );
    assert_eq!(
        two.recv_any().await,
        PeerInbound::Control {
            from: 5,
            payload: bytes::Bytes::from_static(b"claim")
        }
    );

    let stats = two.transport.stats();
    assert_eq!(stats.inbound_failed_handshakes, 1);
    assert_eq!(stats.inbound_bad_frames, 4);
    assert_eq!(stats.inbound_wrong_sender, 1);
    assert_eq!(
        stats.received_from_unknown, 2,
        "member 5 is not configured, but same cluster"
    );
    assert_eq!(stats.peers[&1].received, 1);

    // And the real peer's link was never disturbed.
    one.transport.send(heartbeat(1, 2, 2));
    assert_eq!(two.recv().await.term, 2);
    assert_eq!(one.transport.stats().peers[&2].connects, 1);
}

#[tokio::test]
async fn oversized_outbound_message_is_dropped_not_sent() {
    let (l1, _) = bind().await;
    let (l2, a2) = bind().await;
    let mut c1 = config(1, l1, &[(2, a2)]);
    c1.max_message_bytes = 4096;
    let one = Member::start(c1);
    let mut two = Member::start(config(2, l2, &[]));

    let mut huge = heartbeat(1, 2, 1);
    huge.set_msg_type(MessageType::MsgAppend);
    huge.context = vec![7u8; 8192].into();
    one.transport.send(huge);
    one.transport.send(heartbeat(1, 2, 2));
    assert_eq!(
        two.recv().await.term,
        2,
        "the oversized append was skipped, the heartbeat sent"
    );
    assert_eq!(one.transport.stats().peers[&2].dropped, 1);
}

#[tokio::test]
async fn a_newer_connection_replaces_a_half_open_one() {
    let (l2, a2) = bind().await;
    let mut two = Member::start(config(2, l2, &[]));

    // As if member 5 vanished in a partition without closing, then came back.
    let (_, stale) = connect_by_hand(a2, 5, 2, CLUSTER).await;
    let (_, mut fresh) = connect_by_hand(a2, 5, 2, CLUSTER).await;
    assert_closed_by_peer(stale, "the half-open connection to be closed").await;

    fresh
        .write_all(&raft_frame(&heartbeat(5, 2, 3)))
        .await
        .expect("write");
    assert_eq!(two.recv().await.term, 3, "the new connection serves");
    // Another member's connection is not affected.
    let (_, mut other) = connect_by_hand(a2, 6, 2, CLUSTER).await;
    other
        .write_all(&raft_frame(&heartbeat(6, 2, 4)))
        .await
        .expect("write");
    fresh
        .write_all(&raft_frame(&heartbeat(5, 2, 5)))
        .await
        .expect("write");
    let mut terms = [two.recv().await.term, two.recv().await.term];
    terms.sort_unstable();
    assert_eq!(terms, [4, 5]);
}
