//! The API's contract as data: every endpoint (method and path), the query parameters it takes
//! (type, default, limits), what it answers and the error codes it can answer with.
//!
//! The handlers read their parameters through this table ([`Query::for_endpoint`] refuses a
//! parameter the endpoint does not list; [`Query::duration_of`] and [`Query::count_of`] apply
//! the default and limits written here), so it cannot say something the API does not do. The
//! documentation's route reference and the OpenAPI document (`sidecar/openapi.yaml`) are made
//! from it by `cargo run -p baton-docs`.
//!
//! [`Query::for_endpoint`]: super::Query::for_endpoint
//! [`Query::duration_of`]: super::Query::duration_of
//! [`Query::count_of`]: super::Query::count_of

use std::time::Duration;

use super::error_code::ErrorCode;
use ErrorCode::*;

/// Longest accepted `wait` for long-polls and acquisitions.
pub const MAX_WAIT: Duration = Duration::from_secs(600);
/// Default `wait` for a lock or semaphore acquisition.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(10);
/// Default `wait` at a barrier.
pub const DEFAULT_BARRIER_WAIT: Duration = Duration::from_secs(60);
/// Default lease of an HTTP lock or permit.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// Shortest accepted lease.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// Longest accepted lease: a lock is an application's, not a reservation for a day.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Most holders a semaphore may have, and most parties a barrier may wait for.
pub const MAX_PERMITS: u32 = 10_000;

/// What a query parameter's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// A duration (`500ms`, `30s`, `1m30s`) from `min` to `max`; `default` when absent
    /// (`None`: absent means "not given", e.g. a renew keeps the grant's ttl).
    Duration {
        default: Option<Duration>,
        min: Duration,
        max: Duration,
    },
    /// A whole number from `min` to `max`.
    Count { min: u32, max: u32 },
    /// A fencing token: a signed 64-bit integer.
    Token,
    /// One of these words; the first is the default unless `required` says otherwise.
    Choice(&'static [&'static str]),
    /// Free text (compared, never parsed).
    Text,
}

/// One query parameter of an endpoint. An endpoint lists its parameters in the order its
/// handler checks them (the first refusal is the answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    pub name: &'static str,
    pub kind: ParamKind,
    /// Whether the endpoint refuses a request without it.
    pub required: bool,
    /// The error code a missing required parameter is refused with.
    pub missing: Option<ErrorCode>,
    /// The error code a value that is not of its kind (or out of range) is refused with.
    pub invalid: ErrorCode,
    pub doc: &'static str,
}

/// The media type of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    /// `application/json` of the named [`Schema`].
    Json(&'static str),
    /// `text/event-stream` carrying these events.
    EventStream(&'static [Event]),
    /// Prometheus/OpenMetrics text.
    OpenMetrics,
    /// A JSON document described elsewhere (the OpenAPI document itself).
    AnyJson,
}

/// One event of a `text/event-stream` answer: its `event:` name and the [`Schema`] of its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub name: &'static str,
    pub schema: &'static str,
    pub doc: &'static str,
}

/// A successful answer (errors are the endpoint's `errors`, each with its code's status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub content: Content,
    pub doc: &'static str,
}

/// One endpoint: a method on a path pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The route's fixed name (`Route::label`, the `route` label of the request metric).
    pub id: &'static str,
    pub method: &'static str,
    /// The path, `{name}` standing for the election, lock, semaphore or barrier name.
    pub path: &'static str,
    /// Whether `{name}` may be left out with the `/{name}` segment before it (the first
    /// `--election`): `/leader` is `/leader/{name}` for the default election.
    pub default_name: bool,
    pub summary: &'static str,
    pub doc: &'static str,
    pub params: &'static [Param],
    pub answers: &'static [Answer],
    /// The codes this endpoint can answer with, beyond [`COMMON_ERRORS`].
    pub errors: &'static [ErrorCode],
    /// Also served on `--probe-listen` (the pod IP).
    pub probe: bool,
}

impl Endpoint {
    /// The parameter called `name`.
    pub fn param(&self, name: &str) -> Option<&'static Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// Every code this endpoint can answer with: [`COMMON_ERRORS`] (those of the router and the
    /// query parser that apply to it), then its own.
    pub fn all_errors(&self) -> Vec<ErrorCode> {
        let mut codes: Vec<ErrorCode> = COMMON_ERRORS
            .iter()
            .copied()
            .filter(|c| *c != InvalidName || self.path.contains("{name}"))
            .filter(|c| *c != DuplicateParameter || !self.params.is_empty())
            .collect();
        for code in self.errors {
            if !codes.contains(code) {
                codes.push(*code);
            }
        }
        codes
    }
}

/// Codes any endpoint can answer with: the router's, the query parser's and the body's.
/// (`InvalidName` only where the path has a name; `DuplicateParameter` only where it takes
/// parameters.)
pub const COMMON_ERRORS: &[ErrorCode] = &[
    MethodNotAllowed,
    ProbePortReadOnly,
    PayloadTooLarge,
    BadBody,
    InvalidName,
    UnknownParameter,
    DuplicateParameter,
    InvalidQuery,
];

