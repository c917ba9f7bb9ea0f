//! ZooKeeper's four-letter words, which Baton answers too: `srvr` says whether a member leads.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::error::BenchError;

/// How long one four-letter exchange may take (connect, ask, read to the server's close).
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(2);
/// Answers are a few hundred bytes; more than this is not a four-letter answer.
const MAX_ANSWER: u64 = 64 * 1024;

/// What a member says it is in its `srvr` answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    Leader,
    Follower,
    Standalone,
    /// Anything else (`observer`, a member still looking for a leader, ...).
    Other(String),
}

/// The `Mode:` of `server`'s `srvr` answer; `None` when it does not answer (down, starting, or
/// not serving clients right now, as a ZooKeeper member without a leader).
pub async fn mode(server: &str) -> Option<Mode> {
    let answer = timeout(EXCHANGE_TIMEOUT, ask(server, b"srvr"))
        .await
        .ok()?
        .ok()?;
    parse_mode(&answer)
}

/// The `Connections:` of `server`'s `srvr` answer (both servers give it); `None` when it does
/// not answer.
pub async fn connections(server: &str) -> Option<u64> {
    let answer = timeout(EXCHANGE_TIMEOUT, ask(server, b"srvr"))
        .await
        .ok()?
        .ok()?;
    answer
        .lines()
        .find_map(|line| line.strip_prefix("Connections:"))?
        .trim()
        .parse()
        .ok()
}

async fn ask(server: &str, word: &[u8; 4]) -> Result<String, BenchError> {
    let io = |context: String| move |source| BenchError::Io { context, source };
    let mut stream = TcpStream::connect(server)
        .await
        .map_err(io(format!("connecting to {server}")))?;
    stream
        .write_all(word)
        .await
        .map_err(io(format!("asking {server}")))?;
    let mut answer = Vec::new();
    stream
        .take(MAX_ANSWER)
        .read_to_end(&mut answer)
        .await
        .map_err(io(format!("reading from {server}")))?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

fn parse_mode(answer: &str) -> Option<Mode> {
    let mode = answer
        .lines()
        .find_map(|line| line.strip_prefix("Mode:"))?
        .trim();
    Some(match mode {
        "leader" => Mode::Leader,
        "follower" => Mode::Follower,
        "standalone" => Mode::Standalone,
        other => Mode::Other(other.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_mode_line() {
        let answer =
            "Zookeeper version: 3.8.4\nLatency min/avg/max: 0/0.1/3\nMode: leader\nNode count: 5\n";
        assert_eq!(parse_mode(answer), Some(Mode::Leader));
        assert_eq!(parse_mode("Mode: follower\n"), Some(Mode::Follower));
        assert_eq!(
            parse_mode("Mode: observer\n"),
            Some(Mode::Other("observer".into()))
        );
        assert_eq!(
            parse_mode("This ZooKeeper instance is not currently serving requests\n"),
            None
        );
    }
}
