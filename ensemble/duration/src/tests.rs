use std::time::Duration;

use proptest::prelude::*;

use super::*;

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

#[test]
fn reads_go_style_durations() {
    let cases = [
        ("0", Duration::ZERO),
        ("0s", Duration::ZERO),
        ("0.0ms", Duration::ZERO),
        ("500ms", 500 * MS),
        ("30s", 30 * S),
        ("1m30s", 90 * S),
        ("2h", 7200 * S),
        ("1h2m3s4ms", 3723 * S + 4 * MS),
        ("1.5s", 1500 * MS),
        (".5s", 500 * MS),
        ("5.s", 5 * S),
        ("1.5h", 5400 * S),
        ("0.25ms", Duration::from_micros(250)),
        ("30s1m", 90 * S),
        ("007s", 7 * S),
        ("1.0000000000000000001s", S),
        ("720h", MAX),
        ("719h59m60s", MAX),
    ];
    for (text, want) in cases {
        assert_eq!(parse(text), Ok(want), "{text}");
    }
}

#[test]
fn a_bare_number_is_refused_with_the_unit_to_add() {
    for (bare, example) in [
        ("10", "write 10s"),
        ("100", "write 100s"),
        ("1.5", "write 1.5s"),
    ] {
        let err = parse(bare).expect_err(bare);
        assert_eq!(err, DurationError::NoUnit { input: bare.into() });
        let text = err.to_string();
        assert!(text.contains(example), "{text}");
        assert!(text.contains(&format!("not {bare}")), "{text}");
    }
}

#[test]
fn everything_else_is_refused_with_an_example() {
    let cases = [
        ("", "empty"),
        ("s", "where a number belongs"),
        ("-1s", "negative"),
        ("+1s", "where a number belongs"),
        (" 10s", "where a number belongs"),
        ("10s ", "unknown unit"),
        ("10 s", "unknown unit \" s\""),
        ("10S", "unknown unit \"S\""),
        ("1d", "unknown unit \"d\""),
        ("10us", "unknown unit \"us\""),
        ("10ns", "unknown unit \"ns\""),
        ("10µs", "unknown unit"),
        ("1e3s", "unknown unit \"e\""),
        ("1m30", "no unit after 30"),
        ("1.2.3s", "1.2.3 is not a number"),
        (".s", "a point without digits"),
        ("1.2.3", "1.2.3 is not a number"),
    ];
    for (bad, reason) in cases {
        let err = parse(bad).expect_err(bad);
        let text = err.to_string();
        assert!(
            matches!(err, DurationError::Malformed { .. }),
            "{bad}: {err:?}"
        );
        assert!(text.contains(reason), "{bad}: {text}");
        assert!(
            text.contains("write it like 500ms, 30s, 1m30s or 2h"),
            "{bad}: {text}"
        );
    }
}

#[test]
fn past_thirty_days_and_overflow_are_refused() {
    for long in [
        "721h",
        "720h1ms",
        "43201m",
        "2592001s",
        "99999999999999999999h",
        "999999999999999999999999999999999999999999s",
        "18446744073709551616ms",
        "719h59m59s1001ms",
    ] {
        let err = parse(long).expect_err(long);
        assert_eq!(err, DurationError::TooLong { input: long.into() }, "{long}");
        assert!(err.to_string().contains("720h"), "{err}");
    }
}

#[test]
fn parse_within_names_the_bounds() {
    let range = S..=600 * S;
    assert_eq!(parse_within("10s", range.clone()), Ok(10 * S));
    assert_eq!(parse_within("1s", range.clone()), Ok(S));
    assert_eq!(parse_within("10m", range.clone()), Ok(600 * S));
    for out in ["0", "999ms", "10m1ms", "1h"] {
        let err = parse_within(out, range.clone()).expect_err(out);
        assert_eq!(
            err.to_string(),
            format!("{out:?} is out of range: write a duration from 1s to 10m")
        );
    }
    // The grammar's own refusals come first.
    assert!(matches!(
        parse_within("10", range),
        Err(DurationError::NoUnit { .. })
    ));
}

#[test]
fn formats_like_go_without_zero_terms() {
    let cases = [
        (Duration::ZERO, "0s"),
        (Duration::from_nanos(1), "0.000001ms"),
        (Duration::from_micros(250), "0.25ms"),
        (100 * MS, "100ms"),
        (1500 * MS, "1.5s"),
        (10 * S, "10s"),
        (60 * S, "1m"),
        (90 * S, "1m30s"),
        (3601 * S, "1h1s"),
        (7200 * S, "2h"),
        (MAX, "720h"),
    ];
    for (d, want) in cases {
        assert_eq!(format(d), want, "{d:?}");
    }
}

proptest! {
    #[test]
    fn format_round_trips(ns in 0..=MAX.as_nanos() as u64) {
        let d = Duration::from_nanos(ns);
        prop_assert_eq!(parse(&format(d)), Ok(d));
    }

    #[test]
    fn parse_never_panics(text in "[0-9.hms -]{0,24}") {
        let _ = parse(&text);
    }
}