/// The field types a [`Schema`] uses: `string`, `integer`, `boolean`, `date-time` (RFC 3339
/// text), `state` (`CONNECTED`, `SUSPENDED`, `LOST`), `mode` (`exclusive`, `read`, `write`,
/// `permit`), `hold` (`lease`, `stream`), `Name` (another schema), `[T]` (an array of T);
/// a trailing `?` means it may be `null`, a leading `~` that it may be absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub ty: &'static str,
    pub doc: &'static str,
}

/// A JSON object the API answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schema {
    pub name: &'static str,
    pub doc: &'static str,
    pub fields: &'static [Field],
}

const fn f(name: &'static str, ty: &'static str, doc: &'static str) -> Field {
    Field { name, ty, doc }
}

const fn ok(content: Content, doc: &'static str) -> Answer {
    Answer {
        status: 200,
        content,
        doc,
    }
}

// ---- Parameters -------------------------------------------------------------------------

const fn wait(default: Duration, doc: &'static str) -> Param {
    Param {
        name: "wait",
        kind: ParamKind::Duration {
            default: Some(default),
            min: Duration::ZERO,
            max: MAX_WAIT,
        },
        required: false,
        missing: None,
        invalid: InvalidDuration,
        doc,
    }
}

/// `wait` of `GET /leader`: 0 answers at once.
pub const LEADER_WAIT: Param = wait(
    Duration::ZERO,
    "With `token`: how long to wait for the leader to differ from that token before answering \
     (0: answer at once).",
);
/// `wait` of `GET /members`.
pub const MEMBERS_WAIT: Param = wait(
    Duration::ZERO,
    "With `version`: how long to wait for a member to come or go before answering (0: answer at \
     once).",
);
/// `wait` of a lock or semaphore acquisition.
pub const LOCK_WAIT: Param = wait(
    DEFAULT_LOCK_WAIT,
    "How long to queue before giving up with 409 `NotGranted` (0: try once).",
);
/// `wait` at a barrier.
pub const BARRIER_WAIT: Param = wait(
    DEFAULT_BARRIER_WAIT,
    "How long to wait for the other parties before giving up with 409 `NotPassed`.",
);
/// `ttl` of an acquisition: the lease.
pub const TTL: Param = Param {
    name: "ttl",
    kind: ParamKind::Duration {
        default: Some(DEFAULT_TTL),
        min: MIN_TTL,
        max: MAX_TTL,
    },
    required: false,
    missing: None,
    invalid: InvalidDuration,
    doc: "The lease: the sidecar releases the grant when it runs out without a renew. Not with \
          `hold=stream` (400 `TtlWithStream`).",
};
/// `ttl` of a renew: absent keeps the grant's own.
pub const RENEW_TTL: Param = Param {
    name: "ttl",
    kind: ParamKind::Duration {
        default: None,
        min: MIN_TTL,
        max: MAX_TTL,
    },
    required: false,
    missing: None,
    invalid: InvalidDuration,
    doc: "The new lease, from now; absent: the grant's own ttl again.",
};
/// `token` of a renew or release: the grant's fencing token.
pub const GRANT_TOKEN: Param = Param {
    name: "token",
    kind: ParamKind::Token,
    required: true,
    missing: Some(MissingToken),
    invalid: InvalidToken,
    doc: "The fencing token of the grant (the `token` of the acquisition's answer).",
};
/// `token` of `GET /leader`: the leader's token the caller knows.
pub const LEADER_TOKEN: Param = Param {
    name: "token",
    kind: ParamKind::Token,
    required: false,
    missing: None,
    invalid: InvalidToken,
    doc: "The fencing token of the leader the caller knows (default 0: none); with `wait`, the \
          call answers once the leader's token differs.",
};
/// `follow` of `GET /leader`.
pub const FOLLOW: Param = Param {
    name: "follow",
    kind: ParamKind::Choice(&["stream"]),
    required: false,
    missing: None,
    invalid: InvalidFollow,
    doc: "`stream`: answer with a `text/event-stream` of the leader's changes instead of one \
          answer. Not with `wait` or `token` (400 `FollowWithWait`).",
};
/// `mode` of a lock acquisition.
pub const MODE: Param = Param {
    name: "mode",
    kind: ParamKind::Choice(&["exclusive", "read", "write"]),
    required: false,
    missing: None,
    invalid: InvalidMode,
    doc: "`exclusive` (default), or `read`/`write` for a read/write lock (readers share; a \
          reader waits only for earlier writers).",
};
/// `hold` of an acquisition.
pub const HOLD: Param = Param {
    name: "hold",
    kind: ParamKind::Choice(&["lease", "stream"]),
    required: false,
    missing: None,
    invalid: InvalidHold,
    doc: "`lease` (default): held until released or the `ttl` runs out; `stream`: held while \
          the app keeps this connection open, answered with a `text/event-stream`.",
};
const fn permits(required: bool, missing: Option<ErrorCode>, doc: &'static str) -> Param {
    Param {
        name: "permits",
        kind: ParamKind::Count {
            min: 1,
            max: MAX_PERMITS,
        },
        required,
        missing,
        invalid: InvalidPermits,
        doc,
    }
}
/// `permits` of a semaphore acquisition.
pub const PERMITS: Param = permits(
    true,
    Some(MissingPermits),
    "How many pods may hold the semaphore at once (the same on every pod: a pod queued with \
     another number is refused with 409 `PermitsMismatch`).",
);
/// `permits` of a semaphore inspection.
pub const INSPECT_PERMITS: Param = permits(
    false,
    None,
    "The semaphore's number of permits; absent: this pod's grant's, else the one the queued \
     pods carry.",
);
/// `parties` of a barrier.
pub const PARTIES: Param = Param {
    name: "parties",
    kind: ParamKind::Count {
        min: 1,
        max: MAX_PERMITS,
    },
    required: true,
    missing: Some(MissingParties),
    invalid: InvalidParties,
    doc: "How many pods must enter before any passes (the earliest waiting party's number \
          rules: another is refused with 409 `PartiesMismatch`).",
};
/// `version` of `GET /members`.
pub const VERSION: Param = Param {
    name: "version",
    kind: ParamKind::Text,
    required: false,
    missing: None,
    invalid: InvalidQuery,
    doc: "The `version` of an earlier answer: while it is still the current one, the call waits \
          up to `wait` for a change.",
};

