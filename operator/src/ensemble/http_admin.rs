//! `EnsembleAdmin` over HTTP/1.1, one short connection per call, every call under a deadline.

use std::time::Duration;

use bytes_body::{Body, collect};
use http::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

use super::{AdminError, EnsembleAdmin, MemberStatus};

/// Largest answer read from a member (a status is a few hundred bytes).
const MAX_ANSWER: usize = 64 * 1024;

/// The production `EnsembleAdmin`.
#[derive(Debug, Clone)]
pub struct HttpAdmin {
    timeout: Duration,
}

impl HttpAdmin {
    /// A client whose every call (connect, send, read) finishes within `timeout`.
    pub fn new(timeout: Duration) -> Self {
        HttpAdmin { timeout }
    }

    async fn call(
        &self,
        addr: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(StatusCode, Value), AdminError> {
        let unreachable = |reason: String| AdminError::Unreachable {
            addr: addr.to_string(),
            reason,
        };
        tokio::time::timeout(self.timeout, exchange(addr, method, path, body))
            .await
            .map_err(|_| unreachable(format!("no answer within {:?}", self.timeout)))?
            .map_err(unreachable)
    }

    /// Maps the answers every membership call shares; 202 is success.
    async fn command(
        &self,
        addr: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(), AdminError> {
        let (status, answer) = self.call(addr, method, path, body).await?;
        match status {
            StatusCode::ACCEPTED | StatusCode::OK => Ok(()),
            StatusCode::MISDIRECTED_REQUEST => Err(AdminError::NotLeader {
                addr: addr.to_string(),
                leader_id: answer["error"]["leaderId"].as_u64().unwrap_or(0),
            }),
            StatusCode::CONFLICT => Err(AdminError::Conflict {
                addr: addr.to_string(),
                message: answer["error"]["message"]
                    .as_str()
                    .unwrap_or("conflict")
                    .to_string(),
            }),
            other => Err(AdminError::Unexpected {
                addr: addr.to_string(),
                status: other.as_u16(),
                body: answer.to_string(),
            }),
        }
    }
}

impl EnsembleAdmin for HttpAdmin {
    async fn status(&self, addr: &str) -> Result<MemberStatus, AdminError> {
        let (status, answer) = self.call(addr, Method::GET, "/v1/status", None).await?;
        if status != StatusCode::OK {
            return Err(AdminError::Unexpected {
                addr: addr.to_string(),
                status: status.as_u16(),
                body: answer.to_string(),
            });
        }
        serde_json::from_value(answer.clone()).map_err(|e| AdminError::Unexpected {
            addr: addr.to_string(),
            status: status.as_u16(),
            body: format!("{answer} ({e})"),
        })
    }

    async fn add_member(&self, addr: &str, id: u64, peer_addr: &str) -> Result<(), AdminError> {
        let body = json!({ "id": id, "peerAddr": peer_addr });
        self.command(addr, Method::POST, "/v1/members", Some(body))
            .await
    }

    async fn remove_member(&self, addr: &str, id: u64) -> Result<(), AdminError> {
        self.command(addr, Method::DELETE, &format!("/v1/members/{id}"), None)
            .await
    }

    async fn transfer_leader(&self, addr: &str, to: Option<u64>) -> Result<(), AdminError> {
        let body = match to {
            Some(to) => json!({ "to": to }),
            None => json!({}),
        };
        self.command(addr, Method::POST, "/v1/leader/transfer", Some(body))
            .await
    }
}

/// One request on a fresh connection; the answer's body as JSON (a string if it is not JSON).
async fn exchange(
    addr: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Result<(StatusCode, Value), String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    // The connection task ends when the exchange does (the sender is dropped).
    tokio::spawn(connection);
    let bytes = body.map(|b| b.to_string()).unwrap_or_default();
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, addr)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(bytes))
        .map_err(|e| format!("request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = response.status();
    let bytes = collect(response.into_body(), MAX_ANSWER).await?;
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok((status, value))
}

/// The request body type and a bounded body reader.
mod bytes_body {
    use http_body_util::{BodyExt, Full, Limited};
    use hyper::body::{Bytes, Incoming};

    pub type Body = Full<Bytes>;

    pub async fn collect(body: Incoming, limit: usize) -> Result<Bytes, String> {
        Limited::new(body, limit)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .map_err(|e| format!("read answer: {e}"))
    }
}
