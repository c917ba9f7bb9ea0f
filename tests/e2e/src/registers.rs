//! A register workload on real ZooKeeper sessions, recorded for `baton-checker`: each session
//! runs random setData / getData-after-sync / create / delete on a few znodes (and, if asked,
//! sequential creates), noting every request's invocation and return instants and what it
//! answered. `history` turns the sessions' logs into a checkable history; `check_all` runs
//! every check the checker has on it.
//!
//! ```ignore
//! let workload = Arc::new(Workload::new(&["/w/k0", "/w/k1"], seed));
//! let log = run_session(workload, 0, client, Instant::now(), stop, answered).await;
//! let (history, tally) = history(&[log])?;
//! check_all(&history, &final_reads(&reader, &workload.keys).await?, [], BUDGET).into_result()?;
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use baton_checker::{
    Call, Failure, History, HistoryBuilder, InvariantViolation, Outcome, Reply, Verdict, Znode,
    check, check_no_lost_writes, check_sequential_names, check_session_fifo,
};
use tokio::sync::watch;
use zookeeper_client as zk;

use crate::PERSISTENT;
use crate::cluster::write_load::PERSISTENT_SEQUENTIAL;

/// Bound on one request; unanswered by then, it is recorded as unknown.
pub const OP_DEADLINE: Duration = Duration::from_secs(10);

/// What the sessions do.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The znodes (registers) the sessions work on; their parent must exist.
    pub keys: Vec<String>,
    /// Where one request in ten creates a persistent sequential node (its parent must exist);
    /// `None`: no sequential creates.
    pub sequential_prefix: Option<String>,
    /// Seeds each session's choices (their interleaving still depends on timing).
    pub seed: u64,
    /// Hard cap of requests per session.
    pub max_ops: usize,
    /// Pause after each request, so a long run's history stays checkable.
    pub think: Duration,
}

impl Workload {
    /// `keys`, no sequential creates, 600 requests per session at most, no pause.
    pub fn new(keys: &[&str], seed: u64) -> Workload {
        Workload {
            keys: keys.iter().map(|key| key.to_string()).collect(),
            sequential_prefix: None,
            seed,
            max_ops: 600,
            think: Duration::ZERO,
        }
    }
}

/// One request as a session saw it, times in microseconds since the run began.
#[derive(Debug, Clone)]
pub struct Record {
    pub session: u64,
    pub key: String,
    pub call: Call,
    pub invoke: u64,
    pub ret: Option<u64>,
    pub outcome: Outcome,
}

/// What one session did: every request on the keys, and the sequential names it was given.
#[derive(Debug, Default)]
pub struct SessionLog {
    pub session: u64,
    pub records: Vec<Record>,
    pub sequential: Vec<String>,
    /// Why it stopped before it was told to (its session expired), if it did.
    pub ended_early: Option<String>,
}

/// SplitMix64: a few lines of deterministic randomness without a dependency.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// A number in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % bound
    }

    /// A duration in `low..=high`, in whole milliseconds.
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let span = high.saturating_sub(low).as_millis() as u64;
        low + Duration::from_millis(self.below(span + 1))
    }
}

/// An answer the server gave (the request definitely ran or definitely did not), or unknown.
fn outcome_of<T>(
    answer: Result<Result<T, zk::Error>, tokio::time::error::Elapsed>,
    ok: impl FnOnce(T) -> Reply,
) -> Outcome {
    match answer {
        Ok(Ok(value)) => Outcome::Ok(ok(value)),
        Ok(Err(zk::Error::NodeExists)) => Outcome::Failed(Failure::NodeExists),
        Ok(Err(zk::Error::NoNode)) => Outcome::Failed(Failure::NoNode),
        Ok(Err(zk::Error::BadVersion)) => Outcome::Failed(Failure::BadVersion),
        Ok(Err(zk::Error::NotEmpty)) => Outcome::Failed(Failure::Other),
        // Connection loss, session moved or expired, a timeout: it may or may not have run.
        Ok(Err(_)) | Err(_) => Outcome::Unknown,
    }
}

fn expired<T>(answer: &Result<Result<T, zk::Error>, tokio::time::error::Elapsed>) -> bool {
    matches!(
        answer,
        Ok(Err(zk::Error::SessionExpired | zk::Error::ClientClosed))
    )
}

async fn bounded<F: Future>(request: F) -> Result<F::Output, tokio::time::error::Elapsed> {
    tokio::time::timeout(OP_DEADLINE, request).await
}

