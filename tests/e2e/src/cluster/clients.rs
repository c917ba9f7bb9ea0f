//! ZooKeeper clients of a cluster: pinned to one member, failing over across all of them, or
//! failing over but starting on a chosen member.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use zookeeper_client as zk;

use super::Cluster;
use crate::SESSION_TIMEOUT;

/// How many sessions `connect_on` opens, at most, to land one on the wanted member.
const PLACEMENT_ATTEMPTS: usize = 40;

impl Cluster {
    /// A new session on member `id` alone: it never moves to another member.
    pub async fn connect_to(&self, id: u64) -> Result<zk::Client> {
        let addr = self.member(id)?.client_addr().to_string();
        connect_with(
            &addr,
            zk::Client::connector().with_session_timeout(SESSION_TIMEOUT),
        )
        .await
        .with_context(|| format!("connect to member {id}"))
    }

    /// A new session that may land on, and fail over to, any member.
    pub async fn connect(&self) -> Result<zk::Client> {
        self.connect_all_with(zk::Client::connector().with_session_timeout(SESSION_TIMEOUT))
            .await
    }

    /// A session made by `connector` (to resume a session, detach, ...) with every member in the
    /// connect string.
    pub async fn connect_all_with(&self, connector: zk::Connector) -> Result<zk::Client> {
        connect_with(&self.connect_string(), connector).await
    }

    /// A session with every member in its connect string (so it fails over) that starts on
    /// member `id`. The client shuffles its hosts, so this opens sessions until one lands there,
    /// closing the others.
    pub async fn connect_on(&self, id: u64) -> Result<zk::Client> {
        for _ in 0..PLACEMENT_ATTEMPTS {
            let client = self.connect().await?;
            if created_by(client.session_id()) == id {
                return Ok(client);
            }
        }
        bail!("no session landed on member {id} in {PLACEMENT_ATTEMPTS} attempts")
    }

    /// `connect_to` asking for `session_timeout` (within the members' bounds, 4s to 40s by
    /// default) instead of `SESSION_TIMEOUT`.
    pub async fn connect_to_timed(&self, id: u64, session_timeout: Duration) -> Result<zk::Client> {
        let addr = self.member(id)?.client_addr().to_string();
        connect_with(
            &addr,
            zk::Client::connector().with_session_timeout(session_timeout),
        )
        .await
        .with_context(|| format!("connect to member {id}"))
    }

    /// `connect_on` asking for `session_timeout` instead of `SESSION_TIMEOUT`.
    pub async fn connect_on_timed(&self, id: u64, session_timeout: Duration) -> Result<zk::Client> {
        session_on(&self.connect_string(), id, session_timeout).await
    }
}

/// A session asking for `session_timeout` with every server of `connect_string` in its connect
/// string (so it fails over) that starts on member `id`: Baton's or ZooKeeper's, whose members
/// both mark their sessions (`created_by`). The client shuffles its hosts, so this opens
/// sessions until one lands there, closing the others.
pub async fn session_on(
    connect_string: &str,
    id: u64,
    session_timeout: Duration,
) -> Result<zk::Client> {
    for _ in 0..PLACEMENT_ATTEMPTS {
        let client = connect_with(
            connect_string,
            zk::Client::connector().with_session_timeout(session_timeout),
        )
        .await?;
        if created_by(client.session_id()) == id {
            return Ok(client);
        }
    }
    bail!("no session landed on member {id} in {PLACEMENT_ATTEMPTS} attempts")
}

impl Cluster {
    /// Data and Stat of `path` as member `id` has it once it has caught up with the leader
    /// (`sync` on a new session pinned to it).
    pub async fn read_synced(&self, id: u64, path: &str) -> Result<(Vec<u8>, zk::Stat)> {
        let client = self.connect_to(id).await?;
        client
            .sync(path)
            .await
            .with_context(|| format!("sync {path} on member {id}"))?;
        client
            .get_data(path)
            .await
            .with_context(|| format!("get {path} on member {id}"))
    }
}

/// The member that created `session`: as ZooKeeper does, a member puts its own id in the top
/// byte of the session ids it hands out. A new session is made by the member its client
/// connected to, and stays there until the client reconnects. (Four-letter words name no
/// sessions: anyone may ask them.)
fn created_by(session: zk::SessionId) -> u64 {
    (session.0 as u64) >> 56
}

/// Connects with `connector` to `connect_string`, bounded by the session timeout.
async fn connect_with(connect_string: &str, connector: zk::Connector) -> Result<zk::Client> {
    let deadline = SESSION_TIMEOUT + Duration::from_secs(5);
    tokio::time::timeout(deadline, connector.connect(connect_string))
        .await
        .map_err(|_| anyhow!("no session from {connect_string} within {deadline:?}"))?
        .with_context(|| format!("connect to {connect_string}"))
}
