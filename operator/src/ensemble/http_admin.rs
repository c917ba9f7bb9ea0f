//! `EnsembleAdmin` over HTTPS (`baton_tls::HttpClient`): one short connection per call, every
//! call under a deadline, the ensemble's CA trusted and its admin certificate presented
//! (the admin API refuses status and membership calls without it: 403).

use std::time::Duration;

use baton_tls::{HttpClient, HttpError, client_config_from_pem};
use http::{Method, StatusCode};
use serde_json::{Value, json};

use super::{AdminConnector, AdminError, EnsembleAdmin, EnsembleSettings, MemberStatus};
use crate::pki::AdminCredentials;

/// The production `AdminConnector`: an `HttpAdmin` per ensemble, from its admin certificate.
#[derive(Debug, Clone)]
pub struct HttpAdmins {
    timeout: Duration,
}

impl HttpAdmins {
    /// Admin clients whose every call (connect, handshake, send, read) ends within `timeout`.
    pub fn new(timeout: Duration) -> Self {
        HttpAdmins { timeout }
    }
}

impl AdminConnector for HttpAdmins {
    type Admin = HttpAdmin;

    fn connect(&self, credentials: &AdminCredentials) -> Result<HttpAdmin, AdminError> {
        HttpAdmin::tls(credentials, self.timeout)
    }
}

/// The production `EnsembleAdmin`.
#[derive(Debug, Clone)]
pub struct HttpAdmin {
    client: HttpClient,
}

impl HttpAdmin {
    /// HTTPS trusting `credentials.ca_pem` and presenting the admin certificate.
    pub fn tls(credentials: &AdminCredentials, timeout: Duration) -> Result<Self, AdminError> {
        let config = client_config_from_pem(
            &credentials.ca_pem,
            Some((&credentials.cert_pem, &credentials.key_pem)),
        )
        .map_err(|e| AdminError::Credentials(e.to_string()))?;
        Ok(HttpAdmin {
            client: HttpClient::tls(config, timeout),
        })
    }

    /// Any `HttpClient` (plain HTTP only for members started with `--insecure-no-tls`).
    pub fn with_client(client: HttpClient) -> Self {
        HttpAdmin { client }
    }

    async fn call(
        &self,
        addr: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(StatusCode, Value), AdminError> {
        let answer = self
            .client
            .request(addr, method, path, body.map(|b| b.to_string().into_bytes()))
            .await
            .map_err(|e| AdminError::Unreachable {
                addr: addr.to_string(),
                reason: match e {
                    // Already names the address; keep the reason short in the status.
                    HttpError::Timeout { after, .. } => format!("no answer within {after:?}"),
                    other => other.to_string(),
                },
            })?;
        Ok((answer.status, answer.json()))
    }

    /// Maps the answers every membership call shares; 202 is success.
    async fn command(
        &self,
        addr: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(), AdminError> {
        self.command_answer(addr, method, path, body)
            .await
            .map(|_| ())
    }

    /// `command`, keeping the success's body.
    async fn command_answer(
        &self,
        addr: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, AdminError> {
        let (status, answer) = self.call(addr, method, path, body).await?;
        match status {
            StatusCode::ACCEPTED | StatusCode::OK => Ok(answer),
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

    async fn put_settings(
        &self,
        addr: &str,
        changes: &Value,
    ) -> Result<EnsembleSettings, AdminError> {
        let answer = self
            .command_answer(addr, Method::PUT, "/v1/settings", Some(changes.clone()))
            .await?;
        serde_json::from_value(answer.clone()).map_err(|e| AdminError::Unexpected {
            addr: addr.to_string(),
            status: StatusCode::OK.as_u16(),
            body: format!("{answer} ({e})"),
        })
    }
}
