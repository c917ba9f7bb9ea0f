//! App health (`--app-health`, DESIGN.md §2): the sidecar checks the app's health endpoint and,
//! while the app fails, gives up what the app would otherwise hold: it stands aside in every
//! election (the next candidate leads) and ends the app's locks and stream holds.
//!
//! Hysteresis both ways: `--app-health-failures` failed checks in a row make the app
//! unhealthy, and as many healthy answers in a row make it healthy again, so one slow answer
//! never moves leadership and a flapping app does not win it back on its first good answer.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper::{Request, Uri, header};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::leases::{Ending, LockTable};
use crate::metrics::Metrics;
use crate::recipe::ElectionRecipe;

/// `http://HOST:PORT/PATH`: where the app answers health checks (plain HTTP: it is in the
/// same pod).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthUrl {
    authority: String,
    path: String,
}

impl HealthUrl {
    /// Parses an `http://` URL; the port defaults to 80, the path to `/`.
    pub fn parse(value: &str) -> Result<Self, String> {
        let uri: Uri = value
            .parse()
            .map_err(|e| format!("{value:?} is not a URL: {e}"))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!(
                "{value:?}: only http://HOST:PORT/PATH (the app is in the same pod)"
            ));
        }
        let Some(authority) = uri.authority() else {
            return Err(format!("{value:?} names no host"));
        };
        if authority.host().is_empty() || authority.as_str().contains('@') {
            return Err(format!("{value:?}: bad host"));
        }
        let port = authority.port_u16().unwrap_or(80);
        Ok(Self {
            authority: format!("{}:{port}", authority.host()),
            path: uri.path_and_query().map_or("/", |p| p.as_str()).to_owned(),
        })
    }

    /// `HOST:PORT`.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The path and query.
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl fmt::Display for HealthUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority, self.path)
    }
}

/// How the app is checked.
#[derive(Debug, Clone)]
pub struct AppHealth {
    pub url: HealthUrl,
    /// Between checks, and the bound of one check.
    pub interval: Duration,
    /// Results in a row that change the verdict.
    pub threshold: u32,
}

/// One check: `Ok` for a 2xx answer within `bound`, else why not.
pub async fn check(url: &HealthUrl, bound: Duration) -> Result<(), String> {
    let attempt = async {
        let tcp = TcpStream::connect(url.authority())
            .await
            .map_err(|e| format!("cannot connect to {url}: {e}"))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        // Driven by its own task (an answer with `connection: close` ends it at once), and
        // ended with this check however it ends.
        let _connection = AbortOnDrop(tokio::spawn(async move {
            let _ = connection.await;
        }));
        let request = Request::get(url.path())
            .header(header::HOST, url.authority())
            .header(header::USER_AGENT, "baton-sidecar")
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("{url}: {e}"))?;
        sender
            .send_request(request)
            .await
            .map(|response| response.status())
            .map_err(|e| format!("{url}: {e}"))
    };
    match tokio::time::timeout(bound, attempt).await {
        Err(_) => Err(format!(
            "no answer from {url} within {}",
            baton_duration::format(bound)
        )),
        Ok(Ok(status)) if status.is_success() => Ok(()),
        Ok(Ok(status)) => Err(format!("{url} answered {status}")),
        Ok(Err(why)) => Err(why),
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the checks decide, fed one result at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    healthy: bool,
    /// Results in a row that disagree with `healthy`.
    streak: u32,
    threshold: u32,
}

impl Verdict {
    /// Healthy until `threshold` failures in a row say otherwise.
    pub fn new(threshold: u32) -> Self {
        Self {
            healthy: true,
            streak: 0,
            threshold: threshold.max(1),
        }
    }

    /// Whether the app counts as healthy.
    pub fn healthy(&self) -> bool {
        self.healthy
    }

    /// Counts one check; `true` when it flips the verdict.
    pub fn record(&mut self, ok: bool) -> bool {
        if ok == self.healthy {
            self.streak = 0;
            return false;
        }
        self.streak += 1;
        if self.streak < self.threshold {
            return false;
        }
        self.healthy = ok;
        self.streak = 0;
        true
    }
}

/// Checks the app every `health.interval` until `stop` is set, standing aside in `elections`
/// and ending `locks` while it is unhealthy.
pub async fn watch_app(
    health: AppHealth,
    elections: Vec<ElectionRecipe>,
    locks: LockTable,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    tracing::info!(url = %health.url, interval = %baton_duration::format(health.interval),
        failures = health.threshold, "checking the app's health");
    let mut verdict = Verdict::new(health.threshold);
    let mut ticks = tokio::time::interval(health.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let result = tokio::select! {
            result = check(&health.url, health.interval) => result,
            _ = stop.wait_for(|s| *s) => return,
        };
        if let Err(why) = &result {
            tracing::debug!(url = %health.url, why = %why, "app health check failed");
        }
        if !verdict.record(result.is_ok()) {
            continue;
        }
        let n = health.threshold;
        metrics.app_health_changed(verdict.healthy());
        if verdict.healthy() {
            tracing::info!(url = %health.url,
                "app healthy again: {n} health checks in a row answered 2xx; standing in every election again and accepting locks");
            locks.set_accepting(true);
            for election in &elections {
                election.set_standing(true);
            }
        } else {
            let why = result.err().unwrap_or_default();
            tracing::warn!(url = %health.url, last = %why,
                "app unhealthy: {n} health checks in a row failed (last: {why}); standing aside in every election and ending the app's locks");
            locks.set_accepting(false);
            for election in &elections {
                election.set_standing(false);
            }
            let bound = locks.session().session_timeout();
            locks.end_all(bound, Ending::Lost("app unhealthy")).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let url = HealthUrl::parse("http://localhost/healthz").expect("parses");
        assert_eq!((url.authority(), url.path()), ("localhost:80", "/healthz"));
        assert_eq!(url.to_string(), "http://localhost:80/healthz");
        let bare = HealthUrl::parse("http://127.0.0.1:8080").expect("parses");
        assert_eq!(bare.path(), "/");
        for bad in ["https://x/", "x:80", "/healthz", "http://", "http://u:p@x/"] {
            assert!(HealthUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_verdict_needs_as_many_results_in_a_row_either_way() {
        let mut v = Verdict::new(3);
        assert!(v.healthy());
        // Two failures, a success: the streak starts again.
        assert!(!v.record(false) && !v.record(false) && !v.record(true));
        assert!(!v.record(false) && !v.record(false));
        assert!(v.record(false), "the third failure in a row flips it");
        assert!(!v.healthy());
        assert!(!v.record(true) && !v.record(true) && !v.record(false));
        assert!(!v.record(true) && !v.record(true));
        assert!(v.record(true), "the third success in a row flips it back");
        assert!(v.healthy());
    }
}
