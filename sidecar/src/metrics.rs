//! Prometheus metrics of the sidecar, rendered at `GET /metrics`.

use baton_metrics::{Catalog, FamilyInfo};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::recipe::ConnectionState;
use crate::recipe::trust::IgnoredLabels;

/// Labels naming an election (bounded: elections come from flags).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ElectionLabels {
    pub election: String,
}

/// Labels naming a session state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

/// Labels of a lock acquisition's outcome (lock names are not labels: apps choose them freely).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

/// Labels of an app health transition: the state it went to (`healthy`, `unhealthy`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    pub to: String,
}

/// Labels of an HTTP answer: the route's name (not the raw path) and the status code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub route: String,
    pub status: String,
}

/// Every metric the sidecar exports; updates are atomics, safe from any task.
pub struct Metrics {
    registry: Registry,
    families: Vec<FamilyInfo>,
    /// 1 for the current session state, 0 for the others.
    pub session_state: Family<StateLabels, Gauge>,
    pub sessions_established: Counter,
    pub is_leader: Family<ElectionLabels, Gauge>,
    pub leader_terms: Family<ElectionLabels, Counter>,
    pub lock_acquisitions: Family<OutcomeLabels, Counter>,
    pub locks_held: Gauge,
    pub lease_expirations: Counter,
    pub http_requests: Family<HttpLabels, Counter>,
    /// 1 while the app counts as healthy (always without `--app-health`).
    pub app_healthy: Gauge,
    pub app_health_transitions: Family<TransitionLabels, Counter>,
    /// Shared with the session's recipes, which count the planted nodes they skip.
    pub ignored_queue_nodes: Family<IgnoredLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric under the `baton_sidecar` prefix.
    pub fn new() -> Self {
        Self::with_ignored_nodes(Family::default())
    }

    /// [`Metrics::new`], exporting `ignored` (a session's
    /// [`IgnoredNodes::family`](crate::recipe::trust::IgnoredNodes::family)) as
    /// `baton_sidecar_ignored_queue_nodes_total`.
    pub fn with_ignored_nodes(ignored: Family<IgnoredLabels, Counter>) -> Self {
        let mut registry = Catalog::with_prefix("baton_sidecar");
        let m = Self {
            registry: Registry::default(),
            families: Vec::new(),
            session_state: Family::default(),
            sessions_established: Counter::default(),
            is_leader: Family::default(),
            leader_terms: Family::default(),
            lock_acquisitions: Family::default(),
            locks_held: Gauge::default(),
            lease_expirations: Counter::default(),
            http_requests: Family::default(),
            app_healthy: Gauge::default(),
            app_health_transitions: Family::default(),
            ignored_queue_nodes: ignored,
        };
        m.app_healthy.set(1);
        registry.register(
            "session_state",
            "1 for the session's current state (CONNECTED, SUSPENDED, LOST)",
            m.session_state.clone(),
        );
        registry.register(
            "sessions_established",
            "Sessions established with the ensemble (more than one means a session was lost)",
            m.sessions_established.clone(),
        );
        registry.register(
            "is_leader",
            "1 while this pod leads the election",
            m.is_leader.clone(),
        );
        registry.register(
            "leader_terms",
            "Times this pod became the leader",
            m.leader_terms.clone(),
        );
        registry.register(
            "lock_acquisitions",
            "HTTP lock acquisitions by outcome (granted, not_granted, busy, error)",
            m.lock_acquisitions.clone(),
        );
        registry.register(
            "locks_held",
            "HTTP locks this pod holds",
            m.locks_held.clone(),
        );
        registry.register(
            "lease_expirations",
            "HTTP locks released because their lease ran out",
            m.lease_expirations.clone(),
        );
        registry.register(
            "http_requests",
            "HTTP requests by route and status",
            m.http_requests.clone(),
        );
        registry.register(
            "app_healthy",
            "1 while the app counts as healthy (--app-health; always 1 without it)",
            m.app_healthy.clone(),
        );
        registry.register(
            "app_health_transitions",
            "Times the app's health verdict changed, by the state it went to (healthy, unhealthy)",
            m.app_health_transitions.clone(),
        );
        registry.register(
            "ignored_queue_nodes",
            "Persistent (planted) nodes in election and lock queues that were ignored, by kind",
            m.ignored_queue_nodes.clone(),
        );
        let (registry, families) = registry.finish();
        Self {
            registry,
            families,
            ..m
        }
    }

    /// Counts one lock acquisition outcome.
    pub fn lock_outcome(&self, outcome: &str) {
        self.lock_acquisitions
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Records the app's health verdict changing to `healthy`.
    pub fn app_health_changed(&self, healthy: bool) {
        self.app_healthy.set(i64::from(healthy));
        let to = if healthy { "healthy" } else { "unhealthy" };
        self.app_health_transitions
            .get_or_create(&TransitionLabels { to: to.to_owned() })
            .inc();
    }

    /// Sets the gauges that mirror current state, so a scrape never lags what the API says.
    pub fn set_current(&self, session: ConnectionState, leadership: &[(&str, bool)]) {
        for s in [
            ConnectionState::Connected,
            ConnectionState::Suspended,
            ConnectionState::Lost,
        ] {
            let labels = StateLabels {
                state: s.as_str().to_owned(),
            };
            self.session_state
                .get_or_create(&labels)
                .set(i64::from(s == session));
        }
        for (election, leads) in leadership {
            let labels = ElectionLabels {
                election: (*election).to_owned(),
            };
            self.is_leader.get_or_create(&labels).set(i64::from(*leads));
        }
    }

    /// Every family registered, with its help and type, including labelled ones that have no
    /// series yet (the metrics reference is made from this).
    pub fn families(&self) -> &[FamilyInfo] {
        &self.families
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_registered_metrics() {
        let m = Metrics::new();
        m.lock_outcome("granted");
        m.is_leader
            .get_or_create(&ElectionLabels {
                election: "orders".into(),
            })
            .set(1);
        let text = m.render();
        assert!(
            text.contains("baton_sidecar_lock_acquisitions_total{outcome=\"granted\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("baton_sidecar_is_leader{election=\"orders\"} 1"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
