//! What the members use at rest, read from `/proc`: resident memory, and CPU over a window.

use std::time::Duration;

use tokio::time::{Instant, sleep};

use crate::ensemble::Ensemble;
use crate::error::BenchError;
use crate::four_letter;
use crate::members::MemberControl;

/// Each member's memory and CPU at rest, and this process's CPU over the same window.
pub(super) struct Idle {
    pub rss_kib: Vec<u64>,
    /// Percent of one core.
    pub cpu_pct: Vec<f64>,
    pub bench_cpu_pct: f64,
}

pub(super) async fn idle_usage(
    ensemble: &Ensemble,
    control: &MemberControl,
    window: Duration,
) -> Result<Idle, BenchError> {
    let mut pids = Vec::new();
    for (member, server) in ensemble.servers().iter().enumerate() {
        pids.push(control.pid(member + 1, server)?);
    }
    let rss_kib = pids
        .iter()
        .map(|&pid| rss_kib(pid))
        .collect::<Result<_, _>>()?;
    let before: Vec<u64> = pids
        .iter()
        .map(|&p| cpu_ticks(p))
        .collect::<Result<_, _>>()?;
    let bench_before = cpu_ticks(std::process::id())?;
    let started = Instant::now();
    sleep(window).await;
    let elapsed = started.elapsed().as_secs_f64();
    // SAFETY: sysconf takes and returns plain integers.
    let ticks_per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let pct = |ticks: u64| (ticks as f64 / ticks_per_sec / elapsed * 1000.0).round() / 10.0;
    let mut cpu_pct = Vec::new();
    for (&pid, before) in pids.iter().zip(before) {
        cpu_pct.push(pct(cpu_ticks(pid)?.saturating_sub(before)));
    }
    let bench_cpu_pct = pct(cpu_ticks(std::process::id())?.saturating_sub(bench_before));
    Ok(Idle {
        rss_kib,
        cpu_pct,
        bench_cpu_pct,
    })
}

/// Each member's client connections and resident memory (KiB) now; `None` for a member that
/// is down.
pub(super) async fn footprint(
    ensemble: &Ensemble,
    control: &MemberControl,
) -> (Vec<Option<u64>>, Vec<Option<u64>>) {
    let mut connections = Vec::new();
    let mut rss = Vec::new();
    for (member, server) in ensemble.servers().iter().enumerate() {
        connections.push(four_letter::connections(server).await);
        let pid = control.pid(member + 1, server).ok();
        rss.push(pid.and_then(|pid| rss_kib(pid).ok()));
    }
    (connections, rss)
}

fn proc_file(pid: u32, file: &str) -> Result<String, BenchError> {
    let path = format!("/proc/{pid}/{file}");
    std::fs::read_to_string(&path).map_err(|source| BenchError::Io {
        context: format!("reading {path}"),
        source,
    })
}

/// VmRSS of process `pid`, in KiB.
fn rss_kib(pid: u32) -> Result<u64, BenchError> {
    let status = proc_file(pid, "status")?;
    Ok(status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0))
}

/// utime + stime of process `pid` (all its threads), in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64, BenchError> {
    Ok(parse_cpu_ticks(&proc_file(pid, "stat")?))
}

fn parse_cpu_ticks(stat: &str) -> u64 {
    // The command name (field 2) may hold spaces; the fields after its ')' are fixed, utime
    // and stime being the 12th and 13th of them.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_utime_plus_stime() {
        let stat = "4242 (java (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 30 0";
        assert_eq!(parse_cpu_ticks(stat), 287);
        assert_eq!(parse_cpu_ticks("garbage"), 0);
    }
}
