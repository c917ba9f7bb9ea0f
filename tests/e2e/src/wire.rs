//! Four-letter words on the client port (the admin API is called through `baton_tls::HttpClient`).
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
