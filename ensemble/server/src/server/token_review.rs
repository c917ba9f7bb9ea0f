//! The `k8s` auth scheme: a projected ServiceAccount token (audience `baton`) checked with the
//! Kubernetes TokenReview API, so a deleted pod's token, another audience's or a forged one is
//! refused. Runs in the connection task (network I/O never touches the core thread); the core
//! gets the verdict in the session's order (`CoreMsg::Identity`).
//!
//! Verdicts are cached by the token's SHA-256 until the token's `exp` (read from the JWT
//! payload without trusting it for anything else), at most [`MAX_CACHE_TTL`]: a reconnecting
//! sidecar does not cost an API call, and a token sprayed at us is reviewed once. An API
//! failure is never cached and never accepted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use baton_machine::tenancy::K8S_SCHEME;
use baton_proto::Id;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use kube::api::{Api, PostParams};
use tokio::sync::Semaphore;

use crate::core::{IdentityVerdict, ThrottledLog};
use crate::metrics::Metrics;

/// The audience the sidecar's projected token is issued for.
pub const AUDIENCE: &str = "baton";
/// Longest a verdict is trusted without asking the API server again (a deleted pod's token
/// keeps working at most this long on new connections).
pub const MAX_CACHE_TTL: Duration = Duration::from_secs(600);
/// Tokens cached at most; past it expired entries go first, then arbitrary ones.
const MAX_CACHE_ENTRIES: usize = 10_000;
/// TokenReview calls in flight at most; more wait (their connections are not read meanwhile).
const MAX_CONCURRENT_REVIEWS: usize = 16;
/// One TokenReview call may take this long before it counts as an API failure.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest token accepted for review (projected tokens are ~1 KiB).
const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The TokenReview `extra` key naming the pod a projected token is bound to.
const POD_NAME_KEY: &str = "authentication.kubernetes.io/pod-name";

static REJECT_LOG: ThrottledLog = ThrottledLog::every_10s();
static API_LOG: ThrottledLog = ThrottledLog::every_10s();

/// Why a TokenReview call produced no verdict.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("TokenReview API call failed: {0}")]
    Api(#[from] kube::Error),
    #[error("TokenReview API call took longer than {0:?}")]
    Timeout(Duration),
}

/// Why a token proves no identity (the reason the client's AuthFailed is logged with).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("token longer than {MAX_TOKEN_BYTES} bytes")]
    TooLong,
    #[error("token is not UTF-8")]
    NotUtf8,
    #[error("TokenReview answered without a status")]
    NoStatus,
    #[error("not authenticated")]
    NotAuthenticated,
    #[error("not authenticated: {0}")]
    NotAuthenticatedBecause(String),
    #[error("the token is not for audience {AUDIENCE:?}")]
    WrongAudience,
    #[error("authenticated without a user")]
    NoUser,
    #[error("{0:?} is not a service account")]
    NotServiceAccount(String),
    #[error("malformed service account name {0:?}")]
    MalformedServiceAccount(String),
    #[error("the token of {0} is not bound to a pod (use a projected ServiceAccount token)")]
    NotBoundToPod(String),
    #[error("malformed identity {ns:?}/{sa:?}/{pod:?}")]
    MalformedIdentity { ns: String, sa: String, pod: String },
}

/// Checks `k8s` tokens with TokenReview, with a verdict cache.
pub struct TokenReviewer {
    api: Api<TokenReview>,
    cache: Mutex<HashMap<[u8; 32], Cached>>,
    in_flight: Semaphore,
    metrics: Arc<Metrics>,
}

struct Cached {
    /// The identity, or why the token was refused.
    verdict: Result<Id, Refusal>,
    until: Instant,
}

impl TokenReviewer {
    /// A reviewer talking to the API server `client` reaches.
    pub fn new(client: kube::Client, metrics: Arc<Metrics>) -> Self {
        TokenReviewer {
            api: Api::all(client),
            cache: Mutex::new(HashMap::new()),
            in_flight: Semaphore::new(MAX_CONCURRENT_REVIEWS),
            metrics,
        }
    }

    /// The verdict on `token`: the identity it proves, a refusal, or (API trouble) neither.
    pub async fn review(&self, token: &[u8]) -> IdentityVerdict {
        let verdict = self.review_uncounted(token).await;
        let result = match &verdict {
            IdentityVerdict::Accepted(_) => "accepted",
            IdentityVerdict::Rejected(_) => "rejected",
            IdentityVerdict::Expired => "expired",
            IdentityVerdict::Unavailable(_) => "unavailable",
        };
        self.metrics
            .k8s_auth
            .get_or_create(&[("result", result)])
            .inc();
        verdict
    }

