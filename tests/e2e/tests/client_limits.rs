//! The client port's limits (DESIGN.md §4), each played as an attacker would over real
//! sockets against a real `baton-ensemble`: idle connections by the thousand, connections
//! that never finish their handshake, a client that pipelines reads and never reads the
//! replies, a session that watches without end. Attackers connect from 127.0.0.2 (all of
//! 127/8 is loopback), good clients from 127.0.0.1 or 127.0.0.3.

mod support;

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use support::{Listeners, Member, closed_by_server, connect_from, frame, open_session, read_frame};
use tokio::io::AsyncWriteExt;
use zookeeper_client as zk;

const ATTACKER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const NEIGHBOUR: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
const PLAIN: Listeners = Listeners {
    plain: true,
    secure: false,
};
const BOTH: Listeners = Listeners {
    plain: true,
    secure: true,
};
const MIB: u64 = 1 << 20;

const OPEN: zk::CreateOptions<'static> =
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());

async fn zk_client(addr: std::net::SocketAddr) -> Result<zk::Client> {
    tokio::time::timeout(
        Duration::from_secs(20),
        zk::Client::connector()
            .with_session_timeout(Duration::from_secs(20))
            .connect(&addr.to_string()),
    )
    .await
    .map_err(|_| anyhow!("no session from {addr}"))?
    .context("connect")
}

/// A getData request frame.
fn get_data(xid: i32, path: &str) -> Vec<u8> {
    let mut payload = xid.to_be_bytes().to_vec();
    payload.extend_from_slice(&4i32.to_be_bytes());
    payload.extend_from_slice(&(path.len() as i32).to_be_bytes());
    payload.extend_from_slice(path.as_bytes());
    payload.push(0);
    frame(&payload)
}

#[tokio::test]
async fn a_thousand_idle_connections_from_one_address_do_not_keep_others_out() -> Result<()> {
    // The member takes 1,000 connections in all: without a cap per address, the attacker's
    // 1,000 idle ones would fill every place. The handshake limit is long so that none of
    // them is closed for being idle while the test counts.
    let member = Member::start(
        PLAIN,
        &[
            "--max-client-connections",
            "1000",
            "--client-handshake-timeout",
            "120s",
        ],
    )
    .await?;
    let addr = member.client.context("plain listener")?;
    let mut idle = Vec::new();
    for _ in 0..1000 {
        idle.push(connect_from(ATTACKER, addr).await?);
    }
    let refused = member
        .wait_metric(
            r#"baton_client_connections_refused_total{reason="per_ip_limit"}"#,
            |v| v >= 940.0,
        )
        .await?;
    ensure!(refused == 940.0, "{refused} refused, expected 1000 - 60");

    // A good client from another address gets a session and works.
    let client = zk_client(addr).await?;
    client.create("/after-the-flood", b"ok", &OPEN).await?;
    let (data, _) = client.get_data("/after-the-flood").await?;
    ensure!(data == b"ok");
    drop(idle);
    Ok(())
}

