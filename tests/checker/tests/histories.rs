//! Hand-written histories: ones a linearizable ZooKeeper could produce must pass, and each kind
//! of anomaly must be caught and explained.

use std::collections::BTreeMap;

use baton_checker::{
    Call, Failure, History, HistoryBuilder, HistoryError, InvariantViolation, Outcome, Reply,
    Verdict, Znode, check, check_no_lost_writes, check_sequential_names, check_session_fifo,
};

const BUDGET: u64 = 100_000;
const OK: Outcome = Outcome::Ok(Reply::Done);

fn build(history: HistoryBuilder) -> History {
    match history.build() {
        Ok(history) => history,
        Err(err) => panic!("hand-written history is malformed: {err}"),
    }
}

fn violation(history: &History) -> String {
    match check(history, BUDGET) {
        Verdict::Violation(violation) => violation.to_string(),
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[test]
fn sequential_lifecycle_passes() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(
        1,
        "/a",
        Call::set_data("y", 0),
        11,
        Some(20),
        Outcome::Ok(Reply::Version(1)),
    );
    h.push(
        2,
        "/a",
        Call::get_data(),
        21,
        Some(30),
        Outcome::read("y", 1),
    );
    h.push(2, "/a", Call::delete(1), 31, Some(40), OK);
    h.push(
        1,
        "/a",
        Call::get_data(),
        41,
        Some(50),
        Outcome::Failed(Failure::NoNode),
    );
    h.push(1, "/a", Call::create("z"), 51, Some(60), OK);
    h.push(
        2,
        "/a",
        Call::get_data(),
        61,
        Some(70),
        Outcome::read("z", 0),
    );
    assert_eq!(check(&build(h), BUDGET), Verdict::Ok);
}

#[test]
fn concurrent_writes_may_take_either_order() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(
        1,
        "/a",
        Call::set_data("p", -1),
        20,
        Some(50),
        Outcome::Ok(Reply::Version(2)),
    );
    h.push(
        2,
        "/a",
        Call::set_data("q", -1),
        25,
        Some(45),
        Outcome::Ok(Reply::Version(1)),
    );
    h.push(
        3,
        "/a",
        Call::get_data(),
        30,
        Some(40),
        Outcome::read("q", 1),
    );
    h.push(
        3,
        "/a",
        Call::get_data(),
        60,
        Some(70),
        Outcome::read("p", 2),
    );
    assert_eq!(check(&build(h), BUDGET), Verdict::Ok);
}

#[test]
fn failed_writes_change_nothing_and_unchecked_reads_are_not_checked() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(
        2,
        "/a",
        Call::create("dup"),
        11,
        Some(20),
        Outcome::Failed(Failure::NodeExists),
    );
    h.push(
        2,
        "/a",
        Call::set_data("bad", 7),
        21,
        Some(30),
        Outcome::Failed(Failure::BadVersion),
    );
    h.push(
        1,
        "/a",
        Call::set_data("y", -1),
        31,
        Some(40),
        Outcome::Ok(Reply::Version(1)),
    );
    // A follower read without sync may lag; it is recorded but not checked.
    h.push(
        3,
        "/a",
        Call::GetData { checked: false },
        41,
        Some(50),
        Outcome::read("x", 0),
    );
    assert_eq!(check(&build(h), BUDGET), Verdict::Ok);
}

#[test]
fn keys_are_independent() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(2, "/b", Call::create("x"), 0, Some(10), OK);
    h.push(
        1,
        "/b",
        Call::get_data(),
        11,
        Some(20),
        Outcome::read("x", 0),
    );
    assert_eq!(check(&build(h), BUDGET), Verdict::Ok);
}

#[test]
fn stale_read_after_a_completed_write_is_caught() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(
        1,
        "/a",
        Call::set_data("y", -1),
        20,
        Some(30),
        Outcome::Ok(Reply::Version(1)),
    );
    h.push(
        2,
        "/a",
        Call::get_data(),
        40,
        Some(50),
        Outcome::read("x", 0),
    );
    let report = violation(&build(h));
    // The report as an operator sees it (shown with --no-capture).
    println!("{report}");
    assert!(report.contains("not linearizable on /a"), "{report}");
    assert!(
        report.contains("read \"x\" v0, but the znode holds \"y\" v1"),
        "{report}"
    );
}

