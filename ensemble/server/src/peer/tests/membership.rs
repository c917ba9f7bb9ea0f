//! Who may talk to whom: handshake refusals on both sides, and peers changing at run time.

use super::*;
use crate::peer::RefusalCode;

#[tokio::test]
async fn wrong_cluster_is_refused_on_both_sides() {
    let (l1, _) = bind().await;
    let (l2, a2) = bind().await;
    let mut one = Member::start(config(1, l1, &[(2, a2)]));
    let mut c2 = config(2, l2, &[]);
    c2.cluster_id = "other-cluster".into();
    let mut two = Member::start(c2);

    one.transport.send(heartbeat(1, 2, 1));
    assert_eq!(one.event().await, PeerEvent::Unreachable { peer: 2 });

    let sender = one.transport.stats().peers[&2].clone();
    assert_eq!(
        (sender.refusals, sender.connect_failures, sender.connects),
        (1, 1, 0)
    );
    let error = sender.last_error.expect("refusal recorded");
    assert!(
        error.contains("WrongCluster")
            && error.contains("other-cluster")
            && error.contains(CLUSTER),
        "{error}"
    );

    let receiver = two.transport.stats();
    assert_eq!(receiver.inbound_refused, 1);
    assert!(
        two.inbound.try_recv().is_err(),
        "nothing from a foreign cluster reaches the core"
    );
}

#[tokio::test]
async fn wrong_receiver_id_is_refused_on_both_sides() {
    let (l1, _) = bind().await;
    let (l2, a2) = bind().await;
    // Member 1 believes member 3 lives where member 2 does.
    let mut one = Member::start(config(1, l1, &[(3, a2)]));
    let mut two = Member::start(config(2, l2, &[(1, "127.0.0.1:1".parse().expect("addr"))]));

    one.transport.send(heartbeat(1, 3, 1));
    assert_eq!(one.event().await, PeerEvent::Unreachable { peer: 3 });

    let sender = one.transport.stats().peers[&3].clone();
    assert_eq!(sender.refusals, 1);
    let error = sender.last_error.expect("refusal recorded");
    assert!(
        error.contains("WrongMember") && error.contains("member 2, not member 3"),
        "{error}"
    );
    assert_eq!(two.transport.stats().inbound_refused, 1);
    assert_eq!(two.transport.stats().peers[&1].received, 0);
    assert!(two.inbound.try_recv().is_err());

    // The same refusal seen from a hand-made client: the reason travels back.
    let (reply, _stream) = connect_by_hand(a2, 1, 3, CLUSTER).await;
    let Reply::Refused { code, reason } = reply else {
        panic!("accepted a hello for member 3")
    };
    assert_eq!(code, RefusalCode::WrongMember);
    assert!(reason.contains("member 2"), "{reason}");
    // A member claiming the receiver's own id is a duplicate identity.
    let (reply, _stream) = connect_by_hand(a2, 2, 2, CLUSTER).await;
    assert!(matches!(
        reply,
        Reply::Refused {
            code: RefusalCode::WrongMember,
            ..
        }
    ));
    assert_eq!(two.transport.stats().inbound_refused, 3);
}

#[tokio::test]
async fn peers_added_and_removed_at_run_time() {
    let (l1, _) = bind().await;
    let (l2, a2) = bind().await;
    let one = Member::start(config(1, l1, &[]));
    let mut two = Member::start(config(2, l2, &[]));

    one.transport.send(heartbeat(1, 2, 1));
    assert_eq!(one.transport.stats().dropped_unknown_peer, 1);

    one.transport.add_peer(2, a2.to_string());
    one.transport.add_peer(1, "127.0.0.1:1".into());
    assert!(
        !one.transport.stats().peers.contains_key(&1),
        "a member is never its own peer"
    );
    one.transport.send(heartbeat(1, 2, 2));
    assert_eq!(two.recv().await.term, 2);
    assert_eq!(
        two.transport.stats().received_from_unknown,
        1,
        "two does not know one yet, but listens"
    );

    one.transport.remove_peer(2);
    one.transport.send(heartbeat(1, 2, 3));
    let stats = one.transport.stats();
    assert!(stats.peers.is_empty());
    assert_eq!(stats.dropped_unknown_peer, 2);
}

