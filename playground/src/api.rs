//! What the playground asks its children: the ensemble's `/v1/status` and the sidecars'
//! `/leader/NAME`, reduced to the few fields the display needs.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use baton_tls::HttpClient;
use http::Method;

use crate::topology::ELECTION;

/// A quick question should get a quick answer on loopback; a member that takes longer is as
/// good as down for a live display.
const QUICK: Duration = Duration::from_millis(500);

/// The members' admin API speaks HTTPS and wants the admin certificate for `/v1/status`; the
/// playground has one ensemble, so one client, made once its certificates exist.
static ADMIN: OnceLock<HttpClient> = OnceLock::new();

/// Makes the admin client from the certificates `baton-ensemble certs` wrote into `dir`.
pub fn use_certificates(dir: &Path) -> Result<()> {
    let config = baton_tls::client_config(
        &dir.join("ca.crt"),
        Some(baton_tls::local::admin_files(dir)),
    )
    .context("the admin certificate")?;
    let _ = ADMIN.set(HttpClient::tls(config, QUICK));
    Ok(())
}

fn admin() -> Result<&'static HttpClient> {
    ADMIN.get().context("no admin certificate loaded")
}

/// `GET path` on a sidecar, bounded by `timeout`: status and body as JSON.
async fn sidecar_get(
    pod: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<(u16, serde_json::Value)> {
    let reply = HttpClient::plain(timeout)
        .request(&pod.to_string(), Method::GET, path, None)
        .await?;
    let body = serde_json::from_slice(&reply.body).with_context(|| {
        format!(
            "answer is not JSON: {:?}",
            String::from_utf8_lossy(&reply.body)
        )
    })?;
    Ok((reply.status.as_u16(), body))
}

/// Who leads the demo election, as one sidecar sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub identity: String,
    /// The fencing token of its term.
    pub token: i64,
}

/// One sidecar's view of the demo election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionView {
    pub leader: Option<Leader>,
    /// Whether the sidecar's session is connected; only then is `leader` trustworthy.
    pub connected: bool,
}

/// `GET /leader/demo` on the sidecar at `pod`; with `change`, long-polls up to `wait` until the
/// leader's token differs from the given one.
pub async fn election(pod: SocketAddr, change: Option<(i64, Duration)>) -> Result<ElectionView> {
    let (path, timeout) = match change {
        None => (format!("/leader/{ELECTION}"), QUICK * 6),
        Some((token, wait)) => (
            format!("/leader/{ELECTION}?wait={}s&token={token}", wait.as_secs()),
            wait + QUICK * 10,
        ),
    };
    let (status, body) = sidecar_get(pod, &path, timeout).await?;
    if status != 200 {
        bail!("GET http://{pod}{path}: status {status}: {body}");
    }
    let leader = match body.get("leader") {
        Some(leader) if !leader.is_null() => Some(Leader {
            identity: leader
                .get("identity")
                .and_then(|v| v.as_str())
                .context("leader without identity")?
                .to_owned(),
            token: leader
                .get("token")
                .and_then(|v| v.as_i64())
                .context("leader without token")?,
        }),
        _ => None,
    };
    let state = body
        .pointer("/self/state")
        .and_then(|v| v.as_str())
        .unwrap_or("unknown");
    Ok(ElectionView {
        leader,
        connected: state.eq_ignore_ascii_case("connected"),
    })
}

/// Whether the member whose admin API is at `addr` answers `GET /readyz` with 200.
pub async fn ready(addr: SocketAddr) -> bool {
    let Ok(admin) = admin() else {
        return false;
    };
    admin
        .request(&addr.to_string(), Method::GET, "/readyz", None)
        .await
        .is_ok_and(|reply| reply.status == 200)
}

/// The Raft leader, as the members that answer report it: `(member id, term)`.
///
/// Only a member that says it is the leader counts: the followers of a dead leader keep its
/// id until an election ends, and the display should show that gap rather than a ghost.
pub async fn ensemble_leader(admins: &[SocketAddr]) -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64)> = None;
    let client = admin().ok()?;
    for admin in admins {
        let Ok(reply) = client
            .request(&admin.to_string(), Method::GET, "/v1/status", None)
            .await
        else {
            continue;
        };
        let Ok(status) = serde_json::from_slice::<serde_json::Value>(&reply.body) else {
            continue;
        };
        let field = |name: &str| status.get(name).and_then(|v| v.as_u64());
        let is_leader = status.get("role").and_then(|v| v.as_str()) == Some("leader");
        if let (true, Some(id), Some(term)) = (is_leader, field("id"), field("term"))
            && best.is_none_or(|(_, best_term)| term > best_term)
        {
            best = Some((id, term));
        }
    }
    best
}