/// Runs random requests as history session `session` until `stop`, the cap or the session's
/// expiry, counting answered ones in `answered`.
pub async fn run_session(
    workload: Arc<Workload>,
    session: u64,
    client: zk::Client,
    base: Instant,
    stop: Arc<AtomicBool>,
    answered: Arc<watch::Sender<usize>>,
) -> SessionLog {
    let mut rng = Rng(workload.seed ^ session.wrapping_mul(0x100_0000_01b3));
    let mut log = SessionLog {
        session,
        ..SessionLog::default()
    };
    // The last version this session saw per key, so conditional writes sometimes succeed.
    let mut seen: BTreeMap<&str, i32> = BTreeMap::new();
    let micros = |at: Instant| at.duration_since(base).as_micros() as u64;
    for op in 0..workload.max_ops {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        if !workload.think.is_zero() && op > 0 {
            tokio::time::sleep(workload.think).await;
        }
        let key = workload.keys[rng.below(workload.keys.len() as u64) as usize].as_str();
        let data = format!("s{session}-op{op}").into_bytes();
        let expected = if rng.below(2) == 0 {
            seen.get(key).copied().unwrap_or(0)
        } else {
            -1
        };
        let invoke = Instant::now();
        let ended;
        let choice = rng.below(10);
        let (call, outcome) = match choice {
            0..=2 => {
                let answer = bounded(client.set_data(key, &data, Some(expected))).await;
                ended = expired(&answer);
                let outcome = outcome_of(answer, |stat| Reply::Version(stat.version));
                (Call::set_data(data, expected), outcome)
            }
            3..=5 => {
                // A read counts only after sync: it must then see every write acknowledged
                // before the sync began.
                let outcome = match bounded(client.sync(key)).await {
                    Ok(Ok(())) => {
                        let answer = bounded(client.get_data(key)).await;
                        ended = expired(&answer);
                        outcome_of(answer, |(data, stat)| Reply::Data {
                            data,
                            version: stat.version,
                        })
                    }
                    synced => {
                        ended = expired(&synced);
                        Outcome::Unknown
                    }
                };
                (Call::get_data(), outcome)
            }
            6 | 7 => {
                let answer = bounded(client.create(key, &data, &PERSISTENT)).await;
                ended = expired(&answer);
                (Call::create(data), outcome_of(answer, |_| Reply::Done))
            }
            8 => {
                let answer = bounded(client.delete(key, Some(expected))).await;
                ended = expired(&answer);
                (Call::delete(expected), outcome_of(answer, |_| Reply::Done))
            }
            _ => {
                let Some(prefix) = &workload.sequential_prefix else {
                    continue;
                };
                let answer = bounded(client.create(prefix, &data, &PERSISTENT_SEQUENTIAL)).await;
                if expired(&answer) {
                    log.ended_early = Some("its session expired".into());
                    break;
                }
                if let Ok(Ok((_, sequence))) = answer {
                    log.sequential.push(format!("{prefix}{sequence}"));
                }
                continue;
            }
        };
        let returned = Instant::now();
        match &outcome {
            Outcome::Ok(Reply::Version(version) | Reply::Data { version, .. }) => {
                seen.insert(key, *version);
            }
            Outcome::Ok(_) => {
                seen.insert(key, 0);
            }
            _ => {}
        }
        let known = !matches!(outcome, Outcome::Unknown);
        log.records.push(Record {
            session,
            key: key.to_owned(),
            call,
            invoke: micros(invoke),
            ret: known.then(|| micros(returned)),
            outcome,
        });
        if known {
            answered.send_modify(|count| *count += 1);
        }
        if ended {
            log.ended_early = Some("its session expired".into());
            break;
        }
    }
    log
}

/// Waits until `answered` reaches `target`, or fails after `within` naming the phase.
pub async fn wait_for_answers(
    answered: &mut watch::Receiver<usize>,
    target: usize,
    within: Duration,
    phase: &str,
) -> Result<()> {
    let reached = tokio::time::timeout(within, answered.wait_for(|count| *count >= target))
        .await
        .map(|waited| waited.is_ok());
    match reached {
        Ok(true) => Ok(()),
        Ok(false) => bail!("{phase}: every session ended before {target} answers"),
        Err(_) => bail!(
            "{phase}: {} answers within {within:?}, wanted {target}",
            *answered.borrow()
        ),
    }
}

/// How the recorded requests ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub acknowledged_writes: usize,
    /// Reads after sync that answered (data, or NoNode).
    pub reads: usize,
    /// Definite failures (NodeExists, BadVersion, ...): the request did not run.
    pub failed: usize,
    /// No answer (connection loss, timeout, expiry): it may or may not have run.
    pub unknown: usize,
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ok ({} acknowledged writes, {} reads after sync), {} failed, {} unknown",
            self.acknowledged_writes + self.reads,
            self.acknowledged_writes,
            self.reads,
            self.failed,
            self.unknown
        )
    }
}

