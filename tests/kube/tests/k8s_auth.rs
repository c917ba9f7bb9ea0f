//! `--k8s-auth` on a real `baton-ensemble` member against the real API server: the member
//! finds the API server through KUBECONFIG and calls TokenReview as the ServiceAccount the
//! operator gives its members (bound to `system:auth-delegator` by the operator's own
//! ClusterRoleBinding, built by `baton_operator::build::identity`), never as admin.
//! - a projected token (TokenRequest, audience `baton`, bound to a real Pod object; the pod
//!   never runs) is accepted: whoAmI shows `k8s:NS/SA/POD`;
//! - the same ServiceAccount's token for another audience, and a token of a pod since deleted,
//!   are refused (AuthFailed);
//! - a token the API server accepted just before its pod was deleted stays accepted by the API
//!   server itself for a while (its own token cache; the time is printed), then is refused;
//! - an expired token (signed by the API server's own service-account key, so everything but
//!   its `exp` is genuine) proves no identity, nor does one that expires after the member
//!   accepted it (its cached verdict ends at its `exp`);
//! - the audit log shows no request of the member refused for want of a permission.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail, ensure};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use baton_kube_tests::Kube;
use baton_kube_tests::sidecar::pod;
use baton_operator::build::identity;
use baton_operator::names::EnsembleNames;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::Value;
use zookeeper_client as zk;

/// The audience the member accepts (`token_review::AUDIENCE`).
const AUDIENCE: &str = "baton";

/// A member killed when dropped.
struct Member {
    child: Child,
    client: SocketAddr,
    dir: tempfile::TempDir,
    _pki: baton_tests::pki::Pki,
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Member {
    /// One member with `--k8s-auth`, reaching the API server with `kubeconfig`.
    async fn start(kubeconfig: &str) -> Result<Member> {
        let dir = tempfile::Builder::new()
            .prefix("baton-kube-auth-")
            .tempdir()?;
        let config = dir.path().join("kubeconfig");
        std::fs::write(&config, kubeconfig)?;
        let pki = baton_tests::pki::Pki::new("kube-tests", &[1])?;
        let ports: Vec<TcpListener> = (0..3)
            .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
            .collect::<std::io::Result<_>>()?;
        let addr = |i: usize| -> Result<SocketAddr> { Ok(ports[i].local_addr()?) };
        let (client, peer, admin) = (addr(0)?, addr(1)?, addr(2)?);
        drop(ports);
        let log = std::fs::File::create(dir.path().join("member.log"))?;
        let mut command = Command::new(baton_tests::baton_binary()?);
        command
            .args(["--id", "1", "--k8s-auth", "--data-dir"])
            .arg(dir.path().join("data"))
            .arg("--client-addr")
            .arg(client.to_string())
            .arg("--peer-addr")
            .arg(peer.to_string())
            .arg("--admin-addr")
            .arg(admin.to_string())
            .args(pki.member_args(1))
            // Kubernetes access as kubectl finds it: this kubeconfig and nothing else.
            .env("KUBECONFIG", &config)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("BATON_LOG", "info,raft=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = command.spawn().context("start baton-ensemble")?;
        let mut member = Member {
            child,
            client,
            dir,
            _pki: pki,
        };
        // Ready once it serves a session.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = member.child.try_wait()? {
                bail!("the member exited with {status}:\n{}", member.log());
            }
            if member.session(None).await.is_ok() {
                return Ok(member);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("the member serves no session after 60s:\n{}", member.log());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("member.log")).unwrap_or_default()
    }

    /// A session, authenticated with `token` (scheme `k8s`) if given.
    async fn session(&self, token: Option<&str>) -> Result<zk::Client, zk::Error> {
        let mut connector = zk::Client::connector().with_session_timeout(Duration::from_secs(20));
        if let Some(token) = token {
            connector = connector.with_auth("k8s", token.as_bytes());
        }
        match tokio::time::timeout(
            Duration::from_secs(20),
            connector.connect(&self.client.to_string()),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => Err(zk::Error::Timeout),
        }
    }

    /// The `k8s` identities whoAmI shows for a session authenticated with `token`, or the
    /// error the authentication ended in.
    async fn identities(&self, token: &str) -> Result<Vec<String>, zk::Error> {
        let session = self.session(None).await?;
        session.auth("k8s", token.as_bytes()).await?;
        Ok(session
            .list_auth_users()
            .await?
            .iter()
            .filter(|u| u.scheme() == "k8s")
            .map(|u| u.user().to_string())
            .collect())
    }
}

/// `token` re-signed with the API server's service-account key after `edit` changed its
/// claims (`openssl dgst -sha256 -sign`, RS256 as the API server signs).
fn resigned(kube: &Kube, token: &str, edit: impl FnOnce(&mut Value)) -> Result<String> {
    let mut parts = token.split('.');
    let (header, payload) = (
        parts.next().context("no JWT header")?,
        parts.next().context("no JWT payload")?,
    );
    let mut claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload)?)?;
    edit(&mut claims);
    let signed = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims.to_string()));
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("input"), &signed)?;
    let out = Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(kube.plane.dir.join("pki/sa.key"))
        .arg(dir.path().join("input"))
        .output()
        .context("run openssl")?;
    ensure!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(out.stdout)))
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[tokio::test]
async fn projected_tokens_against_the_real_token_review() -> Result<()> {
    let kube = Kube::new("k8s-auth").await?;
    let ns = kube.namespace.clone();
    // The members' identity exactly as the operator builds it for an ensemble `demo` here.
    let names = EnsembleNames::new("demo", &ns);
    let member_sa = identity::service_account(ObjectMeta {
        name: Some(names.service_account()),
        namespace: Some(ns.clone()),
        ..ObjectMeta::default()
    });
    Api::<ServiceAccount>::namespaced(kube.client.clone(), &ns)
        .create(&PostParams::default(), &member_sa)
        .await?;
    let binding = identity::token_review_binding(&names);
    let bindings = Api::<ClusterRoleBinding>::all(kube.client.clone());
    bindings.create(&PostParams::default(), &binding).await?;
    let result = check_tokens(&kube, &names.service_account()).await;
    let _ = bindings
        .delete(
            binding.metadata.name.as_deref().unwrap_or_default(),
            &DeleteParams::default(),
        )
        .await;
    result
}

