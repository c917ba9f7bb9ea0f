//! Sessions, digest authentication with ACLs, and sync, through the `zookeeper-client` crate.

use anyhow::{Context, Result, bail, ensure};
use base64::Engine as _;
use baton_tests::raw::{self, RawConnection, ReplyHeader, opcode};
use baton_tests::{
    EPHEMERAL, PERSISTENT, SESSION_TIMEOUT, Server, connect, connect_with, next_event, target_tests,
};
use sha1::{Digest as _, Sha1};
use zookeeper_client as zk;

fn expect_err<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, zk::Error>,
    expected: zk::Error,
) -> Result<()> {
    match result {
        Err(err) if err == expected => Ok(()),
        other => bail!("{what}: expected Err({expected:?}), got {other:?}"),
    }
}

/// The id ZooKeeper's digest provider derives from `user:password`: `user:base64(sha1(..))`.
fn digest_id(user: &str, password: &str) -> String {
    let hash = Sha1::digest(format!("{user}:{password}").as_bytes());
    format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(hash)
    )
}

fn authed(user_password: &str) -> zk::Connector {
    zk::Client::connector()
        .with_session_timeout(SESSION_TIMEOUT)
        .with_auth("digest", user_password.as_bytes())
}

async fn closing_a_session_deletes_its_ephemerals(server: &mut Server) -> Result<()> {
    let owner = connect(server).await?;
    let observer = connect(server).await?;
    owner.create("/session-e1", b"", &EPHEMERAL).await?;
    owner.create("/session-e2", b"", &EPHEMERAL).await?;
    owner.create("/session-p", b"", &PERSISTENT).await?;

    let (stat, deleted) = observer.check_and_watch_stat("/session-e1").await?;
    let stat = stat.context("the observer does not see the ephemeral")?;
    ensure!(
        stat.ephemeral_owner == owner.session_id().0,
        "owner field {:#x}",
        stat.ephemeral_owner
    );

    let session = owner.session().clone();
    // Dropping the last handle sends closeSession.
    drop(owner);
    let event = next_event("ephemeral deleted by closeSession", deleted.changed()).await?;
    ensure!(
        event.event_type == zk::EventType::NodeDeleted && event.path == "/session-e1",
        "observer got {event:?}"
    );
    ensure!(
        observer.check_stat("/session-e2").await?.is_none(),
        "second ephemeral survived the close"
    );
    ensure!(
        observer.check_stat("/session-p").await?.is_some(),
        "persistent node went with the session"
    );

    // A closed session cannot be resumed.
    let resumed = zk::Client::connector()
        .with_session_timeout(SESSION_TIMEOUT)
        .with_session(session)
        .connect(&server.connect_string())
        .await;
    expect_err(
        "resume a closed session",
        resumed.map(|_| ()),
        zk::Error::SessionExpired,
    )
}

async fn detached_session_resumes_with_its_ephemerals(server: &mut Server) -> Result<()> {
    let first = connect_with(
        server,
        zk::Client::connector()
            .with_session_timeout(SESSION_TIMEOUT)
            .with_detached(),
    )
    .await?;
    first.create("/resume-e", b"mine", &EPHEMERAL).await?;
    let session_id = first.session_id();
    let session = first.into_session();

    let observer = connect(server).await?;
    let resumed = connect_with(
        server,
        zk::Client::connector()
            .with_session_timeout(SESSION_TIMEOUT)
            .with_session(session),
    )
    .await?;
    ensure!(
        resumed.session_id() == session_id,
        "resumed as {} not {session_id}",
        resumed.session_id()
    );
    let (data, stat) = resumed.get_data("/resume-e").await?;
    ensure!(
        data == b"mine" && stat.ephemeral_owner == session_id.0,
        "ephemeral after resume: {stat:?}"
    );

    let (_, deleted) = observer.check_and_watch_stat("/resume-e").await?;
    drop(resumed);
    let event = next_event("ephemeral of the resumed session", deleted.changed()).await?;
    ensure!(
        event.event_type == zk::EventType::NodeDeleted,
        "observer got {event:?}"
    );
    Ok(())
}

