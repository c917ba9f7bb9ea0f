//! Tenant isolation on a real `baton-ensemble` (TLS member certificates, `--k8s-auth`,
//! `--check-identities`, `--super-digest`) with a fake Kubernetes API server answering
//! TokenReview on loopback, found through KUBECONFIG as kubectl would find it:
//! - sessions of another namespace, and sessions without identity, can neither read nor write
//!   under `/baton/<ns>`; another pod of the same namespace cannot delete a candidate it does
//!   not own; the super digest can;
//! - whoAmI shows `k8s:NS/SA/POD`; a rejected token gets AuthFailed and never an identity; an
//!   API failure closes the connection without an answer (retryable) and is never cached;
//! - a request sent right behind the auth packet sees the identity (per-session FIFO);
//! - verdicts are cached (the fake server counts TokenReview calls); a refused token is
//!   remembered, a token without `exp` costs no call, junk never pushes a good verdict out, and
//!   one client address cannot take every review slot;
//! - without `--k8s-auth` a `k8s` packet fails; owner-only deletion holds without
//!   `--check-identities`.

mod support;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail, ensure};
use base64::Engine as _;
use baton_tests::raw::{self, Outcome, RawConnection, ReplyHeader};
use serde_json::{Value, json};
use support::{Listeners, Member};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use zookeeper_client as zk;

const PLAIN: Listeners = Listeners {
    plain: true,
    secure: false,
};
/// `addauth digest super:secret` matches this (`echo -n super:secret | openssl dgst -binary -sha1 | base64`).
const SUPER_DIGEST: &str = "super:lK75jTNcA+U9vtVEw5vB51mj/w4=";
const AUTH_XID: i32 = -4;
const AUTH_FAILED: i32 = -115;
const NO_AUTH: i32 = -102;

