//! The servers under test, and sessions spread round-robin across them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use zookeeper_client::{Client, StateWatcher, TlsOptions};

use crate::error::BenchError;

/// How long a session may go without hearing from its server before it expires.
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The `--servers` list; worker `i` always talks to server `i mod len`.
///
/// It remembers every session it opened (clones share the list), so a run can make sure all of
/// them are closed before it ends: a session left to expire would be cleaned up by the server
/// during whatever runs next.
#[derive(Clone, Debug)]
pub struct Ensemble {
    servers: Vec<String>,
    opened: Arc<Mutex<Vec<StateWatcher>>>,
    tls: Option<Tls>,
    /// Loopback addresses sessions may be spread over (`--loopback-addresses`).
    loopback_addresses: usize,
}

/// Sessions over TLS (`--tls-ca`): the servers' certificates must chain to this CA and name
/// the host they are reached at (as with ZooKeeper's secureClientPort and a Java client).
#[derive(Clone, Debug)]
struct Tls {
    ca_file: PathBuf,
    options: TlsOptions,
}

impl Ensemble {
    /// Parses `HOST:PORT[,HOST:PORT..]`; every entry needs a host and a numeric port.
    pub fn parse(list: &str) -> Result<Self, BenchError> {
        let servers: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let well_formed = |s: &String| {
            s.rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
        };
        if servers.is_empty() || !servers.iter().all(well_formed) {
            return Err(BenchError::InvalidServers(list.to_owned()));
        }
        Ok(Ensemble {
            servers,
            opened: Arc::default(),
            tls: None,
            loopback_addresses: 1,
        })
    }

    /// Lets [`Ensemble::on_loopback`] reach the servers at 127.0.0.1 up to 127.0.0.`count`.
    /// Linux picks a client's port per destination address and port, about 28,000 of them
    /// (32768-60999): more sessions than that on one member port need more destinations.
    pub fn with_loopback_addresses(mut self, count: usize) -> Result<Self, BenchError> {
        if !(1..=254).contains(&count) {
            return Err(BenchError::InvalidOption(format!(
                "--loopback-addresses {count}: must be 1 to 254"
            )));
        }
        if count > 1 && !self.servers.iter().all(|s| s.starts_with("127.0.0.1:")) {
            return Err(BenchError::InvalidOption(
                "--loopback-addresses needs every server at 127.0.0.1".to_owned(),
            ));
        }
        self.loopback_addresses = count;
        Ok(self)
    }

    /// The same servers (and the same record of opened sessions), reached at loopback address
    /// `slot` mod `--loopback-addresses`: 127.0.0.1 for slot 0, 127.0.0.2 for slot 1, ...
    pub fn on_loopback(&self, slot: usize) -> Ensemble {
        let octet = slot % self.loopback_addresses + 1;
        let mut spread = self.clone();
        if octet > 1 {
            spread.servers = self
                .servers
                .iter()
                .map(|s| s.replacen("127.0.0.1:", &format!("127.0.0.{octet}:"), 1))
                .collect();
        }
        spread
    }

    /// How many loopback addresses [`Ensemble::on_loopback`] cycles through.
    pub fn loopback_addresses(&self) -> usize {
        self.loopback_addresses
    }

    /// Every session from now on connects over TLS and trusts the CA certificates (PEM) in
    /// `ca_file`.
    pub fn with_tls_ca(mut self, ca_file: &Path) -> Result<Self, BenchError> {
        let pem = std::fs::read_to_string(ca_file).map_err(|source| BenchError::Io {
            context: format!("reading --tls-ca {}", ca_file.display()),
            source,
        })?;
        let options = TlsOptions::new().with_pem_ca(&pem).map_err(|e| {
            BenchError::InvalidOption(format!("--tls-ca {}: {e}", ca_file.display()))
        })?;
        self.tls = Some(Tls {
            ca_file: ca_file.to_owned(),
            options,
        });
        Ok(self)
    }

    /// The CA file sessions trust when they connect over TLS; `None` for plain TCP.
    pub fn tls_ca(&self) -> Option<&Path> {
        self.tls.as_ref().map(|tls| tls.ca_file.as_path())
    }

    /// Every server, in `--servers` order.
    pub fn servers(&self) -> &[String] {
        &self.servers
    }

