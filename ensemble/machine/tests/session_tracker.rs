//! SessionTracker: ZooKeeper-style expiry buckets driven by explicit time.

use baton_machine::session_tracker::{
    SessionTracker, default_max_session_timeout, default_min_session_timeout, negotiate_timeout,
};

const TICK: u64 = 2000;

#[test]
fn deadline_is_rounded_up_past_the_timeout_to_the_next_tick() {
    let mut t = SessionTracker::new(TICK);
    t.add(1, 10_000, 1_000);
    // 1_000 + 10_000 = 11_000 → next multiple of 2_000 strictly after it.
    assert_eq!(t.deadline(1), Some(12_000));
    t.add(2, 10_000, 0);
    // Exactly on a tick still moves to the next one, as ZooKeeper's ExpiryQueue does.
    assert_eq!(t.deadline(2), Some(12_000));
    assert_eq!(t.bucket_count(), 1, "both share one bucket");
    assert_eq!(t.next_deadline(), Some(12_000));
}

#[test]
fn session_expires_once_its_deadline_is_reached_and_only_once() {
    let mut t = SessionTracker::new(TICK);
    t.add(1, 4_000, 0);
    let deadline = t.deadline(1).unwrap();
    assert!(t.expired(deadline - 1).is_empty());
    assert_eq!(t.expired(deadline), vec![1]);
    assert!(t.expired(deadline).is_empty());
    assert!(t.expired(deadline + 100_000).is_empty());
    assert!(t.is_closing(1));
    assert!(t.contains(1));
    assert_eq!(t.len(), 1, "closing sessions stay until removed");
    assert_eq!(t.next_deadline(), None);
    assert_eq!(t.deadline(1), None);
}

#[test]
fn touch_extends_the_deadline() {
    let mut t = SessionTracker::new(TICK);
    t.add(1, 4_000, 0);
    let first = t.deadline(1).unwrap();
    assert!(t.touch(1, 3_000));
    let second = t.deadline(1).unwrap();
    assert!(second > first);
    assert!(
        t.expired(first).is_empty(),
        "touched session survives its old deadline"
    );
    assert_eq!(t.expired(second), vec![1]);
}

#[test]
fn touch_never_shortens_a_deadline() {
    let mut t = SessionTracker::new(TICK);
    t.add(1, 4_000, 10_000);
    let deadline = t.deadline(1).unwrap();
    assert!(t.touch(1, 0), "a late-arriving old touch is accepted");
    assert_eq!(t.deadline(1), Some(deadline));
}

#[test]
fn touch_within_the_same_bucket_changes_nothing() {
    let mut t = SessionTracker::new(TICK);
    t.add(1, 4_000, 0);
    assert!(t.touch(1, 1_999));
    assert_eq!(t.deadline(1), Some(6_000));
    assert_eq!(t.bucket_count(), 1);
}

#[test]
fn touch_fails_for_unknown_and_closing_sessions() {
    let mut t = SessionTracker::new(TICK);
    assert!(!t.touch(9, 0));
    t.add(1, 4_000, 0);
    t.expired(u64::MAX);
    assert!(
        !t.touch(1, 1),
        "an expired session cannot be revived by a ping"
    );
    assert!(t.is_closing(1));
    t.remove(1);
    assert!(!t.touch(1, 1));
    assert!(!t.contains(1));
    assert!(t.is_empty());
}

#[test]
fn remove_takes_a_session_out_of_its_bucket() {
    let mut t = SessionTracker::new(TICK);
    t.add(1, 4_000, 0);
    t.add(2, 4_000, 0);
    t.remove(1);
    t.remove(1);
    t.remove(77);
    assert_eq!(t.expired(u64::MAX), vec![2]);
    assert_eq!(t.len(), 1);
}

#[test]
fn expired_is_ordered_by_deadline_then_id() {
    let mut t = SessionTracker::new(TICK);
    t.add(30, 8_000, 0);
    t.add(20, 4_000, 0);
    t.add(10, 8_000, 0);
    t.add(-5, 4_000, 0);
    t.add(99, 60_000, 0);
    assert_eq!(t.expired(20_000), vec![-5, 20, 10, 30]);
    assert_eq!(t.len(), 5);
    assert_eq!(t.next_deadline(), Some(62_000));
}

#[test]
fn sessions_touched_together_share_buckets() {
    let mut t = SessionTracker::new(TICK);
    for id in 0..1_000 {
        t.add(id, 10_000, id as u64 * 7);
    }
    for id in 0..1_000 {
        assert!(t.touch(id, 50_000 + id as u64 % 1_500));
    }
    assert!(t.bucket_count() <= 2, "got {} buckets", t.bucket_count());
    assert!(t.expired(60_000).is_empty());
    assert_eq!(t.expired(62_000).len(), 1_000);
}

#[test]
fn reset_all_gives_every_session_a_fresh_timeout() {
    let mut t = SessionTracker::new(TICK);
    t.add(1, 4_000, 0);
    t.add(2, 30_000, 0);
    assert_eq!(t.expired(6_000), vec![1]);
    t.reset_all(100_000);
    assert!(
        !t.is_closing(1),
        "the new leader re-arms sessions the old one was closing"
    );
    assert_eq!(t.deadline(1), Some(106_000));
    assert_eq!(t.deadline(2), Some(132_000));
    assert!(t.touch(1, 100_500));
    assert!(t.expired(105_999).is_empty());
    assert_eq!(t.expired(200_000), vec![1, 2]);
}