async fn check_tokens(kube: &Kube, member_sa: &str) -> Result<()> {
    let ns = &kube.namespace;
    let member_token = kube.token(ns, member_sa, &[], None, 3600).await?;
    let member = Member::start(&kube.kubeconfig_with_token(&member_token)).await?;
    let outcome = tokens(kube, &member).await;
    outcome.map_err(|e| anyhow!("{e:#}\nmember log:\n{}", member.log()))?;
    let user = format!("system:serviceaccount:{ns}:{member_sa}");
    // The reviews came from the member, as that ServiceAccount.
    let requests = kube.requests_of(&user)?;
    ensure!(
        requests.iter().any(|(r, code)| r
            .starts_with("create /apis/authentication.k8s.io/v1/tokenreviews")
            && *code == 201),
        "no TokenReview by {user} in the audit log: {requests:?}"
    );
    let refused = kube.forbidden_for(&user)?;
    ensure!(
        refused.is_empty(),
        "the API server refused the member ({user}): {refused:?}"
    );
    Ok(())
}

async fn tokens(kube: &Kube, member: &Member) -> Result<()> {
    let ns = &kube.namespace;
    kube.service_account("app").await?;
    let app = pod(kube, "app-0", "app").await?;
    let uid = app.metadata.uid.clone().context("a pod without uid")?;
    // The shortest token TokenRequest issues is 10 minutes.
    let good = kube
        .token(ns, "app", &[AUDIENCE], Some(("app-0", &uid)), 600)
        .await?;
    let who = member.identities(&good).await.context("the pod's token")?;
    ensure!(
        who == [format!("{ns}/app/app-0")],
        "whoAmI shows the pod's identity k8s:{ns}/app/app-0: {who:?}"
    );

    let other = kube
        .token(ns, "app", &["not-baton"], Some(("app-0", &uid)), 600)
        .await?;
    match member.identities(&other).await {
        Err(zk::Error::AuthFailed) => {}
        answer => bail!("a token for another audience: {answer:?}"),
    }

    // A token of a pod that is gone.
    let gone = pod(kube, "app-1", "app").await?;
    let gone_uid = gone.metadata.uid.clone().context("a pod without uid")?;
    let orphan = kube
        .token(ns, "app", &[AUDIENCE], Some(("app-1", &gone_uid)), 600)
        .await?;
    let pods = Api::<Pod>::namespaced(kube.client.clone(), ns);
    pods.delete("app-1", &DeleteParams::default().grace_period(0))
        .await?;
    // A pod never bound to a node is removed at once; wait until the API server says so.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while pods.get_opt("app-1").await?.is_some() {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "pod app-1 still there after 30s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    match member.identities(&orphan).await {
        Err(zk::Error::AuthFailed) => {}
        answer => bail!("a deleted pod's token: {answer:?}"),
    }

    // A token the API server has just accepted stays accepted by it for a while after its pod
    // is deleted (kube-apiserver caches token authentication): the window a member's own cache
    // (at most 2 minutes) adds to. Measured here and printed; it must end.
    let brief = pod(kube, "app-2", "app").await?;
    let brief_uid = brief.metadata.uid.clone().context("a pod without uid")?;
    let brief_token = kube
        .token(ns, "app", &[AUDIENCE], Some(("app-2", &brief_uid)), 600)
        .await?;
    ensure!(review(kube, &brief_token).await?.0, "app-2's token refused");
    pods.delete("app-2", &DeleteParams::default().grace_period(0))
        .await?;
    let deleted = tokio::time::Instant::now();
    loop {
        let (authenticated, error) = review(kube, &brief_token).await?;
        if !authenticated {
            eprintln!(
                "kube-apiserver accepted a deleted pod's token it had just reviewed for {:?} \
                 more ({error})",
                deleted.elapsed()
            );
            break;
        }
        ensure!(
            deleted.elapsed() < Duration::from_secs(60),
            "the API server still accepts a deleted pod's token after 60s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Expired: the pod's genuine claims, `exp` in the past, signed with the API server's key.
    // First the same signing with only `iat` a second earlier (another token, so no cached
    // verdict) must be accepted, or the refusal below could be the signature's fault.
    let resigned_good = resigned(kube, &good, |claims| {
        claims["iat"] = (claims["iat"].as_i64().unwrap_or_else(now) - 1).into();
    })?;
    let who = member
        .identities(&resigned_good)
        .await
        .context("the pod's token re-signed unchanged")?;
    ensure!(who.len() == 1, "re-signed unchanged token: {who:?}");
    let expired = resigned(kube, &good, |claims| {
        claims["iat"] = (now() - 1200).into();
        claims["nbf"] = (now() - 1200).into();
        claims["exp"] = (now() - 600).into();
    })?;
    match member.identities(&expired).await {
        // The member ignores an expired token (a client re-sending a rotated-out one):
        // the session goes on without the identity.
        Ok(who) => ensure!(who.is_empty(), "an expired token proved {who:?}"),
        Err(zk::Error::AuthFailed) => {}
        Err(e) => bail!("an expired token: {e}"),
    }
    // The API server itself agrees the expired token proves nothing.
    ensure!(
        !review(kube, &expired).await?.0,
        "the API server accepted the expired token"
    );

    // A token that expires after the member accepted it (and cached the verdict): once its
    // `exp` has passed, a new session proves nothing with it. TokenRequest's shortest token
    // lives 10 minutes, so this one is the pod's genuine claims with `exp` 5 s ahead, signed
    // with the API server's key (accepted by the API server until then).
    let exp = now() + 5;
    let short = resigned(kube, &good, |claims| {
        claims["iat"] = (now() - 2).into();
        claims["nbf"] = (now() - 2).into();
        claims["exp"] = exp.into();
    })?;
    let who = member
        .identities(&short)
        .await
        .context("a token expiring in 5 s, before it expires")?;
    ensure!(who.len() == 1, "a token not yet expired: {who:?}");
    // The wall clock must pass `exp`: nothing else to wait on.
    tokio::time::sleep(Duration::from_secs((exp + 1 - now()).max(0) as u64)).await;
    match member.identities(&short).await {
        Ok(who) => ensure!(who.is_empty(), "a token past its exp proved {who:?}"),
        Err(zk::Error::AuthFailed) => {}
        Err(e) => bail!("a token past its exp: {e}"),
    }
    Ok(())
}

/// The API server's own TokenReview verdict on `token` for audience `baton` (as admin):
/// authenticated, and the error it gives.
async fn review(kube: &Kube, token: &str) -> Result<(bool, String)> {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.into()),
            audiences: Some(vec![AUDIENCE.into()]),
        },
        ..TokenReview::default()
    };
    let status = Api::<TokenReview>::all(kube.client.clone())
        .create(&PostParams::default(), &review)
        .await?
        .status
        .context("a TokenReview without status")?;
    Ok((
        status.authenticated == Some(true),
        status.error.unwrap_or_default(),
    ))
}
