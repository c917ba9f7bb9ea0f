//! Linearizability under a leader failover: sessions spread over a real 3-member
//! ensemble run random setData / getData-after-sync / create / delete on a few znodes while the
//! harness SIGKILLs the leader and later restarts it. Every request is recorded with its
//! invocation and return instants and checked with `baton-checker`: one order must explain every
//! answer, no acknowledged write may be lost, sequential names are never reused, and each
//! session's answers come in order.
//!
//! Run: `cargo nextest run -p baton-tests -E 'binary(linearizable)'` (after `cargo build -p
//! baton-ensemble --bins`). Counts and the check's duration are printed; nothing is timed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use baton_checker::{
    Call, Failure, HistoryBuilder, Outcome, Reply, Verdict, Znode, check, check_no_lost_writes,
    check_sequential_names, check_session_fifo,
};
use baton_tests::PERSISTENT;
use baton_tests::cluster::write_load::PERSISTENT_SEQUENTIAL;
use baton_tests::cluster::{Cluster, run_cluster_case};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use zookeeper_client as zk;

const KEYS: [&str; 3] = ["/lin/k0", "/lin/k1", "/lin/k2"];
const SEQUENTIAL_PREFIX: &str = "/lin/seq/n-";
const SESSIONS_PER_MEMBER: usize = 2;
/// Answered operations (across all sessions) wanted in each phase: before the kill, while the
/// leader is down, and after it came back.
const ANSWERS_PER_PHASE: usize = 100;
/// Hard cap per session, so the load stays bounded even if a phase is slow.
const MAX_OPS_PER_SESSION: usize = 600;
/// Bound on one request; unanswered by then, it is recorded as unknown.
const OP_DEADLINE: Duration = Duration::from_secs(10);
/// Bound on each phase reaching its answers.
const PHASE_DEADLINE: Duration = Duration::from_secs(90);
/// Search steps per znode: about a thousand times what these histories need, yet small enough
/// that an exhaustive search for a violation ends well inside the case deadline.
const SEARCH_BUDGET: u64 = 2_000_000;
/// Seeds the sessions' choices (their interleaving still depends on timing).
const SEED: u64 = 0x6261_746f_6e21;

/// The session number the injected stale read is recorded under.
const INJECTED_SESSION: u64 = 999;

/// One request as a session saw it, times in microseconds since the run began.
struct Record {
    session: u64,
    key: String,
    call: Call,
    invoke: u64,
    ret: Option<u64>,
    outcome: Outcome,
}

/// What one session did: every request on the keys, and the sequential names it was given.
#[derive(Default)]
struct SessionLog {
    records: Vec<Record>,
    sequential: Vec<String>,
}

/// SplitMix64: a few lines of deterministic randomness without a dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % bound
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

async fn bounded<F: Future>(request: F) -> Result<F::Output, tokio::time::error::Elapsed> {
    tokio::time::timeout(OP_DEADLINE, request).await
}

