//! Elections across real `baton-sidecar` processes: one leader at a time, handover on SIGTERM
//! and on resign, observed through the HTTP long-poll (no sleeps).

mod common;

use common::{Sidecar, unique};
use serde_json::Value;

/// Long-polls every sidecar until each reports a leader whose token differs from `old`, then
/// until they all agree on it; returns (token, identity). Each sidecar's answer is
/// self-consistent (a sidecar names itself leader exactly when it reports `isLeader`), so
/// agreement means the leader's own sidecar has taken office.
async fn settle(sidecars: &[&Sidecar], election: &str, old: i64) -> (i64, String) {
    let mut token = old;
    loop {
        let mut seen = Vec::new();
        for s in sidecars {
            let answer = s
                .call("GET", &format!("/leader/{election}?wait=30s&token={token}"))
                .await;
            assert_eq!(answer.status, 200, "{answer:?}");
            check_answer(s, &answer.body);
            seen.push(answer.body["leader"]["token"].as_i64().unwrap_or(0));
        }
        let newest = seen.iter().copied().max().unwrap_or(0);
        if seen.iter().all(|&t| t == newest) && newest != old {
            let leaders = snapshot(sidecars, election).await;
            let leader = leaders
                .iter()
                .find(|(_, leads)| *leads)
                .map(|(who, _)| who.clone());
            return (
                newest,
                leader.unwrap_or_else(|| panic!("no sidecar leads at token {newest}: {leaders:?}")),
            );
        }
        // Someone is behind: poll again from what the laggards report.
        token = *seen.iter().min().unwrap_or(&old);
        if token == newest {
            token = old;
        }
    }
}

/// The shape of a `GET /leader` answer, and its self-consistency.
fn check_answer(s: &Sidecar, body: &Value) {
    assert_eq!(body["self"]["identity"], s.identity.as_str(), "{body}");
    assert_eq!(body["self"]["state"], "CONNECTED", "{body}");
    let names_self = body["leader"]["identity"] == s.identity.as_str();
    assert_eq!(
        body["self"]["isLeader"], names_self,
        "isLeader agrees with the leader field: {body}"
    );
    if !body["leader"].is_null() {
        assert!(
            body["leader"]["token"].as_i64().is_some_and(|t| t > 0),
            "{body}"
        );
        assert!(
            body["leader"]["since"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z')),
            "{body}"
        );
        assert!(body["leader"].get("address").is_some(), "{body}");
    }
}

/// Asks every sidecar (plain GET) whether it leads; asserts at most one says yes.
async fn snapshot(sidecars: &[&Sidecar], election: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for s in sidecars {
        let answer = s.call("GET", &format!("/leader/{election}")).await;
        assert_eq!(answer.status, 200, "{answer:?}");
        out.push((s.identity.clone(), answer.body["self"]["isLeader"] == true));
        let ready = s.call("GET", &format!("/leader/{election}/ready")).await;
        let leads = answer.body["self"]["isLeader"] == true;
        if leads {
            assert_eq!(ready.status, 200, "{ready:?}");
        } else {
            assert_eq!(
                (ready.status, ready.error_code()),
                (503, "NotLeader"),
                "{ready:?}"
            );
        }
    }
    let leaders = out.iter().filter(|(_, leads)| *leads).count();
    assert!(leaders <= 1, "two leaders at once: {out:?}");
    out
}

async fn one_leader_among_three_and_handover_on_sigterm_and_resign() {
    let election = unique("e");
    let ids: Vec<String> = (0..3).map(|i| format!("{election}-pod-{i}")).collect();
    let mut sidecars: Vec<Sidecar> = ids
        .iter()
        .map(|id| Sidecar::start(id, &[&election]))
        .collect();

    let all: Vec<&Sidecar> = sidecars.iter().collect();
    let (first_token, first_leader) = settle(&all, &election, 0).await;
    let leaders = snapshot(&all, &election).await;
    assert_eq!(leaders.iter().filter(|(_, l)| *l).count(), 1, "{leaders:?}");

    // SIGTERM the leader: it exits 0 and another takes over with a higher token.
    let index = sidecars
        .iter()
        .position(|s| s.identity == first_leader)
        .expect("a sidecar leads");
    let mut departed = sidecars.remove(index);
    let status = departed.terminate();
    assert!(
        status.success(),
        "SIGTERM exits 0: {status:?}\n{}",
        departed.log()
    );
    assert!(
        departed.log().contains("no longer the leader"),
        "{}",
        departed.log()
    );
    let rest: Vec<&Sidecar> = sidecars.iter().collect();
    let (second_token, second_leader) = settle(&rest, &election, first_token).await;
    assert!(
        second_token > first_token,
        "tokens rise: {first_token} then {second_token}"
    );
    assert_ne!(second_leader, first_leader);
    let leaders = snapshot(&rest, &election).await;
    assert_eq!(leaders.iter().filter(|(_, l)| *l).count(), 1, "{leaders:?}");

    // Resign: the other one leads, the resigner queues at the back.
    let resigner = rest
        .iter()
        .find(|s| s.identity == second_leader)
        .expect("leader");
    let answer = resigner
        .call("POST", &format!("/leader/{election}/resign"))
        .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.body["resigned"], true);
    let (third_token, third_leader) = settle(&rest, &election, second_token).await;
    assert!(third_token > second_token);
    assert_ne!(third_leader, second_leader);
    let follower = rest
        .iter()
        .find(|s| s.identity != third_leader)
        .expect("a follower");
    let answer = follower
        .call("POST", &format!("/leader/{election}/resign"))
        .await;
    assert_eq!(
        (answer.status, &answer.body["resigned"]),
        (200, &Value::Bool(false)),
        "{answer:?}"
    );
    let leaders = snapshot(&rest, &election).await;
    assert_eq!(leaders.iter().filter(|(_, l)| *l).count(), 1, "{leaders:?}");

    // The default election (`/leader` without a name) is the first --election.
    let answer = rest[0].call("GET", "/leader").await;
    assert_eq!(answer.body["election"], election.as_str());
    assert_eq!(answer.body["leader"]["token"], third_token);

    // Long-poll with the current token and no change: returns at the deadline, same leader.
    let answer = rest[0]
        .call(
            "GET",
            &format!("/leader/{election}?wait=200ms&token={third_token}"),
        )
        .await;
    assert_eq!(answer.body["leader"]["token"], third_token);

    for mut s in sidecars {
        assert!(s.terminate().success());
    }
}

