//! The client ports: a plain listener and a TLS one (ZooKeeper's `secureClientPort`), both
//! serving the same protocol through the same connection code, under the same limits
//! (DESIGN.md §4; the table of limits is `ClientLimits`).

mod admission;
mod connection;
pub mod four_letter;
mod request;
// Without the `k8s` feature (baton-playground's build) a stub: no reviewer can be made.
#[cfg_attr(not(feature = "k8s"), path = "token_review_off.rs")]
pub mod token_review;
#[cfg(feature = "k8s")]
mod verdict_cache;
mod window;
mod writer;

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;

pub use admission::{Admission, Refusal};

use crate::core::{CoreMsg, ThrottledLog};
use crate::metrics::Metrics;
use crate::status::Status;

static REFUSAL_LOG: ThrottledLog = ThrottledLog::every_10s();
static HANDSHAKE_LOG: ThrottledLog = ThrottledLog::every_10s();
static PAUSE_LOG: ThrottledLog = ThrottledLog::every_10s();
static STALL_LOG: ThrottledLog = ThrottledLog::every_10s();

/// A listen address, or `off` for no listener at all (`--client-addr off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenAddr {
    Off,
    On(SocketAddr),
}

impl ListenAddr {
    /// The address, unless the listener is off.
    pub fn addr(&self) -> Option<SocketAddr> {
        match self {
            ListenAddr::Off => None,
            ListenAddr::On(addr) => Some(*addr),
        }
    }
}

impl FromStr for ListenAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().eq_ignore_ascii_case("off") {
            return Ok(ListenAddr::Off);
        }
        s.trim()
            .parse()
            .map(ListenAddr::On)
            .map_err(|_| format!("{s:?} is neither HOST:PORT (an IP address) nor `off`"))
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Off => f.write_str("off"),
            ListenAddr::On(addr) => addr.fmt(f),
        }
    }
}

/// The client ports' limits, each a flag (README's table: flag, default, metric, what the
/// client sees).
#[derive(Debug, Clone)]
pub struct ClientLimits {
    /// Largest frame a client may send (`--max-frame-bytes`).
    pub max_frame_bytes: usize,
    /// Connections in all (`--max-client-connections`).
    pub max_connections: usize,
    /// Connections from one address; 0 = no limit (`--max-client-connections-per-ip`).
    pub max_connections_per_ip: usize,
    /// TLS handshake + ConnectRequest + the core's answer, or a four-letter word
    /// (`--client-handshake-timeout`).
    pub handshake_timeout: Duration,
    /// Requests awaiting their replies before the socket is no longer read
    /// (`--max-outstanding-requests`).
    pub max_outstanding_requests: usize,
    /// Reply bytes queued and unread before the connection's requests are held back and its
    /// socket no longer read; also the bound on its in-flight request bytes
    /// (`--max-unread-reply-bytes`).
    pub max_unread_reply_bytes: usize,
    /// A connection whose replies make no progress this long is closed. Its session would
    /// expire meanwhile anyway (its pings are not read), so this is the max session timeout.
    pub write_stall_timeout: Duration,
    /// The four-letter words answered (`--four-letter-words`); others get ZooKeeper's refusal.
    pub four_letter_words: four_letter::AllowedWords,
}

impl ClientLimits {
    /// The limits the flags set.
    pub fn from_config(cfg: &crate::Config) -> Self {
        ClientLimits {
            max_frame_bytes: cfg.max_frame_bytes,
            max_connections: cfg.max_client_connections,
            max_connections_per_ip: cfg.max_client_connections_per_ip,
            handshake_timeout: cfg.client_handshake_timeout,
            max_outstanding_requests: cfg.max_outstanding_requests,
            max_unread_reply_bytes: cfg.max_unread_reply_bytes,
            write_stall_timeout: cfg.max_session_timeout,
            four_letter_words: cfg.four_letter_words.clone(),
        }
    }
}

/// What every connection task shares.
#[derive(Clone)]
pub struct ClientContext {
    /// The core's client queue (ticks and peer traffic have their own: `CoreInbox`).
    pub core: mpsc::Sender<CoreMsg>,
    pub status: watch::Receiver<Status>,
    pub metrics: Arc<Metrics>,
    pub limits: Arc<ClientLimits>,
    /// Shared by both listeners, so the caps count every client port together.
    pub admission: Arc<Admission>,
    /// Checks `k8s` auth packets (`--k8s-auth`); without it the core refuses them.
    pub token_reviewer: Option<Arc<token_review::TokenReviewer>>,
}

impl ClientContext {
    pub fn new(
        core: mpsc::Sender<CoreMsg>,
        status: watch::Receiver<Status>,
        metrics: Arc<Metrics>,
        limits: ClientLimits,
    ) -> Self {
        let admission = Admission::new(limits.max_connections, limits.max_connections_per_ip);
        ClientContext {
            core,
            status,
            metrics,
            limits: Arc::new(limits),
            admission,
            token_reviewer: None,
        }
    }

    /// Checks `k8s` auth packets with `reviewer` (`--k8s-auth`).
    pub fn with_token_reviewer(mut self, reviewer: Arc<token_review::TokenReviewer>) -> Self {
        self.token_reviewer = Some(reviewer);
        self
    }
}

/// Connection ids, unique across both listeners.
static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

/// Accepts clients until `shutdown` fires, over TLS when `tls` is given. A connection past a
/// limit (`Admission`) is closed at once, before a byte is read.
pub async fn serve_clients(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    ctx: ClientContext,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.changed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // EMFILE and friends: back off briefly rather than spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let admitted = match ctx.admission.admit(peer.ip()) {
            Ok(admitted) => admitted,
            Err(refusal) => {
                ctx.metrics
                    .client_connections_refused
                    .get_or_create(&[("reason", refusal.label())])
                    .inc();
                if let Some(suppressed) = REFUSAL_LOG.admit() {
                    tracing::warn!(%peer, reason = %refusal, similar_lines_suppressed = suppressed, "refusing a client connection");
                }
                drop(stream);
                continue;
            }
        };
        let id = NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed);
        let ctx = ctx.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            connection::serve(stream, peer, id, ctx, tls).await;
            drop(admitted);
        });
    }
}

/// A client context for unit tests: small limits, and `core` as the core's queue.
#[cfg(test)]
pub(crate) fn test_context(core: mpsc::Sender<CoreMsg>) -> ClientContext {
    let (_, status) = watch::channel(Default::default());
    let limits = ClientLimits {
        max_frame_bytes: 1024,
        max_connections: 10,
        max_connections_per_ip: 0,
        handshake_timeout: Duration::from_secs(1),
        max_outstanding_requests: 10,
        max_unread_reply_bytes: 1024,
        write_stall_timeout: Duration::from_secs(1),
        four_letter_words: four_letter::AllowedWords::default(),
    };
    ClientContext::new(
        core,
        status,
        Arc::new(crate::metrics::Metrics::new()),
        limits,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!("off".parse::<ListenAddr>(), Ok(ListenAddr::Off));
        assert_eq!("OFF".parse::<ListenAddr>(), Ok(ListenAddr::Off));
        assert_eq!(
            "127.0.0.1:2181".parse::<ListenAddr>(),
            Ok(ListenAddr::On(SocketAddr::from(([127, 0, 0, 1], 2181))))
        );
        assert!("localhost:2181".parse::<ListenAddr>().is_err());
        assert_eq!(ListenAddr::Off.to_string(), "off");
    }
}
