//! Latency recording with an HDR histogram, and the way latencies are printed.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::error::BenchError;

/// The longest latency recorded exactly; longer ones are recorded as this value.
const MAX_RECORDED: Duration = Duration::from_secs(600);

/// Latencies of one worker or one run, in nanoseconds with three significant digits.
#[derive(Clone, Debug)]
pub struct LatencyRecorder {
    histogram: Histogram<u64>,
}

impl LatencyRecorder {
    /// An empty recorder covering 1 ns to ten minutes.
    pub fn new() -> Result<Self, BenchError> {
        let high = u64::try_from(MAX_RECORDED.as_nanos()).unwrap_or(u64::MAX);
        Histogram::new_with_bounds(1, high, 3)
            .map(|histogram| LatencyRecorder { histogram })
            .map_err(|e| BenchError::Histogram(format!("{e:?}")))
    }

    /// Records one operation's latency (saturating at ten minutes).
    pub fn record(&mut self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.histogram.saturating_record(nanos.max(1));
    }

    /// Adds every value of `other` to this recorder.
    pub fn merge(&mut self, other: &LatencyRecorder) -> Result<(), BenchError> {
        self.histogram
            .add(&other.histogram)
            .map_err(|e| BenchError::Histogram(format!("{e:?}")))
    }

    /// How many latencies were recorded.
    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// The percentiles reported for a run (all zero when nothing was recorded).
    pub fn summary(&self) -> LatencySummary {
        if self.histogram.is_empty() {
            return LatencySummary::default();
        }
        let at = |q: f64| Micros::from_nanos(self.histogram.value_at_quantile(q));
        LatencySummary {
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            max: Micros::from_nanos(self.histogram.max()),
        }
    }
}

/// A latency in microseconds, printed with a unit that keeps it readable (`812µs`, `2.31ms`).
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Micros(pub f64);

impl Micros {
    fn from_nanos(nanos: u64) -> Self {
        // The histogram keeps three significant digits; more would be noise from its buckets.
        let us = nanos as f64 / 1e3;
        if us <= 0.0 {
            return Micros(0.0);
        }
        let exponent = us.log10().floor() as i32 - 2;
        // Dividing by an exact power of ten keeps `45.7` from printing as `45.700000000000003`.
        if exponent >= 0 {
            let step = 10f64.powi(exponent);
            Micros((us / step).round() * step)
        } else {
            let scale = 10f64.powi(-exponent);
            Micros((us * scale).round() / scale)
        }
    }
}

impl std::fmt::Display for Micros {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let us = self.0;
        if us < 1_000.0 {
            write!(f, "{us:.0}µs")
        } else if us < 1_000_000.0 {
            write!(f, "{:.2}ms", us / 1e3)
        } else {
            write!(f, "{:.2}s", us / 1e6)
        }
    }
}

/// The latency percentiles of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    #[serde(rename = "p50_us")]
    pub p50: Micros,
    #[serde(rename = "p99_us")]
    pub p99: Micros,
    #[serde(rename = "p999_us")]
    pub p999: Micros,
    #[serde(rename = "max_us")]
    pub max: Micros,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_recorded_values() {
        let mut recorder = LatencyRecorder::new().expect("histogram bounds are valid");
        for us in 1..=1000 {
            recorder.record(Duration::from_micros(us));
        }
        let summary = recorder.summary();
        assert_eq!(recorder.count(), 1000);
        assert!((summary.p50.0 - 500.0).abs() <= 1.0, "{summary:?}");
        assert!((summary.p99.0 - 990.0).abs() <= 1.0, "{summary:?}");
        assert!((summary.max.0 - 1000.0).abs() <= 1.0, "{summary:?}");
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = LatencyRecorder::new().expect("histogram bounds are valid");
        let mut b = LatencyRecorder::new().expect("histogram bounds are valid");
        a.record(Duration::from_millis(1));
        b.record(Duration::from_millis(3));
        b.record(Duration::from_hours(2));
        a.merge(&b).expect("same bounds");
        assert_eq!(a.count(), 3);
        // Saturated at the recorder's ceiling rather than rejected.
        assert!(a.summary().max.0 >= 599_000_000.0);
    }

    #[test]
    fn empty_recorder_summarises_to_zero() {
        let recorder = LatencyRecorder::new().expect("histogram bounds are valid");
        assert_eq!(recorder.summary(), LatencySummary::default());
    }

    #[test]
    fn micros_keep_three_significant_digits() {
        assert_eq!(Micros::from_nanos(800_255).0, 800.0);
        assert_eq!(Micros::from_nanos(1_234_567).0, 1230.0);
        assert_eq!(Micros::from_nanos(45_678).0, 45.7);
        assert_eq!(Micros::from_nanos(0).0, 0.0);
    }

    #[test]
    fn latencies_print_with_readable_units() {
        assert_eq!(Micros(812.4).to_string(), "812µs");
        assert_eq!(Micros(2_310.0).to_string(), "2.31ms");
        assert_eq!(Micros(1_500_000.0).to_string(), "1.50s");
    }
}