// ---- Stream events ----------------------------------------------------------------------

const SUSPENDED: Event = Event {
    name: "suspended",
    schema: "SessionChange",
    doc: "The session is cut off from the ensemble: what is held stands until `validUntil`.",
};
const RESUMED: Event = Event {
    name: "resumed",
    schema: "SessionChange",
    doc: "The same session reconnected: nothing was lost.",
};
const CONNECTED: Event = Event {
    name: "connected",
    schema: "SessionChange",
    doc: "A new session (after `lost`).",
};
const SESSION_LOST: Event = Event {
    name: "lost",
    schema: "SessionChange",
    doc: "The session expired.",
};
const STEPPING_DOWN: Event = Event {
    name: "stepping-down",
    schema: "SteppingDown",
    doc: "SIGTERM while this pod leads: it leads on until `POST /leader/{name}/release` or \
          `releaseBy`.",
};

const LEADER_EVENTS: &[Event] = &[
    Event {
        name: "leader",
        schema: "Leader",
        doc: "The `GET /leader` answer: at once, then on every change.",
    },
    SUSPENDED,
    RESUMED,
    SESSION_LOST,
    CONNECTED,
    STEPPING_DOWN,
];

const HOLD_EVENTS: &[Event] = &[
    Event {
        name: "granted",
        schema: "Grant",
        doc: "The grant (`hold: \"stream\"`, no `expiresAt`), first.",
    },
    SUSPENDED,
    RESUMED,
    Event {
        name: "lost",
        schema: "GrantEnded",
        doc: "The grant ended (`reason`: `session lost`, `app unhealthy`); the stream ends.",
    },
    Event {
        name: "released",
        schema: "GrantEnded",
        doc: "Released (`reason`: `released` by a DELETE, `shutdown`); the stream ends.",
    },
];

const CAMPAIGN_EVENTS: &[Event] = &[
    Event {
        name: "candidate",
        schema: "Candidate",
        doc: "Queued in the election, not leading.",
    },
    Event {
        name: "elected",
        schema: "Elected",
        doc: "This pod leads; `token` is the term's fencing token.",
    },
    Event {
        name: "deposed",
        schema: "Deposed",
        doc: "This pod no longer leads (e.g. `reason`: `app unhealthy`).",
    },
    SUSPENDED,
    RESUMED,
    SESSION_LOST,
    CONNECTED,
    STEPPING_DOWN,
];

const POD_EVENTS: &[Event] = &[
    Event {
        name: "state",
        schema: "State",
        doc: "The session's state: first, then on every change.",
    },
    Event {
        name: "leader",
        schema: "Leader",
        doc: "Per election: first, then on every change.",
    },
    Event {
        name: "granted",
        schema: "Grant",
        doc: "A lock or permit of the app was granted.",
    },
    Event {
        name: "lost",
        schema: "GrantEnded",
        doc: "A grant ended without a release (`reason`).",
    },
    Event {
        name: "released",
        schema: "GrantEnded",
        doc: "A grant was released.",
    },
    STEPPING_DOWN,
];

// ---- Errors shared by families -----------------------------------------------------------

const ELECTION_ERRORS: &[ErrorCode] = &[NoElection, UnknownElection];
const SESSION_ERRORS: &[ErrorCode] = &[SessionSuspended, SessionLost, EnsembleError];

macro_rules! codes {
    ($($part:expr),* $(,)?) => {{
        const N: usize = 0 $(+ $part.len())*;
        const ALL: [ErrorCode; N] = {
            let mut out = [NotFound; N];
            let mut i = 0;
            $(
                let part: &[ErrorCode] = $part;
                let mut j = 0;
                while j < part.len() {
                    out[i] = part[j];
                    i += 1;
                    j += 1;
                }
            )*
            let _ = i;
            out
        };
        &ALL
    }};
}

// ---- The endpoints ----------------------------------------------------------------------

