//! The one duration grammar of Baton: every duration a person writes (the flags of
//! `baton-ensemble`, `baton-sidecar`, `baton-operator` and `baton-bench`, the sidecar's
//! environment and query parameters, the operator's CRD fields) is read by [`parse`], and every
//! duration Baton prints for a person to write back (help text, defaults, messages) comes from
//! [`format`].
//!
//! The grammar is Go's `time.ParseDuration`, as Kubernetes uses it: one or more
//! `<number><unit>` terms with no spaces, units `h`, `m`, `s` and `ms`, a number optionally with a
//! decimal fraction (`1.5s`, `.5s`): `500ms`, `30s`, `1m30s`, `2h`. A bare `0` is zero, as in Go.
//! Refused, each with a message that shows the form to write instead: a bare non-zero number
//! (`10`: write `10s`), other units (`d`, `us`, `ns`: none of Baton's durations needs them),
//! signs, spaces, and anything longer than [`MAX`] (30 days).
//!
//! A crate of its own, with no dependency but `thiserror`, so the ensemble, the sidecar, the
//! operator and the bench tool share it without building each other.

use std::ops::RangeInclusive;
use std::time::Duration;

/// The longest duration accepted: no caller needs more, and it keeps every sum far from
/// overflowing.
pub const MAX: Duration = Duration::from_secs(30 * 24 * 3600);

const NANOS_PER_MS: u128 = 1_000_000;
const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Why a string is not an accepted duration. Every message shows what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// A number without a unit other than `0`, e.g. `10`.
    #[error(
        "{input:?} is not a duration: a number needs a unit; write {input}s (or {input}ms, {input}m), not {input}"
    )]
    NoUnit { input: String },
    /// Not in the grammar at all.
    #[error("{input:?} is not a duration ({reason}); write it like 500ms, 30s, 1m30s or 2h")]
    Malformed { input: String, reason: String },
    /// Longer than [`MAX`].
    #[error("{input:?} is longer than the longest duration accepted, 720h (30 days)")]
    TooLong { input: String },
    /// In the grammar, but outside the range the caller accepts ([`parse_within`]).
    #[error("{input:?} is out of range: write a duration from {min} to {max}", min = format(*.min), max = format(*.max))]
    OutOfRange {
        input: String,
        min: Duration,
        max: Duration,
    },
}

/// Reads a duration in the grammar described in the crate documentation.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    let malformed = |reason: String| DurationError::Malformed {
        input: input.to_owned(),
        reason,
    };
    if input == "0" {
        return Ok(Duration::ZERO);
    }
    if input.is_empty() {
        return Err(malformed("empty".into()));
    }
    if input.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && input.bytes().any(|b| b.is_ascii_digit())
        && input.bytes().filter(|&b| b == b'.').count() <= 1
    {
        return Err(DurationError::NoUnit {
            input: input.to_owned(),
        });
    }
    let max_ns = MAX.as_nanos();
    let mut total_ns: u128 = 0;
    let mut rest = input;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        if number.is_empty() {
            let reason = match rest.chars().next() {
                Some('-') => "negative".to_owned(),
                Some(c) => format!("{c:?} where a number belongs"),
                None => "expected a number".to_owned(),
            };
            return Err(malformed(reason));
        }
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if fraction.contains('.') {
            return Err(malformed(format!("{number} is not a number")));
        }
        if whole.is_empty() && fraction.is_empty() {
            return Err(malformed("a point without digits".into()));
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let unit_ns: u128 = match unit {
            "h" => 3600 * NANOS_PER_SEC,
            "m" => 60 * NANOS_PER_SEC,
            "s" => NANOS_PER_SEC,
            "ms" => NANOS_PER_MS,
            "" => return Err(malformed(format!("no unit after {number}"))),
            other => {
                return Err(malformed(format!(
                    "unknown unit {other:?}; the units are h, m, s and ms"
                )));
            }
        };
        // Leading zeros aside, 20 digits of whole units already pass MAX; fewer fit in u128
        // even when multiplied by an hour's nanoseconds.
        let whole = whole.trim_start_matches('0');
        if whole.len() > 20 {
            return Err(DurationError::TooLong {
                input: input.to_owned(),
            });
        }
        let whole: u128 = whole.parse().unwrap_or(0);
        // Digits past the 18th are below a nanosecond even of an hour: dropped, as Go drops
        // what it cannot represent.
        let fraction = &fraction[..fraction.len().min(18)];
        let fraction_ns = if fraction.is_empty() {
            0
        } else {
            let digits: u128 = fraction.parse().unwrap_or(0);
            digits * unit_ns / 10u128.pow(fraction.len() as u32)
        };
        total_ns += whole * unit_ns + fraction_ns;
        if total_ns > max_ns {
            return Err(DurationError::TooLong {
                input: input.to_owned(),
            });
        }
        rest = after;
    }
    // At most MAX, which fits in u64 nanoseconds.
    Ok(Duration::from_nanos(total_ns as u64))
}

/// [`parse`], then refuses a duration outside `range` with a message naming its bounds.
pub fn parse_within(
    input: &str,
    range: RangeInclusive<Duration>,
) -> Result<Duration, DurationError> {
    let d = parse(input)?;
    if !range.contains(&d) {
        return Err(DurationError::OutOfRange {
            input: input.to_owned(),
            min: *range.start(),
            max: *range.end(),
        });
    }
    Ok(d)
}

/// Writes a duration in the grammar [`parse`] reads, the way Go's `Duration.String` would
/// without its zero terms: `0s`, `250ms`, `1.5s`, `1m30s`, `2h`, `1h0m1s` as `1h1s`.
pub fn format(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".to_owned();
    }
    if ns < NANOS_PER_SEC {
        return format!("{}{}ms", ns / NANOS_PER_MS, fraction(ns % NANOS_PER_MS, 6));
    }
    let secs = d.as_secs();
    let (hours, minutes, seconds) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    if seconds > 0 || d.subsec_nanos() > 0 {
        out.push_str(&format!(
            "{seconds}{}s",
            fraction(u128::from(d.subsec_nanos()), 9)
        ));
    }
    out
}

/// `.DIGITS` of `value` as a fraction with `width` digits, trailing zeros dropped; empty for 0.
fn fraction(value: u128, width: usize) -> String {
    if value == 0 {
        return String::new();
    }
    let digits = format!("{value:0width$}");
    format!(".{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests;
