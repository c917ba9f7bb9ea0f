//! `validUntil`: until when a pod may act as leader or lock holder without hearing from the
//! ensemble, in `/leader`, `/leader/ready`, lock grants and `GET /lock` of real sidecars.

mod common;

use std::time::{Duration, SystemTime};

use baton_sidecar::recipe::timestamp::parse_rfc3339;
use common::sse::EventStream;
use common::{Sidecar, unique};
use serde_json::Value;

/// The sidecars' requested (and granted: both servers allow it) session timeout.
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// `value` is an RFC 3339 time after now and no later than now + the session timeout.
fn check_valid_until(value: &Value, what: &str) -> SystemTime {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("{what}: validUntil is {value}"));
    let until = parse_rfc3339(text).unwrap_or_else(|| panic!("{what}: {text:?} is not RFC 3339"));
    let now = SystemTime::now();
    assert!(
        until > now,
        "{what}: validUntil {text} is not in the future"
    );
    assert!(
        until <= now + SESSION_TIMEOUT,
        "{what}: validUntil {text} is past now + the session timeout"
    );
    until
}

async fn valid_until_is_ahead_of_now_and_within_the_session_timeout() {
    let election = unique("valid");
    let lock = unique("valid-lock");
    let a = Sidecar::start(&format!("{election}-a"), &[&election]);
    let leads = a
        .call("GET", &format!("/leader/{election}?wait=30s&token=0"))
        .await;
    assert_eq!(leads.body["self"]["isLeader"], true, "{leads:?}");
    check_valid_until(&leads.body["self"]["validUntil"], "/leader");
    let ready = a.call("GET", &format!("/leader/{election}/ready")).await;
    check_valid_until(&ready.body["validUntil"], "/leader/ready");

    // A follower and a pod without the lock have none.
    let b = Sidecar::start(&format!("{election}-b"), &[&election]);
    let follows = b.call("GET", &format!("/leader/{election}")).await;
    assert_eq!(follows.body["self"]["isLeader"], false, "{follows:?}");
    assert!(follows.body["self"]["validUntil"].is_null(), "{follows:?}");

    let lease = a.call("POST", &format!("/lock/{lock}?ttl=60s")).await;
    assert_eq!(lease.status, 200, "{lease:?}");
    check_valid_until(&lease.body["validUntil"], "lock grant");
    let seen = a.call("GET", &format!("/lock/{lock}")).await;
    check_valid_until(&seen.body["self"]["validUntil"], "GET /lock");
    let elsewhere = b.call("GET", &format!("/lock/{lock}")).await;
    assert!(
        elsewhere.body["self"]["validUntil"].is_null(),
        "{elsewhere:?}"
    );

    // Never past the lease: a short lease bounds it.
    let short = unique("valid-short");
    let brief = a.call("POST", &format!("/lock/{short}?ttl=2s")).await;
    assert_eq!(brief.status, 200, "{brief:?}");
    let until = check_valid_until(&brief.body["validUntil"], "short lease");
    let expires = brief.body["expiresAt"]
        .as_str()
        .and_then(parse_rfc3339)
        .expect("expiresAt");
    assert!(until <= expires, "{brief:?}");

    // A stream hold's grant carries it too.
    let stream = unique("valid-stream");
    let mut hold = EventStream::open(b.addr, "POST", &format!("/lock/{stream}?hold=stream"))
        .await
        .expect("a stream hold");
    let granted = hold.wait_for("granted", |_| true).await;
    check_valid_until(&granted["validUntil"], "stream grant");
}

against_both!(valid_until_is_ahead_of_now_and_within_the_session_timeout);
