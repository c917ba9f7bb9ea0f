//! IPv6: a member told to listen on `[::]` (what the operator gives its members, and the chart
//! the operator) serves IPv6 and IPv4 clients on one port, as a dual-stack pod's clients need,
//! and one told `[::1]` serves IPv6 alone, as in an IPv6-only pod. Sessions are opened with
//! ZooKeeper's own handshake over real sockets on the loopback addresses of both families.

mod support;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use anyhow::{Context, Result, ensure};
use support::{Listeners, Member, open_session};
use tokio::net::TcpStream;

const PLAIN: Listeners = Listeners {
    plain: true,
    secure: false,
};

async fn session_through(addr: SocketAddr) -> Result<i64> {
    let mut stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connect to {addr}"))?;
    open_session(&mut stream).await
}

#[tokio::test]
async fn a_member_on_the_ipv6_wildcard_serves_ipv6_and_ipv4_clients() -> Result<()> {
    let member = Member::start_listening_on(PLAIN, &[], &[], Some("[::]")).await?;
    let port = member.client.context("plain listener")?.port();
    let v6 = session_through(SocketAddr::from((Ipv6Addr::LOCALHOST, port))).await?;
    let v4 = session_through(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await?;
    ensure!(
        v6 != 0 && v4 != 0 && v6 != v4,
        "two sessions: {v6:x} {v4:x}"
    );
    Ok(())
}

#[tokio::test]
async fn a_member_on_ipv6_loopback_serves_ipv6_clients() -> Result<()> {
    let member = Member::start_listening_on(PLAIN, &[], &[], Some("[::1]")).await?;
    let port = member.client.context("plain listener")?.port();
    let v6 = session_through(SocketAddr::from((Ipv6Addr::LOCALHOST, port))).await?;
    ensure!(v6 != 0, "a session over IPv6");
    Ok(())
}
