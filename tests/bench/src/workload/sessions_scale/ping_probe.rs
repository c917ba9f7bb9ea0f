//! Pings timed on raw ZooKeeper-protocol sessions. zookeeper-client sends and consumes its
//! pings internally, so sessions-scale opens a few sessions of its own, speaking just
//! enough of the protocol (connect, ping, closeSession), and times each ping's answer while
//! the workload's sessions are there.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior, interval, timeout};

use crate::error::BenchError;
use crate::latency::LatencyRecorder;

/// The session timeout asked for, as the sidecar's.
const SESSION_TIMEOUT_MS: i32 = 10_000;
/// The protocol's reserved xids and opcodes (ZooKeeper's `ZooDefs.OpCode`).
const PING_XID: i32 = -2;
const NOTIFICATION_XID: i32 = -1;
const OP_PING: i32 = 11;
const OP_CLOSE_SESSION: i32 = -11;
/// Longest wait for any one answer before the probe gives up.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// No answer this probe reads is near this size; a larger length means a broken stream.
const MAX_FRAME: usize = 1 << 20;

/// `sessions` raw sessions, session `i` on `servers[i mod len]`, each pinging every `every`
/// for `window`; every ping's round trip.
pub(super) async fn ping_latencies(
    servers: &[String],
    sessions: usize,
    window: Duration,
    every: Duration,
) -> Result<LatencyRecorder, BenchError> {
    let mut tasks = JoinSet::new();
    for session in 0..sessions {
        let server = servers[session % servers.len()].clone();
        tasks.spawn(async move { probe(&server, window, every).await });
    }
    let mut total = LatencyRecorder::new()?;
    while let Some(joined) = tasks.join_next().await {
        total.merge(&joined??)?;
    }
    Ok(total)
}

async fn probe(
    server: &str,
    window: Duration,
    every: Duration,
) -> Result<LatencyRecorder, BenchError> {
    let io = |what: &str| {
        let context = format!("ping probe {what} {server}");
        move |source| BenchError::Io { context, source }
    };
    let mut stream = TcpStream::connect(server)
        .await
        .map_err(io("connecting to"))?;
    // One small request at a time: Nagle would hold none, but the timing must not depend on it.
    stream
        .set_nodelay(true)
        .map_err(io("setting TCP_NODELAY to"))?;
    stream
        .write_all(&connect_request())
        .await
        .map_err(io("connecting a session on"))?;
    let answer = read_frame(&mut stream, server).await?;
    if session_id(&answer) == 0 {
        return Err(BenchError::Io {
            context: format!("ping probe on {server}"),
            source: std::io::Error::other("the server refused the session"),
        });
    }
    let mut latencies = LatencyRecorder::new()?;
    let mut ticks = interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let end = Instant::now() + window;
    while Instant::now() < end {
        ticks.tick().await;
        let sent = Instant::now();
        stream
            .write_all(&request(PING_XID, OP_PING))
            .await
            .map_err(io("pinging"))?;
        wait_for(&mut stream, server, PING_XID).await?;
        latencies.record(sent.elapsed());
    }
    // Closed rather than left to expire, which would happen in the middle of the next phase.
    stream
        .write_all(&request(1, OP_CLOSE_SESSION))
        .await
        .map_err(io("closing on"))?;
    wait_for(&mut stream, server, 1).await?;
    Ok(latencies)
}

/// ConnectRequest: protocol version, last zxid seen, timeout, session id, a 16-byte zero
/// password, read-only flag.
fn connect_request() -> Vec<u8> {
    let mut body = Vec::with_capacity(45);
    body.extend_from_slice(&0i32.to_be_bytes());
    body.extend_from_slice(&0i64.to_be_bytes());
    body.extend_from_slice(&SESSION_TIMEOUT_MS.to_be_bytes());
    body.extend_from_slice(&0i64.to_be_bytes());
    body.extend_from_slice(&16i32.to_be_bytes());
    body.extend_from_slice(&[0; 16]);
    body.push(0);
    framed(body)
}

/// A request that is only a header (xid, opcode).
fn request(xid: i32, op: i32) -> Vec<u8> {
    let mut body = Vec::with_capacity(8);
    body.extend_from_slice(&xid.to_be_bytes());
    body.extend_from_slice(&op.to_be_bytes());
    framed(body)
}

fn framed(body: Vec<u8>) -> Vec<u8> {
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as i32).to_be_bytes());
    frame.extend(body);
    frame
}

/// The session id of a ConnectResponse (protocol version, timeout, session id, ...); 0 means
/// refused.
fn session_id(answer: &[u8]) -> i64 {
    answer
        .get(8..16)
        .and_then(|b| b.try_into().ok())
        .map_or(0, i64::from_be_bytes)
}

/// Reads answers until the one to `xid`; notifications in between are skipped.
async fn wait_for(stream: &mut TcpStream, server: &str, xid: i32) -> Result<(), BenchError> {
    loop {
        let answer = read_frame(stream, server).await?;
        let got = answer
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map(i32::from_be_bytes);
        match got {
            Some(x) if x == xid => return Ok(()),
            Some(NOTIFICATION_XID) => continue,
            other => {
                return Err(BenchError::Io {
                    context: format!("ping probe on {server}"),
                    source: std::io::Error::other(format!(
                        "answer xid {other:?}, waiting for {xid}"
                    )),
                });
            }
        }
    }
}

async fn read_frame(stream: &mut TcpStream, server: &str) -> Result<Vec<u8>, BenchError> {
    let read = async {
        let len = stream.read_i32().await?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= MAX_FRAME)
            .ok_or_else(|| std::io::Error::other(format!("frame length {len}")))?;
        let mut body = vec![0; len];
        stream.read_exact(&mut body).await?;
        Ok(body)
    };
    timeout(ANSWER_TIMEOUT, read)
        .await
        .map_err(|_| BenchError::Timeout {
            what: format!("an answer from {server} to the ping probe"),
            timeout: ANSWER_TIMEOUT,
        })?
        .map_err(|source| BenchError::Io {
            context: format!("ping probe reading from {server}"),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_length_prefixed_big_endian() {
        assert_eq!(
            request(PING_XID, OP_PING),
            [0, 0, 0, 8, 255, 255, 255, 254, 0, 0, 0, 11]
        );
        let connect = connect_request();
        assert_eq!(connect.len(), 4 + 45);
        assert_eq!(&connect[..4], &45i32.to_be_bytes());
        assert_eq!(&connect[16..20], &SESSION_TIMEOUT_MS.to_be_bytes());
    }

    #[test]
    fn session_id_comes_after_version_and_timeout() {
        let mut answer = vec![0, 0, 0, 0, 0, 0, 39, 16];
        answer.extend_from_slice(&0x1234i64.to_be_bytes());
        assert_eq!(session_id(&answer), 0x1234);
        assert_eq!(session_id(&[0; 4]), 0);
    }
}
