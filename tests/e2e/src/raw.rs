//! A ZooKeeper client connection driven frame by frame, for protocol-abuse and wire-order tests.
//!
//! Every read is bounded by `IO_DEADLINE`: a server that neither answers nor closes fails the
//! test instead of hanging it.

use std::net::SocketAddr;

use anyhow::{Context, Result, anyhow, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::wire::IO_DEADLINE;

/// A ZooKeeper client connection driven frame by frame, for protocol-abuse tests.
pub struct RawConnection {
    stream: TcpStream,
}

/// What the server did after a frame: answered with bytes, or closed the connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A complete length-prefixed frame (the payload, without the length).
    Frame(Vec<u8>),
    /// EOF or reset; `partial` holds any bytes received before it.
    Closed { partial: Vec<u8> },
}

/// `ReplyHeader` of a response frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHeader {
    pub xid: i32,
    pub zxid: i64,
    pub err: i32,
}

impl ReplyHeader {
    /// Parses the first 16 bytes of a response payload.
    pub fn parse(payload: &[u8]) -> Result<ReplyHeader> {
        if payload.len() < 16 {
            bail!(
                "reply of {} bytes is shorter than a ReplyHeader: {payload:02x?}",
                payload.len()
            );
        }
        let i32_at = |at: usize| {
            i32::from_be_bytes([
                payload[at],
                payload[at + 1],
                payload[at + 2],
                payload[at + 3],
            ])
        };
        let zxid = i64::from_be_bytes(payload[4..12].try_into().context("zxid bytes")?);
        Ok(ReplyHeader {
            xid: i32_at(0),
            zxid,
            err: i32_at(12),
        })
    }
}

impl RawConnection {
    /// Opens a TCP connection without any handshake.
    pub async fn open(addr: SocketAddr) -> Result<RawConnection> {
        let stream = tokio::time::timeout(IO_DEADLINE, TcpStream::connect(addr))
            .await
            .map_err(|_| anyhow!("connect to {addr} timed out"))?
            .with_context(|| format!("connect to {addr}"))?;
        Ok(RawConnection { stream })
    }

    /// Opens a connection and creates a new session (30 s timeout); returns the session id.
    pub async fn open_session(addr: SocketAddr) -> Result<(RawConnection, i64)> {
        let mut conn = RawConnection::open(addr).await?;
        conn.send_frame(&connect_request_body(0, &[0; 16], 0, 30_000))
            .await?;
        match conn.receive().await? {
            // ConnectResponse: protocolVersion, timeOut, sessionId, passwd.
            Outcome::Frame(payload) if payload.len() >= 16 => {
                let session_id =
                    i64::from_be_bytes(payload[8..16].try_into().context("session id bytes")?);
                Ok((conn, session_id))
            }
            other => bail!("handshake failed: {other:?}"),
        }
    }

    /// Writes `payload` with its 4-byte big-endian length prefix.
    pub async fn send_frame(&mut self, payload: &[u8]) -> Result<()> {
        let len = i32::try_from(payload.len()).context("frame too long for a length prefix")?;
        let mut frame = len.to_be_bytes().to_vec();
        frame.extend_from_slice(payload);
        self.send_bytes(&frame).await
    }

