//! The recipe library against a real ensemble: owner-id recovery of a lost create reply,
//! reader/writer fairness, resign, and the SUSPENDED → LOST → re-entry path.

mod common;

use std::time::Duration;

use baton_sidecar::recipe::{
    Candidate, ConnectionState, ElectionRecipe, ElectionView, LockError, LockMode, LockRecipe,
    Namespace, ResourceName, SessionControl, SessionHandle, SessionOptions, start_session,
};
use common::proxy::CutProxy;
use common::{BOUND, unique, zk_address};
use tokio::sync::watch;
use tokio::time::timeout;
use zookeeper_client as zk;

fn session(ensemble: &str, timeout: Duration) -> (SessionHandle, SessionControl) {
    start_session(SessionOptions {
        ensemble: ensemble.to_owned(),
        session_timeout: timeout,
        tls: None,
    })
}

async fn observer() -> zk::Client {
    zk::Client::connect(&zk_address())
        .await
        .expect("observer session")
}

/// Makes `dir` (a container under a persistent parent) the way the recipes would, so a test
/// can aim the proxy at the queue-node create rather than at the folder's.
async fn make_folder(client: &zk::Client, dir: &str) {
    let parent = &dir[..dir.rfind('/').expect("absolute")];
    client
        .mkdir(
            parent,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .expect("parent folder");
    client
        .create(
            dir,
            &[],
            &zk::CreateMode::Container.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .expect("folder");
}

async fn children(client: &zk::Client, dir: &str) -> Vec<String> {
    match client.list_children(dir).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {dir}: {e}"),
    }
}

/// Waits (event-driven, bounded) for a published view that satisfies `done`.
async fn view_where(
    views: &mut watch::Receiver<ElectionView>,
    done: impl Fn(&ElectionView) -> bool,
) -> ElectionView {
    let wait = async {
        loop {
            let view = views.borrow_and_update().clone();
            if done(&view) {
                return view;
            }
            views.changed().await.expect("the election task is running");
        }
    };
    timeout(BOUND, wait)
        .await
        .expect("the expected view within the bound")
}

fn candidate(identity: &str) -> Candidate {
    Candidate {
        identity: identity.to_owned(),
        address: Some(format!("{identity}:8080")),
        pod: None,
    }
}

async fn a_lock_create_whose_reply_is_lost_is_recovered_not_repeated() {
    let name = ResourceName::new(&unique("recover-lock")).expect("valid");
    let dir = name.lock_dir(&Namespace::default());
    let observer = observer().await;
    make_folder(&observer, &dir).await;
    let proxy = CutProxy::start(zk_address()).await;
    let (session, control) = session(&proxy.addr.to_string(), Duration::from_secs(10));
    proxy.arm(&format!("{dir}/lock-"));

    let lock = LockRecipe::new(session.clone(), name.clone(), "tester");
    let grant = timeout(
        BOUND,
        lock.acquire(LockMode::Exclusive, Duration::from_secs(30), None),
    )
    .await
    .expect("bounded")
    .expect("granted despite the lost reply");

    assert_eq!(proxy.cuts(), 1, "the create's reply was lost exactly once");
    let nodes = children(&observer, &dir).await;
    assert_eq!(nodes.len(), 1, "one node, not a second create: {nodes:?}");
    let (_, stat) = observer
        .get_data(&format!("{dir}/{}", nodes[0]))
        .await
        .expect("read node");
    assert_eq!(grant.path(), format!("{dir}/{}", nodes[0]));
    assert_eq!(
        grant.token(),
        stat.czxid,
        "the token is the recovered node's czxid"
    );
    let snapshot = session.snapshot();
    let client = snapshot.client.expect("connected");
    assert_eq!(
        stat.ephemeral_owner,
        client.session_id().0,
        "the node is this session's"
    );
    drop(client);

    grant.release(BOUND).await.expect("released");
    assert!(children(&observer, &dir).await.is_empty());
    control.close(BOUND).await;
}

async fn a_candidate_create_whose_reply_is_lost_is_recovered_not_repeated() {
    let name = ResourceName::new(&unique("recover-election")).expect("valid");
    let dir = name.election_dir(&Namespace::default());
    let observer = observer().await;
    make_folder(&observer, &dir).await;
    let proxy = CutProxy::start(zk_address()).await;
    let (session, control) = session(&proxy.addr.to_string(), Duration::from_secs(10));
    proxy.arm(&format!("{dir}/candidate-"));

    let election = ElectionRecipe::start(session.clone(), name.clone(), candidate("solo"));
    let view = view_where(&mut election.subscribe(), |v| v.is_leader).await;

    assert_eq!(proxy.cuts(), 1, "the create's reply was lost exactly once");
    let nodes = children(&observer, &dir).await;
    assert_eq!(nodes.len(), 1, "one candidate node, not two: {nodes:?}");
    assert_eq!(view.node.as_deref(), Some(nodes[0].as_str()));
    let (_, stat) = observer
        .get_data(&format!("{dir}/{}", nodes[0]))
        .await
        .expect("read node");
    assert_eq!(view.leader_token(), stat.czxid);

    election.leave().await;
    assert!(
        children(&observer, &dir).await.is_empty(),
        "leave deletes the candidacy"
    );
    control.close(BOUND).await;
}

async fn a_reader_queued_behind_a_writer_waits_for_it() {
    let name = ResourceName::new(&unique("rw")).expect("valid");
    let dir = name.lock_dir(&Namespace::default());
    let observer = observer().await;
    let (session, control) = session(&zk_address(), Duration::from_secs(10));
    let lock = LockRecipe::new(session.clone(), name.clone(), "tester");
    let now = Duration::ZERO;
    // Try-locks (wait=0) do not wait for the session to connect.
    timeout(BOUND, session.connected(1))
        .await
        .expect("bounded")
        .expect("connected");

    let first_read = lock
        .acquire(LockMode::Read, now, None)
        .await
        .expect("a lone reader is granted");
    let second_read = lock
        .acquire(LockMode::Read, now, None)
        .await
        .expect("readers share");
    let writer = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire(LockMode::Write, BOUND, None).await })
    };
    // Wait (on a child watch, not a clock) until the writer is queued behind the two readers.
    timeout(BOUND, async {
        loop {
            let (nodes, watcher) = observer.list_and_watch_children(&dir).await.expect("list");
            if nodes.iter().any(|n| n.starts_with("write-")) {
                break;
            }
            watcher.changed().await;
        }
    })
    .await
    .expect("the writer queued");

    let late_read = lock.acquire(LockMode::Read, now, None).await;
    assert!(
        matches!(late_read, Err(LockError::NotGranted { .. })),
        "a reader behind a waiting writer must wait: {late_read:?}"
    );
    assert!(!writer.is_finished(), "the writer waits for both readers");
    first_read.release(BOUND).await.expect("released");
    assert!(!writer.is_finished(), "one reader still holds");
    second_read.release(BOUND).await.expect("released");
    let write = timeout(BOUND, writer)
        .await
        .expect("bounded")
        .expect("task")
        .expect("the writer is granted once the readers leave");
    let state = lock.inspect().await.expect("inspect");
    assert_eq!(state.holders.len(), 1);
    assert_eq!(state.holders[0].mode, LockMode::Write);
    assert!(
        state.waiters.is_empty(),
        "the refused try-lock left no node: {state:?}"
    );

    let blocked = lock.acquire(LockMode::Read, now, None).await;
    assert!(
        matches!(blocked, Err(LockError::NotGranted { .. })),
        "{blocked:?}"
    );
    let write_token = write.token();
    write.release(BOUND).await.expect("released");
    let read = lock
        .acquire(LockMode::Read, BOUND, None)
        .await
        .expect("granted");
    assert!(read.token() > write_token, "tokens rise");
    read.release(BOUND).await.expect("released");
    control.close(BOUND).await;
}

