//! A small HTTP/1.1 client for Baton's own JSON APIs (the ensemble's admin API above all):
//! one connection per call, every call under one deadline, TLS with the ensemble CA (and the
//! admin certificate) when the API is served over TLS. The operator, the playground and the
//! tests all call the admin API through it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Largest answer read unless `with_max_body` says otherwise: our APIs answer with kilobytes
/// of JSON or Prometheus text.
const MAX_BODY: usize = 8 << 20;

/// Why a call got no answer.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("no answer from {addr} within {after:?}")]
    Timeout { addr: String, after: Duration },
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("TLS handshake with {addr} failed: {source}")]
    Tls {
        addr: String,
        source: std::io::Error,
    },
    #[error("HTTP exchange with {addr} failed: {reason}")]
    Http { addr: String, reason: String },
}

/// An answer: status, headers and body.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Response {
    /// The body as JSON, or the raw text as a JSON string (e.g. `/readyz`'s "ready").
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|_| {
            serde_json::Value::String(String::from_utf8_lossy(&self.body).into_owned())
        })
    }
}

/// See the module header.
#[derive(Clone)]
pub struct HttpClient {
    tls: Option<TlsConnector>,
    timeout: Duration,
    max_body: usize,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("tls", &self.tls.is_some())
            .field("timeout", &self.timeout)
            .field("max_body", &self.max_body)
            .finish()
    }
}

impl HttpClient {
    /// Plain HTTP.
    pub fn plain(timeout: Duration) -> Self {
        HttpClient {
            tls: None,
            timeout,
            max_body: MAX_BODY,
        }
    }

    /// HTTPS with `config` (see `configs::client_config`).
    pub fn tls(config: Arc<ClientConfig>, timeout: Duration) -> Self {
        HttpClient {
            tls: Some(TlsConnector::from(config)),
            timeout,
            max_body: MAX_BODY,
        }
    }

    /// Reads answers of up to `bytes` (default 8 MiB) instead: a backup snapshot
    /// (`GET /v1/snapshot`) is as large as the tree.
    pub fn with_max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Whether calls use TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// `method path` on `addr` (HOST:PORT) with an optional JSON body.
    pub async fn request(
        &self,
        addr: &str,
        method: Method,
        path: &str,
        json_body: Option<Vec<u8>>,
    ) -> Result<Response, HttpError> {
        tokio::time::timeout(self.timeout, self.exchange(addr, method, path, json_body))
            .await
            .map_err(|_| HttpError::Timeout {
                addr: addr.to_string(),
                after: self.timeout,
            })?
    }

    async fn exchange(
        &self,
        addr: &str,
        method: Method,
        path: &str,
        json_body: Option<Vec<u8>>,
    ) -> Result<Response, HttpError> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|source| HttpError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => send(addr, tcp, method, path, json_body, self.max_body).await,
            Some(tls) => {
                // The CA verifier ignores the name (see `configs`); it only has to parse.
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let name = ServerName::try_from(host.to_string())
                    .unwrap_or_else(|_| ServerName::try_from("baton.invalid").expect("valid"));
                let stream = tls
                    .connect(name, tcp)
                    .await
                    .map_err(|source| HttpError::Tls {
                        addr: addr.to_string(),
                        source,
                    })?;
                send(addr, stream, method, path, json_body, self.max_body).await
            }
        }
    }
}

async fn send<S>(
    addr: &str,
    stream: S,
    method: Method,
    path: &str,
    json_body: Option<Vec<u8>>,
    max_body: usize,
) -> Result<Response, HttpError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let http_error = |reason: String| HttpError::Http {
        addr: addr.to_string(),
        reason,
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| http_error(e.to_string()))?;
    let driver = tokio::spawn(conn);
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, addr);
    if json_body.is_some() {
        request = request.header(http::header::CONTENT_TYPE, "application/json");
    }
    let request = request
        .body(Full::new(Bytes::from(json_body.unwrap_or_default())))
        .map_err(|e| http_error(e.to_string()))?;
    let answer = sender
        .send_request(request)
        .await
        .map_err(|e| http_error(e.to_string()))?;
    let status = answer.status();
    let headers = answer.headers().clone();
    let body = Limited::new(answer.into_body(), max_body)
        .collect()
        .await
        .map_err(|e| http_error(format!("reading the answer: {e}")))?
        .to_bytes();
    driver.abort();
    Ok(Response {
        status,
        headers,
        body,
    })
}
