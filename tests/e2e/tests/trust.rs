//! The trusted ensemble (DESIGN.md §4), played as an attacker inside the cluster would play
//! it, against real member processes: the peer port, the admin API, forged forwarded writes,
//! and an entry nobody can apply.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use baton_tests::cluster::{Cluster, Method, run_cluster_case};
use baton_tls::{HostNames, HttpClient, local};
use rustls::pki_types::ServerName;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const IO: Duration = Duration::from_secs(5);

/// A peer-protocol hello: "BTNP", version 2, lane 0 (messages), from, to, cluster id.
fn hello(from: u64, to: u64, cluster: &str) -> Vec<u8> {
    let mut buf = b"BTNP".to_vec();
    buf.extend_from_slice(&2u16.to_be_bytes());
    buf.push(0);
    buf.extend_from_slice(&from.to_be_bytes());
    buf.extend_from_slice(&to.to_be_bytes());
    buf.extend_from_slice(&(cluster.len() as u16).to_be_bytes());
    buf.extend_from_slice(cluster.as_bytes());
    buf
}

/// What a member answered a hello: `Ok(())` accepted, `Err(code)` refused with that code.
async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    from: u64,
    to: u64,
    cluster: &str,
) -> Result<Result<(), u8>> {
    stream.write_all(&hello(from, to, cluster)).await?;
    stream.flush().await?;
    let mut head = [0u8; 7];
    tokio::time::timeout(IO, stream.read_exact(&mut head))
        .await
        .context("no handshake reply")??;
    ensure!(&head[..4] == b"BTNP", "not a peer reply: {head:?}");
    Ok(match head[6] {
        0 => Ok(()),
        _ => Err(stream.read_u8().await?),
    })
}

/// A TLS connection to a member's peer port with `config`.
async fn tls_to(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("member.baton.invalid").expect("name");
    TlsConnector::from(config).connect(name, tcp).await
}

/// Whether the other side closes (or resets) the stream without sending anything more.
async fn closes<S: AsyncRead + Unpin>(stream: &mut S) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(IO, stream.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

async fn strangers_never_reach_raft(cluster: &mut Cluster) -> Result<()> {
    let leader = cluster.wait_for_leader().await?;
    let target = cluster.member(leader)?.peer_addr();
    let claimed = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .context("a follower")?;
    let pki = cluster.pki();
    let cluster_id = pki.cluster().to_string();

    // Plain TCP and a perfect hello: the port speaks TLS only, so the hello is never read as
    // one; at most a TLS alert comes back before the connection closes.
    let mut plain = TcpStream::connect(target).await?;
    let _ = plain.write_all(&hello(claimed, leader, &cluster_id)).await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(IO, plain.read_to_end(&mut answer)).await;
    ensure!(
        read.is_ok(),
        "the connection stayed open after a plain-TCP hello"
    );
    ensure!(
        !answer.windows(4).any(|w| w == b"BTNP"),
        "a plain-TCP hello got a peer-protocol answer: {answer:?}"
    );
    ensure!(
        answer.first().is_none_or(|b| *b == 0x15),
        "not a TLS alert: {answer:?}"
    );

    // TLS without a client certificate.
    let anonymous = baton_tls::client_config(&pki.ca(), None)?;
    let refused = match tls_to(target, anonymous).await {
        Err(_) => true,
        Ok(mut s) => {
            let _ = s.write_all(&hello(claimed, leader, &cluster_id)).await;
            closes(&mut s).await
        }
    };
    ensure!(refused, "a peer without a certificate was answered");

    // A certificate of another CA that names the same cluster and member.
    let other = tempfile::tempdir()?;
    local::write_dir(
        other.path(),
        &cluster_id,
        &[claimed],
        &HostNames::loopback(),
    )?;
    let forged =
        baton_tls::client_config(&pki.ca(), Some(local::member_files(other.path(), claimed)))?;
    let refused = match tls_to(target, forged).await {
        Err(_) => true,
        Ok(mut s) => {
            let _ = s.write_all(&hello(claimed, leader, &cluster_id)).await;
            closes(&mut s).await
        }
    };
    ensure!(refused, "a certificate of another CA was accepted");

    // A real member's certificate claiming to be another member: refused at the hello.
    let third = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader && *id != claimed);
    let third = third.context("a third member")?;
    let honest =
        baton_tls::client_config(&pki.ca(), Some(local::member_files(pki.dir(), claimed)))?;
    let mut stream = tls_to(target, honest)
        .await
        .context("a real member's certificate")?;
    let answer = handshake(&mut stream, third, leader, &cluster_id).await?;
    ensure!(
        answer == Err(2),
        "a hello claiming member {third} with member {claimed}'s certificate: {answer:?}"
    );
    // The refusal's reason, then the end: nothing after it is ever read as Raft.
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(IO, stream.read_to_end(&mut rest)).await;
    ensure!(
        ended.is_ok(),
        "the connection stayed open after the refusal"
    );

    // None of it disturbed the ensemble.
    let statuses = cluster.wait_for_leader().await?;
    ensure!(
        statuses == leader,
        "leadership moved from {leader} to {statuses}"
    );
    let client = cluster.connect().await?;
    client
        .create("/after-strangers", b"ok", &baton_tests::PERSISTENT)
        .await?;
    Ok(())
}

