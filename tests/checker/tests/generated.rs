//! Histories made by running a sequential znode model, with each operation's interval stretched
//! around its linearization point, are linearizable by construction: the checker must accept
//! every one, and must catch a stale read injected into one.

use std::collections::BTreeMap;

use baton_checker::{Call, Failure, History, HistoryBuilder, Outcome, Reply, Verdict, check};
use proptest::prelude::*;

const KEYS: [&str; 2] = ["/a", "/b"];
const BUDGET: u64 = 2_000_000;
/// Linearization points are this far apart; jitter up to 3 gaps makes neighbours overlap.
const GAP: u64 = 10;

/// One generated request: which key and call, how its interval sits around its point, whether
/// its answer is lost, and (if lost) whether it took effect anyway.
#[derive(Debug, Clone)]
struct Plan {
    session: u64,
    key: usize,
    kind: u8,
    version_pick: u8,
    before: u64,
    after: u64,
    lost: bool,
    applied_if_lost: bool,
}

fn plan() -> impl Strategy<Value = Plan> {
    (
        0..4u64,
        0..KEYS.len(),
        0..4u8,
        0..4u8,
        0..3 * GAP,
        0..3 * GAP,
        prop::bool::weighted(0.1),
        any::<bool>(),
    )
        .prop_map(
            |(session, key, kind, version_pick, before, after, lost, applied_if_lost)| Plan {
                session,
                key,
                kind,
                version_pick,
                before,
                after,
                lost,
                applied_if_lost,
            },
        )
}

/// A znode of the generator's own sequential model.
type Node = Option<(String, i32)>;

/// Records a run of `plans` against a sequential model; returns the builder and, per operation
/// recorded, what it did (kept to choose a stale read to inject).
fn record(plans: &[Plan]) -> (HistoryBuilder, Vec<Recorded>) {
    let mut nodes: BTreeMap<usize, Node> = BTreeMap::new();
    let mut history = HistoryBuilder::new();
    let mut recorded = Vec::new();
    for (index, plan) in plans.iter().enumerate() {
        let point = GAP * (index as u64 + 4);
        let invoke = point - plan.before;
        let ret = point + plan.after;
        let node = nodes.entry(plan.key).or_default();
        let version = node.as_ref().map_or(0, |(_, version)| *version);
        let expected = match plan.version_pick {
            0 => version,
            1 => version + 1,
            _ => -1,
        };
        let data = format!("s{}-op{index}", plan.session);
        let (call, outcome, next): (Call, Outcome, Node) = match (plan.kind, node.clone()) {
            (0, None) => (
                Call::create(data.clone()),
                Outcome::Ok(Reply::Done),
                Some((data, 0)),
            ),
            (0, Some(_)) => (
                Call::create(data),
                Outcome::Failed(Failure::NodeExists),
                node.clone(),
            ),
            (1, Some((_, version))) if expected == -1 || expected == version => (
                Call::set_data(data.clone(), expected),
                Outcome::Ok(Reply::Version(version + 1)),
                Some((data, version + 1)),
            ),
            (1, Some(_)) => (
                Call::set_data(data, expected),
                Outcome::Failed(Failure::BadVersion),
                node.clone(),
            ),
            (1, None) => (
                Call::set_data(data, expected),
                Outcome::Failed(Failure::NoNode),
                None,
            ),
            (2, Some((_, version))) if expected == -1 || expected == version => {
                (Call::delete(expected), Outcome::Ok(Reply::Done), None)
            }
            (2, Some(_)) => (
                Call::delete(expected),
                Outcome::Failed(Failure::BadVersion),
                node.clone(),
            ),
            (2, None) => (
                Call::delete(expected),
                Outcome::Failed(Failure::NoNode),
                None,
            ),
            (_, Some((data, version))) => (
                Call::get_data(),
                Outcome::read(data.clone(), version),
                node.clone(),
            ),
            (_, None) => (Call::get_data(), Outcome::Failed(Failure::NoNode), None),
        };
        let effective = matches!(outcome, Outcome::Ok(_)) && call.is_write();
        let (outcome, ret, took_effect) = if plan.lost {
            (Outcome::Unknown, None, effective && plan.applied_if_lost)
        } else {
            (outcome, Some(ret), effective)
        };
        if took_effect {
            *node = next;
        }
        recorded.push(Recorded {
            key: plan.key,
            write: took_effect && ret.is_some(),
            state: node.clone(),
            invoke,
            ret,
        });
        history.push(plan.session, KEYS[plan.key], call, invoke, ret, outcome);
    }
    (history, recorded)
}

/// What one generated operation did, for choosing a stale read.
#[derive(Debug)]
struct Recorded {
    key: usize,
    /// An acknowledged write that changed the znode.
    write: bool,
    /// The znode right after it.
    state: Node,
    invoke: u64,
    ret: Option<u64>,
}

fn build(history: HistoryBuilder) -> History {
    match history.build() {
        Ok(history) => history,
        Err(err) => panic!("generated history is malformed: {err}"),
    }
}

/// A read appended after everything ended that sees the state an acknowledged write left,
/// although another acknowledged write on the key was invoked after that one returned (so it
/// must follow it, and the state is gone).
fn stale_read(recorded: &[Recorded]) -> Option<(usize, String, i32, u64)> {
    let end = recorded.iter().map(|r| r.ret.unwrap_or(r.invoke)).max()? + 1;
    recorded.iter().find_map(|old| {
        let (data, version) = old.state.clone().filter(|_| old.write)?;
        let old_ret = old.ret?;
        let superseded = recorded
            .iter()
            .any(|later| later.key == old.key && later.write && later.invoke > old_ret);
        superseded.then_some((old.key, data, version, end))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn histories_of_a_sequential_model_pass(plans in prop::collection::vec(plan(), 1..60)) {
        let (history, _) = record(&plans);
        let history = build(history);
        prop_assert_eq!(check(&history, BUDGET), Verdict::Ok);
    }

    #[test]
    fn an_injected_stale_read_is_caught(plans in prop::collection::vec(plan(), 10..60)) {
        let (mut history, recorded) = record(&plans);
        let Some((key, data, version, at)) = stale_read(&recorded) else {
            return Ok(());
        };
        history.push(99, KEYS[key], Call::get_data(), at, Some(at + 1), Outcome::read(data, version));
        let verdict = check(&build(history), BUDGET);
        prop_assert!(matches!(verdict, Verdict::Violation(_)), "not caught: {:?}", verdict);
    }
}

/// Plans from a fixed seed (SplitMix64), for a history too long to shrink by hand.
fn seeded_plans(count: usize, lost_one_in: u64, mut seed: u64) -> Vec<Plan> {
    let mut next = |bound: u64| {
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % bound
    };
    (0..count)
        .map(|_| Plan {
            session: next(8),
            key: next(KEYS.len() as u64) as usize,
            kind: next(4) as u8,
            version_pick: next(4) as u8,
            before: next(3 * GAP),
            after: next(3 * GAP),
            lost: next(lost_one_in) == 0,
            applied_if_lost: next(2) == 0,
        })
        .collect()
}

#[test]
fn a_long_history_is_decided_in_a_few_steps_per_operation() {
    const OPERATIONS: usize = 5_000;
    for lost_one_in in [u64::MAX, 500] {
        let (history, _) = record(&seeded_plans(OPERATIONS, lost_one_in, 7));
        // Ten steps per operation: the search must not wander on a linearizable history.
        assert_eq!(
            check(&build(history), 10 * OPERATIONS as u64),
            Verdict::Ok,
            "one answer in {lost_one_in} lost"
        );
    }
}
