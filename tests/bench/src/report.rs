//! The result of one run: one human-readable line, or one JSON object.

use std::time::Duration;

use serde::Serialize;

use crate::latency::{LatencyRecorder, LatencySummary};

/// What one run measured.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub label: String,
    pub workload: String,
    pub workers: usize,
    pub ops: u64,
    pub elapsed_secs: f64,
    pub ops_per_sec: f64,
    #[serde(flatten)]
    pub latency: LatencySummary,
    /// What a workload measures besides latencies (memory, sessions lost, ...), as flat fields.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl RunReport {
    /// Builds the report of a run that recorded `latencies` over `elapsed` wall-clock time.
    pub fn new(
        label: &str,
        workload: &str,
        workers: usize,
        latencies: &LatencyRecorder,
        elapsed: Duration,
    ) -> Self {
        let ops = latencies.count();
        let secs = elapsed.as_secs_f64();
        RunReport {
            label: label.to_owned(),
            workload: workload.to_owned(),
            workers,
            ops,
            elapsed_secs: (secs * 1e3).round() / 1e3,
            ops_per_sec: if secs > 0.0 {
                (ops as f64 / secs * 10.0).round() / 10.0
            } else {
                0.0
            },
            latency: latencies.summary(),
            extra: serde_json::Map::new(),
        }
    }

    /// Adds a workload's own measurements to the report.
    pub fn with_extra(mut self, extra: serde_json::Map<String, serde_json::Value>) -> Self {
        self.extra = extra;
        self
    }
}

impl std::fmt::Display for RunReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = &self.latency;
        write!(
            f,
            "{:<8} {:<18} workers={:<4} ops={:<8} ops/s={:<10.1} p50={:<8} p99={:<8} p999={:<8} max={}",
            self.label,
            self.workload,
            self.workers,
            self.ops,
            self.ops_per_sec,
            l.p50.to_string(),
            l.p99.to_string(),
            l.p999.to_string(),
            l.max
        )?;
        for (key, value) in &self.extra {
            write!(f, " {key}={value}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RunReport {
        let mut latencies = LatencyRecorder::new().expect("histogram bounds are valid");
        for _ in 0..100 {
            latencies.record(Duration::from_micros(800));
        }
        RunReport::new("zk", "get-data", 10, &latencies, Duration::from_secs(2))
    }

    #[test]
    fn rate_is_ops_over_elapsed() {
        let report = sample();
        assert_eq!(report.ops, 100);
        assert_eq!(report.ops_per_sec, 50.0);
    }

    #[test]
    fn line_names_every_field_with_units() {
        let line = sample().to_string();
        for part in [
            "zk",
            "get-data",
            "workers=10",
            "ops=100",
            "ops/s=50.0",
            "p50=800µs",
            "max=800µs",
        ] {
            assert!(line.contains(part), "{part:?} missing from {line:?}");
        }
    }

    #[test]
    fn json_has_flat_microsecond_fields() {
        let json = serde_json::to_value(sample()).expect("report serializes");
        assert_eq!(json["label"], "zk");
        assert_eq!(json["workers"], 10);
        assert_eq!(json["ops"], 100);
        assert_eq!(json["p50_us"], 800.0);
        assert_eq!(json["p999_us"], 800.0);
    }
}