#[tokio::test]
async fn peer_port_refuses_strangers_and_impostors() {
    run_cluster_case(3, strangers_never_reach_raft).await
}

async fn admin_without_the_admin_certificate_changes_nothing(cluster: &mut Cluster) -> Result<()> {
    let leader = cluster.wait_for_leader().await?;
    let addr = cluster.member(leader)?.admin_addr().to_string();
    let pki = cluster.pki();
    let anonymous = pki.anonymous_client(IO)?;
    let follower = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .context("a follower")?;
    let as_member = HttpClient::tls(
        baton_tls::client_config(&pki.ca(), Some(local::member_files(pki.dir(), follower)))?,
        IO,
    );
    let mutations = [
        (
            http::Method::POST,
            "/v1/members",
            Some(json!({"id": 9, "peerAddr": "10.0.0.9:2888"})),
        ),
        (http::Method::DELETE, "/v1/members/2", None),
        (
            http::Method::POST,
            "/v1/leader/transfer",
            Some(json!({"to": follower})),
        ),
        (
            http::Method::PUT,
            "/v1/settings",
            Some(json!({"namespaceZnodes": 1, "checkIdentities": false})),
        ),
        (http::Method::GET, "/v1/status", None),
        (http::Method::GET, "/v1/members", None),
        (http::Method::GET, "/v1/settings", None),
    ];
    for client in [&anonymous, &as_member] {
        for (method, path, body) in &mutations {
            let body = body.as_ref().map(|b| b.to_string().into_bytes());
            let answer = client.request(&addr, method.clone(), path, body).await?;
            ensure!(
                answer.status == 403,
                "{method} {path} without the admin certificate: {}",
                answer.status
            );
        }
        let probe = client
            .request(&addr, http::Method::GET, "/readyz", None)
            .await?;
        ensure!(
            probe.status == 200,
            "/readyz must stay open: {}",
            probe.status
        );
    }
    // Plain HTTP is not spoken at all.
    let plain = HttpClient::plain(IO)
        .request(&addr, http::Method::GET, "/healthz", None)
        .await;
    ensure!(
        plain.is_err(),
        "plain HTTP was answered: {:?}",
        plain.map(|r| r.status)
    );

    let status = cluster.status(leader).await?;
    ensure!(
        status.members == cluster.ids(),
        "membership changed: {status}"
    );
    ensure!(status.leader_id == leader, "leadership moved: {status}");
    let reply = cluster
        .admin(leader, Method::Get, "/v1/status", None)
        .await?;
    ensure!(reply.status == 200, "the admin certificate works: {reply}");
    let settings = cluster
        .admin(leader, Method::Get, "/v1/settings", None)
        .await?;
    ensure!(
        settings.status == 200 && settings.body["namespaceZnodes"] != json!(1),
        "a stranger's PUT /v1/settings changed the settings: {settings}"
    );
    // The test-only raw proposal endpoint does not exist unless its hidden flag is given,
    // not even for the administrator.
    let reply = cluster
        .admin(leader, Method::Post, "/v1/testing/raw-proposal", None)
        .await?;
    ensure!(
        reply.status == 404,
        "raw proposals without the flag: {reply}"
    );
    Ok(())
}

#[tokio::test]
async fn admin_api_needs_the_admin_certificate() {
    run_cluster_case(3, admin_without_the_admin_certificate_changes_nothing).await
}

