//! Real TLS handshakes over loopback between the configurations of each port: who gets in,
//! who is refused, and what identity the other side proved.

use std::path::Path;
use std::time::Duration;

use baton_tls::{HostNames, Identity, MemberTls, local, peer_identity};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

fn pki(dir: &Path, cluster: &str) {
    local::write_dir(dir, cluster, &[1, 2], &HostNames::loopback()).expect("write certs");
}

/// A CA of the same cluster id has the same name as ours, so webpki finds "our" issuer and
/// then a signature that does not verify; a CA of another name is an unknown issuer.
fn signed_by_another_ca(error: &str) -> bool {
    error.contains("BadSignature") || error.contains("UnknownIssuer")
}

/// Serves one connection with `acceptor`; returns what the client proved, or the error.
async fn serve_once(
    acceptor: TlsAcceptor,
) -> (
    String,
    tokio::task::JoinHandle<Result<Option<Identity>, String>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let mut tls = acceptor.accept(tcp).await.map_err(|e| e.to_string())?;
        let who = peer_identity(tls.get_ref().1)
            .transpose()
            .map_err(|e| e.to_string())?;
        tls.write_all(b"ok").await.map_err(|e| e.to_string())?;
        tls.shutdown().await.map_err(|e| e.to_string())?;
        Ok(who)
    });
    (addr, task)
}

async fn connect(connector: &TlsConnector, addr: &str) -> Result<Identity, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 2];
    tls.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
    peer_identity(tls.get_ref().1)
        .expect("server certificate")
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn members_of_one_ca_prove_their_ids_to_each_other() {
    let dir = tempfile::tempdir().expect("tempdir");
    pki(dir.path(), "prod.demo");
    let one = MemberTls::load(local::member_files(dir.path(), 1)).expect("member 1");
    let two = MemberTls::load(local::member_files(dir.path(), 2)).expect("member 2");
    assert_eq!(one.identity(), &Identity::member("prod.demo", 1));

    let (addr, server) = serve_once(one.peer_acceptor().expect("acceptor")).await;
    let server_proved = connect(&two.peer_connector().expect("connector"), &addr).await;
    assert_eq!(server_proved, Ok(Identity::member("prod.demo", 1)));
    let client_proved = server.await.expect("join");
    assert_eq!(client_proved, Ok(Some(Identity::member("prod.demo", 2))));
}

#[tokio::test]
async fn the_peer_port_refuses_no_certificate_and_another_ca() {
    let dir = tempfile::tempdir().expect("tempdir");
    let other = tempfile::tempdir().expect("tempdir");
    pki(dir.path(), "prod.demo");
    // Same cluster id and member id, but a CA of its own: an attacker's home-made certificate.
    pki(other.path(), "prod.demo");
    let one = MemberTls::load(local::member_files(dir.path(), 1)).expect("member 1");
    // The forger trusts the real CA (its certificate is public) but can only sign its own.
    let forger = baton_tls::client_config(
        &dir.path().join("ca.crt"),
        Some(local::member_files(other.path(), 2)),
    )
    .expect("forger");

    let (addr, server) = serve_once(one.peer_acceptor().expect("acceptor")).await;
    assert!(connect(&TlsConnector::from(forger), &addr).await.is_err());
    let refused = server
        .await
        .expect("join")
        .expect_err("another CA must be refused");
    assert!(signed_by_another_ca(&refused), "{refused}");

    // No client certificate at all.
    let anonymous = baton_tls::client_config(&dir.path().join("ca.crt"), None).expect("config");
    let (addr, server) = serve_once(one.peer_acceptor().expect("acceptor")).await;
    let _ = connect(&TlsConnector::from(anonymous), &addr).await;
    let refused = server
        .await
        .expect("join")
        .expect_err("no certificate must be refused");
    assert!(refused.to_lowercase().contains("certificate"), "{refused}");
}

