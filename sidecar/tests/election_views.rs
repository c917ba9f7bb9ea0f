//! What a pod says about an election is never behind or ahead of itself: a bystander (an
//! app-held candidacy that is not campaigning) learns of a leader whose folder appeared while
//! it looked, and a `follow=stream` opened as the pod becomes leader never says "not leading,
//! leading again" with the same token for a term that did not end. Real sidecar processes
//! against a real ensemble.

mod common;

use common::proxy::{CutProxy, EXISTS};
use common::sse::EventStream;
use common::{BOUND, Sidecar, unique, zk_address};
use serde_json::{Value, json};
use zookeeper_client as zk;

async fn a_bystander_sees_a_leader_whose_folder_appeared_while_it_looked() {
    let election = unique("bystander");
    let dir = format!("/baton/default/elections/{election}");
    let proxy = CutProxy::start(zk_address()).await;
    // The bystander finds no folder, then asks whether it exists (to watch for it): hold that
    // question until the folder and a leader are there, as when another pod's first
    // candidacy lands between the two reads.
    let mut hold = proxy.hold(&[EXISTS], &dir);
    let a = Sidecar::spawn(
        &proxy.addr.to_string(),
        &format!("{election}-a"),
        &[&election],
        &["--candidacy", "app"],
        &[],
    );
    hold.held().await;
    let other = zk::Client::connect(&zk_address())
        .await
        .expect("a session of another pod");
    let open = zk::Acls::anyone_all();
    other
        .mkdir(
            "/baton/default/elections",
            &zk::CreateMode::Persistent.with_acls(open),
        )
        .await
        .expect("the elections folder");
    other
        .create(&dir, &[], &zk::CreateMode::Container.with_acls(open))
        .await
        .expect("the election's folder");
    let data = json!({ "identity": "other", "since": "" }).to_string();
    let (stat, _) = other
        .create(
            &format!("{dir}/candidate-"),
            data.as_bytes(),
            &zk::CreateMode::EphemeralSequential.with_acls(open),
        )
        .await
        .expect("the other pod's candidate");
    hold.release();

    // `/events` takes no fresh look (a `GET /leader` would, and hide a view stuck on a watch
    // that never fires): it says what the bystander's own watches told it.
    let mut events = EventStream::open(a.addr, "GET", "/events")
        .await
        .expect("a stream");
    // Bounded as a whole: keep-alives would otherwise keep a stream that never says it open.
    let saw = events.wait_for("leader", |d| d["leader"]["identity"] == "other");
    tokio::time::timeout(BOUND, saw)
        .await
        .expect("the bystander never saw the other pod lead");
    let answer = a
        .call("GET", &format!("/leader/{election}?wait=60s&token=0"))
        .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.body["leader"]["token"], stat.czxid, "{answer:?}");
}

/// Iterations of the race below; each starts a sidecar, so they are few, with several
/// elections each (every election's stream is a chance to catch it).
const ROUNDS: usize = 4;
const ELECTIONS: usize = 16;

/// (token, isLeader) of a `leader` event.
fn term(data: &Value) -> (i64, bool) {
    (
        data["leader"]["token"].as_i64().unwrap_or(0),
        data["self"]["isLeader"] == true,
    )
}

/// Reads `stream` until this pod leads with a token other than `not`; fails if it said it
/// leads with a token after having said it no longer did (a term that ends and starts again).
async fn until_leading(stream: &mut EventStream, not: i64, seen: &mut Vec<(i64, bool)>) -> i64 {
    loop {
        let (name, data) = stream.next_event().await.expect("the stream goes on");
        if name != "leader" {
            continue;
        }
        let now = term(&data);
        if now.1 {
            let ended_before = seen
                .iter()
                .position(|t| *t == now)
                .is_some_and(|first| seen[first..].iter().any(|t| *t != now));
            assert!(
                !ended_before,
                "the stream said term {} ended, then leading again in it: {seen:?} then {now:?}",
                now.0
            );
        }
        seen.push(now);
        if now.1 && now.0 != not {
            return now.0;
        }
    }
}

async fn a_follow_stream_opened_as_the_pod_becomes_leader_never_goes_back() {
    for _ in 0..ROUNDS {
        let elections: Vec<String> = (0..ELECTIONS).map(|_| unique("flap")).collect();
        let names: Vec<&str> = elections.iter().map(String::as_str).collect();
        let a = Sidecar::spawn(&zk_address(), "flap-a", &names, &[], &[]);
        // As an app does once its sidecar serves: follow at once, while the sidecar connects,
        // queues and takes office (the streams open one after another across those moments).
        let mut streams = Vec::new();
        for election in &elections {
            let path = format!("/leader/{election}?follow=stream");
            streams.push(
                EventStream::open(a.addr, "GET", &path)
                    .await
                    .expect("a stream"),
            );
        }
        for (election, stream) in elections.iter().zip(&mut streams) {
            let mut seen = Vec::new();
            let first = tokio::time::timeout(BOUND, until_leading(stream, 0, &mut seen))
                .await
                .expect("this pod never led");
            // A real end of the term, then the next: the stream says both, in order.
            let resigned = a.call("POST", &format!("/leader/{election}/resign")).await;
            assert_eq!(resigned.status, 200, "{resigned:?}");
            let second = tokio::time::timeout(BOUND, until_leading(stream, first, &mut seen))
                .await
                .expect("this pod never led again");
            assert!(second > first, "{seen:?}");
        }
    }
}

against_both!(
    a_bystander_sees_a_leader_whose_folder_appeared_while_it_looked,
    a_follow_stream_opened_as_the_pod_becomes_leader_never_goes_back,
);