    /// Writes bytes as they are (no framing). A server that already closed may reset us: that
    /// is not an error here, the next `receive` reports the close.
    pub async fn send_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        match tokio::time::timeout(IO_DEADLINE, self.stream.write_all(bytes)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) if is_reset(&err) => Ok(()),
            Ok(Err(err)) => Err(err).context("write to the server"),
            Err(_) => bail!(
                "write of {} bytes did not finish within {IO_DEADLINE:?}",
                bytes.len()
            ),
        }
    }

    /// Half-closes our side: the server sees EOF after what was sent.
    pub async fn shutdown_write(&mut self) -> Result<()> {
        match self.stream.shutdown().await {
            Err(err) if !is_reset(&err) => Err(err).context("shut down the write side"),
            _ => Ok(()),
        }
    }

    /// Sends a request and reads until its reply: the notifications that arrived first, then the
    /// reply's payload. Fails if the connection closes or another reply arrives first.
    pub async fn call(
        &mut self,
        xid: i32,
        opcode: i32,
        body: &[u8],
    ) -> Result<(Vec<WatcherEvent>, Vec<u8>)> {
        self.send_frame(&request(xid, opcode, body)).await?;
        let mut notifications = Vec::new();
        loop {
            let payload = match self.receive().await? {
                Outcome::Frame(payload) => payload,
                Outcome::Closed { partial } => {
                    bail!("connection closed awaiting xid {xid}: {partial:02x?}")
                }
            };
            if let Some(event) = WatcherEvent::parse(&payload)? {
                notifications.push(event);
                continue;
            }
            let header = ReplyHeader::parse(&payload)?;
            if header.xid != xid {
                bail!("expected the reply to xid {xid}, got {header:?}");
            }
            return Ok((notifications, payload));
        }
    }

    /// Reads one response frame, or reports that the server closed the connection.
    pub async fn receive(&mut self) -> Result<Outcome> {
        tokio::time::timeout(IO_DEADLINE, self.receive_unbounded())
            .await
            .map_err(|_| anyhow!("server neither answered nor closed within {IO_DEADLINE:?}"))?
    }

    async fn receive_unbounded(&mut self) -> Result<Outcome> {
        let mut len_bytes = [0u8; 4];
        if let Some(partial) = self.read_exact_or_closed(&mut len_bytes).await? {
            return Ok(Outcome::Closed { partial });
        }
        let len = usize::try_from(i32::from_be_bytes(len_bytes))
            .map_err(|_| anyhow!("server sent a negative frame length {len_bytes:02x?}"))?;
        let mut payload = vec![0u8; len];
        if let Some(mut partial) = self.read_exact_or_closed(&mut payload).await? {
            let mut received = len_bytes.to_vec();
            received.append(&mut partial);
            return Ok(Outcome::Closed { partial: received });
        }
        Ok(Outcome::Frame(payload))
    }

    /// Fills `buf`, or returns the bytes read before the connection closed.
    async fn read_exact_or_closed(&mut self, buf: &mut [u8]) -> Result<Option<Vec<u8>>> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.stream.read(&mut buf[filled..]).await {
                Ok(0) => return Ok(Some(buf[..filled].to_vec())),
                Ok(n) => filled += n,
                Err(err) if is_reset(&err) => return Ok(Some(buf[..filled].to_vec())),
                Err(err) => return Err(err).context("read from the server"),
            }
        }
        Ok(None)
    }
}

fn is_reset(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionAborted
    )
}

/// A ConnectRequest's payload: a new session (`session_id` 0) or a reconnect with its
/// password and the newest zxid the client has seen.
pub fn connect_request_body(
    session_id: i64,
    passwd: &[u8],
    last_zxid_seen: i64,
    timeout_ms: i32,
) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&0i32.to_be_bytes()); // protocolVersion
    body.extend_from_slice(&last_zxid_seen.to_be_bytes());
    body.extend_from_slice(&timeout_ms.to_be_bytes());
    body.extend_from_slice(&session_id.to_be_bytes());
    body.extend_from_slice(&(passwd.len() as i32).to_be_bytes());
    body.extend_from_slice(passwd);
    body.push(0); // readOnly
    body
}

/// Opcodes used by raw tests (`ZooDefs.OpCode`).
pub mod opcode {
    pub const EXISTS: i32 = 3;
    pub const GET_DATA: i32 = 4;
    pub const SET_DATA: i32 = 5;
    pub const GET_CHILDREN: i32 = 8;
    pub const CHECK_WATCHES: i32 = 17;
    pub const REMOVE_WATCHES: i32 = 18;
    pub const MULTI_READ: i32 = 22;
    pub const AUTH: i32 = 100;
}

/// The xid ZooKeeper puts on watch notifications.
pub const NOTIFICATION_XID: i32 = -1;