#[tokio::test]
async fn a_client_refuses_a_server_of_another_ca() {
    let dir = tempfile::tempdir().expect("tempdir");
    let other = tempfile::tempdir().expect("tempdir");
    pki(dir.path(), "prod.demo");
    pki(other.path(), "prod.demo");
    let impostor = MemberTls::load(local::member_files(other.path(), 1)).expect("impostor");
    let (addr, _server) = serve_once(impostor.admin_acceptor().expect("acceptor")).await;
    let admin = baton_tls::client_config(
        &dir.path().join("ca.crt"),
        Some(local::admin_files(dir.path())),
    )
    .expect("admin config");
    let err = connect(&TlsConnector::from(admin), &addr)
        .await
        .expect_err("must refuse");
    assert!(signed_by_another_ca(&err), "{err}");
}

#[tokio::test]
async fn the_admin_port_takes_anyone_and_tells_who_is_the_admin() {
    let dir = tempfile::tempdir().expect("tempdir");
    pki(dir.path(), "prod.demo");
    let one = MemberTls::load(local::member_files(dir.path(), 1)).expect("member 1");
    let ca = dir.path().join("ca.crt");

    let admin = baton_tls::client_config(&ca, Some(local::admin_files(dir.path()))).expect("admin");
    let (addr, server) = serve_once(one.admin_acceptor().expect("acceptor")).await;
    connect(&TlsConnector::from(admin), &addr)
        .await
        .expect("admin connects");
    assert_eq!(
        server.await.expect("join"),
        Ok(Some(Identity::admin("prod.demo")))
    );

    let probe = baton_tls::client_config(&ca, None).expect("probe");
    let (addr, server) = serve_once(one.admin_acceptor().expect("acceptor")).await;
    connect(&TlsConnector::from(probe), &addr)
        .await
        .expect("probe connects");
    assert_eq!(server.await.expect("join"), Ok(None));
}

#[tokio::test]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    pki(dir.path(), "prod.demo");
    let files = local::member_files(dir.path(), 1);
    let key = baton_tls::ReloadingKey::load(files)
        .expect("load")
        .with_recheck(Duration::ZERO);
    let before = key.current();
    assert_eq!(
        before.cert,
        key.current().cert,
        "unchanged files, same certificate"
    );
    local::add_member(dir.path(), "prod.demo", 1, &HostNames::loopback()).expect("renew");
    let after = key.current();
    assert_ne!(before.cert, after.cert);

    // A "renewal" naming another member is refused; the current certificate stays.
    let two = std::fs::read(dir.path().join("member-2.crt")).expect("read");
    let two_key = std::fs::read(dir.path().join("member-2.key")).expect("read");
    std::fs::write(dir.path().join("member-1.crt"), two).expect("write");
    std::fs::write(dir.path().join("member-1.key"), two_key).expect("write");
    assert_eq!(key.current().cert, after.cert);
}

#[tokio::test]
async fn a_ca_added_beside_the_old_one_is_trusted_without_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let next = tempfile::tempdir().expect("tempdir");
    pki(dir.path(), "prod.demo");
    pki(next.path(), "prod.demo"); // the rotated-to CA, and member 2's certificate from it
    let one =
        MemberTls::load_with_recheck(local::member_files(dir.path(), 1), Some(Duration::ZERO))
            .expect("member 1");
    let ca = dir.path().join("ca.crt");
    let two_rotated = || {
        baton_tls::client_config(&ca, Some(local::member_files(next.path(), 2))).expect("config")
    };

    let (addr, server) = serve_once(one.peer_acceptor().expect("acceptor")).await;
    let _ = connect(&TlsConnector::from(two_rotated()), &addr).await;
    assert!(
        server.await.expect("join").is_err(),
        "not trusted before the rotation"
    );

    // The operator's first rotation step: the new CA beside the old one in ca.crt.
    let mut both = std::fs::read_to_string(&ca).expect("read");
    both.push_str(&std::fs::read_to_string(next.path().join("ca.crt")).expect("read"));
    std::fs::write(&ca, both).expect("write");

    let (addr, server) = serve_once(one.peer_acceptor().expect("acceptor")).await;
    connect(&TlsConnector::from(two_rotated()), &addr)
        .await
        .expect("trusted after the rotation");
    assert_eq!(
        server.await.expect("join"),
        Ok(Some(Identity::member("prod.demo", 2)))
    );
}
