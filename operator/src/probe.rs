//! `baton-operator probe URL`: an HTTP GET for exec probes. The injected sidecar listens on
//! localhost only, where the kubelet's HTTP probes (sent to the pod IP) cannot reach; an exec
//! probe runs inside the container, and the Baton image has no curl.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Why a probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Only `http://HOST:PORT/PATH` is understood.
    #[error("{0:?} is not http://HOST:PORT/PATH")]
    BadUrl(String),
    /// No answer within the timeout.
    #[error("no answer from {0} in time")]
    Timeout(String),
    /// Connecting, sending or reading failed.
    #[error("{addr}: {source}")]
    Io {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The answer was not 2xx.
    #[error("{addr} answered {status_line:?}")]
    Status { addr: String, status_line: String },
}

/// GETs `url`; Ok when it answers 2xx within `timeout`.
pub async fn probe(url: &str, timeout: Duration) -> Result<(), ProbeError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| ProbeError::BadUrl(url.into()))?;
    let (addr, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if addr.is_empty() {
        return Err(ProbeError::BadUrl(url.into()));
    }
    tokio::time::timeout(timeout, get(addr, path))
        .await
        .map_err(|_| ProbeError::Timeout(addr.into()))?
}

async fn get(addr: &str, path: &str) -> Result<(), ProbeError> {
    let io = |source| ProbeError::Io {
        addr: addr.into(),
        source,
    };
    let mut stream = TcpStream::connect(addr).await.map_err(io)?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.map_err(io)?;
    // The status line is all a probe needs; a few hundred bytes hold it.
    let mut head = vec![0u8; 256];
    let mut filled = 0;
    while filled < head.len() && !head[..filled].contains(&b'\n') {
        let n = stream.read(&mut head[filled..]).await.map_err(io)?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    let text = String::from_utf8_lossy(&head[..filled]);
    let status_line = text.lines().next().unwrap_or_default().to_string();
    let code = status_line.split_whitespace().nth(1).unwrap_or_default();
    if code.len() == 3 && code.starts_with('2') {
        Ok(())
    } else {
        Err(ProbeError::Status {
            addr: addr.into(),
            status_line,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    async fn answering(status: &'static str) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            if let Ok((mut stream, _)) = listener.accept().await {
                let mut buf = [0u8; 512];
                let _ = stream.read(&mut buf).await;
                let _ = stream
                    .write_all(format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n").as_bytes())
                    .await;
            }
        });
        format!("http://{addr}/readyz")
    }

    #[tokio::test]
    async fn two_hundred_passes_and_anything_else_fails() {
        let timeout = Duration::from_secs(5);
        probe(&answering("200 OK").await, timeout)
            .await
            .expect("ready");
        let err = probe(&answering("503 Service Unavailable").await, timeout)
            .await
            .expect_err("not ready");
        assert!(err.to_string().contains("503"), "{err}");
        assert!(matches!(
            probe("https://x/readyz", timeout).await,
            Err(ProbeError::BadUrl(_))
        ));
    }

    #[tokio::test]
    async fn nothing_listening_fails() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let err = probe(&format!("http://{addr}/readyz"), Duration::from_secs(5))
            .await
            .expect_err("refused");
        assert!(matches!(err, ProbeError::Io { .. }), "{err}");
    }
}
