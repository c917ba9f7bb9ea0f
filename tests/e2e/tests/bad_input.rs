//! Hostile bytes on the client port. ZooKeeper's answers, recorded against 3.8:
//! - a frame it cannot parse as a ConnectRequest, a negative length, or a length over
//!   jute.maxbuffer (0xfffff): the connection is closed at once, nothing is sent;
//! - an unknown opcode in a session: a ReplyHeader with err -6 (Unimplemented), then close;
//! - a request body shorter than its own fields claim: err -5 (MarshallingError), and the
//!   connection stays usable.
//!
//! After each, the server must still be running and serve a fresh client; and while one
//! connection sends all of this, other clients' sessions, watches and ephemerals are untouched.

use anyhow::{Result, bail, ensure};
use baton_tests::raw::{self, Outcome, RawConnection, ReplyHeader, opcode};
use baton_tests::{EPHEMERAL, PERSISTENT, Server, connect, next_event, target_tests};
use zookeeper_client as zk;

const UNIMPLEMENTED: i32 = -6;
const MARSHALLING_ERROR: i32 = -5;
/// A length just over jute.maxbuffer.
const OVERSIZED: i32 = 0x100000;

/// The server survived: still running, and a new session can write and read.
async fn still_serves(server: &mut Server, marker: &str) -> Result<()> {
    ensure!(server.is_running(), "server process died");
    let client = connect(server).await?;
    let path = format!("/survived-{marker}");
    client.create(&path, marker.as_bytes(), &PERSISTENT).await?;
    let (data, _) = client.get_data(&path).await?;
    ensure!(data == marker.as_bytes(), "read back {data:?}");
    Ok(())
}

async fn expect_closed(conn: &mut RawConnection, what: &str) -> Result<()> {
    match conn.receive().await? {
        Outcome::Closed { .. } => Ok(()),
        Outcome::Frame(payload) => {
            bail!("{what}: expected the connection closed, got a frame {payload:02x?}")
        }
    }
}

async fn expect_reply(conn: &mut RawConnection, what: &str) -> Result<ReplyHeader> {
    match conn.receive().await? {
        Outcome::Frame(payload) => ReplyHeader::parse(&payload),
        Outcome::Closed { partial } => {
            bail!("{what}: expected a reply, the connection closed after {partial:02x?}")
        }
    }
}

