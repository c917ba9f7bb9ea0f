//! HTTP locks across real `baton-sidecar` processes: mutual exclusion with rising fencing
//! tokens, lease expiry, renew, and read/write sharing.

mod common;

use std::sync::{Arc, Mutex};

use common::{Sidecar, unique};

/// A resource protected by fencing tokens, as an application would guard one: it refuses a
/// token lower than the highest it has seen, and records any overlap of two holders.
#[derive(Default)]
struct ProtectedResource {
    state: Mutex<ResourceState>,
}

#[derive(Default)]
struct ResourceState {
    highest: i64,
    holder: Option<(String, i64)>,
    entries: usize,
    violations: Vec<String>,
}

impl ProtectedResource {
    fn enter(&self, who: &str, token: i64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((other, other_token)) = &s.holder {
            let v = format!(
                "{who} (token {token}) entered while {other} (token {other_token}) was inside"
            );
            s.violations.push(v);
        }
        if token <= s.highest {
            let v = format!(
                "{who} used token {token}, not above the highest seen {}",
                s.highest
            );
            s.violations.push(v);
        }
        s.highest = s.highest.max(token);
        s.holder = Some((who.to_owned(), token));
        s.entries += 1;
    }

    fn leave(&self, who: &str) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match &s.holder {
            Some((holder, _)) if holder == who => s.holder = None,
            other => {
                let v = format!("{who} left but the holder was {other:?}");
                s.violations.push(v);
            }
        }
    }
}

async fn five_sidecars_fifty_acquisitions_each_never_overlap_and_tokens_rise() {
    const SIDECARS: usize = 5;
    const ROUNDS: usize = 50;
    let lock = unique("contended");
    let sidecars: Vec<Arc<Sidecar>> = (0..SIDECARS)
        .map(|i| Arc::new(Sidecar::start(&format!("{lock}-pod-{i}"), &[])))
        .collect();
    let resource = Arc::new(ProtectedResource::default());
    let mut workers = Vec::new();
    for sidecar in &sidecars {
        let (sidecar, resource, lock) = (sidecar.clone(), resource.clone(), lock.clone());
        workers.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for _ in 0..ROUNDS {
                let granted = sidecar
                    .call("POST", &format!("/lock/{lock}?wait=60s&ttl=60s"))
                    .await;
                assert_eq!(granted.status, 200, "{}: {granted:?}", sidecar.identity);
                let token = granted.body["token"].as_i64().expect("token");
                resource.enter(&sidecar.identity, token);
                // While inside, the ensemble must agree this pod is the one holder.
                let seen = sidecar.call("GET", &format!("/lock/{lock}")).await;
                assert_eq!(seen.body["self"]["holds"], true, "{seen:?}");
                assert_eq!(seen.body["self"]["token"], token, "{seen:?}");
                assert_eq!(seen.body["self"]["mode"], "exclusive", "{seen:?}");
                assert_eq!(seen.body["holder"]["token"], token, "{seen:?}");
                assert_eq!(
                    seen.body["holder"]["identity"],
                    sidecar.identity.as_str(),
                    "{seen:?}"
                );
                assert_eq!(
                    seen.body["holders"].as_array().map(Vec::len),
                    Some(1),
                    "{seen:?}"
                );
                resource.leave(&sidecar.identity);
                let released = sidecar
                    .call("DELETE", &format!("/lock/{lock}?token={token}"))
                    .await;
                assert_eq!(released.status, 200, "{released:?}");
                tokens.push(token);
            }
            tokens
        }));
    }
    let mut all_tokens = Vec::new();
    for worker in workers {
        let tokens = worker.await.expect("worker finished");
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "each pod's tokens rise: {tokens:?}"
        );
        all_tokens.extend(tokens);
    }
    {
        let state = resource.state.lock().unwrap_or_else(|p| p.into_inner());
        assert!(state.violations.is_empty(), "{:#?}", state.violations);
        assert_eq!(state.entries, SIDECARS * ROUNDS);
    }
    all_tokens.sort_unstable();
    all_tokens.dedup();
    assert_eq!(
        all_tokens.len(),
        SIDECARS * ROUNDS,
        "every grant has its own token"
    );
    let metrics = sidecars[0].call("GET", "/metrics").await;
    let text = metrics.body.as_str().expect("text");
    assert!(
        text.contains(&format!(
            "baton_sidecar_lock_acquisitions_total{{outcome=\"granted\"}} {ROUNDS}"
        )),
        "{text}"
    );
}

