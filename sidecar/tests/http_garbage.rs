//! Raw garbage over TCP to a running sidecar: invalid request lines, huge headers,
//! binary junk, requests cut off by a close, and stalled connections. Each connection is
//! refused with an HTTP error or closed, never answered with success; and afterwards (and
//! while stalled connections are held open) the same sidecar still serves valid requests and
//! still leads its election.

mod common;

use common::{BOUND, Sidecar, http, raw_status as status, send_raw, unique};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Garbage is refused with an HTTP error or a close: never a success, never a hang.
fn assert_refused(what: &str, answer: &[u8]) {
    if answer.is_empty() {
        return;
    }
    let code = status(answer).unwrap_or_else(|| {
        panic!(
            "{what}: not an HTTP answer: {:?}",
            String::from_utf8_lossy(answer)
        )
    });
    assert!(
        (400..600).contains(&code),
        "{what}: answered {code}: {:?}",
        String::from_utf8_lossy(answer)
    );
}

/// Deterministic junk (xorshift64*): the same bytes on every run.
fn junk(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_be_bytes()[0]
        })
        .collect()
}

/// The sidecar is alive and well: health, and it still leads `election` (it is the only
/// candidate), so its session survived too.
async fn still_serves(s: &Sidecar, election: &str) {
    let health = s.call("GET", "/healthz").await;
    assert_eq!(health.status, 200, "{health:?}");
    let leader = s.call("GET", &format!("/leader/{election}")).await;
    assert_eq!(leader.status, 200, "{leader:?}");
    assert_eq!(leader.body["self"]["isLeader"], true, "{leader:?}");
    let refused = s.call("GET", "/nope").await;
    assert_eq!((refused.status, refused.error_code()), (404, "NotFound"));
    assert!(
        !s.log().contains("panicked"),
        "the sidecar panicked:\n{}",
        s.log()
    );
}

async fn raw_garbage_never_takes_the_sidecar_down() {
    let election = unique("garbage");
    let s = Sidecar::start("garbage-pod", &[&election]);
    let addr = s.addr;

    // Heads the parser refuses outright: refused and closed whether or not the client closes.
    let bad_heads: &[&[u8]] = &[
        b"GARBAGE\r\n\r\n",
        b"GET\r\n\r\n",
        b"GET /healthz\r\n\r\n",
        b" / HTTP/1.1\r\n\r\n",
        b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
        b"GET /healthz HTTP/1.1 extra\r\nHost: x\r\n\r\n",
        b"GET /heal\x00thz HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",
        b"G\xc3\x89T /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET http://[::1 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nNo colon here\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"POST /lock/db HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551616\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        // The start of a TLS ClientHello.
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    ];
    for (i, head) in bad_heads.iter().enumerate() {
        for close in [false, true] {
            let answer = send_raw(addr, head, close).await;
            assert_refused(&format!("bad head #{i} (close: {close})"), &answer);
        }
    }
    // Input a parser may still wait on (blank lines, a broken chunked body): then the client
    // closes, and the sidecar must refuse or close, not answer success.
    let then_close: &[&[u8]] = &[
        b"\r\n\r\n\r\n\r\n",
        b"POST /lock/db HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ];
    for (i, bytes) in then_close.iter().enumerate() {
        assert_refused(
            &format!("input #{i} then close"),
            &send_raw(addr, bytes, true).await,
        );
    }

    // Huge heads: one 1 MiB header, and 20 000 small ones.
    let mut huge = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 1 << 20));
    huge.extend_from_slice(b"\r\n\r\n");
    assert_refused("a 1 MiB header", &send_raw(addr, &huge, false).await);
    let mut many = b"GET /healthz HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..20_000 {
        many.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_refused("20 000 headers", &send_raw(addr, &many, false).await);
    // A 1 MiB request line.
    let mut long_path = b"GET /".to_vec();
    long_path.extend(std::iter::repeat_n(b'x', 1 << 20));
    long_path.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_refused("a 1 MiB path", &send_raw(addr, &long_path, false).await);

    // Binary junk, with and without a plausible start.
    for seed in 1..=8u64 {
        let mut bytes = if seed % 2 == 0 {
            b"GET /healthz HTTP/1.1\r\n".to_vec()
        } else {
            Vec::new()
        };
        bytes.extend(junk(seed, 64 << seed));
        assert_refused(
            &format!("junk #{seed}"),
            &send_raw(addr, &bytes, true).await,
        );
    }

    // Requests cut off by a close: in the request line, the headers, and the body.
    let halves: &[&[u8]] = &[
        b"GET /hea",
        b"GET /healthz HTTP/1.1\r\nHos",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
        b"POST /lock/db HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc",
        b"POST /lock/db HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc",
    ];
    for (i, half) in halves.iter().enumerate() {
        assert_refused(
            &format!("half request #{i}"),
            &send_raw(addr, half, true).await,
        );
    }
    // And the same, dropped without even a half-close (a reset on some systems).
    for half in halves {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(half).await.expect("send");
        drop(stream);
    }

    // Many junk connections at once.
    let at_once: Vec<_> = (0..32u64)
        .map(|seed| {
            tokio::spawn(async move {
                let answer = send_raw(addr, &junk(100 + seed, 4096), true).await;
                assert_refused("concurrent junk", &answer);
            })
        })
        .collect();
    for task in at_once {
        task.await.expect("a junk connection");
    }

    still_serves(&s, &election).await;
}

