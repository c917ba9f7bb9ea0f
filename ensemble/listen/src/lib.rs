//! Listening sockets for the ensemble's members, the sidecar and the operator.
//!
//! A pod may have IPv4 only, IPv6 only, or both. `[::]` (the address the operator, the chart and
//! the webhook's injected sidecar use) is bound with `IPV6_V6ONLY` off, so one socket takes both
//! families whatever the node's `net.ipv6.bindv6only`; on a kernel without IPv6 at all it falls
//! back to `0.0.0.0` and says so. Any other address is bound as given.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;

/// What `listen(2)` is asked to queue, as the standard library does.
const BACKLOG: i32 = 1024;

/// Binds `addr` for TCP. `[::]:PORT` serves IPv6 and IPv4 (falling back to `0.0.0.0:PORT` where
/// the kernel has no IPv6).
pub async fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    if addr.ip() != Ipv6Addr::UNSPECIFIED {
        return TcpListener::bind(addr).await;
    }
    match dual_stack(addr) {
        Ok(listener) => Ok(listener),
        Err(e) if no_ipv6(&e) => {
            let v4 = SocketAddr::from((Ipv4Addr::UNSPECIFIED, addr.port()));
            tracing::warn!(%addr, fallback = %v4, error = %e, "this kernel has no IPv6: listening on IPv4 only");
            TcpListener::bind(v4).await
        }
        Err(e) => Err(e),
    }
}

fn dual_stack(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_only_v6(false)?;
    // As std's TcpListener::bind: a restarted member takes its port back at once.
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    socket.set_nonblocking(true)?;
    TcpListener::from_std(std::net::TcpListener::from(socket))
}

/// Whether `e` says the kernel cannot do IPv6 (built without it, or booted with it off).
fn no_ipv6(e: &io::Error) -> bool {
    const EAFNOSUPPORT: i32 = 97;
    const EADDRNOTAVAIL: i32 = 99;
    matches!(e.raw_os_error(), Some(EAFNOSUPPORT | EADDRNOTAVAIL))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn echo_once(listener: &TcpListener, to: SocketAddr) -> u8 {
        let mut client = TcpStream::connect(to).await.expect("connect");
        let (mut served, _) = listener.accept().await.expect("accept");
        client.write_all(&[7]).await.expect("write");
        let mut byte = [0u8];
        served.read_exact(&mut byte).await.expect("read");
        byte[0]
    }

    #[tokio::test]
    async fn the_ipv6_wildcard_serves_ipv6_and_ipv4_clients() {
        let listener = bind("[::]:0".parse().expect("address"))
            .await
            .expect("bind");
        let port = listener.local_addr().expect("bound").port();
        assert!(listener.local_addr().expect("bound").is_ipv6());
        let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
        let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        assert_eq!(echo_once(&listener, v6).await, 7);
        assert_eq!(echo_once(&listener, v4).await, 7);
    }

    #[tokio::test]
    async fn other_addresses_are_bound_as_given() {
        let listener = bind("[::1]:0".parse().expect("address"))
            .await
            .expect("bind");
        let port = listener.local_addr().expect("bound").port();
        assert_eq!(
            echo_once(&listener, SocketAddr::from((Ipv6Addr::LOCALHOST, port))).await,
            7
        );
        let v4 = TcpStream::connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await;
        assert!(v4.is_err(), "::1 alone does not take IPv4");
    }
}
