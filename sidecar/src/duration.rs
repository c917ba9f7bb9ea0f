//! Durations as people write them in flags and query strings: `500ms`, `10s`, `1m30s`, `0`.

use std::time::Duration;

/// Why a string is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a duration ({reason}); write e.g. 500ms, 10s, 1m30s or 0")]
pub struct DurationError {
    input: String,
    reason: &'static str,
}

/// Parses Go-style durations: one or more `<number><unit>` terms, units `ms`, `s`, `m`, `h`,
/// decimals allowed (`1.5s`); a bare `0` is zero. Never panics and never overflows: values
/// past 30 days are refused.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    const LIMIT_MS: u128 = 30 * 24 * 3600 * 1000;
    let fail = |reason| DurationError {
        input: input.to_owned(),
        reason,
    };
    let text = input.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(fail("empty"));
    }
    // Work in microseconds so `1.5ms` stays exact and sums cannot overflow before the check.
    let mut total_us: u128 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        if number.is_empty() {
            return Err(fail("expected a number"));
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let unit_us: u128 = match unit {
            "ms" => 1_000,
            "s" => 1_000_000,
            "m" => 60_000_000,
            "h" => 3_600_000_000,
            "" => return Err(fail("missing unit")),
            _ => return Err(fail("unknown unit")),
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
            return Err(fail("malformed number"));
        }
        // More digits than this cannot pass the limit anyway; refusing them keeps u128 safe.
        if whole.len() > 12 || fraction.len() > 9 {
            return Err(fail("too many digits"));
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| fail("malformed number"))?
        };
        let mut term = whole * unit_us;
        if !fraction.is_empty() {
            let digits: u128 = fraction.parse().map_err(|_| fail("malformed number"))?;
            let scale = 10u128.pow(fraction.len() as u32);
            term += digits * unit_us / scale;
        }
        total_us += term;
        if total_us / 1000 > LIMIT_MS {
            return Err(fail("longer than 30 days"));
        }
        rest = after;
    }
    Ok(Duration::from_micros(total_us as u64))
}

/// Renders a duration the way [`parse_duration`] reads it (`1500ms`, `30s`, `2m`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0".to_owned()
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_usual_forms() {
        let cases = [
            ("0", 0),
            ("0s", 0),
            ("500ms", 500),
            ("10s", 10_000),
            ("1.5s", 1_500),
            (".5s", 500),
            ("1m30s", 90_000),
            ("2h", 7_200_000),
            (" 30s ", 30_000),
        ];
        for (text, ms) in cases {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text}"
            );
        }
    }

    #[test]
    fn refuses_garbage_with_a_reason() {
        for bad in [
            "",
            "10",
            "s",
            "10x",
            "1.2.3s",
            "-1s",
            "1e3s",
            "10 s",
            ".s",
            "99999999999999h",
            "31d",
            "721h",
        ] {
            let err = parse_duration(bad).expect_err(bad);
            assert!(err.to_string().contains("is not a duration"), "{err}");
        }
    }

    #[test]
    fn formats_round_trip() {
        for ms in [0, 1, 999, 1000, 1500, 60_000, 90_000] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }
}
