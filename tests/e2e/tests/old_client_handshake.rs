//! The handshake of clients older than ZooKeeper 3.4, which end their ConnectRequest at the
//! password (no trailing `readOnly`). ZooKeeper 3.8 marks such a connection `isOldClient` and
//! leaves `readOnly` out of every ConnectResponse it writes to it: 36 bytes (protocolVersion,
//! timeOut, sessionId, a 16-byte passwd with its length), where a newer client gets 37. Some
//! widely used clients check that length exactly and drop any other answer. The refusal of an
//! unknown session or a wrong password (timeout 0, session 0, 16 zero bytes) has the same shape.

use anyhow::{Context, Result, bail, ensure};
use baton_tests::raw::{self, Outcome, RawConnection, ReplyHeader, opcode};
use baton_tests::{Server, target_tests};

/// The ConnectResponse fields this file looks at.
#[derive(Debug)]
struct Answer {
    len: usize,
    timeout_ms: i32,
    session_id: i64,
    passwd: Vec<u8>,
}

/// A ConnectRequest's payload with the trailing `readOnly` byte, or without it (`old`).
fn connect_body(session_id: i64, passwd: &[u8], old: bool) -> Vec<u8> {
    let mut body = raw::connect_request_body(session_id, passwd, 0, 30_000);
    if old {
        body.pop();
    }
    body
}

/// Sends a ConnectRequest on a new connection and reads the ConnectResponse.
async fn handshake(
    server: &Server,
    session_id: i64,
    passwd: &[u8],
    old: bool,
) -> Result<(RawConnection, Answer)> {
    let mut conn = RawConnection::open(server.client_addr()).await?;
    conn.send_frame(&connect_body(session_id, passwd, old))
        .await?;
    let payload = match conn.receive().await? {
        Outcome::Frame(payload) => payload,
        Outcome::Closed { partial } => bail!("closed instead of a ConnectResponse: {partial:02x?}"),
    };
    ensure!(payload.len() >= 20, "short ConnectResponse {payload:02x?}");
    let i32_at = |at: usize| -> Result<i32> {
        Ok(i32::from_be_bytes(
            payload[at..at + 4].try_into().context("i32 bytes")?,
        ))
    };
    let passwd_len = usize::try_from(i32_at(16)?).context("negative passwd length")?;
    ensure!(
        payload.len() >= 20 + passwd_len,
        "passwd runs past the frame: {payload:02x?}"
    );
    let answer = Answer {
        len: payload.len(),
        timeout_ms: i32_at(4)?,
        session_id: i64::from_be_bytes(payload[8..16].try_into().context("session id bytes")?),
        passwd: payload[20..20 + passwd_len].to_vec(),
    };
    Ok((conn, answer))
}

/// The length of every answer: 36 for an old client, 37 (a trailing `readOnly` of 0) otherwise.
fn expected_len(old: bool) -> usize {
    if old { 36 } else { 37 }
}

/// The session answers a request on `conn` (the handshake really succeeded).
async fn serves(conn: &mut RawConnection, what: &str) -> Result<()> {
    let (_, reply) = conn
        .call(1, opcode::EXISTS, &raw::path_and_watch("/", false))
        .await?;
    let header = ReplyHeader::parse(&reply)?;
    ensure!(header.err == 0, "{what}: exists / answered {header:?}");
    Ok(())
}

async fn a_new_session_is_answered_in_the_shape_the_client_asked(
    server: &mut Server,
) -> Result<()> {
    for old in [false, true] {
        let (mut conn, answer) = handshake(server, 0, &[0; 16], old).await?;
        ensure!(
            answer.len == expected_len(old) && answer.session_id != 0 && answer.passwd.len() == 16,
            "new session, old client {old}: {answer:?}"
        );
        serves(&mut conn, "new session").await?;
    }
    Ok(())
}

async fn a_reconnect_is_answered_in_the_shape_the_client_asked(server: &mut Server) -> Result<()> {
    // The session is opened by a new client and resumed by each kind, and the other way round.
    for (opened_old, resumed_old) in [(false, true), (true, false), (true, true)] {
        let (conn, opened) = handshake(server, 0, &[0; 16], opened_old).await?;
        drop(conn);
        let (mut conn, resumed) =
            handshake(server, opened.session_id, &opened.passwd, resumed_old).await?;
        ensure!(
            resumed.len == expected_len(resumed_old)
                && resumed.session_id == opened.session_id
                && resumed.timeout_ms == opened.timeout_ms,
            "reconnect by an old client {resumed_old}: {resumed:?}, opened {opened:?}"
        );
        serves(&mut conn, "resumed session").await?;
    }
    Ok(())
}

async fn a_refused_reconnect_is_answered_in_the_shape_the_client_asked(
    server: &mut Server,
) -> Result<()> {
    let (_live, opened) = handshake(server, 0, &[0; 16], false).await?;
    let mut wrong = opened.passwd.clone();
    wrong[0] ^= 0xff;
    // A wrong password for a live session, and a session that never existed.
    for (session_id, passwd) in [(opened.session_id, wrong), (0x0bad_5e55, vec![7; 16])] {
        for old in [false, true] {
            let (mut conn, answer) = handshake(server, session_id, &passwd, old).await?;
            ensure!(
                answer.len == expected_len(old)
                    && answer.timeout_ms == 0
                    && answer.session_id == 0
                    && answer.passwd == [0; 16],
                "refused reconnect of {session_id:#x}, old client {old}: {answer:?}"
            );
            match conn.receive().await? {
                Outcome::Closed { .. } => {}
                Outcome::Frame(payload) => {
                    bail!("a refused reconnect got another frame: {payload:02x?}")
                }
            }
        }
    }
    Ok(())
}

target_tests!(
    a_new_session_is_answered_in_the_shape_the_client_asked,
    a_reconnect_is_answered_in_the_shape_the_client_asked,
    a_refused_reconnect_is_answered_in_the_shape_the_client_asked,
);
