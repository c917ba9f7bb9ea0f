//! The floor under every durable write: how long this disk takes to make 1 KiB durable.
//!
//! Appends 1 KiB to a temporary file and fdatasyncs it, like a write-ahead log without
//! preallocation (so each sync also carries the file's new size).

use std::io::Write;
use std::time::{Duration, Instant};

use super::{RunConfig, payload};
use crate::budget::Budget;
use crate::error::BenchError;
use crate::latency::LatencyRecorder;

const RECORD_SIZE: usize = 1024;

/// Times --ops (or --duration of) append + fdatasync rounds in a temp file under --fsync-dir.
pub(super) async fn run(config: &RunConfig) -> Result<(LatencyRecorder, Duration), BenchError> {
    let config = config.clone();
    tokio::task::spawn_blocking(move || sync_loop(&config)).await?
}

fn sync_loop(config: &RunConfig) -> Result<(LatencyRecorder, Duration), BenchError> {
    let dir = &config.fsync_dir;
    let io_error = |what: &str| {
        let context = format!("{what} in {}", dir.display());
        move |source| BenchError::Io { context, source }
    };
    let mut file =
        tempfile::NamedTempFile::new_in(dir).map_err(io_error("creating a temp file"))?;
    let record = payload(RECORD_SIZE);
    let mut latencies = LatencyRecorder::new()?;
    let budget = Budget::start(config.limit);
    let started = Instant::now();
    while budget.claim(1) {
        let round = Instant::now();
        file.write_all(&record).map_err(io_error("writing"))?;
        file.as_file().sync_data().map_err(io_error("fdatasync"))?;
        latencies.record(round.elapsed());
    }
    Ok((latencies, started.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Limit;

    #[test]
    fn syncs_exactly_the_requested_rounds() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = RunConfig {
            ensemble: None,
            workers: 1,
            limit: Limit::Ops(5),
            data_size: 0,
            label: "disk".into(),
            fsync_dir: dir.path().to_owned(),
            sidecar_bin: "baton-sidecar".into(),
            members: None,
        };
        let (latencies, _) = sync_loop(&config).expect("fsync loop");
        assert_eq!(latencies.count(), 5);
    }

    #[test]
    fn missing_directory_is_reported_with_its_path() {
        let config = RunConfig {
            ensemble: None,
            workers: 1,
            limit: Limit::Ops(1),
            data_size: 0,
            label: "disk".into(),
            fsync_dir: "/nonexistent/baton-bench".into(),
            sidecar_bin: "baton-sidecar".into(),
            members: None,
        };
        let err = sync_loop(&config).expect_err("no such directory");
        assert!(
            err.to_string().contains("/nonexistent/baton-bench"),
            "{err}"
        );
    }
}