    async fn review_uncounted(&self, token: &[u8]) -> IdentityVerdict {
        if token.len() > MAX_TOKEN_BYTES {
            return IdentityVerdict::Rejected(Refusal::TooLong.to_string());
        }
        let Ok(token) = std::str::from_utf8(token) else {
            return IdentityVerdict::Rejected(Refusal::NotUtf8.to_string());
        };
        // Proves nothing now whatever TokenReview would say; no call needed to ignore it.
        if token_exp(token).is_some_and(|exp| exp <= now_unix()) {
            return IdentityVerdict::Expired;
        }
        let key = sha256(token.as_bytes());
        if let Some(verdict) = self.cached(&key) {
            self.metrics.k8s_token_review_cache_hits.inc();
            return verdict;
        }
        let Ok(_permit) = self.in_flight.acquire().await else {
            return IdentityVerdict::Unavailable("shutting down".into());
        };
        // Another connection may have asked while this one waited.
        if let Some(verdict) = self.cached(&key) {
            self.metrics.k8s_token_review_cache_hits.inc();
            return verdict;
        }
        let started = Instant::now();
        let outcome = match tokio::time::timeout(REVIEW_TIMEOUT, self.call(token)).await {
            Ok(Ok(review)) => Ok(review),
            Ok(Err(e)) => Err(ReviewError::Api(e)),
            Err(_) => Err(ReviewError::Timeout(REVIEW_TIMEOUT)),
        };
        self.metrics
            .k8s_token_review_seconds
            .observe(started.elapsed().as_secs_f64());
        let review = match outcome {
            Ok(review) => review,
            Err(e) => {
                self.metrics
                    .k8s_token_reviews
                    .get_or_create(&[("result", "error")])
                    .inc();
                if let Some(suppressed) = API_LOG.admit() {
                    tracing::warn!(
                        error = %e, similar_lines_suppressed = suppressed,
                        "cannot check a k8s token with the TokenReview API; closing the client's \
                         connection so that it retries (check the API server, and that this \
                         member's ServiceAccount may create tokenreviews: system:auth-delegator)"
                    );
                }
                return IdentityVerdict::Unavailable(e.to_string());
            }
        };
        let verdict = identity_of(&review);
        self.metrics
            .k8s_token_reviews
            .get_or_create(&[(
                "result",
                if verdict.is_ok() {
                    "authenticated"
                } else {
                    "refused"
                },
            )])
            .inc();
        if let Some(ttl) = cache_ttl(token, now_unix()) {
            self.remember(key, verdict.clone(), ttl);
        }
        match verdict {
            Ok(id) => IdentityVerdict::Accepted(id),
            Err(reason) => IdentityVerdict::Rejected(reason.to_string()),
        }
    }

    async fn call(&self, token: &str) -> Result<TokenReview, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: Some(vec![AUDIENCE.to_owned()]),
            },
            ..TokenReview::default()
        };
        self.api.create(&PostParams::default(), &review).await
    }

    fn cached(&self, key: &[u8; 32]) -> Option<IdentityVerdict> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let entry = cache.get(key).filter(|c| c.until > Instant::now())?;
        Some(match &entry.verdict {
            Ok(id) => IdentityVerdict::Accepted(id.clone()),
            Err(reason) => IdentityVerdict::Rejected(format!("{reason} (cached verdict)")),
        })
    }

    fn remember(&self, key: [u8; 32], verdict: Result<Id, Refusal>, ttl: Duration) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if cache.len() >= MAX_CACHE_ENTRIES {
            cache.retain(|_, c| c.until > now);
        }
        if cache.len() >= MAX_CACHE_ENTRIES
            && let Some(victim) = cache.keys().next().copied()
        {
            cache.remove(&victim);
        }
        cache.insert(
            key,
            Cached {
                verdict,
                until: now + ttl,
            },
        );
    }
}

/// Logs a refused token (rate-limited: anyone can send tokens).
pub fn log_rejected(peer: std::net::SocketAddr, reason: &str) {
    if let Some(suppressed) = REJECT_LOG.admit() {
        tracing::info!(
            %peer, reason, similar_lines_suppressed = suppressed,
            "k8s token refused (TokenReview); answering AuthFailed and closing the connection"
        );
    }
}

/// The identity a TokenReview answer proves, or why it proves none.
pub fn identity_of(review: &TokenReview) -> Result<Id, Refusal> {
    let status = review.status.as_ref().ok_or(Refusal::NoStatus)?;
    if status.authenticated != Some(true) {
        return Err(match &status.error {
            Some(e) if !e.is_empty() => Refusal::NotAuthenticatedBecause(e.clone()),
            _ => Refusal::NotAuthenticated,
        });
    }
    // The authenticator says which of our audiences the token is valid for; none means the
    // token was issued for someone else.
    if !status
        .audiences
        .as_ref()
        .is_some_and(|a| a.iter().any(|a| a == AUDIENCE))
    {
        return Err(Refusal::WrongAudience);
    }
    let user = status.user.as_ref().ok_or(Refusal::NoUser)?;
    identity_of_user(user).map(|id| Id::new(K8S_SCHEME, id))
}