#[test]
fn two_acknowledged_creates_without_a_delete_are_caught() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(2, "/a", Call::create("y"), 5, Some(15), OK);
    let report = violation(&build(h));
    assert!(
        report.contains("would have failed with NodeExists"),
        "{report}"
    );
}

#[test]
fn a_version_going_backwards_is_caught() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(
        1,
        "/a",
        Call::set_data("y", -1),
        11,
        Some(20),
        Outcome::Ok(Reply::Version(1)),
    );
    h.push(
        1,
        "/a",
        Call::set_data("z", -1),
        21,
        Some(30),
        Outcome::Ok(Reply::Version(2)),
    );
    h.push(
        2,
        "/a",
        Call::get_data(),
        31,
        Some(40),
        Outcome::read("z", 1),
    );
    let report = violation(&build(h));
    assert!(
        report.contains("read \"z\" v1, but the znode holds \"z\" v2"),
        "{report}"
    );
}

#[test]
fn a_set_data_answering_an_old_version_is_caught() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(
        1,
        "/a",
        Call::set_data("y", -1),
        11,
        Some(20),
        Outcome::Ok(Reply::Version(1)),
    );
    h.push(
        2,
        "/a",
        Call::set_data("z", -1),
        21,
        Some(30),
        Outcome::Ok(Reply::Version(1)),
    );
    let report = violation(&build(h));
    assert!(report.contains("answered version 1"), "{report}");
}

#[test]
fn an_unknown_write_seen_by_a_read_is_placed() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    // The connection dropped: the write may or may not have happened; a later read says it did.
    h.push(1, "/a", Call::set_data("y", -1), 20, None, Outcome::Unknown);
    h.push(
        2,
        "/a",
        Call::get_data(),
        30,
        Some(40),
        Outcome::read("x", 0),
    );
    h.push(
        2,
        "/a",
        Call::get_data(),
        100,
        Some(110),
        Outcome::read("y", 1),
    );
    assert_eq!(check(&build(h), BUDGET), Verdict::Ok);
}

#[test]
fn an_unknown_write_may_never_happen() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(1, "/a", Call::delete(-1), 20, None, Outcome::Unknown);
    h.push(
        2,
        "/a",
        Call::get_data(),
        30,
        Some(40),
        Outcome::read("x", 0),
    );
    h.push(
        2,
        "/a",
        Call::get_data(),
        100,
        Some(110),
        Outcome::read("x", 0),
    );
    assert_eq!(check(&build(h), BUDGET), Verdict::Ok);
}

#[test]
fn an_unknown_write_cannot_act_before_it_was_invoked() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(
        2,
        "/a",
        Call::get_data(),
        20,
        Some(30),
        Outcome::read("y", 1),
    );
    h.push(1, "/a", Call::set_data("y", -1), 40, None, Outcome::Unknown);
    let report = violation(&build(h));
    assert!(
        report.contains("read \"y\" v1, but the znode holds \"x\" v0"),
        "{report}"
    );
}

#[test]
fn an_exhausted_budget_is_inconclusive() {
    let mut h = HistoryBuilder::new();
    for session in 0..6 {
        h.push(
            session,
            "/a",
            Call::set_data(format!("d{session}"), -1),
            0,
            None,
            Outcome::Unknown,
        );
    }
    h.push(
        9,
        "/a",
        Call::get_data(),
        10,
        Some(20),
        Outcome::read("never", 3),
    );
    assert_eq!(
        check(&build(h), 3),
        Verdict::Inconclusive {
            key: "/a".into(),
            steps: 4
        }
    );
}

#[test]
fn malformed_histories_are_refused() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 10, Some(5), OK);
    assert!(matches!(
        h.build(),
        Err(HistoryError::ReturnBeforeInvoke { id: 0, .. })
    ));
    let mut h = HistoryBuilder::new();
    h.push(
        1,
        "/a",
        Call::create("x"),
        10,
        Some(15),
        Outcome::Ok(Reply::Version(3)),
    );
    assert!(matches!(
        h.build(),
        Err(HistoryError::ReplyDoesNotFitCall { .. })
    ));
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 10, None, OK);
    assert!(matches!(
        h.build(),
        Err(HistoryError::AnswerWithoutReturn { .. })
    ));
}

