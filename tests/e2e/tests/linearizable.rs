//! Linearizability under a leader failover: sessions spread over a real 3-member
//! ensemble run random setData / getData-after-sync / create / delete on a few znodes while the
//! harness SIGKILLs the leader and later restarts it. Every request is recorded with its
//! invocation and return instants and checked with `baton-checker`: one order must explain every
//! answer, no acknowledged write may be lost, sequential names are never reused, and each
//! session's answers come in order.
//!
//! Run: `cargo nextest run -p baton-tests -E 'binary(linearizable)'` (after `cargo build -p
//! baton-ensemble --bins`). Counts and the check's duration are printed; nothing is timed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use baton_checker::{Call, HistoryBuilder, Outcome, Reply, Verdict, check};
use baton_tests::PERSISTENT;
use baton_tests::cluster::{Cluster, run_cluster_case};
use baton_tests::registers::{
    Record, SessionLog, Workload, check_all, final_reads, history, run_session, sequential_names,
    wait_for_answers,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const KEYS: [&str; 3] = ["/lin/k0", "/lin/k1", "/lin/k2"];
const SEQUENTIAL_PREFIX: &str = "/lin/seq/n-";
const SESSIONS_PER_MEMBER: usize = 2;
/// Answered operations (across all sessions) wanted in each phase: before the kill, while the
/// leader is down, and after it came back.
const ANSWERS_PER_PHASE: usize = 100;
/// Hard cap per session, so the load stays bounded even if a phase is slow.
const MAX_OPS_PER_SESSION: usize = 600;
/// Bound on each phase reaching its answers.
const PHASE_DEADLINE: Duration = Duration::from_secs(90);
/// Search steps per znode: about a thousand times what these histories need, yet small enough
/// that an exhaustive search for a violation ends well inside the case deadline.
const SEARCH_BUDGET: u64 = 2_000_000;
/// Seeds the sessions' choices (their interleaving still depends on timing).
const SEED: u64 = 0x6261_746f_6e21;

/// The session number the injected stale read is recorded under.
const INJECTED_SESSION: u64 = 999;

async fn linearizable_under_failover_case(cluster: &mut Cluster) -> Result<()> {
    let leader = cluster.leader().await?;
    let setup = cluster.connect_to(leader).await?;
    setup.create("/lin", b"", &PERSISTENT).await?;
    setup.create("/lin/seq", b"", &PERSISTENT).await?;

    let mut workload = Workload::new(&KEYS, SEED);
    workload.sequential_prefix = Some(SEQUENTIAL_PREFIX.into());
    workload.max_ops = MAX_OPS_PER_SESSION;
    let workload = Arc::new(workload);
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
                workload.clone(),
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
        wait_for_answers(
            &mut answered,
            ANSWERS_PER_PHASE,
            PHASE_DEADLINE,
            "before the kill",
        )
        .await?;
        cluster.kill9(leader)?;
        let at_kill = *answered.borrow();
        let new_leader = cluster.wait_for_leader().await?;
        wait_for_answers(
            &mut answered,
            at_kill + ANSWERS_PER_PHASE,
            PHASE_DEADLINE,
            "leader down",
        )
        .await?;
        cluster.restart(leader).await?;
        let at_restart = *answered.borrow();
        wait_for_answers(
            &mut answered,
            at_restart + ANSWERS_PER_PHASE,
            PHASE_DEADLINE,
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

    let (history, tally) = history(&logs)?;
    let reader = cluster.connect_to(leader_now).await?;
    let finals = final_reads(&reader, &workload.keys).await?;
    let sequential = sequential_names(&logs);
    let creates = sequential.len();
    let verdicts = check_all(&history, &finals, sequential, SEARCH_BUDGET);
    println!(
        "MEASURED checked {} operations on {} znodes in {:?} ({tally}); {creates} sequential \
         creates",
        history.operations().len(),
        KEYS.len(),
        verdicts.search,
    );
    println!("verdicts: {verdicts}");
    verdicts.into_result()?;
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
