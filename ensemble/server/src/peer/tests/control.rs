//! Control payloads: opaque bytes sharing the message lane with Raft messages, in one order.

use bytes::Bytes;

use super::*;

fn payload(i: u64) -> Bytes {
    Bytes::from(format!("control payload {i}"))
}

fn control(from: u64, payload: Bytes) -> PeerInbound {
    PeerInbound::Control { from, payload }
}

#[tokio::test]
async fn control_payloads_flow_both_ways() {
    let (l1, a1) = bind().await;
    let (l2, a2) = bind().await;
    let mut one = Member::start(config(1, l1, &[(2, a2)]));
    let mut two = Member::start(config(2, l2, &[(1, a1)]));

    assert!(one.transport.send_control(2, payload(1)));
    assert!(two.transport.send_control(1, payload(2)));
    assert_eq!(two.recv_any().await, control(1, payload(1)));
    assert_eq!(one.recv_any().await, control(2, payload(2)));
    assert!(one.transport.send_control(2, Bytes::new()));
    assert_eq!(two.recv_any().await, control(1, Bytes::new()));

    let sender = one.transport.stats().peers[&2].clone();
    assert_eq!(
        (sender.sent, sender.control_sent, sender.dropped),
        (2, 2, 0)
    );
    assert_eq!((sender.received, sender.control_received), (1, 1));
    let receiver = two.transport.stats().peers[&1].clone();
    assert_eq!((receiver.received, receiver.control_received), (2, 2));
}

#[tokio::test]
async fn interleaved_raft_and_control_sends_keep_their_order() {
    let (l1, _) = bind().await;
    let (l2, a2) = bind().await;
    let one = Member::start(config(1, l1, &[(2, a2)]));
    let mut two = Member::start(config(2, l2, &[]));

    // An irregular interleaving (runs of either kind), sent across several batched writes.
    let is_control: Vec<bool> = (0u64..300).map(|i| (i * i + i / 7) % 3 == 0).collect();
    for (i, &c) in (0u64..).zip(&is_control) {
        let queued = if c {
            one.transport.send_control(2, payload(i))
        } else {
            one.transport.send(heartbeat(1, 2, i))
        };
        assert!(queued, "send {i} queued");
        if i % 50 == 49 {
            tokio::task::yield_now().await;
        }
    }
    for (i, &c) in (0u64..).zip(&is_control) {
        let expected = if c {
            control(1, payload(i))
        } else {
            PeerInbound::Raft(heartbeat(1, 2, i))
        };
        assert_eq!(two.recv_any().await, expected, "delivery {i}");
    }
    let controls = is_control.iter().filter(|&&c| c).count() as u64;
    assert!(controls > 50 && controls < 250, "the plan mixes both kinds");
    let stats = one.transport.stats().peers[&2].clone();
    assert_eq!((stats.sent, stats.control_sent), (300, controls));
    assert_eq!(two.transport.stats().received_from_unknown, 300);
}

#[tokio::test]
async fn control_to_an_unknown_peer_is_refused_and_counted() {
    let (l1, _) = bind().await;
    let one = Member::start(config(1, l1, &[]));

    assert!(!one.transport.send_control(9, payload(1)));
    assert!(
        !one.transport.send_control(1, payload(2)),
        "a member is not its own peer"
    );
    assert!(!one.transport.send(heartbeat(1, 9, 3)));
    let stats = one.transport.stats();
    assert_eq!(stats.dropped_unknown_peer, 3);
    assert!(stats.peers.is_empty());
}

#[tokio::test]
async fn full_queue_and_oversized_payloads_are_refused() {
    let (l1, _) = bind().await;
    let (_socket, nobody) = reserved_addr();
    let mut c = config(1, l1, &[(2, nobody)]);
    c.tuning.queue_capacity = 4;
    c.max_message_bytes = 1024;
    let one = Member::start(c);

    // No await until the end: the lane task has not run, so nothing leaves the queue.
    assert!(
        !one.transport.send_control(2, Bytes::from(vec![0u8; 1024])),
        "the kind tag counts against the message limit"
    );
    assert!(one.transport.send_control(2, payload(1)));
    assert!(one.transport.send(heartbeat(1, 2, 2)));
    assert!(one.transport.send_control(2, payload(3)));
    assert!(one.transport.send(heartbeat(1, 2, 4)));
    assert!(!one.transport.send_control(2, payload(5)), "queue full");
    assert!(!one.transport.send(heartbeat(1, 2, 6)), "queue full");

    let stats = one.transport.stats();
    let peer = &stats.peers[&2];
    assert_eq!((peer.dropped, peer.sent, peer.control_sent), (3, 0, 0));
    assert_eq!(stats.dropped_unknown_peer, 0);
}

#[tokio::test]
async fn control_payload_at_the_message_limit_is_delivered() {
    let (l1, _) = bind().await;
    let (l2, a2) = bind().await;
    let mut c1 = config(1, l1, &[(2, a2)]);
    c1.max_message_bytes = 1024;
    let one = Member::start(c1);
    let mut c2 = config(2, l2, &[]);
    c2.max_message_bytes = 1024;
    let mut two = Member::start(c2);

    let largest = Bytes::from(vec![7u8; 1023]);
    assert!(one.transport.send_control(2, largest.clone()));
    assert!(!one.transport.send_control(2, Bytes::from(vec![7u8; 1024])));
    assert!(one.transport.send_control(2, payload(1)));
    assert_eq!(two.recv_any().await, control(1, largest));
    assert_eq!(two.recv_any().await, control(1, payload(1)));
    assert_eq!(two.transport.stats().inbound_bad_frames, 0);
    assert_eq!(one.transport.stats().peers[&2].dropped, 1);
}

#[tokio::test]
async fn a_payload_lost_to_a_broken_connection_is_not_resent_but_later_ones_arrive() {
    let (l1, _) = bind().await;
    let (socket, addr2) = reserved_addr();
    let mut one = Member::start(config(1, l1, &[(2, addr2)]));

    // Queued is not delivered: the connection attempt fails and takes the payload with it.
    assert!(one.transport.send_control(2, payload(1)));
    assert_eq!(one.event().await, PeerEvent::Unreachable { peer: 2 });
    assert_eq!(one.transport.stats().peers[&2].dropped, 1);

    let mut two = Member::start(config(2, socket.listen(16).expect("listen"), &[]));
    assert!(one.transport.send_control(2, payload(2)));
    assert_eq!(
        two.recv_any().await,
        control(1, payload(2)),
        "the second payload arrives without the first: the core must check sequence"
    );
}
