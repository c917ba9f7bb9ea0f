//! Group membership over HTTP (`GET /members/NAME`) across real `baton-sidecar` processes:
//! every live candidate listed with its address and which one leads, one version for one
//! membership on every pod, and a long-poll woken by a member leaving.

mod common;

use std::time::{Duration, Instant};

use common::{Sidecar, unique};

async fn a_member_leaving_changes_the_version_and_wakes_a_long_poll() {
    let group = unique("group");
    let first = Sidecar::start_with(
        &format!("{group}-a"),
        &[&group],
        &["--address", "10.0.0.1:80"],
    );
    let second = Sidecar::start_with(
        &format!("{group}-b"),
        &[&group],
        &["--address", "10.0.0.2:80"],
    );
    let mut third = Sidecar::start(&format!("{group}-c"), &[&group]);
    // An observer that does not stand in the election reads it too.
    let observer = Sidecar::start(&format!("{group}-o"), &[]);
    let path = format!("/members/{group}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let all = loop {
        let all = observer.call("GET", &path).await;
        assert_eq!(all.status, 200, "{all:?}");
        if all.body["members"].as_array().map(Vec::len) == Some(3) {
            break all;
        }
        assert!(
            Instant::now() < deadline,
            "three members never listed: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let members = all.body["members"].as_array().expect("members");
    let identities: Vec<_> = members
        .iter()
        .map(|m| m["identity"].as_str().unwrap_or_default())
        .collect();
    for who in ["a", "b", "c"] {
        assert!(
            identities.contains(&format!("{group}-{who}").as_str()),
            "{all:?}"
        );
    }
    let leaders = members.iter().filter(|m| m["leader"] == true).count();
    assert_eq!(leaders, 1, "{all:?}");
    assert_eq!(
        members[0]["leader"], true,
        "the first live member leads: {all:?}"
    );
    let a = members
        .iter()
        .find(|m| m["identity"] == format!("{group}-a"))
        .expect("a");
    assert_eq!(a["address"], "10.0.0.1:80", "{all:?}");
    let version = all.body["version"].as_str().expect("version").to_owned();
    // Every pod answers the same version for the same membership.
    let seen = first.call("GET", &path).await;
    assert_eq!(seen.body["version"], version.as_str(), "{seen:?}");
    // A different version answers at once: with the longest `wait`, a sidecar that waited
    // would outlast the test client's own timeout and fail the call.
    let at_once = second
        .call("GET", &format!("{path}?wait=600s&version=other"))
        .await;
    assert_eq!(at_once.body["version"], version.as_str());
    // The current one waits out `wait` unchanged.
    let started = Instant::now();
    let unchanged = second
        .call("GET", &format!("{path}?wait=1s&version={version}"))
        .await;
    assert_eq!(unchanged.status, 200, "{unchanged:?}");
    assert_eq!(unchanged.body["version"], version.as_str());
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    // A long-poll on the current version is woken by the third member leaving.
    let poll = tokio::spawn({
        let (addr, path, version) = (observer.addr, path.clone(), version.clone());
        async move {
            common::http(
                addr,
                "GET",
                &format!("{path}?wait=60s&version={version}"),
                None,
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!poll.is_finished(), "answered before anything changed");
    assert!(third.terminate().success());
    // Woken by the change: a poll that ran out its `wait` would answer the old version.
    let changed = poll.await.expect("poll");
    assert_eq!(changed.status, 200, "{changed:?}");
    assert_ne!(changed.body["version"], version.as_str(), "{changed:?}");
    let left: Vec<_> = changed.body["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m["identity"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(!left.contains(&format!("{group}-c")), "{changed:?}");
    // An election nobody stands in has no members.
    let empty = observer
        .call("GET", &format!("/members/{}", unique("nobody")))
        .await;
    assert_eq!(empty.status, 200, "{empty:?}");
    assert_eq!(empty.body["members"].as_array().map(Vec::len), Some(0));
}

against_both!(a_member_leaving_changes_the_version_and_wakes_a_long_poll);