async fn a_killed_leader_is_replaced_once_its_session_expires() {
    let election = unique("k");
    // A short session (the servers' smallest is 4s) so the expiry comes soon.
    let mut sidecars: Vec<Sidecar> = (0..2)
        .map(|i| {
            Sidecar::start_with(
                &format!("{election}-pod-{i}"),
                &[&election],
                &["--session-timeout", "4s"],
            )
        })
        .collect();
    let all: Vec<&Sidecar> = sidecars.iter().collect();
    let (first_token, first_leader) = settle(&all, &election, 0).await;

    // kill -9: nothing resigns or closes the session; only its expiry frees the election.
    let index = sidecars
        .iter()
        .position(|s| s.identity == first_leader)
        .expect("a sidecar leads");
    let mut killed = sidecars.remove(index);
    killed.kill();
    let rest: Vec<&Sidecar> = sidecars.iter().collect();
    let (second_token, second_leader) = settle(&rest, &election, first_token).await;
    assert!(
        second_token > first_token,
        "{first_token} then {second_token}"
    );
    assert_eq!(second_leader, sidecars[0].identity);
    sidecars[0].wait_log("became the leader");
}

async fn a_sidecar_stands_in_several_elections() {
    let (a, b) = (unique("multi-a"), unique("multi-b"));
    let mut one = Sidecar::start_with("multi-1", &[&a, &b], &["--address", "10.0.0.1:8080"]);
    let first = one.call("GET", &format!("/leader/{a}?wait=30s")).await;
    assert_eq!(first.body["leader"]["identity"], "multi-1", "{first:?}");
    assert_eq!(
        first.body["leader"]["address"], "10.0.0.1:8080",
        "{first:?}"
    );
    let second = one.call("GET", &format!("/leader/{b}?wait=30s")).await;
    assert_eq!(second.body["self"]["isLeader"], true, "{second:?}");
    assert_ne!(
        first.body["leader"]["token"],
        second.body["leader"]["token"]
    );
    let metrics = one.call("GET", "/metrics").await;
    let text = metrics.body.as_str().expect("text");
    assert!(
        text.contains(&format!("baton_sidecar_is_leader{{election=\"{a}\"}} 1")),
        "{text}"
    );
    assert!(one.terminate().success());
}

against_both!(
    a_killed_leader_is_replaced_once_its_session_expires,
    one_leader_among_three_and_handover_on_sigterm_and_resign,
    a_sidecar_stands_in_several_elections,
);