async fn garbage_closes_the_connection(server: &mut Server) -> Result<()> {
    // Read as a 16-byte ConnectRequest that makes no sense.
    let mut conn = RawConnection::open(server.client_addr()).await?;
    conn.send_bytes(b"\x00\x00\x00\x10hello world garbage!!")
        .await?;
    expect_closed(&mut conn, "garbage connect request").await?;

    // HTTP on the client port: "GET " read as a length of ~1.1 GB.
    let mut conn = RawConnection::open(server.client_addr()).await?;
    conn.send_bytes(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await?;
    expect_closed(&mut conn, "HTTP request").await?;

    // A ConnectRequest cut short.
    let mut conn = RawConnection::open(server.client_addr()).await?;
    conn.send_frame(&[0; 10]).await?;
    expect_closed(&mut conn, "short connect request").await?;
    still_serves(server, "garbage").await
}

async fn negative_length_closes_the_connection(server: &mut Server) -> Result<()> {
    let mut conn = RawConnection::open(server.client_addr()).await?;
    conn.send_bytes(&(-5i32).to_be_bytes()).await?;
    conn.send_bytes(b"abcd").await?;
    expect_closed(&mut conn, "negative length before connect").await?;

    let (mut conn, _) = RawConnection::open_session(server.client_addr()).await?;
    conn.send_bytes(&i32::MIN.to_be_bytes()).await?;
    expect_closed(&mut conn, "negative length in a session").await?;
    still_serves(server, "negative").await
}

async fn oversized_frame_closes_the_connection(server: &mut Server) -> Result<()> {
    // Only the length and a little of the body are sent: the server must not wait for the rest.
    let mut conn = RawConnection::open(server.client_addr()).await?;
    conn.send_bytes(&OVERSIZED.to_be_bytes()).await?;
    conn.send_bytes(&[0; 1024]).await?;
    expect_closed(&mut conn, "oversized connect frame").await?;

    let (mut conn, _) = RawConnection::open_session(server.client_addr()).await?;
    conn.send_bytes(&OVERSIZED.to_be_bytes()).await?;
    conn.send_bytes(&raw::request(1, opcode::SET_DATA, &[0; 1024]))
        .await?;
    expect_closed(&mut conn, "oversized request frame").await?;

    let (mut conn, _) = RawConnection::open_session(server.client_addr()).await?;
    conn.send_bytes(&i32::MAX.to_be_bytes()).await?;
    expect_closed(&mut conn, "2 GiB request frame").await?;
    still_serves(server, "oversized").await
}

async fn unknown_opcode_is_unimplemented(server: &mut Server) -> Result<()> {
    let (mut conn, _) = RawConnection::open_session(server.client_addr()).await?;
    conn.send_frame(&raw::request(1, 999, b"")).await?;
    let header = expect_reply(&mut conn, "unknown opcode").await?;
    ensure!(
        header.xid == 1 && header.err == UNIMPLEMENTED,
        "unknown opcode answered {header:?}"
    );
    expect_closed(&mut conn, "after Unimplemented").await?;
    still_serves(server, "opcode").await
}

async fn truncated_request_is_a_marshalling_error(server: &mut Server) -> Result<()> {
    let (mut conn, _) = RawConnection::open_session(server.client_addr()).await?;

    // getData whose path claims 100 bytes but carries 3.
    let mut body = 100i32.to_be_bytes().to_vec();
    body.extend_from_slice(b"/ab");
    conn.send_frame(&raw::request(1, opcode::GET_DATA, &body))
        .await?;
    let header = expect_reply(&mut conn, "truncated getData").await?;
    ensure!(
        header.xid == 1 && header.err == MARSHALLING_ERROR,
        "truncated getData answered {header:?}"
    );

    // A string length below -1.
    let mut body = (-7i32).to_be_bytes().to_vec();
    body.push(0);
    conn.send_frame(&raw::request(2, opcode::GET_DATA, &body))
        .await?;
    let header = expect_reply(&mut conn, "negative string length").await?;
    ensure!(
        header.xid == 2 && header.err == MARSHALLING_ERROR,
        "negative string length answered {header:?}"
    );

    // The connection is still good.
    let (events, reply) = conn
        .call(3, opcode::EXISTS, &raw::path_and_watch("/", false))
        .await?;
    let header = ReplyHeader::parse(&reply)?;
    ensure!(
        events.is_empty() && header.err == 0,
        "exists after bad requests: {header:?}"
    );
    still_serves(server, "truncated").await
}

async fn frame_cut_by_eof_closes_the_connection(server: &mut Server) -> Result<()> {
    let (mut conn, _) = RawConnection::open_session(server.client_addr()).await?;
    conn.send_bytes(&100i32.to_be_bytes()).await?;
    conn.send_bytes(b"abc").await?;
    conn.shutdown_write().await?;
    expect_closed(&mut conn, "frame cut by EOF").await?;
    still_serves(server, "eof").await
}

/// Reads what the server sends until it closes the connection (a hostile connection may get
/// replies first); each read is bounded by `IO_DEADLINE`, and so is the number of frames.
async fn drain_until_closed(conn: &mut RawConnection, what: &str) -> Result<()> {
    for _ in 0..256 {
        if let Outcome::Closed { .. } = conn.receive().await? {
            return Ok(());
        }
    }
    bail!("{what}: the server kept sending frames and never closed")
}

/// A small deterministic generator (xorshift64*): the same garbage on every run.
struct Junk(u64);

impl Junk {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> usize {
        usize::try_from(self.next() % n).unwrap_or(0)
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next().to_be_bytes()[0]).collect()
    }

    /// A request frame's payload: a random xid, a known opcode (or any i32) and a random body.
    fn request(&mut self) -> Vec<u8> {
        const KNOWN: [i32; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15, 19, 101];
        let opcode = if self.below(4) == 0 {
            i32::from_be_bytes(self.bytes(4).try_into().unwrap_or_default())
        } else {
            KNOWN[self.below(KNOWN.len() as u64)]
        };
        // Never -1 (notification) or 0: any other xid, special ones included.
        let xid = [1, 7, -2, -4, -8, 1000][self.below(6)];
        let len = self.below(48);
        raw::request(xid, opcode, &self.bytes(len))
    }
}

