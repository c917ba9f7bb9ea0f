//! Hostile method/path/query strings and raw request bytes never panic the HTTP API's router and
//! parsers, and every refusal is the JSON error envelope with a 4xx status (the
//! cargo-fuzz targets `http_route` and `http_request` in `tests/fuzz/` check the same, deeper).
//!
//! The first three properties drive `route`, `Query` and `baton_duration::parse` directly. The last
//! sends raw bytes through the real hyper service (`http::serve` on a loopback port) with a
//! state that answers every route at once: no elections, draining, and a session to a port
//! nobody listens on. No ensemble is needed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use baton_sidecar::http::api::ParamKind;
use baton_sidecar::http::{ApiError, ApiState, Exposure, Query, Route, route, serve};
use baton_sidecar::leases::LockTable;
use baton_sidecar::metrics::Metrics;
use baton_sidecar::recipe::{SessionControl, SessionOptions, start_session};
use http_body_util::BodyExt;
use hyper::{Method, StatusCode, Uri, header};
use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio::sync::watch;

/// Bound on one raw exchange: the service answers or closes at once, so reaching it is a bug.
const EXCHANGE_BOUND: Duration = Duration::from_secs(30);

fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// What the router and query parser make of a request line: the route, or the refusal. The
/// parameters are the route's in the API's table, checked in its order (the handlers' order) up
/// to the first word-valued one, after which handlers may check other things first.
fn predict(method: &Method, path: &str, query: Option<&str>) -> Result<Route, ApiError> {
    let route = route(method, path)?;
    let endpoint = route.endpoint();
    let q = Query::for_endpoint(query, endpoint)?;
    for p in endpoint.params {
        let given = match p.kind {
            ParamKind::Duration { .. } => q.optional_duration_of(p)?.is_some(),
            ParamKind::Count { .. } => q.count_of(p)?.is_some(),
            ParamKind::Token => q.token_of(p)?.is_some(),
            ParamKind::Choice(_) | ParamKind::Text => break,
        };
        if p.required && !given && q.get(p.name).is_none() {
            let code = p
                .missing
                .expect("a required parameter names its missing code");
            return Err(ApiError::bad_request(
                code,
                format!("{} is missing", p.name),
            ));
        }
    }
    Ok(route)
}

/// `body` is `{"error": {"code", "message"}}` with non-empty strings (and `code` if given).
fn check_envelope(body: &[u8], code: Option<&str>) -> Result<(), TestCaseError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        TestCaseError::fail(format!(
            "error body is not JSON ({e}): {:?}",
            String::from_utf8_lossy(body)
        ))
    })?;
    let object = value.as_object().filter(|o| o.len() == 1);
    let error = object
        .and_then(|o| o.get("error"))
        .and_then(Value::as_object);
    let Some(error) = error else {
        return Err(TestCaseError::fail(format!(
            "not an error envelope: {value}"
        )));
    };
    let got = error.get("code").and_then(Value::as_str).unwrap_or("");
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    prop_assert!(
        !got.is_empty() && !message.is_empty(),
        "empty code or message: {value}"
    );
    if let Some(code) = code {
        prop_assert_eq!(got, code);
    }
    Ok(())
}

/// A refusal of the parsers: 4xx, and it renders as the JSON envelope (with `Allow` on 405).
fn check_refusal(err: ApiError) -> Result<(), TestCaseError> {
    prop_assert!(err.status.is_client_error(), "{err:?} is not a 4xx");
    prop_assert!(!err.code.is_empty() && !err.message.is_empty(), "{err:?}");
    let (status, code) = (err.status, err.code);
    let response = err.into_response();
    prop_assert_eq!(response.status(), status);
    prop_assert_eq!(
        response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
    if status == StatusCode::METHOD_NOT_ALLOWED {
        prop_assert!(response.headers().contains_key(header::ALLOW));
    }
    let body = runtime()
        .block_on(response.into_body().collect())
        .map(|c| c.to_bytes())
        .map_err(|e| TestCaseError::fail(format!("body: {e}")))?;
    check_envelope(&body, Some(code))
}

fn method() -> impl Strategy<Value = Method> {
    let known = prop::sample::select(vec![
        Method::GET,
        Method::POST,
        Method::DELETE,
        Method::PUT,
        Method::PATCH,
        Method::HEAD,
        Method::OPTIONS,
        Method::CONNECT,
        Method::TRACE,
    ]);
    let any_token = vec(any::<u8>(), 0..12)
        .prop_filter_map("a method token", |bytes| Method::from_bytes(&bytes).ok());
    prop_oneof![3 => known, 1 => any_token]
}

/// A path segment: real names, near-misses and junk.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "leader", "lock", "ready", "resign", "renew", "healthz", "readyz", "metrics", "db",
            "orders", "", ".", "..", "-x", "a%2Fb", "%", "%zz", "%ff", "a b", "\u{0}",
        ])
        .prop_map(str::to_owned),
        "[a-z0-9._-]{1,70}",
        any::<String>(),
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => vec(segment(), 0..5).prop_map(|s| format!("/{}", s.join("/"))),
        1 => any::<String>(),
        1 => vec(any::<u8>(), 0..40).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

