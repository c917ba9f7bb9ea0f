//! Snapshots travel on their own lane: never in front of heartbeats, and always reported.

use raft::SnapshotStatus;
use tokio::io::AsyncWriteExt;

use super::*;
use crate::peer::frame;
use crate::peer::handshake::SNAPSHOT_ACK;

/// Far more than loopback socket buffers hold, so the sender is stuck mid-write until read.
const SNAPSHOT_BYTES: usize = 48 << 20;

fn snapshot(from: u64, to: u64, index: u64, bytes: usize) -> Message {
    let mut m = heartbeat(from, to, 1);
    m.set_msg_type(MessageType::MsgSnapshot);
    let snap = m.mut_snapshot();
    snap.mut_metadata().index = index;
    snap.data = vec![0x5a; bytes].into();
    m
}

#[tokio::test]
async fn large_snapshot_does_not_delay_later_heartbeats() {
    let (l1, _) = bind().await;
    let (fake, fake_addr) = bind().await;
    let mut c1 = config(1, l1, &[(2, fake_addr)]);
    c1.tuning.max_snapshot_bytes = 2 * SNAPSHOT_BYTES;
    let mut one = Member::start(c1);

    one.transport.send(snapshot(1, 2, 42, SNAPSHOT_BYTES));
    let (hello, snapshot_stream) = accept_by_hand(&fake).await;
    assert_eq!((hello.lane, hello.from, hello.to), (Lane::Snapshot, 1, 2));
    // `snapshot_stream` is not read yet: the snapshot is stuck in flight.

    one.transport.send(heartbeat(1, 2, 7));
    let (hello, mut raft_stream) = accept_by_hand(&fake).await;
    assert_eq!(hello.lane, Lane::Raft);
    let payload = within(
        "the heartbeat",
        frame::read_frame(&mut raft_stream, 1 << 20),
    )
    .await;
    let envelope = frame::decode_envelope(&payload.expect("read").expect("a frame"));
    let Ok(frame::Envelope::Raft(hb)) = envelope else {
        panic!("expected a Raft frame, got {envelope:?}")
    };
    assert_eq!((hb.get_msg_type(), hb.term), (MessageType::MsgHeartbeat, 7));
    assert!(
        one.events.try_recv().is_err(),
        "the snapshot cannot be reported before it is read"
    );

    let mut snapshot_stream = snapshot_stream;
    let payload = within(
        "the snapshot",
        frame::read_frame(&mut snapshot_stream, 2 * SNAPSHOT_BYTES),
    )
    .await;
    let snap = frame::decode(&payload.expect("read").expect("a frame")).expect("decode");
    assert_eq!(snap.get_snapshot().get_metadata().index, 42);
    assert_eq!(snap.get_snapshot().data.len(), SNAPSHOT_BYTES);
    snapshot_stream
        .write_all(&[SNAPSHOT_ACK])
        .await
        .expect("ack");
    assert_eq!(
        one.event().await,
        PeerEvent::Snapshot {
            peer: 2,
            status: SnapshotStatus::Finish
        }
    );
    let stats = one.transport.stats().peers[&2].clone();
    assert_eq!((stats.snapshots_sent, stats.snapshots_failed), (1, 0));
}

#[tokio::test]
async fn snapshot_between_transports_is_delivered_and_acknowledged() {
    let (l1, _) = bind().await;
    let (l2, a2) = bind().await;
    let mut one = Member::start(config(1, l1, &[(2, a2)]));
    let mut two = Member::start(config(2, l2, &[]));

    one.transport.send(snapshot(1, 2, 9, 3 << 20));
    let got = two.recv().await;
    assert_eq!(
        (got.get_msg_type(), got.get_snapshot().get_metadata().index),
        (MessageType::MsgSnapshot, 9)
    );
    assert_eq!(
        one.event().await,
        PeerEvent::Snapshot {
            peer: 2,
            status: SnapshotStatus::Finish
        }
    );
    // The lane closes after each transfer and reopens for the next.
    one.transport.send(snapshot(1, 2, 10, 1024));
    assert_eq!(two.recv().await.get_snapshot().get_metadata().index, 10);
    assert_eq!(
        one.event().await,
        PeerEvent::Snapshot {
            peer: 2,
            status: SnapshotStatus::Finish
        }
    );
}

#[tokio::test]
async fn snapshot_failures_are_reported() {
    let (l1, _) = bind().await;
    let (_socket, nobody) = reserved_addr();
    let (fake, fake_addr) = bind().await;
    let mut one = Member::start(config(1, l1, &[(2, nobody), (3, fake_addr)]));

    one.transport.send(snapshot(1, 2, 5, 1024));
    assert_eq!(
        one.event().await,
        PeerEvent::Snapshot {
            peer: 2,
            status: SnapshotStatus::Failure
        }
    );

    // A receiver that takes the snapshot but dies before acknowledging it.
    one.transport.send(snapshot(1, 3, 6, 1024));
    let (_, mut stream) = accept_by_hand(&fake).await;
    let payload = within("the snapshot", frame::read_frame(&mut stream, 1 << 20)).await;
    assert!(payload.expect("read").is_some());
    drop(stream);
    assert_eq!(
        one.event().await,
        PeerEvent::Snapshot {
            peer: 3,
            status: SnapshotStatus::Failure
        }
    );

    let stats = one.transport.stats();
    assert_eq!(
        (
            stats.peers[&2].snapshots_failed,
            stats.peers[&3].snapshots_failed
        ),
        (1, 1)
    );
    assert_eq!(stats.peers[&3].snapshots_sent, 0);
}