/// The one connection that sends garbage, in every way the cases above try and then some:
/// junk connect requests, HTTP, bad and huge lengths, unknown opcodes, truncated and random
/// requests inside a session, random bytes before and after the handshake, frames cut by EOF.
async fn attack(server: &Server) -> Result<()> {
    let addr = server.client_addr();
    let mut junk = Junk(0x5eed_ba70_0000_0007);
    let prefixes: [&[u8]; 6] = [
        b"\x00\x00\x00\x10hello world garbage!!",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        &[0xff, 0xff, 0xff, 0xfb, 1, 2, 3, 4],
        &[0x00, 0x10, 0x00, 0x00, 0, 0, 0, 0],
        &[0x7f, 0xff, 0xff, 0xff],
        &[0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ];
    for prefix in prefixes {
        let mut conn = RawConnection::open(addr).await?;
        conn.send_bytes(prefix).await?;
        conn.shutdown_write().await?;
        drain_until_closed(&mut conn, "junk before the handshake").await?;
    }
    for _ in 0..8 {
        let mut conn = RawConnection::open(addr).await?;
        let len = 1 + junk.below(200);
        conn.send_bytes(&junk.bytes(len)).await?;
        conn.shutdown_write().await?;
        drain_until_closed(&mut conn, "random bytes before the handshake").await?;
    }
    // Inside a session: an unknown opcode, a truncated request, a huge and a negative length,
    // random bytes, and random requests (several per connection, pipelined).
    let in_session: Vec<Vec<u8>> = vec![
        raw::request(1, 999, b""),
        {
            let mut frame = 12i32.to_be_bytes().to_vec();
            frame.extend_from_slice(&raw::request(1, opcode::GET_DATA, &100i32.to_be_bytes()));
            frame
        },
        OVERSIZED.to_be_bytes().to_vec(),
        i32::MIN.to_be_bytes().to_vec(),
        100i32.to_be_bytes().iter().chain(b"abc").copied().collect(),
    ];
    for bytes in in_session {
        let (mut conn, _) = RawConnection::open_session(addr).await?;
        conn.send_bytes(&bytes).await?;
        conn.shutdown_write().await?;
        drain_until_closed(&mut conn, "garbage in a session").await?;
    }
    for round in 0..24 {
        let (mut conn, _) = RawConnection::open_session(addr).await?;
        if round % 3 == 0 {
            let len = 1 + junk.below(200);
            conn.send_bytes(&junk.bytes(len)).await?;
        } else {
            for _ in 0..1 + junk.below(6) {
                let request = junk.request();
                conn.send_frame(&request).await?;
            }
        }
        conn.shutdown_write().await?;
        drain_until_closed(&mut conn, "random requests in a session").await?;
    }
    Ok(())
}

/// `None` if the session's state has not changed since `states` was made (or last read).
async fn state_change(states: &mut zk::StateWatcher) -> Option<zk::SessionState> {
    tokio::select! {
        biased;
        state = states.changed() => Some(state),
        () = std::future::ready(()) => None,
    }
}

async fn garbage_does_not_harm_other_sessions(server: &mut Server) -> Result<()> {
    let watcher = connect(server).await?;
    let writer = connect(server).await?;
    let (mut watcher_states, mut writer_states) = (watcher.state_watcher(), writer.state_watcher());
    writer.create("/bystander", b"0", &PERSISTENT).await?;
    writer.create("/traffic", b"", &PERSISTENT).await?;
    watcher
        .create("/bystander/eph-watcher", b"w", &EPHEMERAL)
        .await?;
    writer
        .create("/bystander/eph-writer", b"x", &EPHEMERAL)
        .await?;
    let (_, _, data_watch) = watcher.get_and_watch_data("/bystander").await?;
    let (stat, delete_watch) = watcher
        .check_and_watch_stat("/bystander/eph-writer")
        .await?;
    ensure!(stat.is_some(), "the writer's ephemeral is missing");

    // Two stalled connections held open throughout: half a length before any handshake, and
    // half a frame inside a session.
    let mut stalled = RawConnection::open(server.client_addr()).await?;
    stalled.send_bytes(&[0, 0]).await?;
    let (mut stalled_session, _) = RawConnection::open_session(server.client_addr()).await?;
    stalled_session.send_bytes(&[0, 0, 0, 40, 0, 0]).await?;

    // The garbage, while the bystanders keep writing and reading.
    let traffic = async {
        for i in 0..40u32 {
            let value = i.to_string();
            writer.set_data("/traffic", value.as_bytes(), None).await?;
            let (data, _) = watcher.get_data("/traffic").await?;
            ensure!(
                data == value.as_bytes(),
                "read {data:?} after writing {value}"
            );
        }
        Ok(())
    };
    tokio::try_join!(attack(server), traffic)?;

    // Neither bystander was ever disconnected, and both sessions are the ones they were.
    ensure!(
        state_change(&mut watcher_states).await.is_none(),
        "the watcher's session changed state: {:?}",
        watcher.state()
    );
    ensure!(
        state_change(&mut writer_states).await.is_none(),
        "the writer's session changed state: {:?}",
        writer.state()
    );
    // Their ephemerals survive, owned by their sessions.
    let observer = connect(server).await?;
    for (path, owner) in [
        ("/bystander/eph-watcher", &watcher),
        ("/bystander/eph-writer", &writer),
    ] {
        let stat = observer.check_stat(path).await?;
        ensure!(
            stat.is_some_and(|s| s.ephemeral_owner == owner.session_id().0),
            "{path}: {stat:?}, expected owner {:?}",
            owner.session_id()
        );
    }
    // The watches set before the garbage still fire, with the right events.
    writer.set_data("/bystander", b"1", None).await?;
    let event = next_event("data watch set before the garbage", data_watch.changed()).await?;
    ensure!(
        event.event_type == zk::EventType::NodeDataChanged && event.path == "/bystander",
        "data watch: {event:?}"
    );
    writer.delete("/bystander/eph-writer", None).await?;
    let event = next_event(
        "exists watch set before the garbage",
        delete_watch.changed(),
    )
    .await?;
    ensure!(
        event.event_type == zk::EventType::NodeDeleted && event.path == "/bystander/eph-writer",
        "exists watch: {event:?}"
    );
    // And new requests and watches on the old sessions work.
    let (_, _, fresh) = watcher.get_and_watch_data("/traffic").await?;
    writer.set_data("/traffic", b"after", None).await?;
    let event = next_event("watch set after the garbage", fresh.changed()).await?;
    ensure!(
        event.event_type == zk::EventType::NodeDataChanged,
        "fresh watch: {event:?}"
    );
    watcher.create("/bystander/after", b"", &PERSISTENT).await?;
    drop((stalled, stalled_session));
    still_serves(server, "bystanders").await
}

target_tests!(
    garbage_does_not_harm_other_sessions,
    garbage_closes_the_connection,
    negative_length_closes_the_connection,
    oversized_frame_closes_the_connection,
    unknown_opcode_is_unimplemented,
    truncated_request_is_a_marshalling_error,
    frame_cut_by_eof_closes_the_connection,
);