/// `NS/SA/POD` of a service account token bound to a pod.
fn identity_of_user(user: &UserInfo) -> Result<String, Refusal> {
    let username = user.username.as_deref().unwrap_or_default();
    let Some(rest) = username.strip_prefix("system:serviceaccount:") else {
        return Err(Refusal::NotServiceAccount(username.into()));
    };
    let Some((ns, sa)) = rest.split_once(':') else {
        return Err(Refusal::MalformedServiceAccount(username.into()));
    };
    let pod = user
        .extra
        .as_ref()
        .and_then(|e| e.get(POD_NAME_KEY))
        .and_then(|v| v.first())
        .map(String::as_str)
        .unwrap_or_default();
    if pod.is_empty() {
        return Err(Refusal::NotBoundToPod(username.into()));
    }
    let name_ok = |s: &str| !s.is_empty() && !s.contains(['/', ':']);
    if !name_ok(ns) || !name_ok(sa) || !name_ok(pod) {
        return Err(Refusal::MalformedIdentity {
            ns: ns.into(),
            sa: sa.into(),
            pod: pod.into(),
        });
    }
    Ok(format!("{ns}/{sa}/{pod}"))
}

/// How long a verdict on `token` may be cached at `now` (seconds since the epoch): until its
/// `exp`, at most [`MAX_CACHE_TTL`]; `None` when it has expired or has no readable `exp`.
pub fn cache_ttl(token: &str, now: u64) -> Option<Duration> {
    let exp = token_exp(token)?;
    let left = exp.checked_sub(now).filter(|&s| s > 0)?;
    Some(Duration::from_secs(left).min(MAX_CACHE_TTL))
}

/// The `exp` claim of a JWT, unverified.
fn token_exp(token: &str) -> Option<u64> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims.get("exp")?.as_u64()
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::TokenReviewStatus;
    use std::collections::BTreeMap;

    fn jwt(claims: &str) -> String {
        let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.sig", enc(r#"{"alg":"RS256"}"#), enc(claims))
    }

    fn review(authenticated: bool, username: &str, pod: Option<&str>, aud: &[&str]) -> TokenReview {
        let extra = pod.map(|p| BTreeMap::from([(POD_NAME_KEY.to_owned(), vec![p.to_owned()])]));
        TokenReview {
            status: Some(TokenReviewStatus {
                authenticated: Some(authenticated),
                audiences: Some(aud.iter().map(|a| a.to_string()).collect()),
                user: Some(UserInfo {
                    username: Some(username.into()),
                    extra,
                    ..UserInfo::default()
                }),
                error: None,
            }),
            ..TokenReview::default()
        }
    }

    #[test]
    fn identities_from_reviews() {
        let sa = "system:serviceaccount:team:web";
        assert_eq!(
            identity_of(&review(true, sa, Some("web-0"), &["baton"])),
            Ok(Id::new("k8s", "team/web/web-0"))
        );
        for (bad, why) in [
            (
                review(false, sa, Some("web-0"), &["baton"]),
                "not authenticated",
            ),
            (
                review(true, sa, Some("web-0"), &["other"]),
                r#"the token is not for audience "baton""#,
            ),
            (
                review(true, sa, Some("web-0"), &[]),
                r#"the token is not for audience "baton""#,
            ),
            (
                review(true, sa, None, &["baton"]),
                "the token of system:serviceaccount:team:web is not bound to a pod \
                 (use a projected ServiceAccount token)",
            ),
            (
                review(true, "alice", Some("web-0"), &["baton"]),
                r#""alice" is not a service account"#,
            ),
            (
                review(true, "system:serviceaccount:team", Some("p"), &["baton"]),
                r#"malformed service account name "system:serviceaccount:team""#,
            ),
            (
                review(
                    true,
                    "system:serviceaccount:te/am:web",
                    Some("p"),
                    &["baton"],
                ),
                r#"malformed identity "te/am"/"web"/"p""#,
            ),
            (
                TokenReview::default(),
                "TokenReview answered without a status",
            ),
        ] {
            let refusal = identity_of(&bad).expect_err("refused");
            assert_eq!(refusal.to_string(), why, "{bad:?}");
        }
    }

    #[test]
    fn cache_lifetimes_follow_exp() {
        let now = 1_800_000_000;
        assert_eq!(
            cache_ttl(&jwt(&format!(r#"{{"exp":{}}}"#, now + 60)), now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            cache_ttl(&jwt(&format!(r#"{{"exp":{}}}"#, now + 86_400)), now),
            Some(MAX_CACHE_TTL)
        );
        assert_eq!(cache_ttl(&jwt(&format!(r#"{{"exp":{now}}}"#)), now), None);
        assert_eq!(cache_ttl(&jwt(r#"{"sub":"x"}"#), now), None);
        assert_eq!(cache_ttl("tok-a", now), None);
        assert_eq!(cache_ttl("a.!!!.c", now), None);
    }
}
