//! Streams told of the session: a stream hold, a follow stream and a campaign stream hear
//! `suspended` when the sidecar is cut off from the ensemble (what they hold stands until
//! `validUntil`), `resumed` when the same session reconnects, and `lost` when it expired.

mod common;

use common::proxy::CutProxy;
use common::sse::EventStream;
use common::{Sidecar, unique, zk_address};

async fn streams_hear_of_a_suspension_and_the_resumption() {
    let election = unique("suspend");
    let lock = unique("suspend-lock");
    let proxy = CutProxy::start(zk_address()).await;
    // A timeout long enough to reconnect within it.
    let a = Sidecar::spawn(
        &proxy.addr.to_string(),
        &format!("{election}-a"),
        &[&election],
        &["--session-timeout", "20s"],
        &[],
    );
    a.wait_log("session established");
    let mut follow = EventStream::open(a.addr, "GET", &format!("/leader/{election}?follow=stream"))
        .await
        .expect("a follow stream");
    follow
        .wait_for("leader", |d| d["self"]["isLeader"] == true)
        .await;
    let mut hold = EventStream::open(a.addr, "POST", &format!("/lock/{lock}?hold=stream"))
        .await
        .expect("a stream hold");
    let granted = hold.wait_for("granted", |_| true).await;

    proxy.block();
    let suspended = follow.wait_for("suspended", |_| true).await;
    assert_eq!(suspended["election"], election.as_str(), "{suspended}");
    assert_eq!(suspended["state"], "SUSPENDED", "{suspended}");
    assert!(suspended["validUntil"].is_string(), "{suspended}");
    let held = hold.wait_for("suspended", |_| true).await;
    assert_eq!(held["lock"], lock.as_str(), "{held}");
    assert_eq!(held["token"], granted["token"], "{held}");
    assert!(held["validUntil"].is_string(), "{held}");

    proxy.unblock();
    let resumed = follow.wait_for("resumed", |_| true).await;
    assert_eq!(resumed["state"], "CONNECTED", "{resumed}");
    assert_eq!(resumed["generation"], suspended["generation"], "{resumed}");
    let held = hold.wait_for("resumed", |_| true).await;
    assert_eq!(held["token"], granted["token"], "{held}");
    // The same session: the lock is still this pod's.
    let seen = a.call("GET", &format!("/lock/{lock}")).await;
    assert_eq!(seen.body["self"]["holds"], true, "{seen:?}");
}

async fn a_campaign_and_a_follow_stream_hear_the_session_expire() {
    let election = unique("expire");
    let proxy = CutProxy::start(zk_address()).await;
    // The shortest timeout the reference server grants (2 × tickTime), to keep the test short.
    let a = Sidecar::spawn(
        &proxy.addr.to_string(),
        &format!("{election}-a"),
        &[&election],
        &["--session-timeout", "4s", "--candidacy", "app"],
        &[],
    );
    a.wait_log("session established");
    let mut campaign = EventStream::open(a.addr, "GET", &format!("/leader/{election}/campaign"))
        .await
        .expect("a campaign stream");
    let elected = campaign.wait_for("elected", |_| true).await;
    let mut follow = EventStream::open(a.addr, "GET", &format!("/leader/{election}?follow=stream"))
        .await
        .expect("a follow stream");
    let b = Sidecar::start(&format!("{election}-b"), &[&election]);

    proxy.block();
    campaign.wait_for("suspended", |_| true).await;
    follow.wait_for("suspended", |_| true).await;
    // b leads once a's session expired on the ensemble.
    let token = elected["token"].as_i64().unwrap_or(0);
    let next = b
        .call("GET", &format!("/leader/{election}?wait=60s&token={token}"))
        .await;
    assert_eq!(next.body["leader"]["identity"], b.identity, "{next:?}");

    // a learns of the expiry when it reaches the ensemble again.
    proxy.unblock();
    let lost = campaign.wait_for("lost", |_| true).await;
    assert_eq!(
        lost["token"], token,
        "the term ended with the session: {lost}"
    );
    follow.wait_for("lost", |_| true).await;
    follow.wait_for("connected", |_| true).await;
    // Still campaigning: a queues again in the new session, behind b.
    let candidate = campaign.wait_for("candidate", |_| true).await;
    assert_eq!(candidate["leader"]["identity"], b.identity, "{candidate}");
}

against_both!(
    streams_hear_of_a_suspension_and_the_resumption,
    a_campaign_and_a_follow_stream_hear_the_session_expire,
);
