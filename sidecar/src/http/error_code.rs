//! Every error code of the HTTP API (`{"error": {"code", "message"}}`), its status and what it
//! means: one list, which the handlers answer with and the docs' API reference is made from.

use hyper::StatusCode;

macro_rules! error_codes {
    ($($code:ident $status:ident $meaning:literal,)*) => {
        /// A stable, machine-readable error code; each has one HTTP status.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $(#[doc = $meaning] $code,)*
        }

        impl ErrorCode {
            /// Every code, in the order the reference lists them.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$code,)*];

            /// The code as the JSON answer spells it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$code => stringify!($code),)*
                }
            }

            /// The status every answer with this code has.
            pub fn status(self) -> StatusCode {
                match self {
                    $(ErrorCode::$code => StatusCode::$status,)*
                }
            }

            /// What the code means, for people.
            pub fn meaning(self) -> &'static str {
                match self {
                    $(ErrorCode::$code => $meaning,)*
                }
            }
        }
    };
}

error_codes! {
    NotFound NOT_FOUND "No endpoint has this path.",
    MethodNotAllowed METHOD_NOT_ALLOWED "The path does not take this method; the `Allow` header lists those it takes.",
    ProbePortReadOnly FORBIDDEN "On `--probe-listen`, which answers only `GET /healthz`, `/readyz`, `/leader[/NAME]/ready` and `/metrics`.",
    PayloadTooLarge PAYLOAD_TOO_LARGE "The request has a body larger than the API takes: parameters go in the query string.",
    BadBody BAD_REQUEST "The request body could not be read.",
    InvalidName BAD_REQUEST "The election, lock, semaphore or barrier name in the path is not a valid name.",
    UnknownParameter BAD_REQUEST "A query parameter the endpoint does not take (a typo is refused, never ignored).",
    DuplicateParameter BAD_REQUEST "A query parameter given more than once.",
    InvalidQuery BAD_REQUEST "The query string is not valid percent-encoded UTF-8.",
    InvalidDuration BAD_REQUEST "A duration parameter (`wait`, `ttl`) is not a duration (`500ms`, `30s`, `1m30s`) or is out of its range.",
    InvalidToken BAD_REQUEST "`token` is not an integer (the fencing token of a grant or a leader).",
    MissingToken BAD_REQUEST "`renew` or `DELETE` without the grant's `token`.",
    InvalidMode BAD_REQUEST "`mode` is not `exclusive`, `read` or `write`.",
    InvalidHold BAD_REQUEST "`hold` is not `lease` or `stream`.",
    TtlWithStream BAD_REQUEST "`ttl` with `hold=stream`: a stream hold has no lease.",
    InvalidFollow BAD_REQUEST "`follow` is not `stream`.",
    FollowWithWait BAD_REQUEST "`follow=stream` with `wait` or `token`.",
    MissingPermits BAD_REQUEST "A semaphore acquisition without `permits`.",
    InvalidPermits BAD_REQUEST "`permits` is not a whole number from 1 to 10000.",
    MissingParties BAD_REQUEST "A barrier without `parties`.",
    InvalidParties BAD_REQUEST "`parties` is not a whole number from 1 to 10000.",
    NoElection NOT_FOUND "`/leader` without a name on a sidecar that stands in no election.",
    UnknownElection NOT_FOUND "An election this sidecar does not stand in (`--election`).",
    NotLeader SERVICE_UNAVAILABLE "`/leader[/NAME]/ready` on a pod that does not lead.",
    NotConnected SERVICE_UNAVAILABLE "`/readyz` while the session is not CONNECTED.",
    SessionSuspended SERVICE_UNAVAILABLE "The session is cut off from the ensemble (SUSPENDED): nothing can be granted now.",
    SessionLost SERVICE_UNAVAILABLE "The session expired (LOST); a new one is being made.",
    ShuttingDown SERVICE_UNAVAILABLE "The sidecar got SIGTERM: no new locks, campaigns or barriers.",
    AppUnhealthy SERVICE_UNAVAILABLE "The app fails its health checks (`--app-health`): no new locks or campaigns until it is healthy.",
    EnsembleError BAD_GATEWAY "The ensemble answered an error the sidecar cannot turn into one of these.",
    NodeVanished CONFLICT "The node of this pod's grant or candidacy was deleted by someone else.",
    NotGranted CONFLICT "The lock or permit was not granted within `wait` (`wait=0`: at once).",
    AlreadyHeld CONFLICT "This pod already holds the lock or a permit of the semaphore.",
    AcquireInProgress CONFLICT "Another request of this pod is already acquiring the lock or semaphore.",
    NotHeld CONFLICT "`renew` or `DELETE` of a lock or semaphore this pod does not hold.",
    StaleToken CONFLICT "`token` is not the current grant's.",
    LockLost CONFLICT "The grant ended (session lost, lease run out) before this call.",
    StreamHold CONFLICT "`renew` of a stream hold, which has no lease.",
    PermitsMismatch CONFLICT "A pod queued on the semaphore asked for another number of permits.",
    PartiesMismatch CONFLICT "The earliest party waiting at the barrier asked for another number of parties.",
    NotPassed CONFLICT "The barrier did not fill within `wait`.",
    CampaignInProgress CONFLICT "This pod already has a campaign stream open for the election.",
    CandidacyAlways CONFLICT "`campaign` on a sidecar run with `--candidacy always`, which stands by itself.",
    NotSteppingDown CONFLICT "`release` outside a SIGTERM hand-over (`resign` steps down and stands again).",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_statuses_are_errors() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "{} twice", code.as_str());
            assert!(
                code.status().is_client_error() || code.status().is_server_error(),
                "{}",
                code.as_str()
            );
        }
    }
}