async fn digest_acl_guards_nodes(server: &mut Server) -> Result<()> {
    let alice = connect_with(server, authed("alice:secret")).await?;
    alice
        .create(
            "/acl",
            b"private",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::creator_all()),
        )
        .await?;

    let (acls, _) = alice.get_acl("/acl").await?;
    let expected_id = digest_id("alice", "secret");
    match acls.as_slice() {
        [acl]
            if acl.scheme() == "digest"
                && acl.id() == expected_id
                && acl.permission() == zk::Permission::ALL => {}
        other => bail!("ACL of /acl is {other:?}, expected ALL for digest {expected_id}"),
    }
    let users = alice.list_auth_users().await?;
    ensure!(
        users.contains(&zk::AuthUser::new("digest", "alice")),
        "whoAmI: {users:?}"
    );

    let anonymous = connect(server).await?;
    expect_err(
        "anonymous read",
        anonymous.get_data("/acl").await,
        zk::Error::NoAuth,
    )?;
    expect_err(
        "anonymous write",
        anonymous.set_data("/acl", b"x", None).await,
        zk::Error::NoAuth,
    )?;
    expect_err(
        "anonymous list",
        anonymous.list_children("/acl").await,
        zk::Error::NoAuth,
    )?;
    expect_err(
        "anonymous getACL",
        anonymous.get_acl("/acl").await,
        zk::Error::NoAuth,
    )?;
    expect_err(
        "anonymous create",
        anonymous.create("/acl/c", b"", &PERSISTENT).await,
        zk::Error::NoAuth,
    )?;
    // exists is never checked against ACLs.
    ensure!(
        anonymous.check_stat("/acl").await?.is_some(),
        "exists refused"
    );
    expect_err(
        "creator ACL without any authenticated id",
        anonymous
            .create(
                "/acl-anon",
                b"",
                &zk::CreateMode::Persistent.with_acls(zk::Acls::creator_all()),
            )
            .await,
        zk::Error::InvalidAcl,
    )?;

    let wrong_password = connect_with(server, authed("alice:guess")).await?;
    expect_err(
        "wrong password read",
        wrong_password.get_data("/acl").await,
        zk::Error::NoAuth,
    )?;

    // Authenticating after connecting counts too.
    let late = connect(server).await?;
    late.auth("digest", b"alice:secret").await?;
    let (data, _) = late.get_data("/acl").await?;
    ensure!(data == b"private", "authenticated read got {data:?}");
    late.set_data("/acl", b"changed", None).await?;

    alice
        .create(
            "/acl-read",
            b"public",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_read()),
        )
        .await?;
    let (data, _) = anonymous.get_data("/acl-read").await?;
    ensure!(data == b"public", "read-only node read {data:?}");
    expect_err(
        "write to a read-only node",
        alice.set_data("/acl-read", b"x", None).await,
        zk::Error::NoAuth,
    )?;

    // An explicit digest ACL naming another user: alice may read it only because of READ.
    let bob_acl = [
        zk::Acl::new(
            zk::Permission::ALL,
            zk::AuthId::new("digest", &digest_id("bob", "pw")),
        ),
        zk::Acl::new(
            zk::Permission::READ,
            zk::AuthId::new("digest", &expected_id),
        ),
    ];
    alice
        .create(
            "/acl-bob",
            b"bob's",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&bob_acl)),
        )
        .await?;
    ensure!(
        alice.get_data("/acl-bob").await?.0 == b"bob's",
        "alice cannot read with READ"
    );
    expect_err(
        "alice writes bob's node",
        alice.set_data("/acl-bob", b"x", None).await,
        zk::Error::NoAuth,
    )?;
    let bob = connect_with(server, authed("bob:pw")).await?;
    bob.set_data("/acl-bob", b"bob again", None).await?;
    bob.delete("/acl-bob", None).await?;
    Ok(())
}

/// The Java client sends auth with xid -4, but the `zookeeper-client` crate uses ordinary
/// xids: ZooKeeper answers each with the xid it was sent.
async fn auth_reply_echoes_the_request_xid(server: &mut Server) -> Result<()> {
    let (mut conn, _) = RawConnection::open_session(server.client_addr()).await?;
    for xid in [1, -4, 2] {
        let (_, reply) = conn
            .call(xid, opcode::AUTH, &raw::auth_body("digest", b"carol:pw"))
            .await?;
        let header = ReplyHeader::parse(&reply)?;
        ensure!(
            header.xid == xid && header.err == 0,
            "auth sent with xid {xid} answered {header:?}"
        );
    }
    let (_, reply) = conn
        .call(3, opcode::EXISTS, &raw::path_and_watch("/", false))
        .await?;
    ensure!(
        ReplyHeader::parse(&reply)?.err == 0,
        "exists after auth failed"
    );
    Ok(())
}

async fn sync_then_read_sees_other_writes(server: &mut Server) -> Result<()> {
    let reader = connect(server).await?;
    let writer = connect(server).await?;
    writer.create("/synced", b"1", &PERSISTENT).await?;
    writer.set_data("/synced", b"2", None).await?;
    reader.sync("/synced").await?;
    let (data, stat) = reader.get_data("/synced").await?;
    ensure!(
        data == b"2" && stat.version == 1,
        "read after sync: {data:?} {stat:?}"
    );
    // sync does not look the path up.
    reader.sync("/never-created").await?;
    reader.sync("/").await?;
    Ok(())
}

target_tests!(
    closing_a_session_deletes_its_ephemerals,
    detached_session_resumes_with_its_ephemerals,
    digest_acl_guards_nodes,
    auth_reply_echoes_the_request_xid,
    sync_then_read_sees_other_writes,
);