async fn a_lease_that_runs_out_frees_the_lock() {
    let lock = unique("lease");
    let holder = Sidecar::start("lease-holder", &[]);
    let waiter = Sidecar::start("lease-waiter", &[]);
    let first = holder.call("POST", &format!("/lock/{lock}?ttl=1s")).await;
    assert_eq!(first.status, 200, "{first:?}");
    let first_token = first.body["token"].as_i64().expect("token");
    assert!(
        first.body["expiresAt"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{first:?}"
    );

    // The holder never releases; the waiter gets the lock once the lease runs out.
    let second = waiter
        .call("POST", &format!("/lock/{lock}?wait=60s&ttl=60s"))
        .await;
    assert_eq!(second.status, 200, "{second:?}");
    assert!(second.body["token"].as_i64().expect("token") > first_token);

    for answer in [
        holder
            .call("POST", &format!("/lock/{lock}/renew?token={first_token}"))
            .await,
        holder
            .call("DELETE", &format!("/lock/{lock}?token={first_token}"))
            .await,
    ] {
        assert_eq!(
            (answer.status, answer.error_code()),
            (409, "NotHeld"),
            "{answer:?}"
        );
    }
    let seen = holder.call("GET", &format!("/lock/{lock}")).await;
    assert_eq!(seen.body["self"]["holds"], false, "{seen:?}");
    assert_eq!(seen.body["holder"]["identity"], "lease-waiter", "{seen:?}");
    let metrics = holder.call("GET", "/metrics").await;
    assert!(
        metrics
            .body
            .as_str()
            .is_some_and(|t| t.contains("baton_sidecar_lease_expirations_total 1")),
        "{metrics:?}"
    );
}

async fn renew_extends_the_lease_and_a_held_lock_is_not_reentrant() {
    let lock = unique("renew");
    let holder = Sidecar::start("renew-holder", &[]);
    let other = Sidecar::start("renew-other", &[]);
    let first = holder.call("POST", &format!("/lock/{lock}?ttl=20s")).await;
    assert_eq!(first.status, 200, "{first:?}");
    let token = first.body["token"].as_i64().expect("token");
    let renewed = holder
        .call("POST", &format!("/lock/{lock}/renew?token={token}&ttl=10m"))
        .await;
    assert_eq!(renewed.status, 200, "{renewed:?}");
    assert_eq!(
        renewed.body["token"], first.body["token"],
        "renew keeps the grant"
    );
    let (before, after) = (
        first.body["expiresAt"].as_str(),
        renewed.body["expiresAt"].as_str(),
    );
    assert!(
        after > before,
        "the lease moved forward: {before:?} -> {after:?}"
    );
    let seen = other.call("GET", &format!("/lock/{lock}")).await;
    assert_eq!(
        seen.body["holder"]["leaseExpiresAt"].as_str(),
        after,
        "observers see the lease: {seen:?}"
    );

    let again = holder.call("POST", &format!("/lock/{lock}?wait=0")).await;
    assert_eq!(
        (again.status, again.error_code()),
        (409, "AlreadyHeld"),
        "{again:?}"
    );
    let busy = other.call("POST", &format!("/lock/{lock}?wait=0")).await;
    assert_eq!(
        (busy.status, busy.error_code()),
        (409, "NotGranted"),
        "{busy:?}"
    );
    let waiters = other.call("GET", &format!("/lock/{lock}")).await;
    assert_eq!(
        waiters.body["waiters"],
        serde_json::json!([]),
        "a refused try-lock leaves nothing queued"
    );

    assert_eq!(
        holder
            .call("DELETE", &format!("/lock/{lock}?token={token}"))
            .await
            .status,
        200
    );
    let next = other.call("POST", &format!("/lock/{lock}?wait=0")).await;
    assert_eq!(next.status, 200, "{next:?}");
}

async fn read_locks_share_and_write_locks_exclude() {
    let lock = unique("rw");
    let a = Sidecar::start("rw-a", &[]);
    let b = Sidecar::start("rw-b", &[]);
    let c = Arc::new(Sidecar::start("rw-c", &[]));
    let read_a = a
        .call("POST", &format!("/lock/{lock}?mode=read&wait=0"))
        .await;
    let read_b = b
        .call("POST", &format!("/lock/{lock}?mode=read&wait=0"))
        .await;
    assert_eq!(
        (read_a.status, read_b.status),
        (200, 200),
        "readers share: {read_a:?} {read_b:?}"
    );
    assert_eq!(read_a.body["mode"], "read");
    let write_c = c
        .call("POST", &format!("/lock/{lock}?mode=write&wait=0"))
        .await;
    assert_eq!(
        (write_c.status, write_c.error_code()),
        (409, "NotGranted"),
        "{write_c:?}"
    );
    let seen = c.call("GET", &format!("/lock/{lock}")).await;
    assert_eq!(
        seen.body["holders"].as_array().map(Vec::len),
        Some(2),
        "{seen:?}"
    );

    // The writer waits for both readers, then holds alone.
    let writer = {
        let (c, lock) = (c.clone(), lock.clone());
        tokio::spawn(async move {
            c.call("POST", &format!("/lock/{lock}?mode=write&wait=60s"))
                .await
        })
    };
    for (s, grant) in [(&a, &read_a), (&b, &read_b)] {
        let token = grant.body["token"].as_i64().expect("token");
        let released = s
            .call("DELETE", &format!("/lock/{lock}?token={token}"))
            .await;
        assert_eq!(released.status, 200, "{released:?}");
    }
    let write_c = writer.await.expect("writer task");
    assert_eq!(write_c.status, 200, "{write_c:?}");
    let write_token = write_c.body["token"].as_i64().expect("token");
    assert!(write_token > read_b.body["token"].as_i64().expect("token"));
    for s in [&a, &b] {
        for mode in ["read", "write", "exclusive"] {
            let refused = s
                .call("POST", &format!("/lock/{lock}?mode={mode}&wait=0"))
                .await;
            assert_eq!(
                (refused.status, refused.error_code()),
                (409, "NotGranted"),
                "{mode}: {refused:?}"
            );
        }
    }
    let released = c
        .call("DELETE", &format!("/lock/{lock}?token={write_token}"))
        .await;
    assert_eq!(released.status, 200, "{released:?}");
    let read_again = a
        .call("POST", &format!("/lock/{lock}?mode=read&wait=0"))
        .await;
    assert_eq!(read_again.status, 200, "{read_again:?}");
    assert!(read_again.body["token"].as_i64().expect("token") > write_token);
}

against_both!(
    five_sidecars_fifty_acquisitions_each_never_overlap_and_tokens_rise,
    a_lease_that_runs_out_frees_the_lock,
    renew_extends_the_lease_and_a_held_lock_is_not_reentrant,
    read_locks_share_and_write_locks_exclude,
);
