//! The `k8s` auth scheme: a projected ServiceAccount token (audience `baton`) checked with the
//! Kubernetes TokenReview API, so a deleted pod's token, another audience's or a forged one is
//! refused. Runs in the connection task (network I/O never touches the core thread); the core
//! gets the verdict in the session's order (`CoreMsg::Identity`).
//!
//! Verdicts are cached by the token's SHA-256 (`verdict_cache.rs`): an accepted one until the
//! token's `exp` (read from the JWT payload without trusting it for anything else), at most
//! `MAX_TRUST`; a refused one for `REFUSED_TTL`, apart from the accepted, so junk never pushes
//! a pod's identity out. A token without an `exp` is refused without a call: every projected
//! (pod-bound) token has one. An API failure is never cached and never accepted.
//!
//! Calls in flight are bounded in all ([`MAX_CONCURRENT_REVIEWS`]) and per client address
//! ([`MAX_REVIEWS_PER_ADDRESS`]): one address sending tokens nobody cached waits for its own
//! slots and never takes every one.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use baton_machine::tenancy::K8S_SCHEME;
use baton_proto::Id;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use kube::api::{Api, PostParams};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::verdict_cache::{
    DEFAULT_ACCEPTED_ENTRIES, DEFAULT_REFUSED_ENTRIES, MAX_TRUST, Remembered, TokenKey,
    VerdictCache,
};
use crate::core::{IdentityVerdict, ThrottledLog};
use crate::metrics::Metrics;

/// The audience the sidecar's projected token is issued for.
pub const AUDIENCE: &str = "baton";
/// TokenReview calls in flight at most; more wait (their connections are not read meanwhile).
pub const MAX_CONCURRENT_REVIEWS: usize = 16;
/// TokenReview calls in flight at most for one client address: a pod reviews one token per
/// connection it opens, and more from one address wait for its own slots, not everyone's.
pub const MAX_REVIEWS_PER_ADDRESS: usize = 4;
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
    #[error("not a projected ServiceAccount token: no `exp` claim (refused without a TokenReview)")]
    NoExpiry,
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
    cache: Mutex<VerdictCache>,
    in_flight: Semaphore,
    per_address: AddressSlots,
    metrics: Arc<Metrics>,
}

/// How many verdicts the reviewer keeps (`--k8s-verdict-cache-entries`, a test knob).
#[derive(Debug, Clone, Copy)]
pub struct CacheSize {
    pub accepted: usize,
    pub refused: usize,
}

impl Default for CacheSize {
    fn default() -> Self {
        CacheSize {
            accepted: DEFAULT_ACCEPTED_ENTRIES,
            refused: DEFAULT_REFUSED_ENTRIES,
        }
    }
}

impl TokenReviewer {
    /// A reviewer talking to the API server `client` reaches.
    pub fn new(client: kube::Client, metrics: Arc<Metrics>, cache: CacheSize) -> Self {
        TokenReviewer {
            api: Api::all(client),
            cache: Mutex::new(VerdictCache::new(cache.accepted, cache.refused)),
            in_flight: Semaphore::new(MAX_CONCURRENT_REVIEWS),
            per_address: AddressSlots::new(MAX_REVIEWS_PER_ADDRESS),
            metrics,
        }
    }

    /// The verdict on `token` sent from `from`: the identity it proves, a refusal, or (API
    /// trouble) neither.
    pub async fn review(&self, token: &[u8], from: IpAddr) -> IdentityVerdict {
        let verdict = self.review_uncounted(token, from).await;
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

    async fn review_uncounted(&self, token: &[u8], from: IpAddr) -> IdentityVerdict {
        if token.len() > MAX_TOKEN_BYTES {
            return IdentityVerdict::Rejected(Refusal::TooLong.to_string());
        }
        let Ok(token) = std::str::from_utf8(token) else {
            return IdentityVerdict::Rejected(Refusal::NotUtf8.to_string());
        };
        // Every token that can prove an identity (bound to a pod) has an `exp`: one without
        // is junk, refused without a call.
        let Some(exp) = token_exp(token) else {
            return IdentityVerdict::Rejected(Refusal::NoExpiry.to_string());
        };
        // Proves nothing now whatever TokenReview would say; no call needed to ignore it.
        if exp <= now_unix() {
            return IdentityVerdict::Expired;
        }
        let key = sha256(token.as_bytes());
        if let Some(verdict) = self.cached(&key) {
            self.metrics.k8s_token_review_cache_hits.inc();
            return verdict;
        }
        // This address's slot first, then one of all: an address whose calls are slow (or
        // that sends many tokens) waits on its own slots.
        let Some(_address_slot) = self.per_address.acquire(from).await else {
            return IdentityVerdict::Unavailable("shutting down".into());
        };
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
        self.remember(key, &verdict, cache_ttl(token, now_unix()));
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

    fn cached(&self, key: &TokenKey) -> Option<IdentityVerdict> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        Some(match cache.get(key, Instant::now())? {
            Remembered::Accepted(id) => IdentityVerdict::Accepted(id),
            Remembered::Refused(reason) => {
                IdentityVerdict::Rejected(format!("{reason} (cached verdict)"))
            }
        })
    }

    /// Caches a verdict: an accepted one for `valid_for` (until the token's `exp`; not at all
    /// without one), a refused one whatever its `exp`.
    fn remember(&self, key: TokenKey, verdict: &Result<Id, Refusal>, valid_for: Option<Duration>) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match verdict {
            Ok(id) => {
                if let Some(valid_for) = valid_for {
                    cache.accept(key, id.clone(), valid_for, now);
                }
            }
            Err(reason) => cache.refuse(key, reason.clone(), now),
        }
    }
}

