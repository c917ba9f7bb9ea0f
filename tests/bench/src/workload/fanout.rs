//! Watch fan-out: one writer, many sessions watching the node it writes.
//!
//! Each round the writer sets the node's data once; every watcher takes its notification, notes
//! the moment, re-reads the node with a new watch and reports. The writer starts the next round
//! only when all watchers have re-armed, so no notification is ever missed. Latency is from the
//! writer issuing setData to each watcher receiving its notification; an operation is one
//! notification delivered.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::timeout;
use zookeeper_client::{Acls, Client, CreateMode, EventType};

use super::{RunConfig, make_dir, payload, remove_dir};
use crate::budget::Budget;
use crate::ensemble::Ensemble;
use crate::error::BenchError;
use crate::latency::LatencyRecorder;

/// Longest acceptable wait for one watcher's report before the run is declared stuck.
const REPORT_TIMEOUT: Duration = Duration::from_secs(30);

/// What a watcher tells the writer.
enum Report {
    /// The first watch is set.
    Armed,
    /// A notification arrived at this moment, and the next watch is already set.
    Notified(Instant),
}

type Reports = mpsc::UnboundedReceiver<Result<Report, BenchError>>;

/// Runs the fan-out rounds with `config.workers` watchers.
pub(super) async fn run(
    ensemble: &Ensemble,
    config: &RunConfig,
    dir: &str,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    let watchers = config.workers;
    // The writer takes the next slot of the round-robin, after the watchers.
    let mut clients = ensemble.connect_all(watchers + 1).await?;
    let Some(writer) = clients.pop() else {
        return Err(BenchError::InvalidOption(
            "watch-fanout needs a writer session".into(),
        ));
    };
    make_dir(&writer, dir).await?;
    let path = format!("{dir}/node");
    let data = payload(config.data_size);
    writer
        .create(
            &path,
            &data,
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        )
        .await
        .map_err(BenchError::op("create", &path))?;

    // The writer's create may not have reached every watcher's member yet.
    for client in &clients {
        client
            .sync(&path)
            .await
            .map_err(BenchError::op("sync", &path))?;
    }

    let (report_tx, mut reports) = mpsc::unbounded_channel();
    // Dropping the set when this function returns aborts every watcher.
    let mut tasks = JoinSet::new();
    for client in clients {
        tasks.spawn(watch(client, path.clone(), report_tx.clone()));
    }
    let result = rounds(&writer, &path, &data, watchers, config, &mut reports).await;
    tasks.abort_all();
    remove_dir(&writer, dir).await;
    result
}

async fn rounds(
    writer: &Client,
    path: &str,
    data: &[u8],
    watchers: usize,
    config: &RunConfig,
    reports: &mut Reports,
) -> Result<(LatencyRecorder, Duration), BenchError> {
    for _ in 0..watchers {
        next_report(reports).await?;
    }
    let budget = Budget::start(config.limit);
    let started = Instant::now();
    let mut latencies = LatencyRecorder::new()?;
    while budget.claim(watchers as u64) {
        let written_at = Instant::now();
        writer
            .set_data(path, data, None)
            .await
            .map_err(BenchError::op("setData", path))?;
        for _ in 0..watchers {
            if let Report::Notified(at) = next_report(reports).await? {
                latencies.record(at.saturating_duration_since(written_at));
            }
        }
    }
    Ok((latencies, started.elapsed()))
}

async fn next_report(reports: &mut Reports) -> Result<Report, BenchError> {
    let stuck = || BenchError::Timeout {
        what: "a watcher's notification".into(),
        timeout: REPORT_TIMEOUT,
    };
    timeout(REPORT_TIMEOUT, reports.recv())
        .await
        .map_err(|_| stuck())?
        .ok_or_else(stuck)?
}

/// One watcher: re-arms after every notification until it is aborted.
async fn watch(
    client: Client,
    path: String,
    reports: mpsc::UnboundedSender<Result<Report, BenchError>>,
) {
    let outcome = watch_loop(&client, &path, &reports).await;
    if let Err(err) = outcome {
        let _ = reports.send(Err(err));
    }
}

async fn watch_loop(
    client: &Client,
    path: &str,
    reports: &mpsc::UnboundedSender<Result<Report, BenchError>>,
) -> Result<(), BenchError> {
    let arm = || async {
        client
            .get_and_watch_data(path)
            .await
            .map(|(_, _, watcher)| watcher)
            .map_err(BenchError::op("getData", path))
    };
    let mut watcher = arm().await?;
    if reports.send(Ok(Report::Armed)).is_err() {
        return Ok(());
    }
    loop {
        let event = watcher.changed().await;
        let at = Instant::now();
        if event.event_type == EventType::Session {
            return Err(BenchError::SessionEnded {
                path: path.to_owned(),
                state: event.session_state,
            });
        }
        watcher = arm().await?;
        if reports.send(Ok(Report::Notified(at))).is_err() {
            // The writer has finished.
            return Ok(());
        }
    }
}
