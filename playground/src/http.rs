//! A minimal HTTP/1.1 client for the loopback APIs of our own children (the ensemble's admin
//! API and the sidecars). One request per connection (`Connection: close`), bodies sized by
//! `Content-Length` or the end of the stream: that is all those servers send, and it keeps
//! the playground free of an HTTP client stack.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest answer read; our APIs answer with a few hundred bytes of JSON.
const MAX_REPLY_BYTES: u64 = 1 << 20;

/// An answer: its status code and body.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as JSON, or an error naming what was asked.
    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "answer is not JSON: {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// `GET path` on `addr`, bounded by `timeout` as a whole.
pub async fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<Reply> {
    request(addr, "GET", path, timeout).await
}

/// `method path` with an empty body on `addr`, bounded by `timeout` as a whole.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    timeout: Duration,
) -> Result<Reply> {
    tokio::time::timeout(timeout, exchange(addr, method, path))
        .await
        .map_err(|_| anyhow!("no answer within {timeout:?}"))?
        .with_context(|| format!("{method} http://{addr}{path}"))
}

async fn exchange(addr: SocketAddr, method: &str, path: &str) -> Result<Reply> {
    let mut stream = TcpStream::connect(addr).await.context("connect")?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    stream
        .write_all(head.as_bytes())
        .await
        .context("send the request")?;
    let mut raw = Vec::new();
    (&mut stream)
        .take(MAX_REPLY_BYTES)
        .read_to_end(&mut raw)
        .await
        .context("read the answer")?;
    parse(&raw)
}

/// Splits a whole HTTP/1.1 answer into status and body.
fn parse(raw: &[u8]) -> Result<Reply> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("answer ended inside its head ({} bytes)", raw.len()))?;
    let head = std::str::from_utf8(&raw[..split]).context("answer head is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| anyhow!("bad status line {status_line:?}"))?;
    let mut body = &raw[split + 4..];
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") && !value.eq_ignore_ascii_case("identity")
        {
            bail!("transfer-encoding {value:?} is not supported by this small client");
        }
        if name.eq_ignore_ascii_case("content-length") {
            let length: usize = value
                .parse()
                .with_context(|| format!("bad content-length {value:?}"))?;
            if body.len() < length {
                bail!("answer cut short: {} of {length} body bytes", body.len());
            }
            body = &body[..length];
        }
    }
    Ok(Reply {
        status,
        body: body.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_sized_answer() {
        let reply = parse(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}extra").unwrap();
        assert_eq!(reply.status, 200);
        assert_eq!(reply.body, b"{}");
    }

    #[test]
    fn refuses_truncated_and_chunked_answers() {
        assert!(parse(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n{}").is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}").is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(parse(b"garbage\r\n\r\n").is_err());
    }
}