async fn stalled_connections_do_not_block_other_clients() {
    let election = unique("stall");
    let s = Sidecar::start("stall-pod", &[&election]);
    let addr = s.addr;

    // Slowloris: connections that send part of a head (or of a body) and then nothing. They
    // are held open by this test, which bounds the stall; meanwhile others are served.
    let partial: &[&[u8]] = &[
        b"G",
        b"GET /healthz HTTP/1.1\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaa",
        b"POST /lock/db HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc",
    ];
    let mut stalled = Vec::new();
    let stalled_at = std::time::Instant::now();
    for round in 0..16 {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(partial[round % partial.len()])
            .await
            .expect("send part of a request");
        stalled.push(stream);
    }
    still_serves(&s, &election).await;

    // A request trickled one byte per write still gets its answer.
    let mut trickle = TcpStream::connect(addr).await.expect("connect");
    trickle.set_nodelay(true).expect("nodelay");
    for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" {
        trickle.write_all(&[*byte]).await.expect("send a byte");
        trickle.flush().await.expect("flush");
        tokio::task::yield_now().await;
    }
    let mut answer = Vec::new();
    tokio::time::timeout(BOUND, trickle.read_to_end(&mut answer))
        .await
        .expect("an answer to the trickled request")
        .expect("read the answer");
    assert_eq!(
        status(&answer),
        Some(200),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );

    // The stalled connections can still be finished by their clients: the sidecar kept them,
    // unless (on a very slow machine) its 10 s header timeout has closed them meanwhile.
    let within_header_timeout = stalled_at.elapsed() < std::time::Duration::from_secs(9);
    let finish: &[&[u8]] = &[
        b"ET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"Host: x\r\nConnection: close\r\n\r\n",
        b"\r\nConnection: close\r\n\r\n",
    ];
    for (round, stream) in stalled.iter_mut().enumerate().take(3) {
        stream.write_all(finish[round]).await.expect("finish");
        let mut answer = Vec::new();
        tokio::time::timeout(BOUND, stream.read_to_end(&mut answer))
            .await
            .expect("an answer to the finished request")
            .expect("read the answer");
        if within_header_timeout {
            assert_eq!(
                status(&answer),
                Some(200),
                "stalled #{round}: {:?}",
                String::from_utf8_lossy(&answer)
            );
        }
    }
    drop(stalled);
    still_serves(&s, &election).await;
    // A plain request through the shared client too.
    let health = http(addr, "GET", "/healthz", None).await;
    assert_eq!(health.status, 200, "{health:?}");
}

async fn a_connection_that_stops_mid_request_is_closed_by_the_sidecar() {
    let s = Sidecar::start("closer-pod", &[]);
    // Half a head, then silence: the sidecar's header timeout (10 s) must end the connection,
    // or idle connections could pile up until it runs out of file descriptors.
    let mut stream = TcpStream::connect(s.addr).await.expect("connect");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("send half a head");
    let mut rest = Vec::new();
    tokio::time::timeout(BOUND, stream.read_to_end(&mut rest))
        .await
        .expect("the sidecar closes a stalled connection")
        .expect("read until the close");
    assert!(
        status(&rest).is_none_or(|code| code == 408),
        "a close, or 408 then a close: {:?}",
        String::from_utf8_lossy(&rest)
    );
    let health = s.call("GET", "/healthz").await;
    assert_eq!(health.status, 200, "{health:?}");
}

against_both!(
    a_connection_that_stops_mid_request_is_closed_by_the_sidecar,
    raw_garbage_never_takes_the_sidecar_down,
    stalled_connections_do_not_block_other_clients,
);