#[test]
fn add_of_a_known_session_re_arms_it() {
    let mut t = SessionTracker::new(TICK);
    t.add(1, 4_000, 0);
    t.add(1, 20_000, 0);
    assert_eq!(t.len(), 1);
    assert_eq!(t.bucket_count(), 1);
    assert_eq!(t.deadline(1), Some(22_000));
    t.expired(u64::MAX);
    t.add(1, 4_000, 100_000);
    assert!(!t.is_closing(1));
    assert!(t.touch(1, 100_000));
}

#[test]
fn extreme_times_and_a_zero_tick_do_not_panic() {
    let mut t = SessionTracker::new(0);
    t.add(1, u32::MAX, u64::MAX - 5);
    assert!(t.touch(1, u64::MAX));
    t.add(2, 0, 0);
    assert_eq!(t.deadline(2), Some(1));
    t.reset_all(u64::MAX);
    assert_eq!(t.expired(u64::MAX).len(), 2);
}

#[test]
fn negotiation_clamps_like_zookeeper() {
    // ZooKeeper 3.8 with tickTime=2000 answered 1000→4000, 5000→5000, 100000→40000, 0→4000.
    let (min, max) = (
        default_min_session_timeout(2000),
        default_max_session_timeout(2000),
    );
    assert_eq!((min, max), (4_000, 40_000));
    assert_eq!(negotiate_timeout(1_000, min, max), 4_000);
    assert_eq!(negotiate_timeout(5_000, min, max), 5_000);
    assert_eq!(negotiate_timeout(100_000, min, max), 40_000);
    assert_eq!(negotiate_timeout(0, min, max), 4_000);
    assert_eq!(negotiate_timeout(-5, min, max), 4_000);
    // Crossed bounds: the maximum is applied last and wins.
    assert_eq!(negotiate_timeout(7, 10_000, 5_000), 5_000);
    assert_eq!(default_max_session_timeout(u32::MAX), i32::MAX);
}

mod model {
    use std::collections::HashMap;

    use baton_machine::session_tracker::SessionTracker;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Add(i64, u32),
        Touch(i64),
        Remove(i64),
        Advance(u64),
        Expire,
        ResetAll,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0i64..6, 0u32..10_000).prop_map(|(id, timeout)| Op::Add(id, timeout)),
            (0i64..6).prop_map(Op::Touch),
            (0i64..6).prop_map(Op::Remove),
            (0u64..5_000).prop_map(Op::Advance),
            Just(Op::Expire),
            Just(Op::ResetAll),
        ]
    }

    /// (timeout, deadline, closing) per session, with deadlines computed by the plain formula.
    fn deadline(now: u64, timeout: u32, tick: u64) -> u64 {
        ((now + u64::from(timeout)) / tick + 1) * tick
    }

    proptest! {
        #[test]
        fn matches_a_plain_map(tick in 1u64..3_000, ops in proptest::collection::vec(op(), 1..100)) {
            let mut t = SessionTracker::new(tick);
            let mut reference: HashMap<i64, (u32, u64, bool)> = HashMap::new();
            let mut now = 0u64;
            for op in ops {
                match op {
                    Op::Add(id, timeout) => {
                        t.add(id, timeout, now);
                        reference.insert(id, (timeout, deadline(now, timeout, tick), false));
                    }
                    Op::Touch(id) => {
                        let live = matches!(reference.get(&id), Some((_, _, false)));
                        prop_assert_eq!(t.touch(id, now), live);
                        if let Some((timeout, d, false)) = reference.get_mut(&id) {
                            *d = (*d).max(deadline(now, *timeout, tick));
                        }
                    }
                    Op::Remove(id) => {
                        t.remove(id);
                        reference.remove(&id);
                    }
                    Op::Advance(ms) => now += ms,
                    Op::Expire => {
                        let mut want: Vec<(u64, i64)> = reference
                            .iter()
                            .filter(|(_, (_, d, closing))| !closing && *d <= now)
                            .map(|(id, (_, d, _))| (*d, *id))
                            .collect();
                        want.sort_unstable();
                        for (_, id) in &want {
                            if let Some(entry) = reference.get_mut(id) {
                                entry.2 = true;
                            }
                        }
                        let want: Vec<i64> = want.into_iter().map(|(_, id)| id).collect();
                        prop_assert_eq!(t.expired(now), want);
                    }
                    Op::ResetAll => {
                        t.reset_all(now);
                        for (timeout, d, closing) in reference.values_mut() {
                            *d = deadline(now, *timeout, tick);
                            *closing = false;
                        }
                    }
                }
                prop_assert_eq!(t.len(), reference.len());
                for id in 0..6 {
                    let want = reference.get(&id).filter(|e| !e.2).map(|e| e.1);
                    prop_assert_eq!(t.deadline(id), want);
                    prop_assert_eq!(t.is_closing(id), reference.get(&id).is_some_and(|e| e.2));
                }
                let next = reference.values().filter(|e| !e.2).map(|e| e.1).min();
                prop_assert_eq!(t.next_deadline(), next);
            }
        }
    }
}
