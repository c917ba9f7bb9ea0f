//! Mutual TLS under the peer transport (DESIGN.md §4): both ends present a member certificate
//! of the ensemble CA, and each learns from the certificate (not from the hello) which member
//! is on the other end. A connection whose certificate names another cluster, no member, or
//! (outbound) a member other than the one dialled fails here, before the hello is read.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;

use baton_tls::{Identity, MemberTls, Role};
use rustls::pki_types::ServerName;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::seam::{Accepted, Connector, Listener};

/// The peer port over TLS.
pub struct TlsPeerListener {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    cluster: String,
}

/// Outbound peer links over TLS.
pub struct TlsPeerConnector {
    connector: TlsConnector,
    cluster: String,
}

/// Both ends of the peer transport for member TLS `tls`.
pub fn peer_tls(
    tls: &MemberTls,
    listener: TcpListener,
) -> Result<(TlsPeerListener, TlsPeerConnector), baton_tls::TlsError> {
    let cluster = tls.identity().cluster.clone();
    Ok((
        TlsPeerListener {
            listener,
            acceptor: tls.peer_acceptor()?,
            cluster: cluster.clone(),
        },
        TlsPeerConnector {
            connector: tls.peer_connector()?,
            cluster,
        },
    ))
}

/// The member id a verified certificate proves, if it is a member of `cluster`.
fn proven_member(conn: &rustls::CommonState, cluster: &str) -> io::Result<u64> {
    let refused = |why: String| io::Error::new(io::ErrorKind::PermissionDenied, why);
    let identity = baton_tls::peer_identity(conn)
        .ok_or_else(|| refused("the peer presented no certificate".into()))?
        .map_err(|e| refused(e.to_string()))?;
    match identity {
        Identity {
            cluster: c,
            role: Role::Member(id),
        } if c == cluster => Ok(id),
        other => Err(refused(format!(
            "the certificate names {other}, not a member of cluster {cluster}"
        ))),
    }
}

impl Listener for TlsPeerListener {
    type Pending = Pin<Box<dyn Future<Output = io::Result<Accepted<Self::Stream>>> + Send>>;
    type Stream = tokio_rustls::server::TlsStream<TcpStream>;

    async fn accept(&mut self) -> io::Result<(Self::Pending, SocketAddr)> {
        let (tcp, addr) = self.listener.accept().await?;
        let acceptor = self.acceptor.clone();
        let cluster = self.cluster.clone();
        let pending = async move {
            tcp.set_nodelay(true)?;
            let stream = acceptor.accept(tcp).await?;
            let member = proven_member(stream.get_ref().1, &cluster)?;
            Ok(Accepted {
                stream,
                proven_member: Some(member),
            })
        };
        Ok((Box::pin(pending), addr))
    }
}

impl Connector for TlsPeerConnector {
    type Stream = tokio_rustls::client::TlsStream<TcpStream>;

    async fn connect(&self, addr: &str, peer: u64) -> io::Result<Self::Stream> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        // The CA verifier ignores the name; it only has to parse.
        let name = ServerName::try_from(format!("member-{peer}.baton.invalid"))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let stream = self.connector.connect(name, tcp).await?;
        let member = proven_member(stream.get_ref().1, &self.cluster)?;
        if member != peer {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{addr} proved to be member {member}, not member {peer}: check --members"),
            ));
        }
        Ok(stream)
    }
}
