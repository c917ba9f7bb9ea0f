//! Raw bytes as an HTTP/1.1 client would send them, through the sidecar's real hyper service
//! (`baton_sidecar::http::serve` on a loopback port; hyper has no public way to feed a server
//! connection from memory that is simpler than a socket). The answer is well-formed HTTP/1.x or a
//! close, never a hang, and nothing panics, in hyper or in the service.
//!
//! The service's state answers every route at once, so no ensemble is needed: it stands in no
//! election, it is draining (acquisitions are refused, long-polls return), and its session is
//! to a loopback port nobody listens on (lock routes answer SessionLost or NotHeld).
#![no_main]

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use baton_sidecar::http::{ApiState, Exposure, serve};
use baton_sidecar::leases::LockTable;
use baton_sidecar::metrics::Metrics;
use baton_sidecar::recipe::{SessionControl, SessionOptions, start_session};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::watch;

/// One exchange answers or closes at once; reaching this is a finding (a hang).
const BOUND: Duration = Duration::from_secs(10);

struct Service {
    runtime: Runtime,
    addr: SocketAddr,
    _session: SessionControl,
    _stop: watch::Sender<bool>,
    _draining: watch::Sender<bool>,
}

fn service() -> &'static Service {
    static SERVICE: OnceLock<Service> = OnceLock::new();
    SERVICE.get_or_init(|| {
        // tokio catches a panicking connection task; make any panic a crash libFuzzer sees.
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            std::process::abort();
        }));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let (addr, session, stop, draining) = runtime.block_on(async {
            let (session, control) = start_session(SessionOptions {
                ensemble: "127.0.0.1:1".to_owned(),
                session_timeout: Duration::from_secs(10),
            });
            let metrics = Arc::new(Metrics::new());
            let (draining_tx, draining) = watch::channel(true);
            let state = Arc::new(ApiState {
                identity: "fuzz".to_owned(),
                session: session.clone(),
                elections: Vec::new(),
                locks: LockTable::new(session, "fuzz".to_owned(), metrics.clone()),
                metrics,
                draining,
            });
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().expect("address");
            let (stop_tx, stop) = watch::channel(false);
            tokio::spawn(serve(listener, state, Exposure::Full, stop));
            (addr, control, stop_tx, draining_tx)
        });
        Service {
            runtime,
            addr,
            _session: session,
            _stop: stop,
            _draining: draining,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let service = service();
    let addr = service.addr;
    let answer = service.runtime.block_on(async {
        let talk = async {
            let mut stream = TcpStream::connect(addr).await.expect("connect");
            // The service may refuse and close before reading everything: not an error.
            let _ = stream.write_all(data).await;
            let _ = stream.shutdown().await;
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer).await;
            answer
        };
        tokio::time::timeout(BOUND, talk).await
    });
    let answer = answer.unwrap_or_else(|_| panic!("no answer or close within {BOUND:?}"));
    if !answer.is_empty() {
        assert!(
            // hyper answers an HTTP/1.0 request in HTTP/1.0.
            (answer.starts_with(b"HTTP/1.1 ") || answer.starts_with(b"HTTP/1.0 "))
                && answer
                    .get(9..12)
                    .is_some_and(|s| s.iter().all(u8::is_ascii_digit)),
            "not an HTTP answer: {:?}",
            String::from_utf8_lossy(&answer)
        );
    }
});
