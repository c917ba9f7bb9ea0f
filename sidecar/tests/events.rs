//! Push instead of poll: `GET /events` and `GET /leader/NAME?follow=stream` across real
//! sidecar processes, observed event by event (no sleeps, no timing).

mod common;

use common::proxy::CutProxy;
use common::sse::EventStream;
use common::{Sidecar, unique, zk_address};
use serde_json::Value;

fn names(body: &Value, identity: &str, leads: bool) -> bool {
    body["leader"]["identity"] == identity && body["self"]["isLeader"] == leads
}

async fn events_report_a_leader_change_and_a_lost_lock_when_the_session_expires() {
    let election = unique("events");
    let lock = unique("events-lock");
    let proxy = CutProxy::start(zk_address()).await;
    // The shortest timeout the reference server grants (2 × tickTime), to keep the test short.
    let a = Sidecar::spawn(
        &proxy.addr.to_string(),
        &format!("{election}-a"),
        &[&election],
        &["--session-timeout", "4s"],
        &[],
    );
    a.wait_log("session established");
    let mut a_events = EventStream::open(a.addr, "GET", "/events")
        .await
        .expect("a stream");
    a_events
        .wait_for("leader", |d| names(d, &a.identity, true))
        .await;
    let b = Sidecar::start(&format!("{election}-b"), &[&election]);
    let mut b_events = EventStream::open(b.addr, "GET", "/events")
        .await
        .expect("a stream");
    // The stream starts with the current state and leader.
    let (name, state) = b_events.next_event().await.expect("an event");
    assert_eq!(
        (name.as_str(), &state["state"]),
        ("state", &Value::from("CONNECTED"))
    );
    b_events
        .wait_for("leader", |d| names(d, &a.identity, false))
        .await;

    let granted = a.call("POST", &format!("/lock/{lock}?ttl=60s")).await;
    assert_eq!(granted.status, 200, "{granted:?}");
    let event = a_events
        .wait_for("granted", |d| d["lock"] == lock.as_str())
        .await;
    assert_eq!(event["token"], granted.body["token"], "{event}");
    assert_eq!(event["hold"], "lease", "{event}");

    // Cut a off: it is suspended at once, and b leads once a's session expires.
    proxy.block();
    a_events
        .wait_for("state", |d| d["state"] == "SUSPENDED")
        .await;
    b_events
        .wait_for("leader", |d| names(d, &b.identity, true))
        .await;

    // a learns of the expiry when it reaches the ensemble again: its lock is lost with the
    // session, and it follows b in a new one.
    proxy.unblock();
    let (mut lost, mut follows) = (None, false);
    while lost.is_none() || !follows {
        let (name, data) = a_events.next_event().await.expect("more events");
        match name.as_str() {
            "lost" if data["lock"] == lock.as_str() => lost = Some(data),
            "leader"
                if names(&data, &b.identity, false) && data["self"]["state"] == "CONNECTED" =>
            {
                follows = true
            }
            _ => {}
        }
    }
    let lost = lost.unwrap_or_default();
    assert_eq!(lost["reason"], "session lost", "{lost}");
    assert_eq!(lost["token"], granted.body["token"], "{lost}");
    let seen = a.call("GET", &format!("/lock/{lock}")).await;
    assert_eq!(seen.body["self"]["holds"], false, "{seen:?}");
}

async fn follow_stream_sends_the_leader_then_each_change() {
    let election = unique("follow");
    let a = Sidecar::start(&format!("{election}-a"), &[&election]);
    let first = a
        .call("GET", &format!("/leader/{election}?wait=30s&token=0"))
        .await;
    assert_eq!(first.body["self"]["isLeader"], true, "{first:?}");
    let b = Sidecar::start(&format!("{election}-b"), &[&election]);
    let path = format!("/leader/{election}?follow=stream");

    for (query, code) in [
        ("follow=poll", "InvalidFollow"),
        ("follow=stream&wait=1s", "FollowWithWait"),
    ] {
        let refused = EventStream::open(b.addr, "GET", &format!("/leader/{election}?{query}"))
            .await
            .err()
            .expect("refused");
        assert_eq!(refused.status, 400, "{refused:?}");
        assert_eq!(refused.body["error"]["code"], code, "{refused:?}");
    }

    let mut follow = EventStream::open(b.addr, "GET", &path)
        .await
        .expect("a stream");
    let (name, now) = follow.next_event().await.expect("the current answer");
    assert_eq!(name, "leader");
    assert!(names(&now, &a.identity, false), "{now}");
    assert_eq!(now["election"], election.as_str(), "{now}");

    let resigned = a.call("POST", &format!("/leader/{election}/resign")).await;
    assert_eq!(resigned.body["resigned"], true, "{resigned:?}");
    let (name, next) = follow.next_event().await.expect("the change");
    assert_eq!(name, "leader");
    // Possibly a moment with no leader (a's node gone, b not yet in office), then b.
    let next = if next["leader"].is_null() {
        follow.next_event().await.expect("the new leader").1
    } else {
        next
    };
    assert!(names(&next, &b.identity, true), "{next}");

    // /events carries a stream hold's grant and its release when the app's connection closes.
    let lock = unique("follow-lock");
    let mut events = EventStream::open(b.addr, "GET", "/events")
        .await
        .expect("a stream");
    let hold = EventStream::open(b.addr, "POST", &format!("/lock/{lock}?hold=stream"))
        .await
        .expect("a stream hold");
    let granted = events
        .wait_for("granted", |d| d["lock"] == lock.as_str())
        .await;
    assert_eq!(granted["hold"], "stream", "{granted}");
    drop(hold);
    let released = events
        .wait_for("released", |d| d["lock"] == lock.as_str())
        .await;
    assert_eq!(released["reason"], "stream closed", "{released}");
    assert_eq!(released["token"], granted["token"], "{released}");
}

against_both!(
    events_report_a_leader_change_and_a_lost_lock_when_the_session_expires,
    follow_stream_sends_the_leader_then_each_change,
);
