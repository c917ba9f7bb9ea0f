//! The API's routes: path shape first (404), then method (405), then names (400).

use hyper::Method;

use super::api::{self, Endpoint};
use super::reply::ApiError;
use crate::http::error_code::ErrorCode;
use crate::recipe::ResourceName;

/// One endpoint of the API, with its validated path parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /leader[/NAME]`; `None` is the first configured election.
    Leader(Option<ResourceName>),
    /// `GET /leader[/NAME]/ready`.
    LeaderReady(Option<ResourceName>),
    /// `POST /leader[/NAME]/resign`.
    LeaderResign(Option<ResourceName>),
    /// `GET /leader[/NAME]/campaign`: an app-held candidacy (`--candidacy app`).
    LeaderCampaign(Option<ResourceName>),
    /// `POST /leader[/NAME]/release`: hand over after `stepping-down`.
    LeaderRelease(Option<ResourceName>),
    /// `POST /lock/NAME`.
    LockAcquire(ResourceName),
    /// `POST /lock/NAME/renew`.
    LockRenew(ResourceName),
    /// `DELETE /lock/NAME`.
    LockRelease(ResourceName),
    /// `GET /lock/NAME`.
    LockInspect(ResourceName),
    /// `POST /semaphore/NAME`.
    SemaphoreAcquire(ResourceName),
    /// `POST /semaphore/NAME/renew`.
    SemaphoreRenew(ResourceName),
    /// `DELETE /semaphore/NAME`.
    SemaphoreRelease(ResourceName),
    /// `GET /semaphore/NAME`.
    SemaphoreInspect(ResourceName),
    /// `POST /barrier/NAME`.
    Barrier(ResourceName),
    /// `GET /members/NAME`.
    Members(ResourceName),
    /// `GET /events`.
    Events,
    Healthz,
    Readyz,
    Metrics,
    /// `GET /openapi.json`: this API's OpenAPI document.
    OpenApi,
}

impl Route {
    /// The route's entry in the API's table: its parameters, answers and errors.
    pub fn endpoint(&self) -> &'static Endpoint {
        api::endpoint(self.label()).expect("every route has an endpoint (checked by api's tests)")
    }

    /// A fixed name for metrics (never the raw path: names would explode the label set).
    pub fn label(&self) -> &'static str {
        match self {
            Route::Leader(_) => "leader",
            Route::LeaderReady(_) => "leader_ready",
            Route::LeaderResign(_) => "leader_resign",
            Route::LeaderCampaign(_) => "leader_campaign",
            Route::LeaderRelease(_) => "leader_release",
            Route::LockAcquire(_) => "lock_acquire",
            Route::LockRenew(_) => "lock_renew",
            Route::LockRelease(_) => "lock_release",
            Route::LockInspect(_) => "lock_inspect",
            Route::SemaphoreAcquire(_) => "semaphore_acquire",
            Route::SemaphoreRenew(_) => "semaphore_renew",
            Route::SemaphoreRelease(_) => "semaphore_release",
            Route::SemaphoreInspect(_) => "semaphore_inspect",
            Route::Members(_) => "members",
            Route::Barrier(_) => "barrier",
            Route::Events => "events",
            Route::Healthz => "healthz",
            Route::Readyz => "readyz",
            Route::Metrics => "metrics",
            Route::OpenApi => "openapi",
        }
    }
}

fn name(kind: &str, raw: &str) -> Result<ResourceName, ApiError> {
    ResourceName::new(raw)
        .map_err(|e| ApiError::bad_request(ErrorCode::InvalidName, format!("{kind} name: {e}")))
}

fn election(raw: Option<&str>) -> Result<Option<ResourceName>, ApiError> {
    raw.map(|r| name("election", r)).transpose()
}

