//! The network half of the floor: one round trip over loopback TCP, the least any request to a
//! member on this machine pays on top of its work.
//!
//! An echo server on 127.0.0.1 (a tokio task per connection, as servers are) and one
//! connection per worker, TCP_NODELAY on both ends; each round writes 64 bytes and reads them
//! back.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::{RunConfig, payload};
use crate::budget::Budget;
use crate::error::BenchError;
use crate::latency::LatencyRecorder;

const MESSAGE_SIZE: usize = 64;

pub(super) async fn run(config: &RunConfig) -> Result<(LatencyRecorder, Duration), BenchError> {
    let io_error = |what: &'static str| {
        move |source| BenchError::Io {
            context: format!("loopback echo: {what}"),
            source,
        }
    };
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(io_error("bind"))?;
    let addr = listener.local_addr().map_err(io_error("local address"))?;
    // Dropped with this function, which ends the accept loop and every echo task with it.
    let mut server = JoinSet::new();
    server.spawn(async move {
        let mut echoes = JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            echoes.spawn(echo(stream));
        }
    });
    let mut streams = Vec::with_capacity(config.workers);
    for _ in 0..config.workers {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(io_error("connect"))?;
        stream.set_nodelay(true).map_err(io_error("TCP_NODELAY"))?;
        streams.push(stream);
    }
    let budget = std::sync::Arc::new(Budget::start(config.limit));
    let started = Instant::now();
    let mut clients = JoinSet::new();
    for mut stream in streams {
        let budget = std::sync::Arc::clone(&budget);
        clients.spawn(async move {
            let message = payload(MESSAGE_SIZE);
            let mut answer = vec![0; MESSAGE_SIZE];
            let mut latencies = LatencyRecorder::new()?;
            while budget.claim(1) {
                let round = Instant::now();
                stream
                    .write_all(&message)
                    .await
                    .map_err(io_error("write"))?;
                stream
                    .read_exact(&mut answer)
                    .await
                    .map_err(io_error("read"))?;
                latencies.record(round.elapsed());
            }
            Ok::<_, BenchError>(latencies)
        });
    }
    let mut total = LatencyRecorder::new()?;
    while let Some(joined) = clients.join_next().await {
        total.merge(&joined??)?;
    }
    Ok((total, started.elapsed()))
}

/// Sends back whatever arrives until the client hangs up.
async fn echo(mut stream: TcpStream) {
    if stream.set_nodelay(true).is_err() {
        return;
    }
    let mut buffer = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buffer).await {
        if n == 0 || stream.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Limit;

    #[tokio::test]
    async fn echoes_exactly_the_requested_rounds() {
        let config = RunConfig {
            ensemble: None,
            workers: 2,
            limit: Limit::Ops(20),
            data_size: 0,
            label: "loopback".into(),
            fsync_dir: ".".into(),
            sidecar_bin: "baton-sidecar".into(),
            members: None,
        };
        let (latencies, _) = run(&config).await.expect("echo rounds");
        assert_eq!(latencies.count(), 20);
    }
}
