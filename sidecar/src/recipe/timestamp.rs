//! RFC 3339 timestamps (UTC, millisecond precision) for znode data, HTTP answers and pod
//! annotations.

use std::time::SystemTime;

/// Formats `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ`; times before 1970 are clamped to the epoch.
pub fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .max(jiff::Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// Parses what [`rfc3339`] writes (`YYYY-MM-DDTHH:MM:SS.mmmZ`, UTC, milliseconds); `None` for
/// anything else or a time before 1970.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    if b.len() != 24 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' || b[19] != b'.' || b[23] != b'Z' {
        return None;
    }
    let at: jiff::Timestamp = text.parse().ok()?;
    (at >= jiff::Timestamp::UNIX_EPOCH).then(|| SystemTime::from(at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn at(secs: u64, millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis)
    }

    #[test]
    fn known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(at(951_782_400, 5)), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(at(1_700_000_000, 123)), "2023-11-14T22:13:20.123Z");
        assert_eq!(rfc3339(at(4_102_444_799, 999)), "2099-12-31T23:59:59.999Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn parses_what_it_writes() {
        for t in [
            UNIX_EPOCH,
            at(951_782_400, 5),
            at(1_700_000_000, 123),
            at(4_102_444_799, 999),
        ] {
            assert_eq!(parse_rfc3339(&rfc3339(t)), Some(t));
        }
        for bad in [
            "",
            "2023-11-14T22:13:20Z",
            "2023-13-14T22:13:20.123Z",
            "2023-11-14 22:13:20.123Z",
            "2023-11-14T22:13:20.12xZ",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
