//! Micro benchmark of the raft log on this machine's disk: the raw fdatasync latency, then
//! `persist` throughput for batches of 1, 10 and 100 entries of 1 KiB (one fdatasync per batch).
//!
//! ```text
//! cargo run --release -p baton-raftlog --example bench [DIR] [SECONDS_PER_CASE]
//! ```
//! DIR (default: the system temp dir) must be on the disk you want to measure; a scratch
//! directory is created inside it and removed afterwards.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use baton_raftlog::{LogOptions, RaftLog};
use raft::eraftpb::{Entry, HardState};

const ENTRY_BYTES: usize = 1024;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let root = args.next().map_or_else(std::env::temp_dir, PathBuf::from);
    let seconds: f64 = args.next().map_or(Ok(3.0), |s| s.parse())?;
    let budget = Duration::from_secs_f64(seconds);
    let scratch = tempfile::Builder::new()
        .prefix("raftlog-bench")
        .tempdir_in(&root)?;
    println!("scratch directory: {}", scratch.path().display());

    raw_fdatasync(scratch.path(), budget)?;

    println!();
    println!(
        "{:>7} {:>12} {:>11} {:>10} {:>13} {:>13} {:>13}",
        "batch", "entries/s", "fsyncs/s", "MiB/s", "persist p50", "persist p99", "fsync share"
    );
    for batch in [1usize, 10, 100] {
        persist_throughput(&scratch.path().join(format!("log-{batch}")), batch, budget)?;
    }
    Ok(())
}

/// Append 4 KiB and fdatasync, repeatedly: the floor under any durable write on this disk.
fn raw_fdatasync(
    dir: &std::path::Path,
    budget: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    let path = dir.join("raw");
    let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
    let block = vec![0x5au8; 4096];
    let mut samples = Vec::new();
    let started = Instant::now();
    while started.elapsed() < budget {
        file.write_all(&block)?;
        let t = Instant::now();
        file.sync_data()?;
        samples.push(t.elapsed());
    }
    samples.sort();
    let mean = samples.iter().sum::<Duration>() / samples.len().max(1) as u32;
    println!(
        "raw fdatasync after a 4 KiB append: {} samples, mean {:?}, p50 {:?}, p99 {:?}, max {:?} ({:.0}/s)",
        samples.len(),
        mean,
        percentile(&samples, 0.50),
        percentile(&samples, 0.99),
        samples.last().copied().unwrap_or_default(),
        1.0 / mean.as_secs_f64()
    );
    Ok(())
}

fn persist_throughput(
    dir: &std::path::Path,
    batch: usize,
    budget: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    let log = RaftLog::open(dir, 1, Some("bench"), LogOptions::default())?;
    let payload = vec![0xa5u8; ENTRY_BYTES];
    let mut next = 1u64;
    let mut latencies = Vec::new();
    let started = Instant::now();
    while started.elapsed() < budget {
        let entries: Vec<Entry> = (next..next + batch as u64)
            .map(|index| Entry {
                index,
                term: 1,
                data: payload.clone().into(),
                ..Default::default()
            })
            .collect();
        next += batch as u64;
        let hs = HardState {
            term: 1,
            vote: 1,
            commit: next - 1,
            ..Default::default()
        };
        let t = Instant::now();
        log.persist(&entries, Some(&hs))?;
        latencies.push(t.elapsed());
    }
    let elapsed = started.elapsed().as_secs_f64();
    let stats = log.stats();
    latencies.sort();
    let entries = (next - 1) as f64;
    println!(
        "{:>7} {:>12.0} {:>11.0} {:>10.1} {:>13?} {:>13?} {:>12.0}%",
        batch,
        entries / elapsed,
        stats.fsyncs as f64 / elapsed,
        entries * ENTRY_BYTES as f64 / elapsed / (1024.0 * 1024.0),
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        100.0 * stats.total_fsync_micros as f64 / 1e6 / elapsed
    );
    Ok(())
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[at]
}