    /// The server that worker `worker` connects to.
    pub fn server_for(&self, worker: usize) -> &str {
        &self.servers[worker % self.servers.len()]
    }

    /// Opens a new session for `worker` on its server only, so the spread stays as assigned.
    pub async fn connect(&self, worker: usize) -> Result<Client, BenchError> {
        let server = self.server_for(worker);
        let connector = Client::connector()
            .with_session_timeout(SESSION_TIMEOUT)
            .with_connection_timeout(CONNECT_TIMEOUT);
        let connected = match &self.tls {
            Some(tls) => {
                connector
                    .with_tls(tls.options.clone())
                    .secure_connect(server)
                    .await
            }
            None => connector.connect(server).await,
        };
        let client = connected.map_err(|source| BenchError::Connect {
            worker,
            server: server.to_owned(),
            source,
        })?;
        self.opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(client.state_watcher());
        Ok(client)
    }

    /// Opens a session that may use every member, as an application's client does: the client
    /// picks one at random and moves to another when its connection drops. `connection_timeout`
    /// replaces the client's default (2/5 of the session timeout); it also sets how often an
    /// idle session pings (3/8 of it).
    pub async fn connect_any(
        &self,
        connection_timeout: Option<Duration>,
    ) -> Result<Client, BenchError> {
        let servers = self.servers.join(",");
        let mut connector = Client::connector().with_session_timeout(SESSION_TIMEOUT);
        if let Some(limit) = connection_timeout {
            connector = connector.with_connection_timeout(limit);
        }
        let connected = match &self.tls {
            Some(tls) => {
                connector
                    .with_tls(tls.options.clone())
                    .secure_connect(&servers)
                    .await
            }
            None => connector.connect(&servers).await,
        };
        let client = connected.map_err(|source| BenchError::Connect {
            worker: 0,
            server: servers,
            source,
        })?;
        self.opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(client.state_watcher());
        Ok(client)
    }

    /// Waits up to `limit` for every session opened so far to close (the client sends
    /// closeSession when its last handle is dropped); returns how many are still open.
    pub async fn wait_all_closed(&self, limit: Duration) -> usize {
        let watchers =
            std::mem::take(&mut *self.opened.lock().unwrap_or_else(PoisonError::into_inner));
        let total = watchers.len();
        let mut closed = 0;
        let all = async {
            for mut watcher in watchers {
                let mut state = watcher.state();
                while !state.is_terminated() {
                    state = watcher.changed().await;
                }
                closed += 1;
            }
        };
        let _ = tokio::time::timeout(limit, all).await;
        total - closed
    }

    /// Opens one session per worker `0..count`, concurrently, before any measurement starts.
    pub async fn connect_all(&self, count: usize) -> Result<Vec<Client>, BenchError> {
        let mut tasks = tokio::task::JoinSet::new();
        for worker in 0..count {
            let ensemble = self.clone();
            tasks.spawn(async move { (worker, ensemble.connect(worker).await) });
        }
        let mut clients: Vec<Option<Client>> = (0..count).map(|_| None).collect();
        while let Some(joined) = tasks.join_next().await {
            let (worker, client) = joined?;
            clients[worker] = Some(client?);
        }
        Ok(clients.into_iter().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_are_spread_round_robin() {
        let ensemble = Ensemble::parse("a:1, b:2,c:3").expect("valid list");
        let assigned: Vec<&str> = (0..5).map(|w| ensemble.server_for(w)).collect();
        assert_eq!(assigned, ["a:1", "b:2", "c:3", "a:1", "b:2"]);
    }

    #[test]
    fn tls_needs_a_readable_ca_with_a_certificate() {
        let plain = Ensemble::parse("a:1").expect("valid list");
        assert!(plain.tls_ca().is_none());
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("missing.crt");
        assert!(matches!(
            plain.clone().with_tls_ca(&missing),
            Err(BenchError::Io { .. })
        ));
        let empty = dir.path().join("empty.crt");
        std::fs::write(&empty, "not a certificate\n").expect("write");
        assert!(matches!(
            plain.with_tls_ca(&empty),
            Err(BenchError::InvalidOption(_))
        ));
    }

    #[test]
    fn malformed_lists_are_rejected() {
        for bad in ["", ",", "host", "host:", ":2181", "host:port", "a:1,b"] {
            assert!(Ensemble::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
