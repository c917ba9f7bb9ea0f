//! ZooKeeper clients of a cluster: pinned to one member, failing over across all of them, or
//! failing over but starting on a chosen member.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use zookeeper_client as zk;

use super::Cluster;
use crate::{SESSION_TIMEOUT, wire};

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
    /// member `id`. The client shuffles its hosts, so this opens sessions until one lands there
    /// (checked with `stat`), closing the others.
    pub async fn connect_on(&self, id: u64) -> Result<zk::Client> {
        for _ in 0..PLACEMENT_ATTEMPTS {
            let client = self.connect().await?;
            if self.session_member(client.session_id()).await? == Some(id) {
                return Ok(client);
            }
        }
        bail!("no session landed on member {id} in {PLACEMENT_ATTEMPTS} attempts")
    }

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

    /// The running member whose `stat` lists `session` among its connections, if any.
    pub async fn session_member(&self, session: zk::SessionId) -> Result<Option<u64>> {
        // `stat` prints "sid=0x<hex>)" per connection; the ")" keeps 0x1 from matching 0x1f.
        let needle = format!("sid=0x{:x})", session.0 as u64);
        for member in self.members.values().filter(|member| member.is_started()) {
            let answer = wire::four_letter_word(member.client_addr(), "stat")
                .await
                .with_context(|| format!("stat of member {}", member.id()))?;
            if answer.contains(&needle) {
                return Ok(Some(member.id()));
            }
        }
        Ok(None)
    }
}

/// Connects with `connector` to `connect_string`, bounded by the session timeout.
async fn connect_with(connect_string: &str, connector: zk::Connector) -> Result<zk::Client> {
    let deadline = SESSION_TIMEOUT + Duration::from_secs(5);
    tokio::time::timeout(deadline, connector.connect(connect_string))
        .await
        .map_err(|_| anyhow!("no session from {connect_string} within {deadline:?}"))?
        .with_context(|| format!("connect to {connect_string}"))
}
