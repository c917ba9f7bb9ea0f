//! The TLS client port (ZooKeeper's secureClientPort) with real clients: the zookeeper-client
//! crate (its `tls` feature), kazoo, zkCli.sh, four-letter words, and `baton-sidecar
//! --ensemble-ca` against a member whose plain listener is off.

mod support;

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use support::{Listeners, Member};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client as zk;

const OPEN: zk::CreateOptions<'static> =
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
const TLS_ONLY: Listeners = Listeners {
    plain: false,
    secure: true,
};

async fn tls_client(member: &Member) -> Result<zk::Client> {
    let secure = member.secure.context("TLS listener")?;
    let tls = zk::TlsOptions::new().with_pem_ca(&member.ca_pem()?)?;
    tokio::time::timeout(
        Duration::from_secs(20),
        zk::Client::connector()
            .with_session_timeout(Duration::from_secs(20))
            .with_tls(tls)
            .secure_connect(&secure.to_string()),
    )
    .await
    .map_err(|_| anyhow!("no TLS session from {secure}"))?
    .context("connect over TLS")
}

#[tokio::test]
async fn the_zookeeper_client_crate_works_over_tls() -> Result<()> {
    let member = Member::start(
        Listeners {
            plain: true,
            secure: true,
        },
        &[],
    )
    .await?;
    let client = tls_client(&member).await?;
    client.create("/tls", b"secret", &OPEN).await?;
    let (data, _, watcher) = client.get_and_watch_data("/tls").await?;
    ensure!(data == b"secret");
    // A session made over TLS sees writes made over plain TCP, watches included.
    let plain = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(20))
        .connect(&member.client.context("plain")?.to_string())
        .await?;
    plain.set_data("/tls", b"changed", None).await?;
    let event = tokio::time::timeout(support::IO_DEADLINE, watcher.changed())
        .await
        .map_err(|_| anyhow!("no watch event over TLS"))?;
    ensure!(event.event_type == zk::EventType::NodeDataChanged);

    // Plain bytes on the TLS port get no session.
    let mut raw = tokio::net::TcpStream::connect(member.secure.context("secure")?).await?;
    raw.write_all(&support::connect_request()).await?;
    support::closed_by_server(&mut raw, support::IO_DEADLINE).await?;
    Ok(())
}

#[tokio::test]
async fn four_letter_words_over_tls() -> Result<()> {
    let member = Member::start(TLS_ONLY, &["--four-letter-words", "ruok"]).await?;
    let tls = tokio_rustls::TlsConnector::from(member.tls_client()?);
    for (word, expect) in [("ruok", "imok"), ("srvr", "Zookeeper version: 3.8.0-baton")] {
        let tcp = tokio::net::TcpStream::connect(member.secure.context("secure")?).await?;
        let mut stream = tls
            .connect(rustls::pki_types::ServerName::try_from("127.0.0.1")?, tcp)
            .await?;
        stream.write_all(word.as_bytes()).await?;
        let mut answer = Vec::new();
        // The server ends with a TLS close or a bare TCP close; either ends the answer.
        let _ = tokio::time::timeout(support::IO_DEADLINE, stream.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        ensure!(answer.starts_with(expect), "{word}: {answer:?}");
    }
    Ok(())
}

#[tokio::test]
async fn kazoo_works_over_tls() -> Result<()> {
    let member = Member::start(TLS_ONLY, &[]).await?;
    let secure = member.secure.context("secure")?;
    let script = r#"
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], use_ssl=True, ca=sys.argv[2], verify_certs=True, timeout=20)
zk.start(timeout=20)
zk.create("/kazoo-tls", b"over tls")
data, stat = zk.get("/kazoo-tls")
assert data == b"over tls", data
print("kazoo-ok", stat.version)
zk.stop()
"#;
    let out = run_with_deadline(
        Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(script)
            .arg(secure.to_string())
            .arg(member.ca()),
    )
    .await?;
    ensure!(out.contains("kazoo-ok 0"), "kazoo said:\n{out}");
    Ok(())
}

#[tokio::test]
async fn zkcli_works_over_tls() -> Result<()> {
    let member = Member::start(TLS_ONLY, &[]).await?;
    let secure = member.secure.context("secure")?;
    // Debian's zookeeper.jar names its dependencies in its manifest but leaves out
    // netty-resolver and netty-codec, which ClientCnxnSocketNetty needs; the last `-cp` wins.
    let flags = format!(
        "-cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar:\
         /usr/share/java/netty-resolver.jar:/usr/share/java/netty-codec.jar \
         -Dzookeeper.client.secure=true \
         -Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty \
         -Dzookeeper.ssl.trustStore.location={} -Dzookeeper.ssl.trustStore.type=PEM",
        member.ca().display()
    );
    let zkcli = "/usr/share/zookeeper/bin/zkCli.sh";
    let out = run_with_deadline(Command::new(zkcli).env("CLIENT_JVMFLAGS", &flags).args([
        "-server",
        &secure.to_string(),
        "create",
        "/zkcli-tls",
        "hello",
    ]))
    .await?;
    ensure!(
        out.contains("Created /zkcli-tls"),
        "zkCli create said:\n{out}"
    );
    let out = run_with_deadline(Command::new(zkcli).env("CLIENT_JVMFLAGS", &flags).args([
        "-server",
        &secure.to_string(),
        "get",
        "/zkcli-tls",
    ]))
    .await?;
    ensure!(
        out.lines().any(|l| l.trim() == "hello"),
        "zkCli get said:\n{out}"
    );
    Ok(())
}

#[tokio::test]
async fn the_sidecar_connects_to_a_tls_only_member() -> Result<()> {
    let member = Member::start(TLS_ONLY, &[]).await?;
    let listen = {
        let probe = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        probe.local_addr()?
    };
    let sidecar_bin = baton_tests::baton_binary()?.with_file_name("baton-sidecar");
    ensure!(
        sidecar_bin.is_file(),
        "{} is missing: cargo build --workspace --bins",
        sidecar_bin.display()
    );
    let mut sidecar = Command::new(&sidecar_bin)
        .args(["--ensemble", &member.secure.context("secure")?.to_string()])
        .arg("--ensemble-ca")
        .arg(member.ca())
        .args(["--identity", "pod-a", "--election", "tls-demo"])
        .args(["--listen", &listen.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawn baton-sidecar")?;
    let outcome = wait_for_leadership(listen).await;
    let _ = sidecar.kill();
    let output = sidecar.wait_with_output()?;
    outcome.with_context(|| format!("sidecar log:\n{}", String::from_utf8_lossy(&output.stderr)))
}

/// Polls the sidecar's `/leader/ready` until it says this pod leads (its only candidate).
async fn wait_for_leadership(listen: SocketAddr) -> Result<()> {
    let http = baton_tls::HttpClient::plain(Duration::from_secs(2));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = http
            .request(
                &listen.to_string(),
                http::Method::GET,
                "/leader/ready",
                None,
            )
            .await
            && r.status == 200
        {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the sidecar never led over TLS");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs a client program to its end (at most two minutes: a JVM on a busy machine is slow)
/// and returns stdout and stderr; fails on a non-zero exit.
async fn run_with_deadline(command: &mut Command) -> Result<String> {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawn {command:?}"))?;
    let pid = child.id();
    let waited = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await;
    let output = match waited {
        Ok(joined) => joined??,
        Err(_) => {
            // Our own child, by its id.
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            bail!("{command:?} did not finish within two minutes");
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        bail!("{command:?} exited with {}:\n{text}", output.status);
    }
    Ok(text)
}
