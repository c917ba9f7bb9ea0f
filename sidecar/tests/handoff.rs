//! Graceful hand-off on SIGTERM across real sidecar processes: a leading pod whose app follows
//! the election sends `stepping-down` and leads on until the app's `POST /leader/NAME/release`
//! (or `--release-grace`); a pod whose app follows nothing hands over at once.

mod common;

use common::sse::EventStream;
use common::{Sidecar, unique};
use serde_json::Value;

/// Waits on `sidecar` until the leader's token differs from `token`, and returns the answer.
async fn next_leader(sidecar: &Sidecar, election: &str, token: i64) -> Value {
    sidecar
        .call("GET", &format!("/leader/{election}?wait=60s&token={token}"))
        .await
        .body
}

async fn sigterm_leads_on_until_the_following_app_releases() {
    let election = unique("handoff");
    // The longest grace: were the release not what ends the wait, this test would time out.
    let mut a = Sidecar::start_with(
        &format!("{election}-a"),
        &[&election],
        &["--candidacy", "app", "--release-grace", "5m"],
    );
    let mut campaign = EventStream::open(a.addr, "GET", &format!("/leader/{election}/campaign"))
        .await
        .expect("a campaign stream");
    let elected = campaign.wait_for("elected", |_| true).await;
    let token = elected["token"].as_i64().expect("a token");
    let mut events = EventStream::open(a.addr, "GET", "/events")
        .await
        .expect("an event stream");
    let b = Sidecar::start(&format!("{election}-b"), &[&election]);
    let seen = b.call("GET", &format!("/leader/{election}")).await;
    assert_eq!(seen.body["leader"]["token"], token, "{seen:?}");

    a.signal_term();
    let stepping = campaign.wait_for("stepping-down", |_| true).await;
    assert_eq!(stepping["election"], election.as_str(), "{stepping}");
    assert_eq!(stepping["token"], token, "{stepping}");
    assert!(stepping["releaseBy"].is_string(), "{stepping}");
    let on_events = events
        .wait_for("stepping-down", |d| d["election"] == election.as_str())
        .await;
    assert_eq!(on_events["token"], token, "{on_events}");

    // Still the leader while the app finishes; but no longer ready, and nothing new granted.
    let mine = a.call("GET", &format!("/leader/{election}")).await;
    assert_eq!(mine.body["self"]["isLeader"], true, "{mine:?}");
    let seen = b.call("GET", &format!("/leader/{election}")).await;
    assert_eq!(seen.body["leader"]["token"], token, "{seen:?}");
    let ready = a.call("GET", "/readyz").await;
    assert_eq!(ready.status, 503, "{ready:?}");
    let lock = a
        .call("POST", &format!("/lock/{}?wait=0s", unique("late")))
        .await;
    assert_eq!(lock.status, 503, "{lock:?}");

    let released = a.call("POST", &format!("/leader/{election}/release")).await;
    assert_eq!(released.status, 200, "{released:?}");
    assert_eq!(released.body["released"], true, "{released:?}");
    assert_eq!(released.body["wasLeader"], true, "{released:?}");
    let next = next_leader(&b, &election, token).await;
    assert_eq!(next["leader"]["identity"], b.identity, "{next}");
    assert_eq!(next["self"]["isLeader"], true, "{next}");
    assert!(a.wait_exit().success());
    a.wait_log("the app released the election");
}

async fn sigterm_resigns_after_the_grace_when_the_app_never_releases() {
    let election = unique("handoff-grace");
    let mut a = Sidecar::start_with(
        &format!("{election}-a"),
        &[&election],
        &["--release-grace", "1s"],
    );
    let first = next_leader(&a, &election, 0).await;
    assert_eq!(first["self"]["isLeader"], true, "{first}");
    let token = first["leader"]["token"].as_i64().expect("a token");
    let b = Sidecar::start(&format!("{election}-b"), &[&election]);
    let mut follow = EventStream::open(a.addr, "GET", &format!("/leader/{election}?follow=stream"))
        .await
        .expect("a follow stream");
    follow.wait_for("leader", |_| true).await;

    a.signal_term();
    let stepping = follow.wait_for("stepping-down", |_| true).await;
    assert_eq!(stepping["token"], token, "{stepping}");
    // The app never releases: after the grace a resigns, and b leads.
    let next = next_leader(&b, &election, token).await;
    assert_eq!(next["leader"]["identity"], b.identity, "{next}");
    assert!(a.wait_exit().success());
    a.wait_log("did not release the election within --release-grace");
}

async fn sigterm_without_a_following_app_hands_over_at_once() {
    let election = unique("handoff-none");
    // The longest grace: a wait for a release would outlast the test's bound on the exit.
    let mut a = Sidecar::start_with(
        &format!("{election}-a"),
        &[&election],
        &["--release-grace", "5m"],
    );
    let first = next_leader(&a, &election, 0).await;
    assert_eq!(first["self"]["isLeader"], true, "{first}");
    let token = first["leader"]["token"].as_i64().expect("a token");
    let b = Sidecar::start(&format!("{election}-b"), &[&election]);
    // A stream hold follows no election.
    let _hold = EventStream::open(
        a.addr,
        "POST",
        &format!("/lock/{}?hold=stream", unique("h")),
    )
    .await
    .expect("a stream hold");
    assert!(a.terminate().success());
    assert!(
        !a.log().contains("stepping down: the app follows"),
        "{}",
        a.log()
    );
    let next = next_leader(&b, &election, token).await;
    assert_eq!(next["leader"]["identity"], b.identity, "{next}");
}

against_both!(
    sigterm_leads_on_until_the_following_app_releases,
    sigterm_resigns_after_the_grace_when_the_app_never_releases,
    sigterm_without_a_following_app_hands_over_at_once,
);