/// Every endpoint, in the order the reference lists them.
pub const ENDPOINTS: &[Endpoint] = &[
    Endpoint {
        id: "leader",
        method: "GET",
        path: "/leader/{name}",
        default_name: true,
        summary: "The current leader of an election",
        doc: "Who leads the election and whether this pod does, from a fresh look at the queue. \
              With `wait` and `token`, a long-poll: answers once the leader's token differs \
              from `token` (or `wait` runs out). With `follow=stream`, a `text/event-stream`.",
        params: &[LEADER_WAIT, LEADER_TOKEN, FOLLOW],
        answers: &[
            ok(
                Content::Json("Leader"),
                "The election's leader and this pod's view.",
            ),
            ok(
                Content::EventStream(LEADER_EVENTS),
                "With `follow=stream`: every change, each computed when sent (never older than \
                 the one before); `: keep-alive` comments every 10 s.",
            ),
        ],
        errors: codes!(
            ELECTION_ERRORS,
            &[InvalidDuration, InvalidToken, InvalidFollow, FollowWithWait]
        ),
        probe: false,
    },
    Endpoint {
        id: "leader_ready",
        method: "GET",
        path: "/leader/{name}/ready",
        default_name: true,
        summary: "Whether this pod leads (a readiness probe)",
        doc: "200 on the leader, 503 `NotLeader` elsewhere (and while the sidecar shuts down): \
              the app container's readinessProbe, so a Service routes only to the leader. On \
              the probe port the answer is the status only.",
        params: &[],
        answers: &[ok(
            Content::Json("Ready"),
            "This pod leads. On the probe port only `election` and `isLeader`.",
        )],
        errors: codes!(ELECTION_ERRORS, &[NotLeader]),
        probe: true,
    },
    Endpoint {
        id: "leader_resign",
        method: "POST",
        path: "/leader/{name}/resign",
        default_name: true,
        summary: "Step down and stand again",
        doc: "Leaves the election and queues again at the back.",
        params: &[],
        answers: &[ok(
            Content::Json("Resigned"),
            "`resigned`: whether this pod led.",
        )],
        errors: codes!(ELECTION_ERRORS, SESSION_ERRORS, &[NodeVanished]),
        probe: false,
    },
    Endpoint {
        id: "leader_campaign",
        method: "GET",
        path: "/leader/{name}/campaign",
        default_name: true,
        summary: "Stand in the election while this stream is open",
        doc: "With `--candidacy app` only: the pod is a candidate while the app keeps this \
              stream open; when the app's socket closes (a crash closes it) the candidate node \
              is deleted at once. One stream per election per pod.",
        params: &[],
        answers: &[ok(
            Content::EventStream(CAMPAIGN_EVENTS),
            "The candidacy; `: keep-alive` comments every 10 s.",
        )],
        errors: codes!(
            ELECTION_ERRORS,
            &[CandidacyAlways, ShuttingDown, CampaignInProgress]
        ),
        probe: false,
    },
    Endpoint {
        id: "leader_release",
        method: "POST",
        path: "/leader/{name}/release",
        default_name: true,
        summary: "Hand over during shutdown",
        doc: "During SIGTERM's hand-off (after `stepping-down`): resign the election now, for \
              good.",
        params: &[],
        answers: &[ok(Content::Json("LeaderReleased"), "Released.")],
        errors: codes!(ELECTION_ERRORS, &[NotSteppingDown]),
        probe: false,
    },
    Endpoint {
        id: "lock_acquire",
        method: "POST",
        path: "/lock/{name}",
        default_name: false,
        summary: "Acquire a lock",
        doc: "Queues for the lock and answers when it is granted, or 409 `NotGranted` when \
              `wait` runs out (`wait=0` is a try-lock). With `hold=stream`, the grant lasts as \
              long as this connection.",
        params: &[LOCK_WAIT, TTL, HOLD, MODE],
        answers: &[
            ok(Content::Json("Grant"), "Granted, as a lease."),
            ok(
                Content::EventStream(HOLD_EVENTS),
                "With `hold=stream`: granted, held while the connection is open; `: keep-alive` \
                 comments every 10 s. A `wait` that runs out answers 409 as JSON before any \
                 stream starts.",
            ),
        ],
        errors: codes!(
            SESSION_ERRORS,
            &[
                InvalidDuration,
                InvalidMode,
                InvalidHold,
                TtlWithStream,
                ShuttingDown,
                AppUnhealthy,
                NotGranted,
                AlreadyHeld,
                AcquireInProgress,
                NodeVanished,
            ]
        ),
        probe: false,
    },
    Endpoint {
        id: "lock_renew",
        method: "POST",
        path: "/lock/{name}/renew",
        default_name: false,
        summary: "Extend a lock's lease",
        doc: "Extends the lease of this pod's grant.",
        params: &[RENEW_TTL, GRANT_TOKEN],
        answers: &[ok(
            Content::Json("Grant"),
            "The grant with its new `expiresAt`.",
        )],
        errors: codes!(
            SESSION_ERRORS,
            &[
                InvalidDuration,
                MissingToken,
                InvalidToken,
                NotHeld,
                StaleToken,
                LockLost,
                StreamHold
            ]
        ),
        probe: false,
    },
    Endpoint {
        id: "lock_release",
        method: "DELETE",
        path: "/lock/{name}",
        default_name: false,
        summary: "Release a lock",
        doc: "Releases this pod's grant (a stream hold's stream ends with `released`).",
        params: &[GRANT_TOKEN],
        answers: &[ok(Content::Json("LockReleased"), "Released.")],
        errors: codes!(
            SESSION_ERRORS,
            &[MissingToken, InvalidToken, NotHeld, StaleToken, LockLost]
        ),
        probe: false,
    },
    Endpoint {
        id: "lock_inspect",
        method: "GET",
        path: "/lock/{name}",
        default_name: false,
        summary: "Who holds a lock and who waits",
        doc: "The lock's holders and waiters in queue order, and this pod's own hold.",
        params: &[],
        answers: &[ok(Content::Json("LockState"), "The queue.")],
        errors: SESSION_ERRORS,
        probe: false,
    },
    Endpoint {
        id: "semaphore_acquire",
        method: "POST",
        path: "/semaphore/{name}",
        default_name: false,
        summary: "Acquire one of N permits",
        doc: "One of `permits` permits, held, renewed and released as a lock is; first come, \
              first served.",
        params: &[PERMITS, LOCK_WAIT, TTL, HOLD],
        answers: &[
            ok(
                Content::Json("Grant"),
                "Granted, as a lease (`semaphore`, `permits`, `mode: \"permit\"`).",
            ),
            ok(
                Content::EventStream(HOLD_EVENTS),
                "With `hold=stream`: as a lock's stream hold.",
            ),
        ],
        errors: codes!(
            SESSION_ERRORS,
            &[
                MissingPermits,
                InvalidPermits,
                InvalidDuration,
                InvalidHold,
                TtlWithStream,
                ShuttingDown,
                AppUnhealthy,
                NotGranted,
                AlreadyHeld,
                AcquireInProgress,
                PermitsMismatch,
                NodeVanished,
            ]
        ),
        probe: false,
    },
    Endpoint {
        id: "semaphore_renew",
        method: "POST",
        path: "/semaphore/{name}/renew",
        default_name: false,
        summary: "Extend a permit's lease",
        doc: "As a lock's renew.",
        params: &[RENEW_TTL, GRANT_TOKEN],
        answers: &[ok(
            Content::Json("Grant"),
            "The grant with its new `expiresAt`.",
        )],
        errors: codes!(
            SESSION_ERRORS,
            &[
                InvalidDuration,
                MissingToken,
                InvalidToken,
                NotHeld,
                StaleToken,
                LockLost,
                StreamHold
            ]
        ),
        probe: false,
    },
    Endpoint {
        id: "semaphore_release",
        method: "DELETE",
        path: "/semaphore/{name}",
        default_name: false,
        summary: "Release a permit",
        doc: "As a lock's release.",
        params: &[GRANT_TOKEN],
        answers: &[ok(Content::Json("SemaphoreReleased"), "Released.")],
        errors: codes!(
            SESSION_ERRORS,
            &[MissingToken, InvalidToken, NotHeld, StaleToken, LockLost]
        ),
        probe: false,
    },
    Endpoint {
        id: "semaphore_inspect",
        method: "GET",
        path: "/semaphore/{name}",
        default_name: false,
        summary: "Who holds a semaphore's permits and who waits",
        doc: "Holders and waiters in queue order, and this pod's own hold.",
        params: &[INSPECT_PERMITS],
        answers: &[ok(Content::Json("SemaphoreState"), "The queue.")],
        errors: codes!(SESSION_ERRORS, &[InvalidPermits]),
        probe: false,
    },
    Endpoint {
        id: "barrier",
        method: "POST",
        path: "/barrier/{name}",
        default_name: false,
        summary: "Enter a barrier and wait for the others",
        doc: "Answers every party at once when `parties` pods are in; this pod has left the \
              barrier when the answer comes (or the call drops), so the name can be used again \
              for the next round.",
        params: &[BARRIER_WAIT, PARTIES],
        answers: &[ok(Content::Json("Barrier"), "Passed.")],
        errors: codes!(
            SESSION_ERRORS,
            &[
                MissingParties,
                InvalidParties,
                InvalidDuration,
                ShuttingDown,
                NotPassed,
                PartiesMismatch
            ]
        ),
        probe: false,
    },
    Endpoint {
        id: "members",
        method: "GET",
        path: "/members/{name}",
        default_name: false,
        summary: "The live members of an election",
        doc: "On any pod, standing in the election or not: the members in queue order, the \
              first leads. With `version` equal to the current one, a long-poll of up to `wait`.",
        params: &[MEMBERS_WAIT, VERSION],
        answers: &[ok(Content::Json("Members"), "The members.")],
        errors: codes!(SESSION_ERRORS, &[InvalidDuration]),
        probe: false,
    },
    Endpoint {
        id: "events",
        method: "GET",
        path: "/events",
        default_name: false,
        summary: "What happens on this pod, as a stream",
        doc: "Starts with the current `state` and each election's `leader`; each later one says \
              what is true when sent. A reader that falls behind (256 events) gets a \
              `: lagged N` comment, then the current `state` and `leader`s again.",
        params: &[],
        answers: &[ok(
            Content::EventStream(POD_EVENTS),
            "The stream; `: keep-alive` comments every 10 s.",
        )],
        errors: &[],
        probe: false,
    },
    Endpoint {
        id: "healthz",
        method: "GET",
        path: "/healthz",
        default_name: false,
        summary: "The sidecar is alive",
        doc: "200 while the process serves.",
        params: &[],
        answers: &[ok(Content::Json("Health"), "Alive.")],
        errors: &[],
        probe: true,
    },
    Endpoint {
        id: "readyz",
        method: "GET",
        path: "/readyz",
        default_name: false,
        summary: "The session is connected",
        doc: "200 while the session is CONNECTED and the sidecar is not shutting down.",
        params: &[],
        answers: &[ok(Content::Json("Readiness"), "Ready.")],
        errors: &[NotConnected, ShuttingDown],
        probe: true,
    },
    Endpoint {
        id: "openapi",
        method: "GET",
        path: "/openapi.json",
        default_name: false,
        summary: "This API's OpenAPI document",
        doc: "The OpenAPI 3.1 document of this API, made from the same table as the handlers' \
              parameters.",
        params: &[],
        answers: &[ok(Content::AnyJson, "The document.")],
        errors: &[],
        probe: false,
    },
    Endpoint {
        id: "metrics",
        method: "GET",
        path: "/metrics",
        default_name: false,
        summary: "Prometheus metrics",
        doc: "The sidecar's metrics in the OpenMetrics text format.",
        params: &[],
        answers: &[ok(Content::OpenMetrics, "The metrics.")],
        errors: &[],
        probe: true,
    },
];