#[tokio::test]
async fn members_of_another_protocol_version_refuse_each_other() {
    use tokio::io::AsyncWriteExt;

    use crate::peer::handshake::{MAGIC, VERSION};

    // A version-1 member (bare Raft frames, no kind tag) connecting to us is refused with
    // a reason it can log.
    let (l2, a2) = bind().await;
    let mut two = Member::start(config(2, l2, &[]));
    let mut old = TcpStream::connect(a2).await.expect("connect");
    let mut hello = MAGIC.to_vec();
    hello.extend_from_slice(&1u16.to_be_bytes());
    hello.push(0);
    hello.extend_from_slice(&1u64.to_be_bytes());
    hello.extend_from_slice(&2u64.to_be_bytes());
    hello.extend_from_slice(&(CLUSTER.len() as u16).to_be_bytes());
    hello.extend_from_slice(CLUSTER.as_bytes());
    old.write_all(&hello).await.expect("hello");
    let (_, reply) = within("a refusal", handshake::read_reply(&mut old))
        .await
        .expect("a readable reply");
    let Reply::Refused { code, reason } = reply else {
        panic!("a version-1 member was accepted")
    };
    assert_eq!(code, RefusalCode::UnsupportedVersion);
    assert!(
        reason.contains(&format!("versions {} to {VERSION}, not 1", VERSION - 1)),
        "{reason}"
    );
    assert_eq!(two.transport.stats().inbound_refused, 1);
    assert!(two.inbound.try_recv().is_err());

    // We connect to a version-1 member: its reply is not ours, and we say so.
    let (l1, _) = bind().await;
    let (fake, fake_addr) = bind().await;
    let mut one = Member::start(config(1, l1, &[(2, fake_addr)]));
    assert!(one.transport.send(heartbeat(1, 2, 1)));
    let (mut stream, _) = within("a connection", fake.accept()).await.expect("accept");
    within("a hello", handshake::read_hello(&mut stream))
        .await
        .expect("a hello of our version");
    let mut old_reply = MAGIC.to_vec();
    old_reply.extend_from_slice(&1u16.to_be_bytes());
    old_reply.push(0);
    stream.write_all(&old_reply).await.expect("reply");
    assert_eq!(one.event().await, PeerEvent::Unreachable { peer: 2 });
    let error = one.transport.stats().peers[&2]
        .last_error
        .clone()
        .expect("failure recorded");
    assert!(error.contains("protocol version 1"), "{error}");
}

/// A rolling upgrade must not split the ensemble. A member of the previous protocol
/// version refuses our hello in its own version; we connect again speaking it, and its
/// messages arrive. A hello of the previous version is accepted, answered in that version,
/// and the peer is reported at the base feature level.
#[tokio::test]
async fn a_member_one_protocol_version_older_is_spoken_to_in_its_version() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use crate::peer::handshake::{OLDEST_VERSION, VERSION};

    // We connect to an older member.
    let (l1, _) = bind().await;
    let (fake, fake_addr) = bind().await;
    let one = Member::start(config(1, l1, &[(2, fake_addr)]));
    assert!(one.transport.send(heartbeat(1, 2, 1)));
    let (mut first, _) = within("a connection", fake.accept()).await.expect("accept");
    let hello = within("a hello", handshake::read_hello(&mut first))
        .await
        .expect("a hello");
    assert_eq!(hello.version, VERSION);
    let refusal = Reply::Refused {
        code: RefusalCode::UnsupportedVersion,
        reason: format!("member 2 speaks peer protocol version {OLDEST_VERSION}, not {VERSION}"),
    };
    handshake::write_reply(&mut first, OLDEST_VERSION, &refusal)
        .await
        .expect("refusal");
    first.shutdown().await.expect("close");
    let (mut second, _) = within("a second connection", fake.accept())
        .await
        .expect("accept");
    let hello = within("a hello", handshake::read_hello(&mut second))
        .await
        .expect("a hello");
    assert_eq!((hello.version, hello.from), (OLDEST_VERSION, 1));
    handshake::write_reply(&mut second, OLDEST_VERSION, &Reply::Accepted)
        .await
        .expect("accept");
    // The heartbeat follows on this connection: the older member can read it.
    let mut len = [0u8; 4];
    within("a frame", second.read_exact(&mut len))
        .await
        .expect("a frame after the older handshake");

    // An older member connects to us.
    let (l3, a3) = bind().await;
    let mut three = Member::start(config(3, l3, &[(2, fake_addr)]));
    let mut old = TcpStream::connect(a3).await.expect("connect");
    let older = Hello {
        version: OLDEST_VERSION,
        lane: Lane::Raft,
        from: 2,
        to: 3,
        cluster_id: CLUSTER.into(),
        max_feature_level: 99,
    };
    handshake::write_hello(&mut old, &older)
        .await
        .expect("hello");
    let (answered_in, reply) = within("a reply", handshake::read_reply(&mut old))
        .await
        .expect("a reply in the older version");
    assert_eq!((answered_in, reply), (OLDEST_VERSION, Reply::Accepted));
    loop {
        match three.event().await {
            PeerEvent::FeatureLevel { peer: 2, max } => {
                assert_eq!(max, baton_machine::feature::BASE);
                break;
            }
            _ => continue,
        }
    }
}
