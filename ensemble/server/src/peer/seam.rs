//! The one seam between the peer transport and the network. Everything above it (handshake,
//! framing, queues, backoff) works on any byte stream; below it sit plain TCP (an explicit,
//! logged opt-out) and mutual TLS (`tls.rs`), where the connection proves which member is on
//! the other end before the transport reads a byte of it.

use std::future::{Future, Ready, ready};
use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

/// A byte stream to or from a peer: TCP, or TLS over TCP.
pub trait PeerStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T> PeerStream for T where T: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

/// An inbound connection once set up, with what the transport proved about its sender.
pub struct Accepted<S> {
    pub stream: S,
    /// The member id a certificate of the ensemble CA proved, `None` on plain TCP (which
    /// proves nothing; the hello's claim is all there is).
    pub proven_member: Option<u64>,
}

/// Opens outbound streams to peers.
pub trait Connector: Send + Sync + 'static {
    /// The stream a connection yields, ready for the handshake.
    type Stream: PeerStream;

    /// Connects to member `peer` at `addr` (HOST:PORT). Names are resolved on every call, so
    /// a member that comes back with a new IP address (a rescheduled pod) is found. The
    /// transport bounds the whole call with its connect timeout; a TLS connector does its
    /// handshake here and fails unless the other end proves it is member `peer`.
    fn connect(
        &self,
        addr: &str,
        peer: u64,
    ) -> impl Future<Output = io::Result<Self::Stream>> + Send;
}

/// Accepts inbound streams from peers.
pub trait Listener: Send + 'static {
    /// Finishes setting up one accepted connection (e.g. a TLS accept). It runs in that
    /// connection's own task under the handshake timeout, so a slow or silent peer never
    /// holds up the accept loop.
    type Pending: Future<Output = io::Result<Accepted<Self::Stream>>> + Send + 'static;
    /// The stream once set up, ready for the handshake.
    type Stream: PeerStream;

    /// Waits for the next connection; must be cancel-safe (it races the shutdown signal).
    /// Errors are logged and the accept loop goes on.
    fn accept(&mut self) -> impl Future<Output = io::Result<(Self::Pending, SocketAddr)>> + Send;
}

/// Plain TCP with Nagle off: Raft heartbeats and votes are small and latency-bound.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpConnector;

impl Connector for TcpConnector {
    type Stream = TcpStream;

    async fn connect(&self, addr: &str, _peer: u64) -> io::Result<TcpStream> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

impl Listener for TcpListener {
    type Pending = Ready<io::Result<Accepted<TcpStream>>>;
    type Stream = TcpStream;

    async fn accept(&mut self) -> io::Result<(Self::Pending, SocketAddr)> {
        let (stream, addr) = TcpListener::accept(self).await?;
        // Only the handshake reply and snapshot acks flow this way, but they are waited on.
        let accepted = stream.set_nodelay(true).map(|()| Accepted {
            stream,
            proven_member: None,
        });
        Ok((ready(accepted), addr))
    }
}