/// The endpoint whose `id` this is (a route's label).
pub fn endpoint(id: &str) -> Option<&'static Endpoint> {
    ENDPOINTS.iter().find(|e| e.id == id)
}

// ---- Schemas ----------------------------------------------------------------------------

/// Every JSON object the endpoints and streams answer with.
pub const SCHEMAS: &[Schema] = &[
    Schema {
        name: "Error",
        doc: "Every error answer.",
        fields: &[f("error", "ErrorBody", "")],
    },
    Schema {
        name: "ErrorBody",
        doc: "",
        fields: &[
            f(
                "code",
                "string",
                "Stable, for programs: one of the error codes.",
            ),
            f("message", "string", "For people; may change."),
        ],
    },
    Schema {
        name: "Leader",
        doc: "An election's leader and this pod's view of it.",
        fields: &[
            f("election", "string", ""),
            f("leader", "LeaderInfo?", "`null` while no one leads."),
            f("self", "LeaderSelf", ""),
        ],
    },
    Schema {
        name: "LeaderInfo",
        doc: "",
        fields: &[
            f("identity", "string", ""),
            f("address", "string?", ""),
            f("pod", "string?", ""),
            f(
                "since",
                "string",
                "When it took office (or joined, if it has not said yet), RFC 3339; empty when \
                 its node does not say (a node not made by a Baton sidecar).",
            ),
            f(
                "token",
                "integer",
                "The term's fencing token, rising with every new term.",
            ),
        ],
    },
    Schema {
        name: "LeaderSelf",
        doc: "",
        fields: &[
            f("identity", "string", ""),
            f("isLeader", "boolean", "Only ever true while CONNECTED."),
            f("state", "state", ""),
            f(
                "validUntil",
                "date-time?",
                "While this pod leads: until when it may act as the leader without hearing from the ensemble.",
            ),
        ],
    },
    Schema {
        name: "Ready",
        doc: "",
        fields: &[
            f("election", "string", ""),
            f("isLeader", "boolean", "Always true."),
            f("token", "~integer", "Not on the probe port."),
            f("validUntil", "~date-time?", "Not on the probe port."),
        ],
    },
    Schema {
        name: "Resigned",
        doc: "",
        fields: &[
            f("election", "string", ""),
            f("resigned", "boolean", "Whether this pod led."),
        ],
    },
    Schema {
        name: "LeaderReleased",
        doc: "",
        fields: &[
            f("election", "string", ""),
            f("released", "boolean", "Always true."),
            f("wasLeader", "boolean", ""),
        ],
    },
    Schema {
        name: "Grant",
        doc: "A lock's or permit's grant. A permit's names `semaphore` (and `permits`) where a lock's names `lock`.",
        fields: &[
            f("lock", "~string", "A lock's name (not in a permit's)."),
            f(
                "semaphore",
                "~string",
                "A semaphore's name (only in a permit's).",
            ),
            f("permits", "~integer", "Only in a permit's."),
            f("mode", "mode", ""),
            f(
                "token",
                "integer",
                "The fencing token: the czxid of the granted node.",
            ),
            f("hold", "hold", ""),
            f(
                "expiresAt",
                "date-time?",
                "When the lease runs out (`null` for a stream hold).",
            ),
            f(
                "validUntil",
                "date-time?",
                "Until when this pod may act as the holder without hearing from the ensemble.",
            ),
        ],
    },
    Schema {
        name: "GrantEnded",
        doc: "A grant's end, as `lost` and `released` events say it.",
        fields: &[
            f("lock", "~string", "A lock's name (not in a permit's)."),
            f(
                "semaphore",
                "~string",
                "A semaphore's name (only in a permit's).",
            ),
            f("permits", "~integer", "Only in a permit's."),
            f("mode", "mode", ""),
            f("token", "integer", ""),
            f("hold", "hold", ""),
            f(
                "reason",
                "string",
                "`session lost`, `app unhealthy`, `lease ran out`, `released`, `stream closed`, `shutdown`",
            ),
        ],
    },
    Schema {
        name: "LockReleased",
        doc: "",
        fields: &[
            f("lock", "string", ""),
            f("released", "boolean", "Always true."),
        ],
    },
    Schema {
        name: "SemaphoreReleased",
        doc: "",
        fields: &[
            f("semaphore", "string", ""),
            f("released", "boolean", "Always true."),
        ],
    },
    Schema {
        name: "QueueEntry",
        doc: "A holder or waiter.",
        fields: &[
            f("identity", "string", ""),
            f("mode", "~mode", "A lock's entries only."),
            f("permits", "~integer?", "A semaphore's entries only."),
            f("token", "integer", ""),
            f("leaseExpiresAt", "date-time?", ""),
            f("node", "string", ""),
        ],
    },
    Schema {
        name: "OwnHold",
        doc: "This pod's side of a lock or semaphore.",
        fields: &[
            f("identity", "string", ""),
            f("holds", "boolean", ""),
            f("mode", "~mode?", "A lock's only."),
            f("token", "integer?", ""),
            f("hold", "hold?", ""),
            f("expiresAt", "date-time?", ""),
            f("validUntil", "date-time?", ""),
            f("state", "state", ""),
        ],
    },
    Schema {
        name: "LockState",
        doc: "",
        fields: &[
            f("lock", "string", ""),
            f("holder", "QueueEntry?", "The first holder."),
            f("holders", "[QueueEntry]", ""),
            f("waiters", "[QueueEntry]", ""),
            f("self", "OwnHold", ""),
        ],
    },
    Schema {
        name: "SemaphoreState",
        doc: "",
        fields: &[
            f("semaphore", "string", ""),
            f(
                "permits",
                "integer?",
                "The one given, else this pod's grant's, else the one the nodes carry.",
            ),
            f("holders", "[QueueEntry]", ""),
            f("waiters", "[QueueEntry]", ""),
            f("self", "OwnHold", ""),
        ],
    },
    Schema {
        name: "Barrier",
        doc: "",
        fields: &[
            f("barrier", "string", ""),
            f("parties", "integer", ""),
            f("passed", "boolean", "Always true."),
        ],
    },
    Schema {
        name: "Members",
        doc: "",
        fields: &[
            f("election", "string", ""),
            f(
                "version",
                "string",
                "Hashes the answer (16 hex digits): every pod answers the same for the same members.",
            ),
            f("members", "[Member]", "In queue order; the first leads."),
        ],
    },
    Schema {
        name: "Member",
        doc: "",
        fields: &[
            f("identity", "string", ""),
            f("address", "string?", ""),
            f("pod", "string?", ""),
            f(
                "since",
                "string",
                "When it joined (the leader: when it took office), RFC 3339; empty when its node \
                 does not say (a node not made by a Baton sidecar).",
            ),
            f(
                "token",
                "integer",
                "The czxid of its candidate node (the fencing token while it leads).",
            ),
            f("leader", "boolean", ""),
            f("node", "string", ""),
        ],
    },
    Schema {
        name: "Health",
        doc: "",
        fields: &[f("status", "string", "`ok`.")],
    },
    Schema {
        name: "Readiness",
        doc: "",
        fields: &[
            f("status", "string", "`ready`."),
            f("state", "state", "`CONNECTED`."),
        ],
    },
    Schema {
        name: "State",
        doc: "",
        fields: &[
            f("state", "state", ""),
            f(
                "generation",
                "integer",
                "A new generation is a new session.",
            ),
        ],
    },
    Schema {
        name: "SessionChange",
        doc: "A change of the session on a stream: on a stream hold with the grant's fields, on a \
              leader or campaign stream with the election.",
        fields: &[
            f("state", "state", ""),
            f("generation", "integer", ""),
            f("validUntil", "date-time?", ""),
            f("election", "~string", "On a leader or campaign stream."),
            f("lock", "~string", "On a lock's stream hold."),
            f("semaphore", "~string", "On a semaphore's stream hold."),
            f("permits", "~integer", "On a semaphore's stream hold."),
            f("mode", "~mode", "On a stream hold."),
            f(
                "token",
                "~integer",
                "On a stream hold: the grant's; on a campaign's `lost`: the term's.",
            ),
            f("hold", "~hold", "On a stream hold."),
            f("expiresAt", "~date-time?", "On a stream hold (`null`)."),
        ],
    },
    Schema {
        name: "SteppingDown",
        doc: "",
        fields: &[
            f("election", "string", ""),
            f("token", "integer", ""),
            f(
                "releaseBy",
                "date-time",
                "When the sidecar resigns without the app's release.",
            ),
        ],
    },
    Schema {
        name: "Candidate",
        doc: "",
        fields: &[
            f("election", "string", ""),
            f("node", "string", "This pod's candidate node."),
            f("leader", "LeaderInfo?", ""),
        ],
    },
    Schema {
        name: "Elected",
        doc: "",
        fields: &[
            f("election", "string", ""),
            f("token", "integer", ""),
            f("since", "date-time", ""),
            f("validUntil", "date-time?", ""),
        ],
    },
    Schema {
        name: "Deposed",
        doc: "",
        fields: &[
            f("election", "string", ""),
            f("token", "integer", ""),
            f("reason", "string", ""),
        ],
    },
];

