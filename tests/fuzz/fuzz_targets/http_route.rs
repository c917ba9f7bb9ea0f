//! The sidecar's request-line parsers: a method, a path and a query string go through `route`,
//! then `Query::for_endpoint` with the parameters the API's table lists for the route it found,
//! then the route's durations with the table's limits, as `http::handlers` does. None of it panics, and every refusal is a 4xx that renders as the
//! JSON error envelope `{"error": {"code", "message"}}` (with `Allow` on 405).
//!
//! Input: one byte choosing the method (a known one, or the bytes up to the first space as a
//! token), then UTF-8 text `PATH` or `PATH?QUERY`. The same bytes also go to `baton_duration::parse`.
#![no_main]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use baton_sidecar::duration;
use baton_sidecar::http::api::ParamKind;
use baton_sidecar::http::{ApiError, Query, Route, route};
use http_body_util::BodyExt;
use hyper::{Method, StatusCode, header};
use libfuzzer_sys::fuzz_target;

const METHODS: [Method; 9] = [
    Method::GET,
    Method::POST,
    Method::DELETE,
    Method::PUT,
    Method::PATCH,
    Method::HEAD,
    Method::OPTIONS,
    Method::CONNECT,
    Method::TRACE,
];

/// The route, its query parsed with the parameters the API's table lists for it, and each
/// duration parameter read with its default and limits from the same table, as the handlers do.
fn parse(method: &Method, path: &str, query: Option<&str>) -> Result<Route, ApiError> {
    let route = route(method, path)?;
    let endpoint = route.endpoint();
    let q = Query::for_endpoint(query, endpoint)?;
    for p in endpoint.params {
        if let ParamKind::Duration { min, max, .. } = p.kind
            && let Some(d) = q.optional_duration_of(p)?
        {
            assert!(
                min <= d && d <= max,
                "{}: {d:?} outside {min:?}..={max:?}",
                p.name
            );
        }
    }
    Ok(route)
}

/// The body of a `Full` response: ready at once, so one poll with a no-op waker suffices.
fn body_of(response: hyper::Response<baton_sidecar::http::Body>) -> Vec<u8> {
    let mut collect = pin!(response.into_body().collect());
    match collect
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(Ok(collected)) => collected.to_bytes().to_vec(),
        Poll::Ready(Err(never)) => match never {},
        Poll::Pending => panic!("a Full body was not ready"),
    }
}

fn check_refusal(err: ApiError) {
    assert!(err.status.is_client_error(), "{err:?} is not a 4xx");
    assert!(!err.code.is_empty() && !err.message.is_empty(), "{err:?}");
    let (status, code) = (err.status, err.code);
    let response = err.into_response();
    assert_eq!(response.status(), status);
    assert_eq!(
        response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.as_bytes()),
        Some(&b"application/json"[..])
    );
    if status == StatusCode::METHOD_NOT_ALLOWED {
        assert!(response.headers().contains_key(header::ALLOW));
    }
    let body: serde_json::Value =
        serde_json::from_slice(&body_of(response)).expect("the error body is JSON");
    let error = &body["error"];
    assert_eq!(error["code"].as_str(), Some(code), "{body}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert_eq!(body.as_object().map(|o| o.len()), Some(1), "{body}");
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let (method, rest) = match METHODS.get(usize::from(selector)) {
        Some(m) => (m.clone(), rest),
        None => {
            let (token, rest) = match rest.iter().position(|&b| b == b' ') {
                Some(at) => (&rest[..at], &rest[at + 1..]),
                None => (rest, &[][..]),
            };
            let Ok(method) = Method::from_bytes(token) else {
                return;
            };
            (method, rest)
        }
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    if let Ok(d) = duration::parse(text) {
        assert!(
            d <= Duration::from_secs(30 * 24 * 3600),
            "{text:?} -> {d:?}"
        );
    }
    let (path, query) = match text.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (text, None),
    };
    if let Err(err) = parse(&method, path, query) {
        check_refusal(err);
    }
});