/// What the fake API server answers for one token.
#[derive(Clone)]
enum Answer {
    /// Authenticated as `system:serviceaccount:NS:SA`, bound to pod POD, for audience baton.
    Pod(&'static str, &'static str, &'static str),
    /// Authenticated, but for another audience only.
    OtherAudience,
    /// `authenticated: false` (a deleted pod's token).
    Refused,
    /// HTTP 500.
    Broken,
    /// As `Pod`, after a delay.
    Slow(Duration, &'static str, &'static str, &'static str),
    /// Authenticated as pod `a/app/pod-held`, once the test releases held calls.
    Held,
}

/// Calls on `Answer::Held` tokens: how many are in flight, the most at once, and the release.
struct HeldCalls {
    in_flight: AtomicUsize,
    most: AtomicUsize,
    released: tokio::sync::watch::Sender<bool>,
}

impl HeldCalls {
    fn new() -> Self {
        HeldCalls {
            in_flight: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            released: tokio::sync::watch::channel(false).0,
        }
    }

    /// Holds one call until released (true), or until the member gives up on it and closes
    /// the connection (false).
    async fn hold(&self, stream: &mut TcpStream) -> bool {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let mut released = self.released.subscribe();
        let mut probe = [0u8; 1];
        let answered = tokio::select! {
            _ = released.wait_for(|r| *r) => true,
            // The client sends nothing more before its answer: a read ends only at its close.
            _ = stream.read(&mut probe) => false,
        };
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        answered
    }
}

/// A fake Kubernetes API server: answers `POST .../tokenreviews` by token, counts calls per token.
struct FakeApiServer {
    kubeconfig: std::path::PathBuf,
    calls: Arc<Mutex<HashMap<String, usize>>>,
    held: Arc<HeldCalls>,
    _dir: tempfile::TempDir,
}

impl FakeApiServer {
    async fn start(tokens: HashMap<String, Answer>) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr: SocketAddr = listener.local_addr()?;
        let calls = Arc::new(Mutex::new(HashMap::new()));
        let held = Arc::new(HeldCalls::new());
        let tokens = Arc::new(tokens);
        {
            let calls = calls.clone();
            let held = held.clone();
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve_api(
                        stream,
                        tokens.clone(),
                        calls.clone(),
                        held.clone(),
                    ));
                }
            });
        }
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
                 clusters:\n- name: fake\n  cluster:\n    server: http://{addr}\n\
                 contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n\
                 users:\n- name: fake\n  user:\n    token: ensemble-token\n"
            ),
        )?;
        Ok(FakeApiServer {
            kubeconfig,
            calls,
            held,
            _dir: dir,
        })
    }

    /// Waits until `n` calls on held tokens are in flight at once (polling: the calls come
    /// from another process, with no event to wait on).
    async fn wait_held(&self, n: usize) -> Result<()> {
        let deadline = tokio::time::Instant::now() + support::IO_DEADLINE;
        while self.held.in_flight.load(Ordering::SeqCst) < n {
            ensure!(
                tokio::time::Instant::now() < deadline,
                "only {} held TokenReview calls in flight, waiting for {n}",
                self.held.in_flight.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    fn calls(&self, token: &str) -> usize {
        self.calls
            .lock()
            .map(|c| c.get(token).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    async fn member(&self, extra: &[&str]) -> Result<Member> {
        let kubeconfig = self.kubeconfig.to_str().context("utf-8 path")?;
        Member::start_with_env(PLAIN, extra, &[("KUBECONFIG", kubeconfig)]).await
    }
}

/// One HTTP/1.1 connection of the fake API server (keep-alive, Content-Length bodies).
async fn serve_api(
    mut stream: TcpStream,
    tokens: Arc<HashMap<String, Answer>>,
    calls: Arc<Mutex<HashMap<String, usize>>>,
    held: Arc<HeldCalls>,
) {
    let mut buf = Vec::new();
    loop {
        let Some(end) = find(&buf, b"\r\n\r\n") else {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        while buf.len() < end + 4 + length {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Value =
            serde_json::from_slice(&buf[end + 4..end + 4 + length]).unwrap_or_default();
        buf.drain(..end + 4 + length);
        let (status, reply) =
            if head.starts_with("POST /apis/authentication.k8s.io/v1/tokenreviews") {
                let token = body["spec"]["token"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                if let Ok(mut c) = calls.lock() {
                    *c.entry(token.clone()).or_default() += 1;
                }
                let audiences = body["spec"]["audiences"].clone();
                let answer = tokens.get(&token).cloned();
                if matches!(answer, Some(Answer::Held)) && !held.hold(&mut stream).await {
                    return;
                }
                review_answer(answer, audiences).await
            } else {
                (
                    404,
                    json!({"kind": "Status", "status": "Failure", "code": 404}),
                )
            };
        let text = reply.to_string();
        let response = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
            text.len()
        );
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

async fn review_answer(answer: Option<Answer>, audiences: Value) -> (u16, Value) {
    let authenticated = |ns: &str, sa: &str, pod: &str, aud: Value| {
        json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "status": {
                "authenticated": true,
                "audiences": aud,
                "user": {
                    "username": format!("system:serviceaccount:{ns}:{sa}"),
                    "groups": ["system:serviceaccounts"],
                    "extra": {"authentication.kubernetes.io/pod-name": [pod]}
                }
            }
        })
    };
    // The real API server answers the intersection of the asked and the token's audiences.
    let baton_only = if audiences == json!(["baton"]) {
        json!(["baton"])
    } else {
        json!([])
    };
    match answer {
        Some(Answer::Pod(ns, sa, pod)) => (200, authenticated(ns, sa, pod, baton_only)),
        Some(Answer::Held) => (200, authenticated("a", "app", "pod-held", baton_only)),
        Some(Answer::Slow(delay, ns, sa, pod)) => {
            tokio::time::sleep(delay).await;
            (200, authenticated(ns, sa, pod, baton_only))
        }
        Some(Answer::OtherAudience) => (200, authenticated("a", "app", "pod-x", json!([]))),
        Some(Answer::Broken) => (
            500,
            json!({"kind": "Status", "status": "Failure", "code": 500}),
        ),
        Some(Answer::Refused) | None => (
            200,
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                   "status": {"authenticated": false, "error": "pod does not exist"}}),
        ),
    }
}

/// A request payload with its length prefix, for pipelining several in one write.
fn framed(payload: Vec<u8>) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.extend(payload);
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A JWT-shaped token (what a projected token looks like) expiring in an hour.
fn token(name: &str) -> String {
    token_expiring(name, 3600)
}

/// A JWT-shaped token whose `exp` is `secs` from now (negative: already expired).
fn token_expiring(name: &str, secs: i64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let exp = now.saturating_add_signed(secs);
    let enc = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    format!(
        "{}.{}.signature",
        enc(json!({"alg": "RS256"})),
        enc(json!({"aud": ["baton"], "exp": exp, "sub": name}))
    )
}

struct Tokens {
    a1: String,
    a2: String,
    b: String,
    deleted: String,
    other_audience: String,
    broken: String,
    slow: String,
}

impl Tokens {
    fn new() -> Self {
        Tokens {
            a1: token("tok-a"),
            a2: token("tok-a2"),
            b: token("tok-b"),
            deleted: token("tok-deleted"),
            other_audience: token("tok-other-audience"),
            broken: token("tok-error"),
            slow: token("tok-slow"),
        }
    }

    fn answers(&self) -> HashMap<String, Answer> {
        HashMap::from([
            (self.a1.clone(), Answer::Pod("a", "app", "pod-a1")),
            (self.a2.clone(), Answer::Pod("a", "app", "pod-a2")),
            (self.b.clone(), Answer::Pod("b", "app", "pod-b1")),
            (self.deleted.clone(), Answer::Refused),
            (self.other_audience.clone(), Answer::OtherAudience),
            (self.broken.clone(), Answer::Broken),
            (
                self.slow.clone(),
                Answer::Slow(Duration::from_millis(500), "a", "app", "pod-a3"),
            ),
        ])
    }
}

async fn session(member: &Member, auth: &[(&str, &[u8])]) -> Result<zk::Client> {
    let addr = member.client.context("plain listener")?.to_string();
    let mut connector = zk::Client::connector().with_session_timeout(Duration::from_secs(20));
    for (scheme, credentials) in auth {
        connector = connector.with_auth(scheme, credentials);
    }
    let client = tokio::time::timeout(Duration::from_secs(20), connector.connect(&addr))
        .await
        .map_err(|_| anyhow!("no session from {addr}"))??;
    Ok(client)
}

const PERSISTENT: zk::CreateOptions<'static> =
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
const EPHEMERAL_SEQ: zk::CreateOptions<'static> =
    zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());

/// Makes `/baton/a/elections/web` and a candidate of `owner` in it; returns the candidate's path.
async fn election(owner: &zk::Client) -> Result<String> {
    for path in [
        "/baton",
        "/baton/a",
        "/baton/a/elections",
        "/baton/a/elections/web",
    ] {
        match owner.create(path, b"", &PERSISTENT).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => bail!("create {path}: {e}"),
        }
    }
    owner
        .create("/baton/a/elections/web/candidate-", b"{}", &EPHEMERAL_SEQ)
        .await?;
    let (children, _) = owner.get_children("/baton/a/elections/web").await?;
    let name = children.first().context("the candidate")?;
    Ok(format!("/baton/a/elections/web/{name}"))
}

fn expect_no_auth<T: std::fmt::Debug>(
    what: &str,
    result: std::result::Result<T, zk::Error>,
) -> Result<()> {
    match result {
        Err(zk::Error::NoAuth) => Ok(()),
        other => bail!("{what}: expected NoAuth, got {other:?}"),
    }
}

/// Every read and write an intruder could try on namespace a's election.
async fn intruder_is_refused(intruder: &zk::Client, candidate: &str) -> Result<()> {
    let web = "/baton/a/elections/web";
    expect_no_auth("getData", intruder.get_data(candidate).await)?;
    expect_no_auth("getChildren", intruder.get_children(web).await)?;
    expect_no_auth("exists", intruder.check_stat(candidate).await)?;
    expect_no_auth(
        "exists of a missing node",
        intruder.check_stat("/baton/a/nothing").await,
    )?;
    expect_no_auth("getACL", intruder.get_acl("/baton/a").await)?;
    expect_no_auth(
        "watch",
        intruder.get_and_watch_data(candidate).await.map(|_| ()),
    )?;
    expect_no_auth(
        "create",
        intruder
            .create(&format!("{web}/candidate-"), b"{}", &EPHEMERAL_SEQ)
            .await,
    )?;
    expect_no_auth(
        "create persistent",
        intruder
            .create(&format!("{web}/candidate-9999999999"), b"{}", &PERSISTENT)
            .await,
    )?;
    expect_no_auth("delete", intruder.delete(candidate, None).await)?;
    expect_no_auth("setData", intruder.set_data(candidate, b"{}", None).await)?;
    expect_no_auth(
        "setACL",
        intruder
            .set_acl("/baton/a", &zk::Acls::creator_all(), None)
            .await,
    )?;
    let mut multi = intruder.new_multi_writer();
    multi.add_delete(candidate, None)?;
    match multi.commit().await {
        Err(zk::MultiWriteError::OperationFailed {
            source: zk::Error::NoAuth,
            ..
        }) => {}
        other => bail!("multi delete: expected NoAuth, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn namespaces_owners_and_the_super_identity() -> Result<()> {
    let tokens = Tokens::new();
    let api = FakeApiServer::start(tokens.answers()).await?;
    let member = api
        .member(&[
            "--k8s-auth",
            "--check-identities",
            "--super-digest",
            SUPER_DIGEST,
        ])
        .await?;
    with_log(&member, namespaces(&api, &tokens, &member).await)
}

async fn namespaces(api: &FakeApiServer, tokens: &Tokens, member: &Member) -> Result<()> {
    let a1 = session(member, &[("k8s", tokens.a1.as_bytes())]).await?;
    let who = a1.list_auth_users().await?;
    ensure!(
        who.iter()
            .any(|u| u.scheme() == "k8s" && u.user() == "a/app/pod-a1"),
        "whoAmI shows the pod's identity: {who:?}"
    );
    let candidate = election(&a1).await?;

    let b = session(member, &[("k8s", tokens.b.as_bytes())]).await?;
    intruder_is_refused(&b, &candidate)
        .await
        .context("namespace b")?;
    let anonymous = session(member, &[]).await?;
    intruder_is_refused(&anonymous, &candidate)
        .await
        .context("no identity")?;
    // Namespace b may make its own namespace, and list the shared root.
    b.create("/baton/b", b"", &PERSISTENT).await?;
    let (namespaces, _) = anonymous.get_children("/baton").await?;
    ensure!(namespaces.len() == 2, "{namespaces:?}");
    // Nobody but super changes /baton itself.
    expect_no_auth(
        "setACL /baton",
        a1.set_acl("/baton", &zk::Acls::creator_all(), None).await,
    )?;

    // Another pod of namespace a reads the candidate but cannot take it away.
    let a2 = session(member, &[("k8s", tokens.a2.as_bytes())]).await?;
    a2.get_data(&candidate).await?;
    expect_no_auth("delete by a2", a2.delete(&candidate, None).await)?;
    ensure!(
        a1.check_stat(&candidate).await?.is_some(),
        "the candidate stays"
    );

    // The super digest repairs: it reads and deletes anything.
    let admin = session(member, &[("digest", b"super:secret")]).await?;
    let who = admin.list_auth_users().await?;
    ensure!(who.iter().any(|u| u.scheme() == "super"), "{who:?}");
    admin.get_data(&candidate).await?;
    admin.delete(&candidate, None).await?;
    ensure!(a1.check_stat(&candidate).await?.is_none());
    // A wrong super password is an ordinary digest identity.
    let pretender = session(member, &[("digest", b"super:guess")]).await?;
    expect_no_auth(
        "getData by a wrong super",
        pretender.get_data("/baton/a").await,
    )?;

    // The verdict cache: a1's token was reviewed once, however many sessions present it.
    let again = session(member, &[("k8s", tokens.a1.as_bytes())]).await?;
    again.get_data("/baton/a").await?;
    ensure!(
        api.calls(&tokens.a1) == 1,
        "TokenReview calls for a1's token: {}",
        api.calls(&tokens.a1)
    );
    ensure!(
        member
            .metric("baton_k8s_token_review_cache_hits_total")
            .await?
            >= 1.0
    );
    ensure!(
        member
            .metric("baton_tenancy_refusals_total{reason=\"not_owner\"}")
            .await?
            >= 1.0
    );
    ensure!(
        member
            .metric("baton_tenancy_refusals_total{reason=\"other_namespace\"}")
            .await?
            >= 1.0
    );
    Ok(())
}

/// A failure with the member's log attached.
fn with_log(member: &Member, result: Result<()>) -> Result<()> {
    result.with_context(|| format!("member log:\n{}", member.log()))
}

/// Sends an auth packet on a raw session and returns the reply header (or the close).
async fn raw_auth(conn: &mut RawConnection, scheme: &str, credentials: &[u8]) -> Result<Outcome> {
    conn.send_frame(&raw::request(
        AUTH_XID,
        raw::opcode::AUTH,
        &raw::auth_body(scheme, credentials),
    ))
    .await?;
    conn.receive().await
}

fn header(outcome: &Outcome) -> Result<ReplyHeader> {
    match outcome {
        Outcome::Frame(payload) => ReplyHeader::parse(payload),
        Outcome::Closed { partial } => bail!("closed instead of answering: {partial:02x?}"),
    }
}

#[tokio::test]
async fn refused_tokens_fail_and_api_trouble_is_retryable() -> Result<()> {
    let tokens = Tokens::new();
    let api = FakeApiServer::start(tokens.answers()).await?;
    let member = api.member(&["--k8s-auth", "--check-identities"]).await?;
    with_log(&member, refusals(&api, &tokens, &member).await)
}

async fn refusals(api: &FakeApiServer, tokens: &Tokens, member: &Member) -> Result<()> {
    let addr = member.client.context("plain listener")?;
    let owner = session(member, &[("k8s", tokens.a1.as_bytes())]).await?;
    election(&owner).await?;

    for (what, token) in [
        ("a deleted pod's token", &tokens.deleted),
        ("a token for another audience", &tokens.other_audience),
        ("garbage", &"tok-a".to_string()),
    ] {
        let (mut conn, _) = RawConnection::open_session(addr).await?;
        // A read pipelined right behind the auth must never run with an identity.
        let mut frames = framed(raw::request(
            AUTH_XID,
            raw::opcode::AUTH,
            &raw::auth_body("k8s", token.as_bytes()),
        ));
        frames.extend(framed(raw::request(
            1,
            raw::opcode::GET_DATA,
            &raw::path_and_watch("/baton/a", false),
        )));
        conn.send_bytes(&frames).await?;
        let reply = header(&conn.receive().await?).context(what)?;
        ensure!(
            reply.xid == AUTH_XID && reply.err == AUTH_FAILED,
            "{what}: {reply:?}"
        );
        match conn.receive().await? {
            Outcome::Closed { .. } => {}
            Outcome::Frame(f) => bail!(
                "{what}: the connection stays open: {:?}",
                ReplyHeader::parse(&f)
            ),
        }
    }
    // The zookeeper-client crate sees AuthFailed too.
    let client = session(member, &[]).await?;
    match client.auth("k8s", tokens.deleted.as_bytes()).await {
        Err(zk::Error::AuthFailed) => {}
        other => bail!("auth with a deleted pod's token: {other:?}"),
    }
    // The refused verdict is cached; a second try costs no API call.
    let (mut conn, _) = RawConnection::open_session(addr).await?;
    let reply = header(&raw_auth(&mut conn, "k8s", tokens.deleted.as_bytes()).await?)?;
    ensure!(reply.err == AUTH_FAILED);
    ensure!(
        api.calls(&tokens.deleted) == 1,
        "{}",
        api.calls(&tokens.deleted)
    );

    // A rotated-out, expired token that a client re-sends first on reconnect (as the
    // zookeeper-client crate and kazoo do) is acknowledged and ignored: it grants nothing, the
    // connection stays, and the fresh token behind it gives the identity. The API is not asked.
    let expired = token_expiring("tok-a", -60);
    let (mut conn, _) = RawConnection::open_session(addr).await?;
    let reply = header(&raw_auth(&mut conn, "k8s", expired.as_bytes()).await?)?;
    ensure!(reply.err == 0, "an expired token: {reply:?}");
    let (_, payload) = conn
        .call(
            5,
            raw::opcode::GET_DATA,
            &raw::path_and_watch("/baton/a", false),
        )
        .await?;
    ensure!(
        ReplyHeader::parse(&payload)?.err == NO_AUTH,
        "an expired token granted an identity"
    );
    let reply = header(&raw_auth(&mut conn, "k8s", tokens.a1.as_bytes()).await?)?;
    ensure!(reply.err == 0, "the fresh token after it: {reply:?}");
    let (_, payload) = conn
        .call(
            6,
            raw::opcode::GET_DATA,
            &raw::path_and_watch("/baton/a", false),
        )
        .await?;
    ensure!(
        ReplyHeader::parse(&payload)?.err == 0,
        "the fresh token's identity"
    );
    ensure!(
        api.calls(&expired) == 0,
        "an expired token was sent to TokenReview"
    );

    // API trouble: the connection closes without an answer (the client reconnects and
    // retries), and the failure is not cached.
    for _ in 0..2 {
        let (mut conn, _) = RawConnection::open_session(addr).await?;
        match raw_auth(&mut conn, "k8s", tokens.broken.as_bytes()).await? {
            Outcome::Closed { .. } => {}
            Outcome::Frame(f) => bail!(
                "an answer despite API trouble: {:?}",
                ReplyHeader::parse(&f)
            ),
        }
    }
    ensure!(
        api.calls(&tokens.broken) == 2,
        "{}",
        api.calls(&tokens.broken)
    );
    ensure!(
        member
            .metric("baton_k8s_auth_total{result=\"unavailable\"}")
            .await?
            == 2.0
    );

    // FIFO: a read sent right behind a slowly reviewed auth already has the identity.
    let (mut conn, _) = RawConnection::open_session(addr).await?;
    let mut frames = framed(raw::request(
        AUTH_XID,
        raw::opcode::AUTH,
        &raw::auth_body("k8s", tokens.slow.as_bytes()),
    ));
    frames.extend(framed(raw::request(
        7,
        raw::opcode::GET_DATA,
        &raw::path_and_watch("/baton/a", false),
    )));
    conn.send_bytes(&frames).await?;
    let auth = header(&conn.receive().await?)?;
    ensure!(auth.xid == AUTH_XID && auth.err == 0, "{auth:?}");
    let read = header(&conn.receive().await?)?;
    ensure!(
        read.xid == 7 && read.err == 0,
        "read behind the auth: {read:?}"
    );
    // And without an identity the same read is refused.
    let (mut conn, _) = RawConnection::open_session(addr).await?;
    let (_, payload) = conn
        .call(
            8,
            raw::opcode::GET_DATA,
            &raw::path_and_watch("/baton/a", false),
        )
        .await?;
    ensure!(ReplyHeader::parse(&payload)?.err == NO_AUTH);
    Ok(())
}

/// An auth packet's reply on a fresh session of its own, on a raw connection.
async fn auth_once(addr: SocketAddr, token: &str) -> Result<i32> {
    let (mut conn, _) = RawConnection::open_session(addr).await?;
    Ok(header(&raw_auth(&mut conn, "k8s", token.as_bytes()).await?)?.err)
}

#[tokio::test]
async fn junk_tokens_cost_no_call_and_never_push_a_good_verdict_out() -> Result<()> {
    let tokens = Tokens::new();
    let api = FakeApiServer::start(tokens.answers()).await?;
    // Eight verdicts kept on each side, so a hundred junk tokens overflow the cache.
    let member = api
        .member(&["--k8s-auth", "--k8s-verdict-cache-entries", "8"])
        .await?;
    with_log(&member, junk(&api, &tokens, &member).await)
}

async fn junk(api: &FakeApiServer, tokens: &Tokens, member: &Member) -> Result<()> {
    let addr = member.client.context("plain listener")?;
    ensure!(auth_once(addr, &tokens.a1).await? == 0, "a1's token");

    // No `exp`: no projected token looks like this; refused without asking, every time.
    let no_exp = {
        let enc = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        format!(
            "{}.{}.sig",
            enc(json!({"alg": "RS256"})),
            enc(json!({"sub": "x"}))
        )
    };
    for junk in ["not-a-jwt", no_exp.as_str()] {
        for _ in 0..3 {
            ensure!(auth_once(addr, junk).await? == AUTH_FAILED, "{junk}");
        }
        ensure!(
            api.calls(junk) == 0,
            "{junk}: {} TokenReview calls",
            api.calls(junk)
        );
    }

    // A refused token with an `exp` a year away is asked about once and then remembered.
    let far = token_expiring("tok-far", 365 * 86_400);
    for _ in 0..3 {
        ensure!(auth_once(addr, &far).await? == AUTH_FAILED);
    }
    ensure!(
        api.calls(&far) == 1,
        "{} calls for a refused token",
        api.calls(&far)
    );

    // A hundred refused far-`exp` tokens fill only the refused side: a1's identity is still
    // cached, and the oldest refusal made room (it is asked about again).
    for i in 0..100 {
        let junk = token_expiring(&format!("tok-junk-{i}"), 365 * 86_400);
        ensure!(auth_once(addr, &junk).await? == AUTH_FAILED);
    }
    ensure!(
        auth_once(addr, &tokens.a1).await? == 0,
        "a1's token after the flood"
    );
    ensure!(
        api.calls(&tokens.a1) == 1,
        "a1's verdict was pushed out by junk: {} calls",
        api.calls(&tokens.a1)
    );
    ensure!(auth_once(addr, &far).await? == AUTH_FAILED);
    ensure!(
        api.calls(&far) == 2,
        "the oldest refusal is forgotten first"
    );
    Ok(())
}

/// Per client address, `MAX_REVIEWS_PER_ADDRESS` in the ensemble.
const REVIEWS_PER_ADDRESS: usize = 4;
const ATTACKER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const NEIGHBOUR: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

#[tokio::test]
async fn one_address_cannot_take_every_review_slot() -> Result<()> {
    let tokens = Tokens::new();
    let held: Vec<String> = (0..20).map(|i| token(&format!("tok-held-{i}"))).collect();
    let mut answers = tokens.answers();
    answers.extend(held.iter().map(|t| (t.clone(), Answer::Held)));
    let api = FakeApiServer::start(answers).await?;
    let member = api.member(&["--k8s-auth"]).await?;
    let result = review_slots(&api, &tokens, &held, &member).await;
    api.held.released.send_replace(true);
    with_log(&member, result)
}

async fn review_slots(
    api: &FakeApiServer,
    tokens: &Tokens,
    held: &[String],
    member: &Member,
) -> Result<()> {
    let addr = member.client.context("plain listener")?;
    // One address sends twenty tokens whose reviews the API server holds (a slow API server,
    // or tokens made to be slow): more than the member's sixteen slots in all.
    let mut attacker = Vec::new();
    for token in held {
        let mut stream = support::connect_from(ATTACKER, addr).await?;
        support::open_session(&mut stream).await?;
        let auth = raw::request(
            AUTH_XID,
            raw::opcode::AUTH,
            &raw::auth_body("k8s", token.as_bytes()),
        );
        stream.write_all(&support::frame(&auth)).await?;
        attacker.push(stream);
    }
    api.wait_held(REVIEWS_PER_ADDRESS).await?;

    // Another address is reviewed at once meanwhile.
    let mut neighbour = support::connect_from(NEIGHBOUR, addr).await?;
    support::open_session(&mut neighbour).await?;
    let auth = raw::request(
        AUTH_XID,
        raw::opcode::AUTH,
        &raw::auth_body("k8s", tokens.a1.as_bytes()),
    );
    neighbour.write_all(&support::frame(&auth)).await?;
    let reply = ReplyHeader::parse(
        &support::read_frame(&mut neighbour)
            .await
            .context("the neighbour's auth waited behind another address's reviews")?,
    )?;
    ensure!(reply.xid == AUTH_XID && reply.err == 0, "{reply:?}");
    let most = api.held.most.load(Ordering::SeqCst);
    ensure!(
        most <= REVIEWS_PER_ADDRESS,
        "{most} reviews of one address were in flight at once"
    );
    drop(attacker);
    Ok(())
}

#[tokio::test]
async fn without_flags_k8s_fails_and_owners_still_own_their_nodes() -> Result<()> {
    let member = Member::start(PLAIN, &[]).await?;
    with_log(&member, without_flags(&member).await)
}

async fn without_flags(member: &Member) -> Result<()> {
    let addr = member.client.context("plain listener")?;
    let (mut conn, _) = RawConnection::open_session(addr).await?;
    let reply = header(&raw_auth(&mut conn, "k8s", token("tok-a").as_bytes()).await?)?;
    ensure!(reply.err == AUTH_FAILED, "{reply:?}");
    ensure!(
        member
            .metric("baton_k8s_auth_total{result=\"disabled\"}")
            .await?
            == 1.0
    );
    // No namespace policy: anyone reads, but only the owner deletes its candidate.
    let owner = session(member, &[]).await?;
    let candidate = election(&owner).await?;
    let other = session(member, &[]).await?;
    other.get_data(&candidate).await?;
    expect_no_auth(
        "delete by another session",
        other.delete(&candidate, None).await,
    )?;
    // Outside /baton ZooKeeper's rules are untouched.
    owner
        .create(
            "/app-lock",
            b"",
            &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
        )
        .await?;
    other.delete("/app-lock", None).await?;
    // Without --super-digest, "super" is an ordinary digest user.
    let pretender = session(member, &[("digest", b"super:secret")]).await?;
    expect_no_auth(
        "delete by a digest user",
        pretender.delete(&candidate, None).await,
    )?;
    owner.delete(&candidate, None).await?;
    Ok(())
}

/// kazoo's view of the same guarantees: it sends `k8s` auth like any scheme (`auth_data`).
const KAZOO_SCRIPT: &str = r#"
import sys
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, AuthFailedError
hosts, tok_a, tok_a2, tok_b, tok_deleted = sys.argv[1:6]

def client(auth):
    c = KazooClient(hosts=hosts, auth_data=auth, timeout=20)
    c.start(timeout=20)
    return c

def refused(what, f):
    try:
        f()
    except NoAuthError:
        return
    raise SystemExit(what + ": expected NoAuthError")

a = client([("k8s", tok_a)])
a.ensure_path("/baton/a/locks/db")
mine = a.create("/baton/a/locks/db/lock-", b"", ephemeral=True, sequence=True)
b = client([("k8s", tok_b)])
refused("get by b", lambda: b.get(mine))
refused("children by b", lambda: b.get_children("/baton/a/locks/db"))
refused("delete by b", lambda: b.delete(mine))
a2 = client([("k8s", tok_a2)])
a2.get(mine)
refused("delete by a2", lambda: a2.delete(mine))
assert a.exists(mine), "the lock stays"
root = client([("digest", "super:secret")])
root.delete(mine)
assert not a.exists(mine)
try:
    client([("k8s", tok_deleted)]).get("/baton")
    raise SystemExit("a deleted pod's token was accepted")
except AuthFailedError:
    pass
for c in (a, b, a2, root):
    c.stop()
print("ok")
"#;

#[tokio::test]
async fn kazoo_sees_namespaces_and_owners() -> Result<()> {
    let tokens = Tokens::new();
    let api = FakeApiServer::start(tokens.answers()).await?;
    let member = api
        .member(&[
            "--k8s-auth",
            "--check-identities",
            "--super-digest",
            SUPER_DIGEST,
        ])
        .await?;
    let addr = member.client.context("plain listener")?;
    let mut command = std::process::Command::new("/usr/bin/python3");
    command
        .arg("-c")
        .arg(KAZOO_SCRIPT)
        .arg(addr.to_string())
        .args([&tokens.a1, &tokens.a2, &tokens.b, &tokens.deleted]);
    let finished = baton_tests::command::run(command, Duration::from_secs(90)).await?;
    with_log(
        &member,
        if finished.success() {
            Ok(())
        } else {
            Err(anyhow!("kazoo script failed\n{finished}"))
        },
    )
}

#[tokio::test]
async fn no_acl_locks_tenants_out_and_counts_hide_other_namespaces() -> Result<()> {
    let tokens = Tokens::new();
    let api = FakeApiServer::start(tokens.answers()).await?;
    let member = api
        .member(&[
            "--k8s-auth",
            "--check-identities",
            "--super-digest",
            SUPER_DIGEST,
        ])
        .await?;
    with_log(&member, lock_out_and_counts(&tokens, &member).await)
}

/// The attacker has no identity. On a fresh ensemble it takes CREATE off `/` (ZooKeeper lets
/// anyone with ADMIN there do so), then counts and lists what namespace a does.
async fn lock_out_and_counts(tokens: &Tokens, member: &Member) -> Result<()> {
    let anonymous = session(member, &[]).await?;
    anonymous
        .set_acl("/", &zk::Acls::anyone_read(), None)
        .await
        .context("setACL / as ZooKeeper allows it")?;
    expect_no_auth(
        "create /elsewhere under the new ACL of /",
        anonymous.create("/elsewhere", b"", &PERSISTENT).await,
    )?;
    // Namespace a still makes /baton, its namespace and an election.
    let a1 = session(member, &[("k8s", tokens.a1.as_bytes())]).await?;
    let candidate = election(&a1).await.context("a tenant after setACL /")?;

    // Counting from the shared root, or from `/`, shows nothing of what a does inside.
    let b = session(member, &[("k8s", tokens.b.as_bytes())]).await?;
    let counts = async || -> Result<[usize; 4]> {
        Ok([
            anonymous.count_descendants_number("/baton").await?,
            anonymous.count_descendants_number("/").await?,
            b.count_descendants_number("/baton").await?,
            a1.count_descendants_number("/baton").await?,
        ])
    };
    let before = counts().await?;
    ensure!(before[0] == 1, "anonymous counts /baton as {before:?}");
    a1.create("/baton/a/locks", b"", &PERSISTENT).await?;
    a1.create("/baton/a/locks/x", b"", &PERSISTENT).await?;
    let after = counts().await?;
    ensure!(
        after[..3] == before[..3] && after[3] == before[3] + 2,
        "counts before {before:?} and after a's two creates {after:?}"
    );
    expect_no_auth(
        "getAllChildrenNumber inside a",
        b.count_descendants_number("/baton/a").await,
    )?;

    // A session that now speaks for namespace b lists none of a's ephemerals it made.
    ensure!(
        a1.list_ephemerals("/").await? == [candidate.clone()],
        "a1's ephemerals"
    );
    let switched = session(member, &[("k8s", tokens.a2.as_bytes())]).await?;
    switched
        .create("/baton/a/elections/web/candidate-", b"{}", &EPHEMERAL_SEQ)
        .await?;
    switched.auth("k8s", tokens.b.as_bytes()).await?;
    let listed = switched.list_ephemerals("/").await?;
    ensure!(listed.is_empty(), "listed from namespace b: {listed:?}");
    Ok(())
}