/// A duration-ish value: valid, out of range, malformed, huge.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "0",
            "10s",
            "1m30s",
            "500ms",
            "1.5s",
            ".5s",
            "99ms",
            "601s",
            "25h",
            "721h",
            "-1s",
            "1e3s",
            "1..2s",
            "s",
            "",
            "99999999999999h",
            "0.0000000001s",
            "read",
            "write",
            "exclusive",
            "9223372036854775808",
            "-9223372036854775808",
            "%",
            "%zz",
            "%ff",
        ])
        .prop_map(str::to_owned),
        "[0-9.]{0,16}(ms|s|m|h|d|)",
        any::<String>(),
    ]
}

fn query() -> impl Strategy<Value = Option<String>> {
    let key = prop_oneof![
        prop::sample::select(vec!["wait", "ttl", "mode", "token", "wiat", "", "%77ait"])
            .prop_map(str::to_owned),
        any::<String>(),
    ];
    let pair = (key, prop::option::of(value())).prop_map(|(k, v)| match v {
        Some(v) => format!("{k}={v}"),
        None => k,
    });
    prop_oneof![
        1 => Just(None),
        3 => vec(pair, 0..5).prop_map(|p| Some(p.join("&"))),
        1 => any::<String>().prop_map(Some),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// The router and query parser never panic, and every refusal is a 4xx JSON envelope.
    #[test]
    fn route_and_query_never_panic_and_refuse_with_4xx_json(
        method in method(),
        path in path(),
        query in query(),
    ) {
        if let Err(err) = predict(&method, &path, query.as_deref()) {
            check_refusal(err)?;
        }
    }

    /// Any query against any allow-list and any duration range: no panic, 4xx refusals.
    #[test]
    fn query_parsing_never_panics(
        raw in prop::option::of(any::<String>()),
        allow in vec(prop::sample::select(vec!["wait", "ttl", "mode", "token", ""]), 0..4),
        min_ms in 0u64..100_000,
        span_ms in 0u64..1_000_000_000,
    ) {
        match Query::parse(raw.as_deref(), &allow) {
            Err(err) => check_refusal(err)?,
            Ok(q) => {
                let min = Duration::from_millis(min_ms);
                let max = min + Duration::from_millis(span_ms);
                for key in &allow {
                    match q.duration(key, min, min, max) {
                        Ok(d) => prop_assert!(min <= d && d <= max, "{d:?} outside {min:?}..={max:?}"),
                        Err(err) => {
                            prop_assert_eq!(err.code, "InvalidDuration");
                            check_refusal(err)?;
                        }
                    }
                }
            }
        }
    }

    /// Durations: no panic, nothing past the documented 30-day limit, errors say why.
    #[test]
    fn duration_parsing_never_panics(text in prop_oneof![value(), any::<String>()]) {
        match baton_duration::parse(&text) {
            Ok(d) => prop_assert!(d <= Duration::from_secs(30 * 24 * 3600), "{text:?} -> {d:?}"),
            Err(e) => prop_assert!(e.to_string().starts_with(&format!("{text:?} ")), "{e}"),
        }
    }
}

/// The real service on a loopback port, with a state whose every route answers at once.
struct Service {
    addr: std::net::SocketAddr,
    _session: SessionControl,
    _stop: watch::Sender<bool>,
    _draining: watch::Sender<bool>,
}

/// Set by a panic on a runtime worker: tokio turns a panicking connection task into a quiet
/// `JoinError`, so without this a panic in the service would go unnoticed.
static WORKER_PANICKED: AtomicBool = AtomicBool::new(false);

fn service() -> &'static Service {
    static SERVICE: OnceLock<Service> = OnceLock::new();
    SERVICE.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("tokio-runtime-worker"))
            {
                WORKER_PANICKED.store(true, Ordering::SeqCst);
            }
            previous(info);
        }));
        runtime().block_on(async {
            // Port 1 on loopback: nothing listens, so the session stays unconnected and the
            // lock routes answer SessionLost / NotHeld at once instead of waiting.
            let (session, control) = start_session(SessionOptions {
                ensemble: "127.0.0.1:1".to_owned(),
                session_timeout: Duration::from_secs(10),
                tls: None,
            });
            let metrics = Arc::new(Metrics::new());
            // Draining: acquisitions are refused at once and long-polls return.
            let (draining_tx, draining) = watch::channel(true);
            let state = Arc::new(ApiState {
                identity: "fuzz".to_owned(),
                session: session.clone(),
                elections: Vec::new(),
                locks: LockTable::new(session, "fuzz".to_owned(), metrics.clone()),
                metrics,
                draining,
                candidacy: baton_sidecar::config::Candidacy::Always,
                handoff: baton_sidecar::handoff::HandOff::new(Duration::ZERO),
                campaigns: Default::default(),
            });
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().expect("address");
            let (stop_tx, stop) = watch::channel(false);
            tokio::spawn(serve(listener, state, Exposure::Full, stop));
            Service {
                addr,
                _session: control,
                _stop: stop_tx,
                _draining: draining_tx,
            }
        })
    })
}