/// A metric's value on member `id` (0 when absent).
async fn metric(cluster: &Cluster, id: u64, name: &str) -> Result<u64> {
    let reply = cluster.admin(id, Method::Get, "/metrics", None).await?;
    let text = reply.body.as_str().context("metrics are text")?.to_string();
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64))
}

/// A control frame carrying a forwarded write (`Control::Propose`) with `command`.
fn forged_propose(term: u64, session_id: i64, command: &[u8]) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&1i32.to_be_bytes()); // PROPOSE
    payload.extend_from_slice(&(term as i64).to_be_bytes());
    payload.extend_from_slice(&session_id.to_be_bytes());
    payload.extend_from_slice(&7i32.to_be_bytes()); // xid
    payload.push(0); // no predecessor
    payload.extend_from_slice(&0i32.to_be_bytes());
    payload.extend_from_slice(&(command.len() as i32).to_be_bytes());
    payload.extend_from_slice(command);
    let mut frame = ((payload.len() + 1) as u32).to_be_bytes().to_vec();
    frame.push(1); // control
    frame.extend_from_slice(&payload);
    frame
}

async fn forwarded_garbage_is_refused(cluster: &mut Cluster) -> Result<()> {
    let leader = cluster.wait_for_leader().await?;
    let term = cluster.status(leader).await?.term;
    let member = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .context("a follower")?;
    let pki = cluster.pki();
    // A member gone bad: its own, valid certificate, and garbage for the log.
    let config = baton_tls::client_config(&pki.ca(), Some(local::member_files(pki.dir(), member)))?;
    let target = cluster.member(leader)?.peer_addr();
    let mut stream = tls_to(target, config).await?;
    let accepted = handshake(&mut stream, member, leader, pki.cluster()).await?;
    ensure!(
        accepted.is_ok(),
        "member {member}'s own certificate was refused: {accepted:?}"
    );
    stream
        .write_all(&forged_propose(term, 0x4242, b"not a command"))
        .await?;
    stream.flush().await?;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while metric(cluster, leader, "baton_forwards_refused_total").await? == 0 {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the leader never refused the forged write"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let client = cluster.connect().await?;
    client
        .create("/after-forgery", b"ok", &baton_tests::PERSISTENT)
        .await?;
    for id in cluster.ids() {
        ensure!(
            metric(cluster, id, "baton_entries_skipped_total").await? == 0,
            "member {id} met the forged write in its log"
        );
    }
    Ok(())
}

#[tokio::test]
async fn forwarded_garbage_never_reaches_the_log() {
    run_cluster_case(3, forwarded_garbage_is_refused).await
}

async fn unappliable_entry_is_skipped_everywhere(cluster: &mut Cluster) -> Result<()> {
    let leader = cluster.wait_for_leader().await?;
    let addr = cluster.member(leader)?.admin_addr().to_string();
    let admin = cluster.pki().admin_client(IO)?;
    let answer = admin
        .request(
            &addr,
            http::Method::POST,
            "/v1/testing/raw-proposal",
            Some(b"\xff garbage".to_vec()),
        )
        .await?;
    ensure!(
        answer.status.is_success(),
        "raw proposal: {}",
        answer.status
    );
    let client = cluster.connect().await?;
    client
        .create("/after-garbage", b"ok", &baton_tests::PERSISTENT)
        .await?;
    client.sync("/").await?;

    let ids = cluster.ids();
    for round in ["before", "after"] {
        for &id in &ids {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            while metric(cluster, id, "baton_entries_skipped_total").await? != 1 {
                if tokio::time::Instant::now() > deadline {
                    bail!("member {id} did not skip the entry exactly once {round} a full restart");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        if round == "before" {
            cluster.restart_all(&ids).await?;
            cluster.wait_for_leader().await?;
        }
    }
    let client = cluster.connect().await?;
    let (data, _) = client.get_data("/after-garbage").await?;
    ensure!(data == b"ok", "lost a write around the bad entry");
    client
        .create("/after-restart", b"ok", &baton_tests::PERSISTENT)
        .await?;
    Ok(())
}

#[tokio::test]
async fn an_unappliable_entry_never_stops_the_ensemble() {
    let mut cluster = Cluster::start_with_flags(3, &["--unsafe-testing-raw-proposals"])
        .await
        .expect("cluster");
    if let Err(err) = unappliable_entry_is_skipped_everywhere(&mut cluster).await {
        cluster.dump_logs();
        panic!("{err:?}");
    }
}
