//! Query strings: `key=value` pairs, percent-decoded, checked against what a route accepts.

use std::time::Duration;

use super::api::{Endpoint, Param, ParamKind};
use super::reply::ApiError;
use crate::http::error_code::ErrorCode;

/// The parameters of one request, each at most once and each known to the route.
#[derive(Debug, Default)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Parses `raw` (without the `?`), refusing parameters not in `allowed`, repeated ones
    /// and undecodable ones: a typo like `ttl=30s&wiat=5s` is an error, not a silent default.
    pub fn parse(raw: Option<&str>, allowed: &[&str]) -> Result<Self, ApiError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for part in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            let key = decode(key)?;
            let value = decode(value)?;
            if !allowed.contains(&key.as_str()) {
                let expected = if allowed.is_empty() {
                    "this endpoint takes no parameters".to_owned()
                } else {
                    format!("expected one of: {}", allowed.join(", "))
                };
                return Err(ApiError::bad_request(
                    ErrorCode::UnknownParameter,
                    format!("unknown query parameter {key:?}; {expected}"),
                ));
            }
            if pairs.iter().any(|(k, _)| *k == key) {
                return Err(ApiError::bad_request(
                    ErrorCode::DuplicateParameter,
                    format!("query parameter {key:?} is given more than once"),
                ));
            }
            pairs.push((key, value));
        }
        Ok(Self { pairs })
    }

    /// Parses `raw` with the parameters `endpoint` takes (its entry in [`super::api`]).
    pub fn for_endpoint(raw: Option<&str>, endpoint: &Endpoint) -> Result<Self, ApiError> {
        let names: Vec<&str> = endpoint.params.iter().map(|p| p.name).collect();
        Self::parse(raw, &names)
    }

    /// Duration parameter `p`: its value, else its default (zero when it has none: use
    /// [`Self::optional_duration_of`] for those).
    pub fn duration_of(&self, p: &Param) -> Result<Duration, ApiError> {
        Ok(self.optional_duration_of(p)?.unwrap_or_default())
    }

    /// Duration parameter `p`: its value, else its default, else `None`.
    pub fn optional_duration_of(&self, p: &Param) -> Result<Option<Duration>, ApiError> {
        let ParamKind::Duration { default, min, max } = p.kind else {
            unreachable!("{} is not a duration parameter", p.name);
        };
        match (self.get(p.name), default) {
            (None, default) => Ok(default),
            (Some(_), default) => self
                .duration(p.name, default.unwrap_or(min), min, max)
                .map(Some),
        }
    }

    /// Count parameter `p` (a whole number within its limits), `None` when absent.
    pub fn count_of(&self, p: &Param) -> Result<Option<u32>, ApiError> {
        let ParamKind::Count { min, max } = p.kind else {
            unreachable!("{} is not a count parameter", p.name);
        };
        let Some(raw) = self.get(p.name) else {
            return Ok(None);
        };
        match raw.parse::<u32>() {
            Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(ApiError::bad_request(
                p.invalid,
                format!(
                    "{}: {raw:?} is not a whole number from {min} to {max}",
                    p.name
                ),
            )),
        }
    }

    /// Token parameter `p` (a signed 64-bit integer), `None` when absent.
    pub fn token_of(&self, p: &Param) -> Result<Option<i64>, ApiError> {
        debug_assert_eq!(p.kind, ParamKind::Token, "{}", p.name);
        let Some(raw) = self.get(p.name) else {
            return Ok(None);
        };
        raw.parse::<i64>().map(Some).map_err(|_| {
            ApiError::bad_request(
                p.invalid,
                format!("{}: {raw:?} is not an integer fencing token", p.name),
            )
        })
    }

    /// Choice parameter `p`: its value when it is one of the choices, `None` when absent.
    pub fn choice_of(&self, p: &Param) -> Result<Option<&'static str>, ApiError> {
        let ParamKind::Choice(choices) = p.kind else {
            unreachable!("{} is not a choice parameter", p.name);
        };
        let Some(raw) = self.get(p.name) else {
            return Ok(None);
        };
        match choices.iter().find(|c| **c == raw) {
            Some(c) => Ok(Some(c)),
            None => Err(ApiError::bad_request(
                p.invalid,
                match choices {
                    [one] => format!("{}: {raw:?} is not {one}", p.name),
                    _ => format!("{}: {raw:?} is not one of {}", p.name, choices.join(", ")),
                },
            )),
        }
    }

    /// The raw value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `key` as a duration in `min..=max`, or `default` when absent.
    pub fn duration(
        &self,
        key: &str,
        default: Duration,
        min: Duration,
        max: Duration,
    ) -> Result<Duration, ApiError> {
        let Some(value) = self.get(key) else {
            return Ok(default);
        };
        baton_duration::parse_within(value, min..=max)
            .map_err(|e| ApiError::bad_request(ErrorCode::InvalidDuration, format!("{key}: {e}")))
    }
}

/// Percent-decodes one component (`+` stays `+`: these are not form bodies).
fn decode(raw: &str) -> Result<String, ApiError> {
    let bad = || {
        ApiError::bad_request(
            ErrorCode::InvalidQuery,
            format!("query component {raw:?} is not valid percent-encoded UTF-8"),
        )
    };
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn reads_known_parameters() {
        let q = Query::parse(Some("wait=10s&ttl=1m&mode=read"), &["wait", "ttl", "mode"])
            .expect("parses");
        assert_eq!(q.get("mode"), Some("read"));
        assert_eq!(q.duration("wait", S, Duration::ZERO, 600 * S), Ok(10 * S));
        assert_eq!(q.duration("ttl", S, S, 600 * S), Ok(60 * S));
        assert_eq!(q.duration("absent", 7 * S, S, 600 * S), Ok(7 * S));
        let q = Query::parse(Some("wait=1%30s"), &["wait"]).expect("parses");
        assert_eq!(q.duration("wait", S, Duration::ZERO, 600 * S), Ok(10 * S));
        assert!(Query::parse(None, &[]).is_ok());
        assert!(Query::parse(Some(""), &[]).is_ok());
    }

    #[test]
    fn refuses_what_it_does_not_understand() {
        let code = |r: Result<Query, ApiError>| r.expect_err("refused").code;
        assert_eq!(
            code(Query::parse(Some("wiat=5s"), &["wait"])),
            "UnknownParameter"
        );
        assert_eq!(code(Query::parse(Some("x=1"), &[])), "UnknownParameter");
        assert_eq!(
            code(Query::parse(Some("wait=1s&wait=2s"), &["wait"])),
            "DuplicateParameter"
        );
        assert_eq!(
            code(Query::parse(Some("wait=%zz"), &["wait"])),
            "InvalidQuery"
        );
        assert_eq!(
            code(Query::parse(Some("wait=%"), &["wait"])),
            "InvalidQuery"
        );
        assert_eq!(
            code(Query::parse(Some("wait=%ff"), &["wait"])),
            "InvalidQuery"
        );
        let q = Query::parse(Some("wait=soon&ttl=0"), &["wait", "ttl"]).expect("parses");
        assert_eq!(
            q.duration("wait", S, Duration::ZERO, S)
                .expect_err("bad")
                .code,
            "InvalidDuration"
        );
        let err = q.duration("ttl", S, S, 600 * S).expect_err("bad");
        assert_eq!(err.code, "InvalidDuration");
        assert!(err.message.contains("out of range"), "{}", err.message);
    }
}