async fn resign_hands_over_and_queues_at_the_back() {
    let name = ResourceName::new(&unique("resign")).expect("valid");
    let (session_a, control_a) = session(&zk_address(), Duration::from_secs(10));
    let (session_b, control_b) = session(&zk_address(), Duration::from_secs(10));
    let a = ElectionRecipe::start(session_a, name.clone(), candidate("a"));
    let first = view_where(&mut a.subscribe(), |v| v.is_leader).await;
    let b = ElectionRecipe::start(session_b, name.clone(), candidate("b"));
    view_where(&mut b.subscribe(), |v| {
        v.leader.as_ref().is_some_and(|l| l.identity == "a")
    })
    .await;

    assert!(a.resign().await.expect("resigned"), "a was leading");
    let second = view_where(&mut b.subscribe(), |v| v.is_leader).await;
    assert!(
        second.leader_token() > first.leader_token(),
        "a new term has a higher token"
    );
    let a_view = view_where(&mut a.subscribe(), |v| {
        v.leader_token() == second.leader_token()
    })
    .await;
    assert!(!a_view.is_leader);
    assert!(a_view.node > first.node, "a queued again at the back");
    assert!(b.resign().await.expect("resigned"), "b was leading");
    let third = view_where(&mut a.subscribe(), |v| v.is_leader).await;
    assert!(third.leader_token() > second.leader_token());
    let resigned = b.resign().await.expect("not leading");
    assert!(!resigned, "resigning a follower is a no-op");

    a.leave().await;
    b.leave().await;
    control_a.close(BOUND).await;
    control_b.close(BOUND).await;
}

async fn a_partition_suspends_then_a_lost_session_reenters_the_election() {
    let name = ResourceName::new(&unique("partition")).expect("valid");
    let proxy = CutProxy::start(zk_address()).await;
    // The shortest timeout the reference server grants (2 × tickTime), to keep the test short.
    let (session, control) = session(&proxy.addr.to_string(), Duration::from_secs(4));
    let election = ElectionRecipe::start(session.clone(), name.clone(), candidate("solo"));
    let mut views = election.subscribe();
    let first = view_where(&mut views, |v| v.is_leader).await;

    proxy.block();
    let suspended = view_where(&mut views, |v| v.state != ConnectionState::Connected).await;
    assert!(
        !suspended.is_leader,
        "a disconnected leader does not claim leadership"
    );
    assert!(!election.is_leader());
    view_where(&mut views, |v| v.state == ConnectionState::Lost).await;
    proxy.unblock();

    let again = view_where(&mut views, |v| {
        v.is_leader && v.generation > first.generation
    })
    .await;
    assert!(
        again.leader_token() > first.leader_token(),
        "re-entered with a new node"
    );
    assert_eq!(session.generation(), again.generation);
    election.leave().await;
    control.close(BOUND).await;
}

against_both!(
    a_lock_create_whose_reply_is_lost_is_recovered_not_repeated,
    a_candidate_create_whose_reply_is_lost_is_recovered_not_repeated,
    a_reader_queued_behind_a_writer_waits_for_it,
    resign_hands_over_and_queues_at_the_back,
    a_partition_suspends_then_a_lost_session_reenters_the_election,
);
