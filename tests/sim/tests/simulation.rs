//! The deterministic simulation in CI: a bounded set of seeds must run clean, a seed must
//! replay exactly, and a deliberate bug must be caught. `tests/sim/README.md` has the command for
//! thousands of seeds.

use baton_sim::{Bug, Report, SimConfig, run};

/// Seeds per test; every third seed runs 5 members. `BATON_SIM_SEEDS` raises it.
fn seeds_per_test() -> u64 {
    std::env::var("BATON_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6)
}

/// Runs `seeds_per_test()` seeds from `first` and fails with every failing seed's replay line.
fn run_clean(first: u64) -> Vec<Report> {
    let n = seeds_per_test();
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for seed in first..first + n {
        match run(&SimConfig::for_seed(seed)) {
            Ok(report) => reports.push(report),
            Err(failure) => failures.push(failure.to_string()),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // A run that did nothing would pass vacuously.
    for r in &reports {
        assert!(
            r.operations > 100,
            "seed {} recorded only {} operations",
            r.seed,
            r.operations
        );
        assert!(r.grants > 0, "seed {}: no lock was ever granted", r.seed);
        assert!(
            r.permit_grants > 0,
            "seed {}: no permit was ever granted",
            r.seed
        );
        assert!(
            r.barrier_passes > 0 && r.barrier_releases > 0,
            "seed {}: the barrier never opened ({} passes, {} releases checked)",
            r.seed,
            r.barrier_passes,
            r.barrier_releases
        );
        assert!(
            r.faults.len() > 5,
            "seed {}: only {} faults",
            r.seed,
            r.faults.len()
        );
    }
    // The tenancy policy went on or off under the faults in at least one run of the batch.
    assert!(
        reports.iter().any(|r| r.policy_changes > 0),
        "no run from seed {first} changed the tenancy policy"
    );
    reports
}

// Four tests rather than one loop, so the test runner spreads them over the cores.
#[test]
fn seeds_0_run_clean() {
    run_clean(0);
}

#[test]
fn seeds_1000_run_clean() {
    run_clean(1000);
}

#[test]
fn seeds_2000_run_clean() {
    run_clean(2000);
}

#[test]
fn seeds_3000_run_clean() {
    run_clean(3000);
}

#[test]
fn a_seed_replays_exactly() {
    let cfg = SimConfig::for_seed(7);
    let (a, b) = (run(&cfg).unwrap(), run(&cfg).unwrap());
    assert_eq!(a.trace, b.trace, "the same seed took a different path");
    assert_eq!(
        (a.operations, a.grants, a.events, a.faults),
        (b.operations, b.grants, b.events, b.faults)
    );
    let other = run(&SimConfig::for_seed(8)).unwrap();
    assert_ne!(
        a.trace, other.trace,
        "the trace does not depend on the seed"
    );
}

/// Runs seeds with `bug` until one fails; returns the failure.
fn catch(bug: Bug) -> baton_sim::Failure {
    // Sixteen: a bug that needs a lagging member (stale-sync) is first caught at seed 8.
    for seed in 0..16 {
        let mut cfg = SimConfig::for_seed(seed);
        cfg.bug = Some(bug);
        if let Err(failure) = run(&cfg) {
            let replay = format!("--bug {}", bug.name());
            assert!(failure.to_string().contains(&replay), "{failure}");
            return failure;
        }
    }
    panic!("no seed caught the deliberate bug {}", bug.name());
}

/// `sync` answered without the leader's ReadIndex lets a read after `sync` miss an
/// acknowledged write: the linearizability checker must say so.
#[test]
fn a_stale_sync_is_caught() {
    let failure = catch(Bug::StaleSync);
    assert!(failure.what.contains("not linearizable"), "{failure}");
}

/// A log that acknowledges appends before they are durable loses them in a crash; some check
/// (lost write, linearizability, lock safety, or raft's own refusal to go on) must notice.
#[test]
fn acknowledging_before_fsync_is_caught() {
    let failure = catch(Bug::NoFsync);
    println!("{failure}");
}

/// Barrier clients that pass with one party fewer than asked for: the barrier check in the
/// ensemble's view ("nobody passes before N entered") must say so.
#[test]
fn a_short_barrier_is_caught() {
    let failure = catch(Bug::ShortBarrier);
    assert!(failure.what.contains("parties in"), "{failure}");
}

/// Members that decide the disk alarm each on their own (even ids ignore alarm entries): the
/// settings check ("every member holds the same settings at the same index") must say so.
#[test]
fn an_alarm_decided_per_member_is_caught() {
    let failure = catch(Bug::LocalAlarm);
    assert!(
        failure.what.contains("disagree on the settings"),
        "{failure}"
    );
}

/// A member that switches level-2 behaviour on by its build before the level entry (even ids
/// keep null data while the ensemble is at level 1, with a capped member still in it): the
/// replicas check ("every member holds the same tree at the same index") must say so.
#[test]
fn a_feature_applied_before_its_level_is_caught() {
    let failure = catch(Bug::EarlyFeature);
    assert!(failure.what.contains("the replicas differ"), "{failure}");
}

/// Members that decide writes by their own policy flag (even ids apply with checkIdentities
/// off, as in a rolling change of `--check-identities`), with the policy turned over under the
/// faults and anonymous clients writing in `/baton/default`: the replicas' trees, or the quota
/// usage counted from them, differ at one index.
#[test]
fn a_policy_decided_per_member_is_caught() {
    let failure = catch(Bug::LocalPolicy);
    assert!(
        failure.what.contains("the replicas differ")
            || failure
                .what
                .contains("disagree on the settings or quota usage"),
        "{failure}"
    );
}