/// Maps a request line to a route, or to the error answer for it.
pub fn route(method: &Method, path: &str) -> Result<Route, ApiError> {
    let segments: Vec<&str> = match path.strip_prefix('/') {
        Some(rest) => rest.split('/').collect(),
        None => return Err(ApiError::no_route(path)),
    };
    if segments.iter().any(|s| s.is_empty()) {
        return Err(ApiError::no_route(path));
    }
    let only = |allowed: Method, allow: &'static str| {
        if *method == allowed {
            Ok(())
        } else {
            Err(ApiError::method_not_allowed(method, path, allow))
        }
    };
    match segments.as_slice() {
        ["healthz"] => only(Method::GET, "GET").map(|()| Route::Healthz),
        ["readyz"] => only(Method::GET, "GET").map(|()| Route::Readyz),
        ["metrics"] => only(Method::GET, "GET").map(|()| Route::Metrics),
        ["openapi.json"] => only(Method::GET, "GET").map(|()| Route::OpenApi),
        ["events"] => only(Method::GET, "GET").map(|()| Route::Events),
        ["leader"] => {
            only(Method::GET, "GET")?;
            Ok(Route::Leader(None))
        }
        ["leader", "ready"] => {
            only(Method::GET, "GET")?;
            Ok(Route::LeaderReady(None))
        }
        ["leader", "resign"] => {
            only(Method::POST, "POST")?;
            Ok(Route::LeaderResign(None))
        }
        ["leader", "campaign"] => {
            only(Method::GET, "GET")?;
            Ok(Route::LeaderCampaign(None))
        }
        ["leader", "release"] => {
            only(Method::POST, "POST")?;
            Ok(Route::LeaderRelease(None))
        }
        ["leader", raw] => {
            only(Method::GET, "GET")?;
            Ok(Route::Leader(election(Some(raw))?))
        }
        ["leader", raw, "ready"] => {
            only(Method::GET, "GET")?;
            Ok(Route::LeaderReady(election(Some(raw))?))
        }
        ["leader", raw, "resign"] => {
            only(Method::POST, "POST")?;
            Ok(Route::LeaderResign(election(Some(raw))?))
        }
        ["leader", raw, "campaign"] => {
            only(Method::GET, "GET")?;
            Ok(Route::LeaderCampaign(election(Some(raw))?))
        }
        ["leader", raw, "release"] => {
            only(Method::POST, "POST")?;
            Ok(Route::LeaderRelease(election(Some(raw))?))
        }
        ["lock", raw] => {
            let route = match *method {
                Method::POST => Route::LockAcquire,
                Method::DELETE => Route::LockRelease,
                Method::GET => Route::LockInspect,
                _ => {
                    return Err(ApiError::method_not_allowed(
                        method,
                        path,
                        "GET, POST, DELETE",
                    ));
                }
            };
            Ok(route(name("lock", raw)?))
        }
        ["lock", raw, "renew"] => {
            only(Method::POST, "POST")?;
            Ok(Route::LockRenew(name("lock", raw)?))
        }
        ["barrier", raw] => {
            only(Method::POST, "POST")?;
            Ok(Route::Barrier(name("barrier", raw)?))
        }
        ["members", raw] => {
            only(Method::GET, "GET")?;
            Ok(Route::Members(name("election", raw)?))
        }
        ["semaphore", raw] => {
            let route = match *method {
                Method::POST => Route::SemaphoreAcquire,
                Method::DELETE => Route::SemaphoreRelease,
                Method::GET => Route::SemaphoreInspect,
                _ => {
                    return Err(ApiError::method_not_allowed(
                        method,
                        path,
                        "GET, POST, DELETE",
                    ));
                }
            };
            Ok(route(name("semaphore", raw)?))
        }
        ["semaphore", raw, "renew"] => {
            only(Method::POST, "POST")?;
            Ok(Route::SemaphoreRenew(name("semaphore", raw)?))
        }
        _ => Err(ApiError::no_route(path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::StatusCode;

    fn n(s: &str) -> ResourceName {
        ResourceName::new(s).expect("valid")
    }

    #[test]
    fn every_documented_endpoint_routes() {
        let cases = [
            (Method::GET, "/leader", Route::Leader(None)),
            (
                Method::GET,
                "/leader/orders",
                Route::Leader(Some(n("orders"))),
            ),
            (Method::GET, "/leader/ready", Route::LeaderReady(None)),
            (
                Method::GET,
                "/leader/orders/ready",
                Route::LeaderReady(Some(n("orders"))),
            ),
            (Method::POST, "/leader/resign", Route::LeaderResign(None)),
            (
                Method::POST,
                "/leader/orders/resign",
                Route::LeaderResign(Some(n("orders"))),
            ),
            (Method::GET, "/leader/campaign", Route::LeaderCampaign(None)),
            (
                Method::GET,
                "/leader/orders/campaign",
                Route::LeaderCampaign(Some(n("orders"))),
            ),
            (Method::POST, "/leader/release", Route::LeaderRelease(None)),
            (
                Method::POST,
                "/leader/orders/release",
                Route::LeaderRelease(Some(n("orders"))),
            ),
            (Method::POST, "/lock/db", Route::LockAcquire(n("db"))),
            (Method::DELETE, "/lock/db", Route::LockRelease(n("db"))),
            (Method::GET, "/lock/db", Route::LockInspect(n("db"))),
            (Method::POST, "/lock/db/renew", Route::LockRenew(n("db"))),
            (Method::POST, "/lock/renew", Route::LockAcquire(n("renew"))),
            (
                Method::POST,
                "/semaphore/s",
                Route::SemaphoreAcquire(n("s")),
            ),
            (
                Method::DELETE,
                "/semaphore/s",
                Route::SemaphoreRelease(n("s")),
            ),
            (Method::GET, "/semaphore/s", Route::SemaphoreInspect(n("s"))),
            (Method::GET, "/members/e", Route::Members(n("e"))),
            (Method::POST, "/barrier/b", Route::Barrier(n("b"))),
            (
                Method::POST,
                "/semaphore/s/renew",
                Route::SemaphoreRenew(n("s")),
            ),
            (Method::GET, "/healthz", Route::Healthz),
            (Method::GET, "/readyz", Route::Readyz),
            (Method::GET, "/metrics", Route::Metrics),
            (Method::GET, "/events", Route::Events),
            (Method::GET, "/openapi.json", Route::OpenApi),
        ];
        for (method, path, expected) in cases {
            assert_eq!(route(&method, path), Ok(expected), "{method} {path}");
        }
    }

    #[test]
    fn unknown_paths_are_404() {
        for path in [
            "/",
            "",
            "/leaders",
            "/leader/",
            "/leader/a/b",
            "/lock",
            "/lock/",
            "/lock//renew",
            "/lock/a/b",
            "/healthz/x",
            "//leader",
        ] {
            let err = route(&Method::GET, path).expect_err(path);
            assert_eq!(
                (err.status, err.code),
                (StatusCode::NOT_FOUND, "NotFound"),
                "{path}"
            );
        }
    }

    #[test]
    fn wrong_methods_are_405_with_allow() {
        let cases = [
            (Method::POST, "/leader", "GET"),
            (Method::DELETE, "/leader/x/ready", "GET"),
            (Method::GET, "/leader/resign", "POST"),
            (Method::POST, "/leader/x/campaign", "GET"),
            (Method::GET, "/leader/x/release", "POST"),
            (Method::PUT, "/lock/db", "GET, POST, DELETE"),
            (Method::GET, "/lock/db/renew", "POST"),
            (Method::POST, "/metrics", "GET"),
        ];
        for (method, path, allow) in cases {
            let err = route(&method, path).expect_err(path);
            assert_eq!(
                (err.status, err.allow),
                (StatusCode::METHOD_NOT_ALLOWED, Some(allow)),
                "{method} {path}"
            );
        }
    }

    #[test]
    fn bad_names_are_400() {
        for (method, path) in [
            (Method::POST, "/lock/-x"),
            (Method::POST, "/lock/a%2Fb"),
            (Method::POST, "/lock/.."),
            (Method::GET, "/leader/%20"),
            (Method::POST, "/lock/a b/renew"),
        ] {
            let err = route(&method, path).expect_err(path);
            assert_eq!(
                (err.status, err.code),
                (StatusCode::BAD_REQUEST, "InvalidName"),
                "{path}"
            );
        }
    }
}
