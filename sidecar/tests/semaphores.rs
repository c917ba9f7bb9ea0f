//! HTTP semaphores across real `baton-sidecar` processes: never more than N holders, first
//! come first served, a crashed holder's permit freed with its session, and pods that
//! disagree on N refused.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Sidecar, unique, wait_for_children};

/// Four sidecars, each taking a 2-permit semaphore ten times: at most two inside at once,
/// every grant a distinct token, and both permits used at once at some point.
async fn never_more_than_n_holders_across_sidecars() {
    const SIDECARS: usize = 4;
    const ROUNDS: usize = 10;
    let name = unique("sem");
    let sidecars: Vec<Arc<Sidecar>> = (0..SIDECARS)
        .map(|i| Arc::new(Sidecar::start(&format!("{name}-pod-{i}"), &[])))
        .collect();
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for sidecar in &sidecars {
        let (sidecar, inside, most, name) =
            (sidecar.clone(), inside.clone(), most.clone(), name.clone());
        workers.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for _ in 0..ROUNDS {
                let granted = sidecar
                    .call(
                        "POST",
                        &format!("/semaphore/{name}?permits=2&wait=60s&ttl=60s"),
                    )
                    .await;
                assert_eq!(granted.status, 200, "{}: {granted:?}", sidecar.identity);
                assert_eq!(granted.body["semaphore"], name.as_str(), "{granted:?}");
                assert_eq!(granted.body["permits"], 2, "{granted:?}");
                assert_eq!(granted.body["mode"], "permit", "{granted:?}");
                let token = granted.body["token"].as_i64().expect("token");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(now <= 2, "{now} holders of a 2-permit semaphore");
                let seen = sidecar.call("GET", &format!("/semaphore/{name}")).await;
                assert_eq!(seen.status, 200, "{seen:?}");
                assert_eq!(seen.body["self"]["holds"], true, "{seen:?}");
                let holders = seen.body["holders"].as_array().expect("holders").len();
                assert!((1..=2).contains(&holders), "{seen:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                let released = sidecar
                    .call("DELETE", &format!("/semaphore/{name}?token={token}"))
                    .await;
                assert_eq!(released.status, 200, "{released:?}");
                tokens.push(token);
            }
            tokens
        }));
    }
    let mut tokens = Vec::new();
    for worker in workers {
        tokens.extend(worker.await.expect("worker"));
    }
    let count = tokens.len();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), count, "every grant has its own token");
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "both permits were used at once"
    );
}

/// Two holders fill a 2-permit semaphore; a third waits. Killing a holder (no release, the
/// session just ends) lets the waiter in; a pod asking for a different count gets 409, and a
/// lock of the same name is another resource.
async fn a_crashed_holder_frees_its_permit() {
    let name = unique("sem-crash");
    let mut first = Sidecar::start(&format!("{name}-a"), &[]);
    let second = Sidecar::start(&format!("{name}-b"), &[]);
    let third = Sidecar::start_with(&format!("{name}-c"), &[], &["--session-timeout", "4s"]);
    let path = format!("/semaphore/{name}?permits=2&ttl=60s&wait=0s");
    assert_eq!(first.call("POST", &path).await.status, 200);
    let held = second.call("POST", &path).await;
    assert_eq!(held.status, 200, "{held:?}");
    let full = third.call("POST", &path).await;
    assert_eq!(full.status, 409, "{full:?}");
    assert_eq!(full.error_code(), "NotGranted");
    // Another count is refused while the queue holds nodes asking for 2.
    let mismatch = third
        .call("POST", &format!("/semaphore/{name}?permits=3&wait=0s"))
        .await;
    assert_eq!(mismatch.status, 409, "{mismatch:?}");
    assert_eq!(mismatch.error_code(), "PermitsMismatch");
    // Locks and semaphores of one name are apart.
    let lock = third.call("POST", &format!("/lock/{name}?wait=0s")).await;
    assert_eq!(lock.status, 200, "{lock:?}");
    let seen = third.call("GET", &format!("/semaphore/{name}")).await;
    assert_eq!(seen.body["permits"], 2, "{seen:?}");
    assert_eq!(seen.body["holders"].as_array().map(Vec::len), Some(2));
    // The third pod waits; the first crashes and its session expires (10s in the harness).
    let waiting = tokio::spawn({
        let (addr, name) = (third.addr, name.clone());
        async move {
            common::http(
                addr,
                "POST",
                &format!("/semaphore/{name}?permits=2&ttl=60s&wait=60s"),
                None,
            )
            .await
        }
    });
    // Two holders and the third pod's queued node.
    wait_for_children(&format!("/baton/default/semaphores/{name}"), 3).await;
    assert!(
        !waiting.is_finished(),
        "granted while both permits were held"
    );
    first.kill();
    let granted = waiting.await.expect("waiter");
    assert_eq!(granted.status, 200, "{granted:?}");
    let seen = second.call("GET", &format!("/semaphore/{name}")).await;
    let holders: Vec<_> = seen.body["holders"]
        .as_array()
        .expect("holders")
        .iter()
        .map(|h| h["identity"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        holders,
        [format!("{name}-b"), format!("{name}-c")],
        "{seen:?}"
    );
}

/// A stream hold keeps a permit as long as the connection; bad counts are 400.
async fn bad_permits_are_refused() {
    let name = unique("sem-bad");
    let sidecar = Sidecar::start(&format!("{name}-a"), &[]);
    for bad in [
        "",
        "?permits=0",
        "?permits=x",
        "?permits=-1",
        "?permits=10001",
    ] {
        let answer = sidecar
            .call("POST", &format!("/semaphore/{name}{bad}"))
            .await;
        assert_eq!(answer.status, 400, "{bad}: {answer:?}");
    }
    let granted = sidecar
        .call("POST", &format!("/semaphore/{name}?permits=1"))
        .await;
    assert_eq!(granted.status, 200, "{granted:?}");
    let token = granted.body["token"].as_i64().expect("token");
    let renewed = sidecar
        .call(
            "POST",
            &format!("/semaphore/{name}/renew?token={token}&ttl=5s"),
        )
        .await;
    assert_eq!(renewed.status, 200, "{renewed:?}");
    let stale = sidecar
        .call("DELETE", &format!("/semaphore/{name}?token={}", token + 1))
        .await;
    assert_eq!(stale.status, 409, "{stale:?}");
    let released = sidecar
        .call("DELETE", &format!("/semaphore/{name}?token={token}"))
        .await;
    assert_eq!(released.status, 200, "{released:?}");
}

against_both!(
    never_more_than_n_holders_across_sidecars,
    a_crashed_holder_frees_its_permit,
    bad_permits_are_refused,
);
