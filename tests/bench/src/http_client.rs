//! A minimal HTTP/1.1 client for the sidecar's localhost API: one keep-alive connection, one
//! request at a time, JSON answers.
//!
//! Each simulated application holds its own connection, as an app container talking to its
//! sidecar would; connecting is done before any clock starts, so a measured request is only the
//! request. A connection the sidecar closed (it restarted, or ended a long-poll) is reopened on
//! the next request.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Method, Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::error::BenchError;

/// One keep-alive connection to one sidecar.
pub struct HttpClient {
    addr: SocketAddr,
    sender: Option<SendRequest<Empty<Bytes>>>,
}

/// A parsed answer: the status and the JSON body.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub body: serde_json::Value,
}

impl HttpClient {
    /// Opens the connection now, so the first measured request does not pay for it.
    pub async fn connect(addr: SocketAddr) -> Result<Self, BenchError> {
        let mut client = HttpClient { addr, sender: None };
        client.sender().await?;
        Ok(client)
    }

    /// The connection, reopened if the sidecar closed it.
    async fn sender(&mut self) -> Result<&mut SendRequest<Empty<Bytes>>, BenchError> {
        if self.sender.as_ref().is_none_or(SendRequest::is_closed) {
            let stream = TcpStream::connect(self.addr)
                .await
                .map_err(|source| BenchError::Io {
                    context: format!("connecting to the sidecar API at {}", self.addr),
                    source,
                })?;
            // One small request at a time: Nagle would only delay it.
            stream.set_nodelay(true).map_err(|source| BenchError::Io {
                context: format!("setting TCP_NODELAY towards {}", self.addr),
                source,
            })?;
            let (sender, connection) = http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|source| http_error(self.addr, "handshake", source))?;
            let addr = self.addr;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(%addr, error = %e, "sidecar HTTP connection ended");
                }
            });
            self.sender = Some(sender);
        }
        // Just set above when it was missing.
        self.sender.as_mut().ok_or_else(|| BenchError::Sidecar {
            identity: self.addr.to_string(),
            detail: "no HTTP connection".into(),
        })
    }

    /// Sends `method path_and_query` with an empty body and parses the JSON answer, whatever
    /// its status (the caller decides which statuses it expects).
    pub async fn call(&mut self, method: Method, path: &str) -> Result<Reply, BenchError> {
        let request_name = format!("{method} {path}");
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, self.addr.to_string())
            .body(Empty::new())
            .map_err(|e| BenchError::InvalidOption(format!("{request_name}: {e}")))?;
        let addr = self.addr;
        let sender = self.sender().await?;
        sender
            .ready()
            .await
            .map_err(|source| http_error(addr, &request_name, source))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|source| http_error(addr, &request_name, source))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|source| http_error(addr, &request_name, source))?
            .to_bytes();
        let body = serde_json::from_slice(&bytes).map_err(|e| BenchError::BadReply {
            addr: self.addr.to_string(),
            request: request_name,
            detail: format!("not JSON: {e}"),
            body: String::from_utf8_lossy(&bytes).into_owned(),
        })?;
        Ok(Reply { status, body })
    }

    /// Like [`HttpClient::call`], but any status other than 200 is an error.
    pub async fn call_ok(
        &mut self,
        method: Method,
        path: &str,
    ) -> Result<serde_json::Value, BenchError> {
        let request = format!("{method} {path}");
        let reply = self.call(method, path).await?;
        if reply.status != StatusCode::OK {
            return Err(BenchError::HttpStatus {
                addr: self.addr.to_string(),
                request,
                status: reply.status.as_u16(),
                body: reply.body.to_string(),
            });
        }
        Ok(reply.body)
    }
}

fn http_error(addr: SocketAddr, request: &str, source: hyper::Error) -> BenchError {
    BenchError::Http {
        addr: addr.to_string(),
        request: request.to_owned(),
        source,
    }
}