/// Sends `raw`, half-closes if `close`, and reads until the service closes (bounded). Without
/// `close`, `raw` must end in a request with `Connection: close`: hyper may drop a connection
/// half-closed by its client before it answers, so answers are certain only without `close`.
fn exchange(raw: &[u8], close: bool) -> Vec<u8> {
    let addr = service().addr;
    runtime().block_on(async {
        let talk = async {
            let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
            // The service may answer and close before reading everything: not an error.
            let _ = stream.write_all(raw).await;
            if close {
                let _ = stream.shutdown().await;
            }
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer).await;
            answer
        };
        tokio::time::timeout(EXCHANGE_BOUND, talk)
            .await
            .unwrap_or_else(|_| panic!("no answer or close within {EXCHANGE_BOUND:?} to {raw:?}"))
    })
}

fn check_no_worker_panic() -> Result<(), TestCaseError> {
    prop_assert!(
        !WORKER_PANICKED.load(Ordering::SeqCst),
        "the service panicked (see the panic message above)"
    );
    Ok(())
}

/// The first response in `answer`, if any: (status, content type, body). `is_head` if it
/// answers a HEAD request (then it has no body, whatever its Content-Length says).
fn first_response(
    answer: &[u8],
    is_head: bool,
) -> Result<Option<(u16, String, Vec<u8>)>, TestCaseError> {
    if !answer.is_empty() {
        let text = String::from_utf8_lossy(answer);
        let Some(head_len) = text.find("\r\n\r\n") else {
            return Err(TestCaseError::fail(format!("no complete head in {text:?}")));
        };
        let head = &text[..head_len];
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or("");
        let status: u16 = status_line
            .strip_prefix("HTTP/1.1 ")
            .and_then(|s| s.get(..3))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| TestCaseError::fail(format!("bad status line {status_line:?}")))?;
        let mut content_type = String::new();
        let mut length = 0usize;
        for line in lines {
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-type") {
                    content_type = v.trim().to_owned();
                } else if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
        }
        if is_head {
            length = 0;
        }
        let body_start = head_len + 4;
        let body = answer
            .get(body_start..body_start + length)
            .ok_or_else(|| TestCaseError::fail(format!("body cut short in {text:?}")))?;
        return Ok(Some((status, content_type, body.to_vec())));
    }
    Ok(None)
}

/// One request as a client might send it: method, target, and extra header lines.
fn request() -> impl Strategy<Value = (Method, String, Vec<String>)> {
    let target = (path(), query()).prop_map(|(p, q)| match q {
        Some(q) => format!("{p}?{q}"),
        None => p,
    });
    let header = prop_oneof![
        Just("Content-Length: 0".to_owned()),
        Just("Content-Length: 5000".to_owned()),
        Just("Content-Length: -1".to_owned()),
        Just("Content-Length: 99999999999999999999".to_owned()),
        Just("Transfer-Encoding: chunked".to_owned()),
        Just("Expect: 100-continue".to_owned()),
        "[A-Za-z-]{1,20}: [ -~]{0,40}",
        any::<String>(),
    ];
    (method(), target, vec(header, 0..3))
}

