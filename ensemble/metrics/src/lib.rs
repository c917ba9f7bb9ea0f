//! A Prometheus registry that remembers what was registered in it. `prometheus-client` encodes
//! only families that have a series, so a labelled family is invisible on `/metrics` until its
//! first event; the documentation's metrics reference is made from [`Catalog::families`]
//! instead, which lists every family from the start. One copy for the ensemble, the sidecar and
//! the operator.

use prometheus_client::registry::{Metric, Registry};

/// One registered family, as `/metrics` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyInfo {
    /// The full name (prefix included; a counter's series add `_total`).
    pub name: String,
    pub help: String,
    /// `counter`, `gauge`, `histogram`, `info` or `unknown`.
    pub kind: &'static str,
}

/// A [`Registry`] with a prefix, and the list of the families registered in it.
#[derive(Debug)]
pub struct Catalog {
    registry: Registry,
    prefix: String,
    families: Vec<FamilyInfo>,
}

impl Catalog {
    /// An empty catalog whose names all start with `prefix_`.
    pub fn with_prefix(prefix: &str) -> Self {
        Self {
            registry: Registry::with_prefix(prefix),
            prefix: prefix.to_string(),
            families: Vec::new(),
        }
    }

    /// Registers `metric` as [`Registry::register`] does, and lists it.
    pub fn register(
        &mut self,
        name: impl Into<String>,
        help: impl Into<String>,
        metric: impl Metric,
    ) {
        let (name, help) = (name.into(), help.into());
        let kind = match metric.metric_type().as_str() {
            "counter" => "counter",
            "gauge" => "gauge",
            "histogram" => "histogram",
            "info" => "info",
            _ => "unknown",
        };
        self.families.push(FamilyInfo {
            name: format!("{}_{name}", self.prefix),
            help: help.clone(),
            kind,
        });
        self.registry.register(name, help, metric);
    }

    /// The registry (to encode) and the families it holds, in registration order.
    pub fn finish(self) -> (Registry, Vec<FamilyInfo>) {
        (self.registry, self.families)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;

    #[test]
    fn lists_families_encoding_would_skip() {
        let mut catalog = Catalog::with_prefix("x");
        catalog.register("hits", "Hits", Counter::<u64>::default());
        catalog.register(
            "by_reason",
            "By reason",
            Family::<Vec<(String, String)>, Counter>::default(),
        );
        let (registry, families) = catalog.finish();
        let names: Vec<(&str, &str)> = families.iter().map(|f| (f.name.as_str(), f.kind)).collect();
        assert_eq!(names, [("x_hits", "counter"), ("x_by_reason", "counter")]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(text.contains("x_hits_total"), "{text}");
        assert!(!text.contains("x_by_reason"), "{text}");
    }
}