/// Runs random requests until `stop` or the cap, counting answered ones in `answered`.
async fn run_session(
    session: u64,
    client: zk::Client,
    base: Instant,
    stop: Arc<AtomicBool>,
    answered: Arc<watch::Sender<usize>>,
) -> SessionLog {
    let mut rng = Rng(SEED ^ session.wrapping_mul(0x100_0000_01b3));
    let mut log = SessionLog::default();
    // The last version this session saw per key, so conditional writes sometimes succeed.
    let mut seen: BTreeMap<&str, i32> = BTreeMap::new();
    let micros = |at: Instant| at.duration_since(base).as_micros() as u64;
    for op in 0..MAX_OPS_PER_SESSION {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let key = KEYS[rng.below(KEYS.len() as u64) as usize];
        let data = format!("s{session}-op{op}").into_bytes();
        let expected = if rng.below(2) == 0 {
            seen.get(key).copied().unwrap_or(0)
        } else {
            -1
        };
        let invoke = Instant::now();
        let (call, outcome) = match rng.below(10) {
            0..=2 => {
                let answer = bounded(client.set_data(key, &data, Some(expected))).await;
                let outcome = outcome_of(answer, |stat| Reply::Version(stat.version));
                (Call::set_data(data, expected), outcome)
            }
            3..=5 => {
                // A read counts only after sync: it must then see every write acknowledged
                // before the sync began.
                let outcome = match bounded(client.sync(key)).await {
                    Ok(Ok(())) => {
                        outcome_of(bounded(client.get_data(key)).await, |(data, stat)| {
                            Reply::Data {
                                data,
                                version: stat.version,
                            }
                        })
                    }
                    _ => Outcome::Unknown,
                };
                (Call::get_data(), outcome)
            }
            6 | 7 => {
                let answer = bounded(client.create(key, &data, &PERSISTENT)).await;
                (Call::create(data), outcome_of(answer, |_| Reply::Done))
            }
            8 => {
                let answer = bounded(client.delete(key, Some(expected))).await;
                (Call::delete(expected), outcome_of(answer, |_| Reply::Done))
            }
            _ => {
                let answer =
                    bounded(client.create(SEQUENTIAL_PREFIX, &data, &PERSISTENT_SEQUENTIAL)).await;
                if let Ok(Ok((_, sequence))) = answer {
                    log.sequential
                        .push(format!("{SEQUENTIAL_PREFIX}{sequence}"));
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
    }
    log
}

/// Waits until `answered` reaches `target`, or fails after `PHASE_DEADLINE` naming the phase.
async fn wait_for_answers(
    answered: &mut watch::Receiver<usize>,
    target: usize,
    phase: &str,
) -> Result<()> {
    let reached = tokio::time::timeout(PHASE_DEADLINE, answered.wait_for(|count| *count >= target))
        .await
        .map(|waited| waited.is_ok());
    match reached {
        Ok(true) => Ok(()),
        Ok(false) => bail!("{phase}: every session ended before {target} answers"),
        Err(_) => bail!(
            "{phase}: {} answers within {PHASE_DEADLINE:?}, wanted {target}",
            *answered.borrow()
        ),
    }
}

async fn linearizable_under_failover_case(cluster: &mut Cluster) -> Result<()> {
    let leader = cluster.leader().await?;
    let setup = cluster.connect_to(leader).await?;
    setup.create("/lin", b"", &PERSISTENT).await?;
    setup.create("/lin/seq", b"", &PERSISTENT).await?;

    let base = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let (answered_tx, mut answered) = watch::channel(0usize);
    let answered_tx = Arc::new(answered_tx);
    let mut sessions: Vec<JoinHandle<SessionLog>> = Vec::new();
    for id in cluster.ids() {
        for _ in 0..SESSIONS_PER_MEMBER {
            let client = cluster.connect_on(id).await?;
            let session = sessions.len() as u64;
            sessions.push(tokio::spawn(run_session(
                session,
                client,
                base,
                stop.clone(),
                answered_tx.clone(),
            )));
        }
    }
    println!(
        "leader {leader}; {} sessions, seed {SEED:#x}",
        sessions.len()
    );

    let load = async {
        wait_for_answers(&mut answered, ANSWERS_PER_PHASE, "before the kill").await?;
        cluster.kill9(leader)?;
        let at_kill = *answered.borrow();
        let new_leader = cluster.wait_for_leader().await?;
        wait_for_answers(&mut answered, at_kill + ANSWERS_PER_PHASE, "leader down").await?;
        cluster.restart(leader).await?;
        let at_restart = *answered.borrow();
        wait_for_answers(
            &mut answered,
            at_restart + ANSWERS_PER_PHASE,
            "after the restart",
        )
        .await?;
        anyhow::Ok(new_leader)
    }
    .await;
    stop.store(true, Ordering::SeqCst);
    let mut logs = Vec::new();
    for session in sessions {
        logs.push(
            session
                .await
                .map_err(|err| anyhow!("a session task failed: {err}"))?,
        );
    }
    let new_leader = load?;
    let leader_now = cluster.wait_for_leader().await?;
    println!(
        "member {leader} killed and restarted; {new_leader} took over; {leader_now} leads at the end"
    );

    let mut history = HistoryBuilder::new();
    // (acknowledged writes, answered reads, failed, unknown), for the printed summary.
    let mut counts = (0, 0, 0, 0);
    for record in logs.iter().flat_map(|log| &log.records) {
        match (&record.outcome, record.call.is_write()) {
            (Outcome::Ok(_), true) => counts.0 += 1,
            (Outcome::Ok(_) | Outcome::Failed(Failure::NoNode), false) => counts.1 += 1,
            (Outcome::Failed(_), _) => counts.2 += 1,
            (Outcome::Unknown, _) => counts.3 += 1,
        }
        history.push(
            record.session,
            record.key.clone(),
            record.call.clone(),
            record.invoke,
            record.ret,
            record.outcome.clone(),
        );
    }
    let history = history
        .build()
        .context("the recorded history is malformed")?;

    let reader = cluster.connect_to(leader_now).await?;
    let mut finals = BTreeMap::new();
    for key in KEYS {
        reader
            .sync(key)
            .await
            .with_context(|| format!("sync {key}"))?;
        let znode = match reader.get_data(key).await {
            Ok((data, stat)) => Znode::Present {
                data,
                version: stat.version,
            },
            Err(zk::Error::NoNode) => Znode::Absent,
            Err(err) => return Err(err).with_context(|| format!("final read of {key}")),
        };
        finals.insert(key.to_owned(), znode);
    }

    let checking = Instant::now();
    let verdict = check(&history, SEARCH_BUDGET);
    let took = checking.elapsed();
    let sequential: Vec<(u64, &str)> = logs
        .iter()
        .enumerate()
        .flat_map(|(session, log)| {
            log.sequential
                .iter()
                .map(move |name| (session as u64, name.as_str()))
        })
        .collect();
    println!(
        "MEASURED checked {} operations on {} znodes in {took:?} ({} acknowledged writes, {} reads \
         after sync, {} failed, {} unknown); {} sequential creates",
        history.operations().len(),
        KEYS.len(),
        counts.0,
        counts.1,
        counts.2,
        counts.3,
        sequential.len()
    );
    match verdict {
        Verdict::Ok => {}
        Verdict::Violation(violation) => bail!("Baton is not linearizable:\n{violation}"),
        Verdict::Inconclusive { key, steps } => {
            bail!("the check of {key} gave up after {steps} steps")
        }
    }
    check_no_lost_writes(&history, &finals)?;
    check_sequential_names(sequential)?;
    check_session_fifo(&history)?;
    stale_read_is_caught(&logs)
}

/// Proves the check above is not vacuous on this very history: a read appended after the run
/// that sees what an acknowledged write left, although a later acknowledged write on the same
/// znode began after it returned, must be reported.
fn stale_read_is_caught(logs: &[SessionLog]) -> Result<()> {
    let records: Vec<&Record> = logs.iter().flat_map(|log| &log.records).collect();
    let acknowledged =
        |record: &&&Record| record.call.is_write() && matches!(record.outcome, Outcome::Ok(_));
    let end = records
        .iter()
        .filter_map(|record| record.ret)
        .max()
        .unwrap_or(0)
        + 1;
    let stale = records.iter().filter(acknowledged).find_map(|old| {
        let version = match (&old.call, &old.outcome) {
            (Call::Create { .. }, _) => 0,
            (Call::SetData { .. }, Outcome::Ok(Reply::Version(version))) => *version,
            _ => return None,
        };
        let (Call::Create { data } | Call::SetData { data, .. }) = &old.call else {
            return None;
        };
        let old_ret = old.ret?;
        let superseded = records
            .iter()
            .filter(acknowledged)
            .any(|later| later.key == old.key && later.invoke > old_ret);
        superseded.then(|| (old.key.clone(), data.clone(), version))
    });
    let (key, data, version) = stale.context("no acknowledged write was superseded")?;
    let mut history = HistoryBuilder::new();
    for record in &records {
        history.push(
            record.session,
            record.key.clone(),
            record.call.clone(),
            record.invoke,
            record.ret,
            record.outcome.clone(),
        );
    }
    history.push(
        INJECTED_SESSION,
        key.clone(),
        Call::get_data(),
        end,
        Some(end + 1),
        Outcome::read(data, version),
    );
    let history = history
        .build()
        .context("the history with a stale read is malformed")?;
    match check(&history, SEARCH_BUDGET) {
        Verdict::Violation(violation) if violation.key == key => {
            println!("the injected stale read is reported as:\n{violation}");
            Ok(())
        }
        other => bail!("a stale read injected on {key} was not caught: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linearizable_under_leader_failover() {
    run_cluster_case(3, linearizable_under_failover_case).await;
}