/// The exchange itself works: known requests get the known answers through the real service.
#[test]
fn the_real_service_answers_known_requests() {
    let cases: [(&str, u16, Option<&str>); 6] = [
        ("GET /healthz", 200, None),
        ("GET /nope", 404, Some("NotFound")),
        ("PUT /lock/db", 405, Some("MethodNotAllowed")),
        ("GET /leader?wait=soon", 400, Some("InvalidDuration")),
        ("POST /lock/db?wiat=1s", 400, Some("UnknownParameter")),
        ("GET /leader", 404, Some("NoElection")),
    ];
    for (line, status, code) in cases {
        let raw = format!("{line} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let answer = first_response(&exchange(raw.as_bytes(), false), false)
            .unwrap_or_else(|e| panic!("{line}: {e}"))
            .unwrap_or_else(|| panic!("{line}: no answer"));
        assert_eq!(answer.0, status, "{line}");
        if let Some(code) = code {
            check_envelope(&answer.2, Some(code)).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A request line built from hostile parts, through hyper and the real service: the
    /// answer is well-formed, and when the router or query parser refuses it, the answer is
    /// exactly that refusal (status and code) as a JSON envelope.
    #[test]
    fn the_real_service_answers_hostile_requests_as_the_parsers_predict(
        (method, target, headers) in request(),
        body in vec(any::<u8>(), 0..64),
    ) {
        // Requests with only these headers are answered for certain (see `exchange`); the
        // others may wait for a body, so the client half-closes after them.
        let simple_headers = headers.iter().all(|h| h == "Content-Length: 0");
        let mut raw = format!("{method} {target} HTTP/1.1\r\nHost: x\r\n");
        if simple_headers {
            raw.push_str("Connection: close\r\n");
        }
        for h in &headers {
            raw.push_str(h);
            raw.push_str("\r\n");
        }
        raw.push_str("\r\n");
        let mut raw = raw.into_bytes();
        raw.extend_from_slice(&body);
        let answer = first_response(&exchange(&raw, !simple_headers), method == Method::HEAD)?;
        check_no_worker_panic()?;
        let parsed: Option<Uri> = target.parse().ok();
        let plain_target = parsed.filter(|u| u.scheme().is_none() && target.starts_with('/'));
        // hyper answers what it cannot parse itself (400, 413, 431...) without our envelope,
        // and may close without answering a half-closed connection.
        let Some((status, content_type, body)) = answer.as_ref() else {
            prop_assert!(
                !simple_headers || plain_target.is_none(),
                "no answer at all to {} {}", method, target
            );
            return Ok(());
        };
        prop_assert!((200..600).contains(status), "status {status}");
        if content_type != "application/json" {
            prop_assert!(
                *status >= 400 || content_type.starts_with("application/openmetrics-text"),
                "{status} with content type {content_type:?}"
            );
            return Ok(());
        }
        // HEAD answers carry no body to check.
        let is_head = method == Method::HEAD;
        match plain_target {
            Some(uri) if simple_headers => match predict(&method, uri.path(), uri.query()) {
                Err(err) => {
                    prop_assert_eq!(*status, err.status.as_u16(), "{} {}", method, target);
                    if !is_head {
                        check_envelope(body, Some(err.code))?;
                    }
                }
                Ok(_) if *status != 200 && !is_head => check_envelope(body, None)?,
                Ok(_) => {}
            },
            _ if *status != 200 && !is_head => check_envelope(body, None)?,
            _ => {}
        }
    }

    /// Raw bytes, and a valid request with bytes overwritten: the service answers with
    /// well-formed HTTP or closes, and never panics (a panic in a connection task would be
    /// swallowed by tokio, so the next check is that the service still answers).
    #[test]
    fn the_real_service_survives_raw_bytes(
        junk in prop_oneof![
            vec(any::<u8>(), 0..300),
            (vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)).prop_map(|edits| {
                let mut raw = b"POST /lock/db?wait=1s&ttl=2s HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc".to_vec();
                for (at, byte) in edits {
                    let i = at.index(raw.len());
                    raw[i] = byte;
                }
                raw
            }),
        ],
    ) {
        let answer = exchange(&junk, true);
        check_no_worker_panic()?;
        if !answer.is_empty() {
            // hyper answers an HTTP/1.0 request (a mutated version) in HTTP/1.0.
            prop_assert!(
                answer.starts_with(b"HTTP/1.1 ") || answer.starts_with(b"HTTP/1.0 "),
                "{:?}",
                String::from_utf8_lossy(&answer)
            );
        }
        let health = first_response(
            &exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", false),
            false,
        )?;
        prop_assert_eq!(health.map(|r| r.0), Some(200));
    }
}
