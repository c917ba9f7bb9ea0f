//! HTTP barriers across real `baton-sidecar` processes: nobody passes before N entered, all
//! pass once they have, the barrier is used again, a timeout is 409 and leaves the barrier.

mod common;

use std::net::SocketAddr;
use std::time::Instant;

use common::{Sidecar, unique, wait_for_children};
use tokio::task::JoinHandle;

fn enter(addr: SocketAddr, path: String) -> JoinHandle<(common::Response, Instant)> {
    tokio::spawn(async move {
        let answer = common::http(addr, "POST", &path, None).await;
        (answer, Instant::now())
    })
}

async fn nobody_passes_before_n_entered() {
    let name = unique("barrier");
    let pods: Vec<Sidecar> = (0..3)
        .map(|i| Sidecar::start(&format!("{name}-{i}"), &[]))
        .collect();
    let path = format!("/barrier/{name}?parties=3&wait=60s");
    for round in 0..2 {
        let first = enter(pods[0].addr, path.clone());
        let second = enter(pods[1].addr, path.clone());
        // Both are in (a round's parties have left by the time their calls returned).
        wait_for_children(&format!("/baton/default/barriers/{name}"), 2).await;
        assert!(
            !first.is_finished() && !second.is_finished(),
            "round {round}: passed with two of three in"
        );
        let entered_last = Instant::now();
        let third = enter(pods[2].addr, path.clone());
        for waiter in [first, second, third] {
            let (answer, at) = waiter.await.expect("waiter");
            assert_eq!(answer.status, 200, "round {round}: {answer:?}");
            assert_eq!(answer.body["passed"], true, "{answer:?}");
            assert!(
                at >= entered_last,
                "round {round}: passed before the third entered"
            );
        }
    }
    // Alone with a short wait: 409, and it has left (a later round of 2 needs two new parties).
    let alone = pods[0]
        .call("POST", &format!("/barrier/{name}?parties=3&wait=500ms"))
        .await;
    assert_eq!(alone.status, 409, "{alone:?}");
    assert_eq!(alone.error_code(), "NotPassed");
    let pair = format!("/barrier/{name}-pair?parties=2&wait=60s");
    let one = enter(pods[0].addr, pair.clone());
    wait_for_children(&format!("/baton/default/barriers/{name}-pair"), 1).await;
    // Another count while a party waits is refused.
    let mismatch = pods[1]
        .call("POST", &format!("/barrier/{name}-pair?parties=3&wait=1s"))
        .await;
    assert_eq!(mismatch.status, 409, "{mismatch:?}");
    assert_eq!(mismatch.error_code(), "PartiesMismatch");
    assert!(!one.is_finished(), "a refused party let the other pass");
    let two = pods[1].call("POST", &pair).await;
    assert_eq!(two.status, 200, "{two:?}");
    assert_eq!(one.await.expect("waiter").0.status, 200);
    for bad in ["", "?parties=0", "?parties=x"] {
        let answer = pods[2].call("POST", &format!("/barrier/{name}{bad}")).await;
        assert_eq!(answer.status, 400, "{bad}: {answer:?}");
    }
}

against_both!(nobody_passes_before_n_entered);