/// Every session's records as one history, with their tally.
pub fn history<'a>(logs: impl IntoIterator<Item = &'a SessionLog>) -> Result<(History, Tally)> {
    let mut builder = HistoryBuilder::new();
    let mut tally = Tally::default();
    for record in logs.into_iter().flat_map(|log| &log.records) {
        match (&record.outcome, record.call.is_write()) {
            (Outcome::Ok(_), true) => tally.acknowledged_writes += 1,
            (Outcome::Ok(_) | Outcome::Failed(Failure::NoNode), false) => tally.reads += 1,
            (Outcome::Failed(_), _) => tally.failed += 1,
            (Outcome::Unknown, _) => tally.unknown += 1,
        }
        builder.push(
            record.session,
            record.key.clone(),
            record.call.clone(),
            record.invoke,
            record.ret,
            record.outcome.clone(),
        );
    }
    let history = builder
        .build()
        .context("the recorded history is malformed")?;
    Ok((history, tally))
}

/// Every sequential name the sessions were given, with the session given it.
pub fn sequential_names<'a>(logs: impl IntoIterator<Item = &'a SessionLog>) -> Vec<(u64, &'a str)> {
    logs.into_iter()
        .flat_map(|log| {
            log.sequential
                .iter()
                .map(|name| (log.session, name.as_str()))
        })
        .collect()
}

/// Each key as `client` sees it after `sync`: what `check_no_lost_writes` compares against.
pub async fn final_reads(client: &zk::Client, keys: &[String]) -> Result<BTreeMap<String, Znode>> {
    let mut finals = BTreeMap::new();
    for key in keys {
        client
            .sync(key)
            .await
            .with_context(|| format!("sync {key}"))?;
        let znode = match client.get_data(key).await {
            Ok((data, stat)) => Znode::Present {
                data,
                version: stat.version,
            },
            Err(zk::Error::NoNode) => Znode::Absent,
            Err(err) => return Err(err).with_context(|| format!("final read of {key}")),
        };
        finals.insert(key.clone(), znode);
    }
    Ok(finals)
}

/// The verdict of every check on one history.
#[derive(Debug)]
pub struct Verdicts {
    pub linearizable: Verdict,
    /// How long the linearizability search took.
    pub search: Duration,
    pub no_lost_writes: Result<(), InvariantViolation>,
    pub sequential_names: Result<(), InvariantViolation>,
    pub session_fifo: Result<(), InvariantViolation>,
}

/// Runs every check: linearizability (at most `budget` search steps per znode), no lost
/// acknowledged write against `finals`, no sequential name given twice, FIFO per session.
pub fn check_all<'a>(
    history: &History,
    finals: &BTreeMap<String, Znode>,
    sequential: impl IntoIterator<Item = (u64, &'a str)>,
    budget: u64,
) -> Verdicts {
    let started = Instant::now();
    let linearizable = check(history, budget);
    Verdicts {
        linearizable,
        search: started.elapsed(),
        no_lost_writes: check_no_lost_writes(history, finals),
        sequential_names: check_sequential_names(sequential),
        session_fifo: check_session_fifo(history),
    }
}

impl Verdicts {
    /// `Err` naming the first check that failed; an inconclusive search counts as a failure.
    pub fn into_result(self) -> Result<()> {
        match self.linearizable {
            Verdict::Ok => {}
            Verdict::Violation(violation) => bail!("Baton is not linearizable:\n{violation}"),
            Verdict::Inconclusive { key, steps } => {
                bail!("the linearizability check of {key} gave up after {steps} steps")
            }
        }
        self.no_lost_writes?;
        self.sequential_names?;
        self.session_fifo?;
        Ok(())
    }
}

impl fmt::Display for Verdicts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |verdict: &Result<(), InvariantViolation>| match verdict {
            Ok(()) => "ok".to_string(),
            Err(err) => format!("VIOLATED: {err}"),
        };
        let linearizable = match &self.linearizable {
            Verdict::Ok => "ok".to_string(),
            Verdict::Violation(violation) => format!("VIOLATED on {}", violation.key),
            Verdict::Inconclusive { key, steps } => {
                format!("INCONCLUSIVE on {key} after {steps} steps")
            }
        };
        write!(
            f,
            "linearizable: {linearizable} (searched in {:?}); no lost writes: {}; sequential \
             names: {}; session FIFO: {}",
            self.search,
            show(&self.no_lost_writes),
            show(&self.sequential_names),
            show(&self.session_fifo)
        )
    }
}