/// A watch notification: `WatcherEvent{type, state, path}` after a `ReplyHeader` with xid -1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatcherEvent {
    pub event_type: i32,
    pub state: i32,
    pub path: String,
}

impl WatcherEvent {
    /// Parses a notification frame's payload; `None` if the frame is not a notification.
    pub fn parse(payload: &[u8]) -> Result<Option<WatcherEvent>> {
        let header = ReplyHeader::parse(payload)?;
        if header.xid != NOTIFICATION_XID {
            return Ok(None);
        }
        let body = &payload[16..];
        if body.len() < 12 {
            bail!("notification body too short: {body:02x?}");
        }
        let i32_at =
            |at: usize| i32::from_be_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
        let path_len = usize::try_from(i32_at(8)).map_err(|_| anyhow!("negative path length"))?;
        let path = body
            .get(12..12 + path_len)
            .ok_or_else(|| anyhow!("notification path truncated"))?;
        Ok(Some(WatcherEvent {
            event_type: i32_at(0),
            state: i32_at(4),
            path: String::from_utf8(path.to_vec()).context("notification path is not UTF-8")?,
        }))
    }
}

/// Body of exists/getData/getChildren: path then the watch flag.
pub fn path_and_watch(path: &str, watch: bool) -> Vec<u8> {
    let mut body = jute_string(path);
    body.push(u8::from(watch));
    body
}

/// Body of a multiRead: per op a `MultiHeader{type, done: false, err: -1}` and its path and
/// watch flag, then the closing header `{-1, true, -1}`.
pub fn multi_read_body(ops: &[(i32, &str, bool)]) -> Vec<u8> {
    let mut body = Vec::new();
    for &(op, path, watch) in ops {
        body.extend_from_slice(&op.to_be_bytes());
        body.push(0);
        body.extend_from_slice(&(-1i32).to_be_bytes());
        body.extend_from_slice(&path_and_watch(path, watch));
    }
    body.extend_from_slice(&(-1i32).to_be_bytes());
    body.push(1);
    body.extend_from_slice(&(-1i32).to_be_bytes());
    body
}

/// Body of checkWatches and removeWatches: path, then the raw `WatcherType` (1 children,
/// 2 data, 3 any, 4 persistent, 5 persistent recursive).
pub fn watches_body(path: &str, watcher_type: i32) -> Vec<u8> {
    let mut body = jute_string(path);
    body.extend_from_slice(&watcher_type.to_be_bytes());
    body
}

/// Body of an auth packet: type (always 0), scheme, credentials.
pub fn auth_body(scheme: &str, credentials: &[u8]) -> Vec<u8> {
    let mut body = 0i32.to_be_bytes().to_vec();
    body.extend_from_slice(&jute_string(scheme));
    body.extend_from_slice(
        &i32::try_from(credentials.len())
            .unwrap_or(i32::MAX)
            .to_be_bytes(),
    );
    body.extend_from_slice(credentials);
    body
}

/// Body of setData: path, data, expected version.
pub fn set_data_body(path: &str, data: &[u8], version: i32) -> Vec<u8> {
    let mut body = jute_string(path);
    body.extend_from_slice(&i32::try_from(data.len()).unwrap_or(i32::MAX).to_be_bytes());
    body.extend_from_slice(data);
    body.extend_from_slice(&version.to_be_bytes());
    body
}

/// A request payload: `RequestHeader{xid, opcode}` followed by `body`.
pub fn request(xid: i32, opcode: i32, body: &[u8]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(8 + body.len());
    payload.extend_from_slice(&xid.to_be_bytes());
    payload.extend_from_slice(&opcode.to_be_bytes());
    payload.extend_from_slice(body);
    payload
}

/// Jute encoding of a string: length then UTF-8 bytes.
pub fn jute_string(s: &str) -> Vec<u8> {
    let mut out = i32::try_from(s.len())
        .unwrap_or(i32::MAX)
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(s.as_bytes());
    out
}
