//! Tenant isolation as the sidecar sees it: recipes live under `/baton/<namespace>`,
//! planted persistent nodes never lead or hold, a stale fencing token cannot renew or release
//! another worker's grant, and with `--zk-digest` other users are kept out by ACLs. Each case
//! runs against Baton and Apache ZooKeeper.

mod common;

use common::{Sidecar, unique, zk_address};
use zookeeper_client as zk;

async fn client() -> zk::Client {
    zk::Client::connect(&zk_address())
        .await
        .expect("observer session")
}

async fn digest_client(credentials: &str) -> zk::Client {
    zk::Client::connector()
        .with_auth("digest", credentials.as_bytes())
        .connect(&zk_address())
        .await
        .expect("digest session")
}

/// Creates `path` and its parents as persistent, open nodes (as a squatter would).
async fn plant(client: &zk::Client, path: &str, data: &str) {
    let parent = &path[..path.rfind('/').expect("absolute")];
    client
        .mkdir(
            parent,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .expect("parents");
    client
        .create(
            path,
            data.as_bytes(),
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .expect("planted");
}

/// Waits (long-poll, no sleeping) until `sidecar` knows a leader of `election`.
async fn leader_of(sidecar: &Sidecar, election: &str) -> serde_json::Value {
    let answer = sidecar
        .call("GET", &format!("/leader/{election}?wait=50s&token=0"))
        .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.body
}

fn metric(text: &serde_json::Value, line: &str) -> bool {
    text.as_str().is_some_and(|t| t.contains(line))
}

/// The issue's attack: a persistent candidate with the lowest sequence, naming another
/// identity and address. Every sidecar must still elect among the live candidates.
async fn a_planted_persistent_candidate_never_leads() {
    let election = unique("squatted");
    let observer = client().await;
    let dir = format!("/baton/default/elections/{election}");
    plant(
        &observer,
        &format!("{dir}/candidate-0000000000"),
        r#"{"identity":"squatter","address":"6.6.6.6:80","since":"2020-01-01T00:00:00Z"}"#,
    )
    .await;
    let a = Sidecar::start(&format!("{election}-a"), &[&election]);
    let body = leader_of(&a, &election).await;
    assert_eq!(body["leader"]["identity"], a.identity.as_str(), "{body}");
    assert_eq!(body["self"]["isLeader"], true, "{body}");
    let b = Sidecar::start(&format!("{election}-b"), &[&election]);
    let body = leader_of(&b, &election).await;
    assert_eq!(body["leader"]["identity"], a.identity.as_str(), "{body}");
    assert_eq!(body["self"]["isLeader"], false, "{body}");
    let ready = b.call("GET", &format!("/leader/{election}/ready")).await;
    assert_eq!(ready.status, 503, "{ready:?}");
    // The planted node is still there, still the lowest: only its being persistent counts.
    let children = observer.list_children(&dir).await.expect("list");
    assert!(children.contains(&"candidate-0000000000".to_owned()));
    assert_eq!(children.len(), 3, "{children:?}");
    let metrics = a.call("GET", "/metrics").await;
    assert!(
        metric(
            &metrics.body,
            "baton_sidecar_ignored_queue_nodes_total{kind=\"candidate\"} 1"
        ),
        "{metrics:?}"
    );
    a.wait_log("ignoring a persistent node in a queue");
}

/// A persistent lock node (and a persistent writer) at the head of the queue neither blocks a
/// try-lock nor shows as a holder or waiter.
async fn a_planted_lock_node_never_blocks_or_holds() {
    let lock = unique("squatted-lock");
    let observer = client().await;
    let dir = format!("/baton/default/locks/{lock}");
    plant(
        &observer,
        &format!("{dir}/lock-0000000000"),
        r#"{"identity":"squatter","owner":"squatter/1/1"}"#,
    )
    .await;
    plant(
        &observer,
        &format!("{dir}/write-0000000001"),
        r#"{"identity":"squatter","owner":"squatter/1/2"}"#,
    )
    .await;
    let s = Sidecar::start(&format!("{lock}-pod"), &[]);
    let granted = s.call("POST", &format!("/lock/{lock}?wait=0")).await;
    assert_eq!(granted.status, 200, "a try-lock is granted: {granted:?}");
    let token = granted.body["token"].as_i64().expect("token");
    let seen = s.call("GET", &format!("/lock/{lock}")).await;
    assert_eq!(seen.body["holder"]["token"], token, "{seen:?}");
    assert_eq!(
        seen.body["holder"]["identity"],
        s.identity.as_str(),
        "{seen:?}"
    );
    assert_eq!(
        seen.body["holders"].as_array().map(Vec::len),
        Some(1),
        "{seen:?}"
    );
    assert_eq!(seen.body["waiters"], serde_json::json!([]), "{seen:?}");
    // Readers too: the planted writer does not hold them back.
    let other = Sidecar::start(&format!("{lock}-reader"), &[]);
    let released = s
        .call("DELETE", &format!("/lock/{lock}?token={token}"))
        .await;
    assert_eq!(released.status, 200, "{released:?}");
    let read = other
        .call("POST", &format!("/lock/{lock}?mode=read&wait=0"))
        .await;
    assert_eq!(read.status, 200, "{read:?}");
    let metrics = s.call("GET", "/metrics").await;
    for kind in ["lock", "write"] {
        assert!(
            metric(
                &metrics.body,
                &format!("baton_sidecar_ignored_queue_nodes_total{{kind=\"{kind}\"}} 1")
            ),
            "{kind}: {metrics:?}"
        );
    }
}

/// The issue's scenario: worker 1's lease runs out, worker 2 (same pod, same sidecar) takes
/// the lock; worker 1's renew and release with its old token are refused with 409 and worker
/// 2 still holds. Without a token: 400.
async fn a_stale_token_cannot_renew_or_release_the_current_grant() {
    let lock = unique("stale");
    let s = Sidecar::start(&format!("{lock}-pod"), &[]);
    let first = s.call("POST", &format!("/lock/{lock}?ttl=200ms")).await;
    assert_eq!(first.status, 200, "{first:?}");
    let stale = first.body["token"].as_i64().expect("token");
    s.wait_log("lease ran out; releasing the lock");
    let second = s
        .call("POST", &format!("/lock/{lock}?wait=30s&ttl=60s"))
        .await;
    assert_eq!(second.status, 200, "{second:?}");
    let current = second.body["token"].as_i64().expect("token");
    assert!(current > stale);
    for (method, path) in [
        ("DELETE", format!("/lock/{lock}?token={stale}")),
        ("POST", format!("/lock/{lock}/renew?token={stale}")),
    ] {
        let refused = s.call(method, &path).await;
        assert_eq!(
            (refused.status, refused.error_code()),
            (409, "StaleToken"),
            "{method} {path}: {refused:?}"
        );
    }
    for (method, path) in [
        ("DELETE", format!("/lock/{lock}")),
        ("POST", format!("/lock/{lock}/renew")),
    ] {
        let refused = s.call(method, &path).await;
        assert_eq!(
            (refused.status, refused.error_code()),
            (400, "MissingToken"),
            "{method} {path}: {refused:?}"
        );
        let message = refused.body["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains("token"), "{message}");
    }
    let seen = s.call("GET", &format!("/lock/{lock}")).await;
    assert_eq!(seen.body["self"]["holds"], true, "{seen:?}");
    assert_eq!(seen.body["self"]["token"], current, "{seen:?}");
    assert_eq!(seen.body["holder"]["token"], current, "{seen:?}");
    let renewed = s
        .call("POST", &format!("/lock/{lock}/renew?token={current}"))
        .await;
    assert_eq!(renewed.status, 200, "{renewed:?}");
    let released = s
        .call("DELETE", &format!("/lock/{lock}?token={current}"))
        .await;
    assert_eq!(released.status, 200, "{released:?}");
}

/// Elections and locks live under `/baton/<namespace>`; the same names in two namespaces are
/// two elections and two locks; without --namespace the namespace is `default`.
async fn recipes_live_under_their_namespace() {
    let name = unique("web");
    let observer = client().await;
    let a = Sidecar::start_with(&format!("{name}-a"), &[&name], &["--namespace", "team-a"]);
    let b = Sidecar::start_with(&format!("{name}-b"), &[&name], &["--namespace", "team-b"]);
    let plain = Sidecar::start(&format!("{name}-plain"), &[&name]);
    for s in [&a, &b, &plain] {
        let body = leader_of(s, &name).await;
        assert_eq!(body["self"]["isLeader"], true, "each leads its own: {body}");
    }
    for (ns, s) in [("team-a", &a), ("team-b", &b), ("default", &plain)] {
        let dir = format!("/baton/{ns}/elections/{name}");
        let children = observer.list_children(&dir).await.expect("list");
        assert_eq!(children.len(), 1, "{dir}: {children:?}");
        let (data, stat) = observer
            .get_data(&format!("{dir}/{}", children[0]))
            .await
            .expect("read");
        assert_ne!(stat.ephemeral_owner, 0, "an ephemeral candidate");
        let data: serde_json::Value = serde_json::from_slice(&data).expect("json");
        assert_eq!(data["identity"], s.identity.as_str());
    }
    assert_eq!(
        observer
            .list_children(&format!("/baton/elections/{name}"))
            .await,
        Err(zk::Error::NoNode),
        "nothing at the old, global path"
    );
    let granted = a.call("POST", &format!("/lock/{name}?wait=0")).await;
    assert_eq!(granted.status, 200, "{granted:?}");
    let in_b = b.call("POST", &format!("/lock/{name}?wait=0")).await;
    assert_eq!(in_b.status, 200, "another namespace's lock: {in_b:?}");
    let held = observer
        .list_children(&format!("/baton/team-a/locks/{name}"))
        .await
        .expect("list");
    assert_eq!(held.len(), 1, "{held:?}");
}

/// With `--zk-digest` the namespace's nodes carry a digest ACL: another digest user and an
/// unauthenticated session can neither read nor write there, while the sidecar works.
async fn a_digest_namespace_keeps_other_users_out() {
    let name = unique("guarded");
    let ns = "digest-a";
    let s = Sidecar::start_with(
        &format!("{name}-pod"),
        &[&name],
        &["--namespace", ns, "--zk-digest", "alice:secret"],
    );
    let body = leader_of(&s, &name).await;
    assert_eq!(body["self"]["isLeader"], true, "{body}");
    let granted = s.call("POST", &format!("/lock/{name}?wait=0")).await;
    assert_eq!(granted.status, 200, "{granted:?}");
    let dir = format!("/baton/{ns}/elections/{name}");
    let owner = digest_client("alice:secret").await;
    let nodes = owner.list_children(&dir).await.expect("the owner reads");
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let node = format!("{dir}/{}", nodes[0]);
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    for (who, stranger) in [
        ("another digest user", digest_client("mallory:secret").await),
        ("an unauthenticated session", client().await),
    ] {
        assert_eq!(
            stranger.list_children(&dir).await.err(),
            Some(zk::Error::NoAuth),
            "{who} lists"
        );
        assert_eq!(
            stranger.get_data(&node).await.err(),
            Some(zk::Error::NoAuth),
            "{who} reads"
        );
        assert_eq!(
            stranger
                .create(&format!("{dir}/candidate-0000000000"), b"{}", &open)
                .await
                .err(),
            Some(zk::Error::NoAuth),
            "{who} plants"
        );
        assert_eq!(
            stranger.set_data(&node, b"{}", None).await.err(),
            Some(zk::Error::NoAuth),
            "{who} writes"
        );
        assert_eq!(
            stranger.delete(&node, None).await.err(),
            Some(zk::Error::NoAuth),
            "{who} deletes"
        );
        assert_eq!(
            stranger
                .create(&format!("/baton/{ns}/locks/x"), b"", &open)
                .await
                .err(),
            Some(zk::Error::NoAuth),
            "{who} creates a lock folder"
        );
    }
    let still = leader_of(&s, &name).await;
    assert_eq!(still["self"]["isLeader"], true, "{still}");
}

against_both!(
    a_planted_persistent_candidate_never_leads,
    a_planted_lock_node_never_blocks_or_holds,
    a_stale_token_cannot_renew_or_release_the_current_grant,
    recipes_live_under_their_namespace,
    a_digest_namespace_keeps_other_users_out,
);