/// The schema called `name`.
pub fn schema(name: &str) -> Option<&'static Schema> {
    SCHEMAS.iter().find(|s| s.name == name)
}

/// Whether `value` is what schema `name` says: every field not marked `~` present, none that it
/// does not list, each of its type. For tests that hold the API's real answers to the table.
pub fn conforms(name: &str, value: &serde_json::Value) -> Result<(), String> {
    let Some(s) = schema(name) else {
        return Err(format!("no schema {name}"));
    };
    let Some(object) = value.as_object() else {
        return Err(format!("{name}: not an object: {value}"));
    };
    for key in object.keys() {
        if !s.fields.iter().any(|f| f.name == key) {
            return Err(format!(
                "{name}: field {key:?} is not in the table: {value}"
            ));
        }
    }
    for field in s.fields {
        match object.get(field.name) {
            None if field.ty.starts_with('~') => {}
            None => return Err(format!("{name}: no field {:?}: {value}", field.name)),
            Some(v) => conforms_type(field.ty.trim_start_matches('~'), v)
                .map_err(|e| format!("{name}.{}: {e}", field.name))?,
        }
    }
    Ok(())
}

fn conforms_type(ty: &str, v: &serde_json::Value) -> Result<(), String> {
    use serde_json::Value;
    if let Some(inner) = ty.strip_suffix('?') {
        return if v.is_null() {
            Ok(())
        } else {
            conforms_type(inner, v)
        };
    }
    if let Some(item) = ty.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        let Some(items) = v.as_array() else {
            return Err(format!("not an array: {v}"));
        };
        return items.iter().try_for_each(|i| conforms_type(item, i));
    }
    let words = |allowed: &[&str]| match v {
        Value::String(s) if allowed.contains(&s.as_str()) => Ok(()),
        _ => Err(format!("not one of {allowed:?}: {v}")),
    };
    match ty {
        "string" if v.is_string() => Ok(()),
        "integer" if v.is_i64() || v.is_u64() => Ok(()),
        "boolean" if v.is_boolean() => Ok(()),
        "date-time"
            if v.as_str()
                .is_some_and(|s| s.len() >= 20 && s.as_bytes()[10] == b'T') =>
        {
            Ok(())
        }
        "state" => words(&["CONNECTED", "SUSPENDED", "LOST"]),
        "mode" => words(&["exclusive", "read", "write", "permit"]),
        "hold" => words(&["lease", "stream"]),
        "string" | "integer" | "boolean" | "date-time" => Err(format!("not a {ty}: {v}")),
        other => conforms(other, v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::route::route;
    use hyper::Method;

    /// Every endpoint is what the router makes of its method and path (with and without the
    /// default name), and every route has an endpoint.
    #[test]
    fn the_table_is_what_the_router_routes() {
        let mut ids = std::collections::HashSet::new();
        for e in ENDPOINTS {
            assert!(ids.insert(e.id), "{} twice", e.id);
            let method = Method::from_bytes(e.method.as_bytes()).expect("a method");
            let mut paths = vec![e.path.replace("{name}", "x")];
            if e.default_name {
                paths.push(e.path.replace("/{name}", ""));
            }
            for path in paths {
                let routed = route(&method, &path).unwrap_or_else(|err| panic!("{path}: {err:?}"));
                assert_eq!(routed.label(), e.id, "{} {path}", e.method);
            }
        }
    }

    #[test]
    fn every_schema_named_exists() {
        let known = |ty: &str| {
            let ty = ty.trim_start_matches('~').trim_end_matches('?');
            let ty = ty.trim_start_matches('[').trim_end_matches(']');
            matches!(
                ty,
                "string" | "integer" | "boolean" | "date-time" | "state" | "mode" | "hold"
            ) || schema(ty).is_some()
        };
        for s in SCHEMAS {
            for field in s.fields {
                assert!(known(field.ty), "{}.{}: {}", s.name, field.name, field.ty);
            }
        }
        for e in ENDPOINTS {
            for a in e.answers {
                match a.content {
                    Content::Json(name) => assert!(schema(name).is_some(), "{name}"),
                    Content::EventStream(events) => {
                        for ev in events {
                            assert!(schema(ev.schema).is_some(), "{}", ev.schema);
                        }
                    }
                    Content::OpenMetrics | Content::AnyJson => {}
                }
            }
        }
    }

    #[test]
    fn errors_are_listed_once_per_endpoint() {
        for e in ENDPOINTS {
            let all = e.all_errors();
            let unique: std::collections::HashSet<_> = all.iter().collect();
            assert_eq!(unique.len(), all.len(), "{}", e.id);
            for p in e.params {
                assert!(all.contains(&p.invalid), "{}: {}", e.id, p.name);
                if let Some(missing) = p.missing {
                    assert!(all.contains(&missing), "{}: {}", e.id, p.name);
                }
            }
        }
    }
}
