//! Hostile bytes on the client port. ZooKeeper's answers, recorded against 3.8:
//! - a frame it cannot parse as a ConnectRequest, a negative length, or a length over
//!   jute.maxbuffer (0xfffff): the connection is closed at once, nothing is sent;
//! - an unknown opcode in a session: a ReplyHeader with err -6 (Unimplemented), then close;
//! - a request body shorter than its own fields claim: err -5 (MarshallingError), and the
//!   connection stays usable.
//!
//! After each, the server must still be running and serve a fresh client.

use anyhow::{Result, bail, ensure};
use baton_tests::raw::{self, Outcome, RawConnection, ReplyHeader, opcode};
use baton_tests::{PERSISTENT, Server, connect, target_tests};

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

target_tests!(
    garbage_closes_the_connection,
    negative_length_closes_the_connection,
    oversized_frame_closes_the_connection,
    unknown_opcode_is_unimplemented,
    truncated_request_is_a_marshalling_error,
    frame_cut_by_eof_closes_the_connection,
);
