//! The floor under every durable write: how long this disk takes to make 1 KiB durable while
//! `--workers` writers do the same at once, each on its own file, as the members of an
//! ensemble sharing one disk each persist the same entry to their own log.
//!
//! Each writer appends 1 KiB to a temporary file and fdatasyncs it, like a write-ahead log
//! without preallocation (so each sync also carries the file's new size).

use std::io::Write;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use super::{RunConfig, payload};
use crate::budget::Budget;
use crate::error::BenchError;
use crate::latency::LatencyRecorder;

const RECORD_SIZE: usize = 1024;

/// Times --ops (or --duration of) append + fdatasync rounds, shared among --workers writers.
pub(super) async fn run(config: &RunConfig) -> Result<(LatencyRecorder, Duration), BenchError> {
    let config = config.clone();
    tokio::task::spawn_blocking(move || sync_loops(&config)).await?
}

fn sync_loops(config: &RunConfig) -> Result<(LatencyRecorder, Duration), BenchError> {
    let dir = &config.fsync_dir;
    let io_error = |what: &str| {
        let context = format!("{what} in {}", dir.display());
        move |source| BenchError::Io { context, source }
    };
    let files = (0..config.workers.max(1))
        .map(|_| tempfile::NamedTempFile::new_in(dir).map_err(io_error("creating a temp file")))
        .collect::<Result<Vec<_>, _>>()?;
    // Every writer starts together, so the first syncs already share the disk.
    let start = Arc::new(Barrier::new(files.len()));
    let budget = Budget::start(config.limit);
    let started = Instant::now();
    let results = std::thread::scope(|scope| {
        let writers: Vec<_> = files
            .into_iter()
            .map(|file| {
                let (start, budget) = (Arc::clone(&start), &budget);
                scope.spawn(move || writer(file, &start, budget, io_error))
            })
            .collect();
        writers
            .into_iter()
            .map(|writer| writer.join().expect("fsync writer panicked"))
            .collect::<Vec<_>>()
    });
    let elapsed = started.elapsed();
    let mut total = LatencyRecorder::new()?;
    for latencies in results {
        total.merge(&latencies?)?;
    }
    Ok((total, elapsed))
}

fn writer<E>(
    mut file: tempfile::NamedTempFile,
    start: &Barrier,
    budget: &Budget,
    io_error: impl Fn(&str) -> E,
) -> Result<LatencyRecorder, BenchError>
where
    E: FnOnce(std::io::Error) -> BenchError,
{
    let record = payload(RECORD_SIZE);
    let mut latencies = LatencyRecorder::new()?;
    start.wait();
    while budget.claim(1) {
        let round = Instant::now();
        file.write_all(&record).map_err(io_error("writing"))?;
        file.as_file().sync_data().map_err(io_error("fdatasync"))?;
        latencies.record(round.elapsed());
    }
    Ok(latencies)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Limit;

    fn config(dir: &std::path::Path, workers: usize, ops: u64) -> RunConfig {
        RunConfig {
            ensemble: None,
            workers,
            limit: Limit::Ops(ops),
            data_size: 0,
            label: "disk".into(),
            fsync_dir: dir.to_owned(),
            sidecar_bin: "baton-sidecar".into(),
            members: None,
        }
    }

    #[test]
    fn syncs_exactly_the_requested_rounds() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (latencies, _) = sync_loops(&config(dir.path(), 1, 5)).expect("fsync loop");
        assert_eq!(latencies.count(), 5);
    }

    #[test]
    fn concurrent_writers_share_the_rounds_and_leave_no_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (latencies, _) = sync_loops(&config(dir.path(), 3, 30)).expect("fsync loops");
        assert_eq!(latencies.count(), 30);
        let left = std::fs::read_dir(dir.path()).expect("read dir").count();
        assert_eq!(left, 0, "temp files are removed");
    }

    #[test]
    fn missing_directory_is_reported_with_its_path() {
        let config = config("/nonexistent/baton-bench".as_ref(), 1, 1);
        let err = sync_loops(&config).expect_err("no such directory");
        assert!(
            err.to_string().contains("/nonexistent/baton-bench"),
            "{err}"
        );
    }
}