#[tokio::test]
async fn connections_past_the_per_address_cap_are_refused_while_other_addresses_connect()
-> Result<()> {
    let member = Member::start(
        BOTH,
        &[
            "--max-client-connections-per-ip",
            "4",
            "--client-handshake-timeout",
            "120s",
        ],
    )
    .await?;
    let plain = member.client.context("plain listener")?;
    let secure = member.secure.context("TLS listener")?;
    let tls = tokio_rustls::TlsConnector::from(member.tls_client()?);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;

    // Three sessions over plain TCP and one TLS connection: the cap counts both ports.
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = connect_from(ATTACKER, plain).await?;
        open_session(&mut stream).await?;
        held.push(stream);
    }
    let tls_held = tls
        .connect(name.clone(), connect_from(ATTACKER, secure).await?)
        .await
        .context("TLS handshake within the cap")?;

    // The fifth from that address is closed at once, on either port, before any byte.
    let mut fifth = connect_from(ATTACKER, plain).await?;
    closed_by_server(&mut fifth, support::IO_DEADLINE).await?;
    let fifth_tls = tls
        .connect(name.clone(), connect_from(ATTACKER, secure).await?)
        .await;
    ensure!(
        fifth_tls.is_err(),
        "a TLS connection past the cap completed its handshake"
    );
    let refused = member
        .wait_metric(
            r#"baton_client_connections_refused_total{reason="per_ip_limit"}"#,
            |v| v >= 2.0,
        )
        .await?;
    ensure!(refused == 2.0, "{refused} refused");

    // Meanwhile another address connects, and so does a real client from 127.0.0.1.
    let mut neighbour = connect_from(NEIGHBOUR, plain).await?;
    open_session(&mut neighbour).await?;
    let client = zk_client(plain).await?;
    client.create("/neighbour", b"", &OPEN).await?;

    // A place freed is a place again (the server notices the close a moment later).
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + support::IO_DEADLINE;
    loop {
        let mut again = connect_from(ATTACKER, plain).await?;
        if open_session(&mut again).await.is_ok() {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the freed place was never given back");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(tls_held);
    Ok(())
}

#[tokio::test]
async fn a_connection_that_never_finishes_its_handshake_is_closed() -> Result<()> {
    let member = Member::start(BOTH, &["--client-handshake-timeout", "1s"]).await?;
    let plain = member.client.context("plain listener")?;
    let secure = member.secure.context("TLS listener")?;
    // A session made in time stays usable long after the limit: it is for handshakes only.
    let client = zk_client(plain).await?;

    // Silent; half a ConnectRequest; half a four-letter word; a TLS port that never sees a
    // ClientHello; a TLS handshake with no ConnectRequest after it.
    let mut silent = connect_from(ATTACKER, plain).await?;
    let mut half_connect = connect_from(ATTACKER, plain).await?;
    half_connect
        .write_all(&support::connect_request()[..10])
        .await?;
    let mut half_word = connect_from(ATTACKER, plain).await?;
    half_word.write_all(b"ru").await?;
    let mut no_hello = connect_from(ATTACKER, secure).await?;
    let tls = tokio_rustls::TlsConnector::from(member.tls_client()?);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
    let mut tls_silent = tls
        .connect(name, connect_from(ATTACKER, secure).await?)
        .await?;

    let within = Duration::from_secs(30);
    closed_by_server(&mut silent, within)
        .await
        .context("silent")?;
    closed_by_server(&mut half_connect, within)
        .await
        .context("half a ConnectRequest")?;
    closed_by_server(&mut half_word, within)
        .await
        .context("half a four-letter word")?;
    closed_by_server(&mut no_hello, within)
        .await
        .context("no ClientHello")?;
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(
        within,
        tokio::io::AsyncReadExt::read(&mut tls_silent, &mut buf),
    )
    .await
    .map_err(|_| anyhow!("TLS without a ConnectRequest was not closed"))?;
    ensure!(
        matches!(read, Ok(0) | Err(_)),
        "TLS without a ConnectRequest got an answer: {read:?}"
    );
    let timeouts = member
        .wait_metric("baton_client_handshake_timeouts_total", |v| v >= 5.0)
        .await?;
    ensure!(timeouts == 5.0, "{timeouts} handshake timeouts");

    client.create("/still-here", b"", &OPEN).await?;
    Ok(())
}

#[tokio::test]
async fn a_client_that_never_reads_its_replies_stays_within_bounded_memory() -> Result<()> {
    // Default limits: 1,000 outstanding requests and 4 MiB of unread replies per connection.
    let member = Member::start(PLAIN, &[]).await?;
    let addr = member.client.context("plain listener")?;
    let good = zk_client(addr).await?;
    let big = vec![7u8; 1_000_000];
    good.create("/big", &big, &OPEN).await?;
    good.create("/small", b"0", &OPEN).await?;
    // One full read first, so the baseline includes what serving a 1 MB reply costs once.
    ensure!(good.get_data("/big").await?.0.len() == big.len());
    let baseline = member.proc_status_bytes("VmRSS")?;

    // 1,200 pipelined reads of a 1 MB node: 1.2 GB of replies, none of them read.
    const READS: i32 = 1200;
    let mut attacker = connect_from(ATTACKER, addr).await?;
    open_session(&mut attacker).await?;
    let mut requests = Vec::new();
    for xid in 1..=READS {
        requests.extend_from_slice(&get_data(xid, "/big"));
    }
    // Small enough for the socket buffers: the write ends even once the server stops reading.
    tokio::time::timeout(support::IO_DEADLINE, attacker.write_all(&requests))
        .await
        .map_err(|_| anyhow!("the requests did not fit in the socket buffers"))??;
    member
        .wait_metric("baton_client_paused_connections", |v| v >= 1.0)
        .await?;
    member
        .wait_metric("baton_client_replies_held_total", |v| v >= 1.0)
        .await?;

    // Other sessions keep working meanwhile, 1 MB reads included.
    for i in 0..5 {
        ensure!(good.get_data("/big").await?.0.len() == big.len());
        good.set_data("/small", i.to_string().as_bytes(), None)
            .await?;
    }
    let other = zk_client(addr).await?;
    other.create("/other", b"", &OPEN).await?;
    ensure!(
        member.metric("baton_client_paused_connections").await? == 1.0,
        "the attacker's connection should still be paused"
    );

    // The bound: the unread reply bytes allowed, plus one reply past them (the check is made
    // before a reply is added), plus the reply being built (a copy of the node's data and its
    // encoding), plus 16 MiB for the allocator and the good clients' traffic.
    let unread_limit = 4 * MIB;
    let reply = 1_000_000 + 100;
    let bound = unread_limit + reply + 2 * reply + 16 * MIB;
    let peak = member.proc_status_bytes("VmHWM")?;
    let now = member.proc_status_bytes("VmRSS")?;
    let queued = member.metric("baton_client_reply_queue_bytes").await?;
    eprintln!(
        "RSS: baseline {:.1} MiB, now {:.1} MiB, peak {:.1} MiB; growth allowed {:.1} MiB; \
         reply bytes queued {:.1} MiB (without the limits: {READS} MB)",
        baseline as f64 / MIB as f64,
        now as f64 / MIB as f64,
        peak as f64 / MIB as f64,
        bound as f64 / MIB as f64,
        queued / MIB as f64,
    );
    ensure!(
        peak <= baseline + bound,
        "peak RSS {peak} passed baseline {baseline} + bound {bound}"
    );

    // Nothing was dropped or reordered: once the client reads, every reply comes, in order.
    for xid in 1..=READS {
        let payload = read_frame(&mut attacker).await?;
        let got_xid = i32::from_be_bytes(payload[0..4].try_into()?);
        let err = i32::from_be_bytes(payload[12..16].try_into()?);
        ensure!(
            got_xid == xid && err == 0,
            "reply {xid}: xid {got_xid} err {err}"
        );
        let len = i32::from_be_bytes(payload[16..20].try_into()?);
        ensure!(len as usize == big.len(), "reply {xid} carries {len} bytes");
    }
    let peak = member.proc_status_bytes("VmHWM")?;
    eprintln!(
        "RSS peak after all {READS} replies were read: {:.1} MiB",
        peak as f64 / MIB as f64
    );
    ensure!(
        peak <= baseline + bound,
        "peak RSS {peak} passed baseline {baseline} + bound {bound} while draining"
    );
    ensure!(member.metric("baton_client_paused_connections").await? == 0.0);
    Ok(())
}

#[tokio::test]
async fn a_session_at_the_watch_limit_gets_an_error() -> Result<()> {
    let member = Member::start(PLAIN, &["--max-watches-per-session", "10"]).await?;
    let addr = member.client.context("plain listener")?;
    let client = zk_client(addr).await?;
    client.create("/w", b"", &OPEN).await?;
    for i in 0..=10 {
        client.create(&format!("/w/{i}"), b"", &OPEN).await?;
    }
    // The watchers are kept: zookeeper-client removes a watch when its watcher is dropped.
    let mut watchers = Vec::new();
    for i in 0..10 {
        let (_, _, watcher) = client.get_and_watch_data(&format!("/w/{i}")).await?;
        watchers.push(watcher);
    }
    match client.get_and_watch_data("/w/10").await {
        Err(zk::Error::BadArguments(_)) => {}
        other => bail!("the 11th watch: {other:?}"),
    }
    // A path already watched costs nothing more; other sessions have their own allowance.
    let (_, again) = client.check_and_watch_stat("/w/0").await?;
    let other = zk_client(addr).await?;
    let (_, _, other_watch) = other.get_and_watch_data("/w/10").await?;
    ensure!(
        member.metric("baton_watch_limit_refusals_total").await? == 1.0,
        "one refusal counted"
    );

    // A watch that fires gives its place back.
    other.set_data("/w/0", b"changed", None).await?;
    let first = watchers.remove(0);
    tokio::time::timeout(support::IO_DEADLINE, first.changed())
        .await
        .map_err(|_| anyhow!("the watch on /w/0 did not fire"))?;
    tokio::time::timeout(support::IO_DEADLINE, again.changed())
        .await
        .map_err(|_| anyhow!("the second watch on /w/0 did not fire"))?;
    let (_, _, tenth) = client.get_and_watch_data("/w/10").await?;
    drop((watchers, tenth, other_watch));
    Ok(())
}

/// The attack the watch count let through: a few `exists` watches on huge paths (they need not
/// exist) held a quarter of a GiB of one member. With the default flags a session's watched
/// paths stop at 1 MiB (`--max-watch-bytes-per-session`); the next watch is refused (BadArguments),
/// counted, and the session and its other sessions' allowances are untouched.
#[tokio::test]
async fn huge_watched_paths_stop_at_the_watch_bytes_limit() -> Result<()> {
    const PATH_BYTES: usize = 200_000;
    const SESSIONS: usize = 20;
    const ATTEMPTS: usize = 10;
    let member = Member::start(PLAIN, &[]).await?;
    let addr = member.client.context("plain listener")?;
    let huge = |session: usize, i: usize| {
        let mut path = format!("/huge-{session}-{i}-");
        path.push_str(&"x".repeat(PATH_BYTES - path.len()));
        path
    };
    let baseline = member.proc_status_bytes("VmRSS")?;
    let mut clients = Vec::new();
    let mut watchers = Vec::new();
    for session in 0..SESSIONS {
        let client = zk_client(addr).await?;
        let mut accepted = 0;
        for i in 0..ATTEMPTS {
            match client.check_and_watch_stat(&huge(session, i)).await {
                Ok((None, watcher)) => {
                    accepted += 1;
                    watchers.push(watcher);
                }
                Err(zk::Error::BadArguments(_)) => {}
                other => bail!("an exists watch on a {PATH_BYTES}-byte path: {other:?}"),
            }
        }
        // 1 MiB holds five such paths, never the sixth.
        ensure!(
            accepted == (1 << 20) / PATH_BYTES,
            "session {session}: {accepted} of {ATTEMPTS} huge watches accepted"
        );
        clients.push(client);
    }
    let grown = member.proc_status_bytes("VmRSS")?.saturating_sub(baseline);
    eprintln!(
        "RSS after {SESSIONS} sessions each asked for {ATTEMPTS} watches on {PATH_BYTES}-byte \
         paths: +{:.1} MiB",
        grown as f64 / MIB as f64
    );
    let refused = (SESSIONS * (ATTEMPTS - (1 << 20) / PATH_BYTES)) as f64;
    ensure!(
        member
            .metric("baton_watch_bytes_limit_refusals_total")
            .await?
            == refused,
        "{refused} refusals counted"
    );
    // A short path still fits beside the five, and a watch that fires gives its bytes back.
    let first = &clients[0];
    let (_, short) = first.check_and_watch_stat("/short").await?;
    first.create(&huge(0, 0), b"", &OPEN).await?;
    let (_, again) = first.check_and_watch_stat(&huge(0, 5)).await?;
    drop((watchers, short, again));
    Ok(())
}
