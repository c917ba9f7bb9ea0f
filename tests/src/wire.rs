//! Small socket clients for the non-ZooKeeper-protocol ports: four-letter words and HTTP GET.
//!
//! Every call is bounded by `IO_DEADLINE`, so a server that never answers fails the test
//! instead of hanging it.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Upper bound for one request/response exchange on loopback.
pub const IO_DEADLINE: Duration = Duration::from_secs(10);

/// Sends a four-letter word (`ruok`, `srvr`, `stat`, `mntr`) and returns the whole answer.
pub async fn four_letter_word(addr: SocketAddr, word: &str) -> Result<String> {
    four_letter_word_within(addr, word, IO_DEADLINE).await
}

/// `four_letter_word` with its own deadline: readiness probes use a short one, because a
/// server that is still starting can accept a connection and then never answer on it.
pub async fn four_letter_word_within(
    addr: SocketAddr,
    word: &str,
    deadline: Duration,
) -> Result<String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.context("connect")?;
        stream
            .write_all(word.as_bytes())
            .await
            .context("send the word")?;
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .await
            .context("read the answer")?;
        Ok::<_, anyhow::Error>(String::from_utf8_lossy(&answer).into_owned())
    };
    tokio::time::timeout(deadline, exchange)
        .await
        .map_err(|_| anyhow!("no answer to {word:?} from {addr} within {deadline:?}"))?
        .with_context(|| format!("four-letter word {word:?} to {addr}"))
}

/// `GET path` over HTTP/1.0 (so the body is close-delimited, never chunked): status and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    http_get_within(addr, path, IO_DEADLINE).await
}

/// `http_get` with its own deadline, for readiness probes.
pub async fn http_get_within(
    addr: SocketAddr,
    path: &str,
    deadline: Duration,
) -> Result<(u16, String)> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.context("connect")?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .context("send the request")?;
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .await
            .context("read the response")?;
        parse_http_response(&response)
    };
    tokio::time::timeout(deadline, exchange)
        .await
        .map_err(|_| anyhow!("no HTTP answer from {addr}{path} within {deadline:?}"))?
        .with_context(|| format!("GET http://{addr}{path}"))
}

fn parse_http_response(response: &[u8]) -> Result<(u16, String)> {
    let text = String::from_utf8_lossy(response);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("response without a header/body separator: {text:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| anyhow!("malformed status line in {head:?}"))?;
    Ok((status, body.to_owned()))
}