/// Review slots per client address: at most `per_address` calls in flight for one address.
/// An address's entry lives while someone holds or waits for one of its slots.
struct AddressSlots {
    per_address: usize,
    slots: Mutex<HashMap<IpAddr, Arc<Semaphore>>>,
}

/// One address's review slot (or the wait for one); gives it back, and forgets the address
/// once nobody holds or waits for its slots, when dropped.
struct AddressSlot<'a> {
    owner: &'a AddressSlots,
    address: IpAddr,
    semaphore: Option<Arc<Semaphore>>,
    permit: Option<OwnedSemaphorePermit>,
}

impl AddressSlots {
    fn new(per_address: usize) -> Self {
        AddressSlots {
            per_address,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for a slot of `address`; `None` only if the semaphore was closed.
    async fn acquire(&self, address: IpAddr) -> Option<AddressSlot<'_>> {
        // One client on a dual-stack listener (`::ffff:a.b.c.d`) and on an IPv4 one is one
        // address.
        let address = address.to_canonical();
        let semaphore = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots
                .entry(address)
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_address)))
                .clone()
        };
        // The guard exists before the wait, so a connection dropped while waiting cleans up.
        let mut slot = AddressSlot {
            owner: self,
            address,
            semaphore: Some(semaphore.clone()),
            permit: None,
        };
        slot.permit = Some(semaphore.acquire_owned().await.ok()?);
        Some(slot)
    }

    /// Addresses with a slot held or awaited (for tests).
    #[cfg(test)]
    fn addresses(&self) -> usize {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for AddressSlot<'_> {
    fn drop(&mut self) {
        self.permit.take();
        self.semaphore.take();
        let mut slots = self.owner.slots.lock().unwrap_or_else(|e| e.into_inner());
        // Only the map's own reference left: nobody holds or awaits this address's slots.
        if slots
            .get(&self.address)
            .is_some_and(|s| Arc::strong_count(s) == 1)
        {
            slots.remove(&self.address);
        }
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

/// How long an accepted verdict on `token` may be cached at `now` (seconds since the epoch):
/// until its `exp`, at most `MAX_TRUST`; `None` when it has expired or has no readable `exp`.
pub fn cache_ttl(token: &str, now: u64) -> Option<Duration> {
    let exp = token_exp(token)?;
    let left = exp.checked_sub(now).filter(|&s| s > 0)?;
    Some(Duration::from_secs(left).min(MAX_TRUST))
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
            Some(MAX_TRUST)
        );
        assert_eq!(cache_ttl(&jwt(&format!(r#"{{"exp":{now}}}"#)), now), None);
        assert_eq!(cache_ttl(&jwt(r#"{"sub":"x"}"#), now), None);
        assert_eq!(cache_ttl("tok-a", now), None);
        assert_eq!(cache_ttl("a.!!!.c", now), None);
    }

    #[tokio::test]
    async fn one_address_never_holds_more_than_its_slots() {
        let slots = AddressSlots::new(2);
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let first = slots.acquire(a).await.expect("a slot");
        let second = slots.acquire(a).await.expect("a slot");
        // A third for the same address waits; another address goes ahead.
        let mut third = Box::pin(slots.acquire(a));
        assert!(futures::poll!(third.as_mut()).is_pending());
        let other = slots.acquire(b).await.expect("b's own slot");
        // The same address written as IPv4-mapped IPv6 shares a's slots.
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("an address");
        let mut same = Box::pin(slots.acquire(mapped));
        assert!(futures::poll!(same.as_mut()).is_pending());
        drop(same);
        drop(first);
        let third = third.await.expect("a's freed slot");
        drop((second, third, other));
        assert_eq!(slots.addresses(), 0, "idle addresses are forgotten");
        // A wait given up (its connection closed) is forgotten too.
        let held = slots.acquire(a).await.expect("a slot");
        let held2 = slots.acquire(a).await.expect("a slot");
        let mut waiting = Box::pin(slots.acquire(a));
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        drop(waiting);
        drop((held, held2));
        assert_eq!(slots.addresses(), 0);
    }
}