fn finals(entries: &[(&str, Znode)]) -> BTreeMap<String, Znode> {
    entries
        .iter()
        .map(|(key, znode)| ((*key).to_owned(), znode.clone()))
        .collect()
}

fn present(data: &str, version: i32) -> Znode {
    Znode::Present {
        data: data.as_bytes().to_vec(),
        version,
    }
}

#[test]
fn a_lost_acknowledged_write_is_caught() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(
        1,
        "/a",
        Call::set_data("y", -1),
        20,
        Some(30),
        Outcome::Ok(Reply::Version(1)),
    );
    let history = build(h);
    assert_eq!(
        check_no_lost_writes(&history, &finals(&[("/a", present("y", 1))])),
        Ok(())
    );
    let lost = check_no_lost_writes(&history, &finals(&[("/a", present("x", 0))]));
    assert!(
        matches!(lost, Err(InvariantViolation::LostWrite { .. })),
        "{lost:?}"
    );
    let unread = check_no_lost_writes(&history, &finals(&[]));
    assert!(
        matches!(unread, Err(InvariantViolation::NoFinalRead { .. })),
        "{unread:?}"
    );
}

#[test]
fn a_later_unknown_write_may_explain_the_final_state() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(2, "/a", Call::delete(-1), 5, None, Outcome::Unknown);
    let history = build(h);
    assert_eq!(
        check_no_lost_writes(&history, &finals(&[("/a", Znode::Absent)])),
        Ok(())
    );
}

#[test]
fn a_reused_sequential_name_is_caught() {
    let names = [(1, "/q/n-0000000001"), (2, "/q/n-0000000002")];
    assert_eq!(check_sequential_names(names), Ok(()));
    let reused = [(1, "/q/n-0000000001"), (2, "/q/n-0000000001")];
    assert_eq!(
        check_sequential_names(reused),
        Err(InvariantViolation::SequentialNameReused {
            name: "/q/n-0000000001".into(),
            first: 1,
            second: 2
        })
    );
}

#[test]
fn answers_out_of_session_order_are_caught() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(30), OK);
    h.push(1, "/b", Call::create("y"), 10, Some(20), OK);
    h.push(2, "/c", Call::create("z"), 10, Some(20), OK);
    let out_of_order = check_session_fifo(&build(h));
    assert!(
        matches!(
            out_of_order,
            Err(InvariantViolation::SessionOutOfOrder { session: 1, .. })
        ),
        "{out_of_order:?}"
    );
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(1, "/b", Call::create("y"), 5, None, Outcome::Unknown);
    h.push(1, "/b", Call::create("y"), 11, Some(20), OK);
    assert_eq!(check_session_fifo(&build(h)), Ok(()));
}

#[test]
fn an_error_that_fits_no_state_is_caught() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(1, "/a", Call::delete(0), 11, Some(20), OK);
    // The znode is gone for certain: NodeExists fits no point of this interval.
    h.push(
        2,
        "/a",
        Call::create("y"),
        30,
        Some(40),
        Outcome::Failed(Failure::NodeExists),
    );
    let report = violation(&build(h));
    assert!(
        report.contains("answered NodeExists, but would have succeeded on absent"),
        "{report}"
    );
}

#[test]
fn a_bad_version_answered_for_the_current_version_is_caught() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(
        2,
        "/a",
        Call::set_data("y", 0),
        20,
        Some(30),
        Outcome::Failed(Failure::BadVersion),
    );
    let report = violation(&build(h));
    assert!(report.contains("answered BadVersion"), "{report}");
}

#[test]
fn an_error_concurrent_with_the_write_that_explains_it_passes() {
    let mut h = HistoryBuilder::new();
    h.push(1, "/a", Call::create("x"), 0, Some(10), OK);
    h.push(1, "/a", Call::delete(-1), 20, Some(40), OK);
    h.push(
        2,
        "/a",
        Call::set_data("y", -1),
        25,
        Some(35),
        Outcome::Failed(Failure::NoNode),
    );
    h.push(
        3,
        "/a",
        Call::create("z"),
        50,
        Some(60),
        Outcome::Failed(Failure::Other),
    );
    assert_eq!(check(&build(h), BUDGET), Verdict::Ok);
}
