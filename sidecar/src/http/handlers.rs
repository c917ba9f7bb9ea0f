//! What each route does. Every answer is JSON; errors use the envelope in [`super::reply`].

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hyper::{Response, StatusCode};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;
use tokio::time::Instant;

use super::query::Query;
use super::reply::{ApiError, Body, event_stream, json, text};
use super::route::Route;
use super::sse::{KEEP_ALIVE, SseSender};
use crate::events::{leader_key, sse_comment, sse_event, state_data};
use crate::leases::{Ending, LockTable, StreamHold};
use crate::metrics::Metrics;
use crate::recipe::timestamp::rfc3339;
use crate::recipe::{
    BarrierError, BarrierRecipe, ConnectionState, ElectionRecipe, ElectionView, LockEntry,
    LockMode, LockRecipe, ResourceName, SessionHandle, read_members,
};

/// Longest accepted `wait` for long-polls and lock acquisitions.
pub const MAX_WAIT: Duration = Duration::from_secs(600);
/// Default `wait` for a lock acquisition.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(10);
/// Default lease of an HTTP lock.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// Shortest accepted lease.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// Longest accepted lease: a lock is an application's, not a reservation for a day.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// How long a plain `GET /leader` waits for a fresh look at the queue before answering from
/// the last one.
const REFRESH_BOUND: Duration = Duration::from_secs(2);

/// Everything the handlers use.
pub struct ApiState {
    pub identity: String,
    pub session: SessionHandle,
    /// In flag order; the first is the default election of `/leader`.
    pub elections: Vec<ElectionRecipe>,
    pub locks: LockTable,
    pub metrics: Arc<Metrics>,
    /// Set on SIGTERM: readiness fails, long-polls return, new acquisitions are refused.
    pub draining: watch::Receiver<bool>,
}

impl ApiState {
    fn election(&self, name: Option<&ResourceName>) -> Result<&ElectionRecipe, ApiError> {
        let found = match name {
            None => self.elections.first(),
            Some(name) => self.elections.iter().find(|e| e.name() == name),
        };
        found.ok_or_else(|| {
            let known: Vec<_> = self.elections.iter().map(|e| e.name().as_str()).collect();
            match (name, known.is_empty()) {
                (_, true) => ApiError::new(
                    StatusCode::NOT_FOUND,
                    "NoElection",
                    "this sidecar stands in no election; start it with --election NAME",
                ),
                (Some(name), false) => ApiError::new(
                    StatusCode::NOT_FOUND,
                    "UnknownElection",
                    format!(
                        "this sidecar does not stand in election {name}; it stands in: {}",
                        known.join(", ")
                    ),
                ),
                (None, false) => {
                    ApiError::new(StatusCode::NOT_FOUND, "NoElection", "no default election")
                }
            }
        })
    }

    fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    async fn drained(&self) {
        let mut draining = self.draining.clone();
        // The guard `wait_for` returns must not live across an await.
        let _ = draining.wait_for(|d| *d).await.is_ok();
    }
}

/// Runs `route` with the raw query string.
pub async fn handle(
    state: &ApiState,
    route: Route,
    query: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    match route {
        Route::Leader(name) => leader(state, name.as_ref(), query).await,
        Route::LeaderReady(name) => {
            Query::parse(query, &[])?;
            ready(state, state.election(name.as_ref())?)
        }
        Route::LeaderResign(name) => {
            Query::parse(query, &[])?;
            let election = state.election(name.as_ref())?;
            let resigned = election.resign().await?;
            Ok(json(
                StatusCode::OK,
                &json!({ "election": election.name(), "resigned": resigned }),
            ))
        }
        Route::LockAcquire(name) => acquire(state, &name, query).await,
        Route::LockRenew(name) => {
            let q = Query::parse(query, &["token", "ttl"])?;
            let ttl = match q.get("ttl") {
                Some(_) => Some(q.duration("ttl", DEFAULT_TTL, MIN_TTL, MAX_TTL)?),
                None => None,
            };
            let token = grant_token(&q, &name, "renew")?;
            let lease = state.locks.renew(&name, token, ttl).await?;
            Ok(json(StatusCode::OK, &lease.to_json()))
        }
        Route::LockRelease(name) => {
            let q = Query::parse(query, &["token"])?;
            let token = grant_token(&q, &name, "release")?;
            state.locks.release(&name, token).await?;
            Ok(json(
                StatusCode::OK,
                &json!({ "lock": name, "released": true }),
            ))
        }
        Route::LockInspect(name) => {
            Query::parse(query, &[])?;
            inspect(state, &name).await
        }
        Route::Members(name) => members(state, &name, query).await,
        Route::Barrier(name) => barrier(state, &name, query).await,
        Route::SemaphoreAcquire(name) => acquire_permit(state, &name, query).await,
        Route::SemaphoreRenew(name) => {
            let q = Query::parse(query, &["token", "ttl"])?;
            let ttl = match q.get("ttl") {
                Some(_) => Some(q.duration("ttl", DEFAULT_TTL, MIN_TTL, MAX_TTL)?),
                None => None,
            };
            let token = grant_token(&q, &name, "renew")?;
            let lease = state.locks.semaphores().renew(&name, token, ttl).await?;
            Ok(json(StatusCode::OK, &lease.to_json()))
        }
        Route::SemaphoreRelease(name) => {
            let q = Query::parse(query, &["token"])?;
            let token = grant_token(&q, &name, "release")?;
            state.locks.semaphores().release(&name, token).await?;
            Ok(json(
                StatusCode::OK,
                &json!({ "semaphore": name, "released": true }),
            ))
        }
        Route::SemaphoreInspect(name) => {
            let q = Query::parse(query, &["permits"])?;
            let permits = permits(&q)?;
            inspect_semaphore(state, &name, permits).await
        }
        Route::Events => {
            Query::parse(query, &[])?;
            Ok(events(state))
        }
        Route::Healthz => {
            Query::parse(query, &[])?;
            Ok(json(StatusCode::OK, &json!({ "status": "ok" })))
        }
        Route::Readyz => {
            Query::parse(query, &[])?;
            readyz(state)
        }
        Route::Metrics => {
            Query::parse(query, &[])?;
            let views: Vec<_> = state.elections.iter().map(ElectionRecipe::view).collect();
            let leadership: Vec<_> = views
                .iter()
                .map(|v| (v.election.as_str(), v.is_leader))
                .collect();
            state
                .metrics
                .set_current(state.session.state(), &leadership);
            Ok(text(
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                state.metrics.render(),
            ))
        }
    }
}

/// The `token` a renew or release names: the fencing token its grant was answered with.
fn grant_token(q: &Query, lock: &ResourceName, what: &str) -> Result<i64, ApiError> {
    let Some(raw) = q.get("token") else {
        return Err(ApiError::bad_request(
            "MissingToken",
            format!(
                "to {what} lock {lock}, pass the fencing token of your grant as ?token=T \
                 (the \"token\" in the answer to POST /lock/{lock})"
            ),
        ));
    };
    raw.parse::<i64>().map_err(|_| {
        ApiError::bad_request(
            "InvalidToken",
            format!("token: {raw:?} is not an integer fencing token"),
        )
    })
}

async fn leader(
    state: &ApiState,
    name: Option<&ResourceName>,
    query: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let q = Query::parse(query, &["wait", "token", "follow"])?;
    let wait = q.duration("wait", Duration::ZERO, Duration::ZERO, MAX_WAIT)?;
    let token = match q.get("token") {
        None => 0,
        Some(raw) => raw.parse::<i64>().map_err(|_| {
            ApiError::bad_request(
                "InvalidToken",
                format!("token: {raw:?} is not an integer fencing token"),
            )
        })?,
    };
    let follow = match q.get("follow") {
        None => false,
        Some("stream") if q.get("wait").is_some() || q.get("token").is_some() => {
            return Err(ApiError::bad_request(
                "FollowWithWait",
                "follow=stream sends every change as it happens; it takes no wait or token",
            ));
        }
        Some("stream") => true,
        Some(other) => {
            return Err(ApiError::bad_request(
                "InvalidFollow",
                format!("follow: {other:?} is not stream"),
            ));
        }
    };
    let election = state.election(name)?;
    if follow {
        return Ok(follow_leader(state, election).await);
    }
    let deadline = Instant::now() + wait;
    // A fresh look first: followers far from the head of the queue do not watch the leader.
    let mut view = election.refresh(REFRESH_BOUND).await;
    if !wait.is_zero() && view.leader_token() == token && !state.is_draining() {
        view = tokio::select! {
            view = election.wait_for_leader_change(token, deadline) => view,
            _ = state.drained() => election.view(),
        };
    }
    Ok(json(
        StatusCode::OK,
        &leader_body(&state.identity, &state.session, &view),
    ))
}

/// `GET /leader[/NAME]?follow=stream`: `event: leader` with the current answer at once, then
/// one per change ([`leader_key`]) until the client goes away or the sidecar stops.
async fn follow_leader(state: &ApiState, election: &ElectionRecipe) -> Response<Body> {
    // Listen first, then look: a change between the two is sent, not lost.
    let interest = election.follow_leader();
    let mut events = state.locks.events().subscribe();
    let view = election.refresh(REFRESH_BOUND).await;
    let first = leader_body(&state.identity, &state.session, &view);
    let (mut sse, rx) = SseSender::channel(state.draining.clone());
    let (election, identity) = (election.clone(), state.identity.clone());
    let session = state.session.clone();
    tokio::spawn(async move {
        let _interest = interest;
        let mut last = leader_key(&first);
        let mut open = sse.send(sse_event("leader", &first)).await;
        let mut keep_alive = tokio::time::interval_at(Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
        while open {
            let body = tokio::select! {
                received = events.recv() => match received {
                    Ok(event) if event.name == "leader"
                        && event.data["election"] == election.name().as_str() => event.data.clone(),
                    Ok(_) => continue,
                    Err(RecvError::Lagged(n)) => {
                        open = sse.send(sse_comment(&format!("lagged {n}"))).await;
                        leader_body(&identity, &session, &election.view())
                    }
                    Err(RecvError::Closed) => break,
                },
                _ = sse.closed() => break,
                _ = keep_alive.tick() => {
                    open = sse.send(sse_comment("keep-alive")).await;
                    continue;
                }
            };
            let key = leader_key(&body);
            if open && key != last {
                last = key;
                open = sse.send(sse_event("leader", &body)).await;
            }
        }
    });
    event_stream(rx)
}

/// `GET /events`: the session's state and every election's leader at once, then every
/// change, lock grant, loss and release as it happens. A reader more than
/// [`crate::events::EVENT_BUFFER`] events behind gets `: lagged N` and the current state again.
fn events(state: &ApiState) -> Response<Body> {
    let interests: Vec<_> = state.elections.iter().map(|e| e.follow_leader()).collect();
    let mut events = state.locks.events().subscribe();
    let (mut sse, rx) = SseSender::channel(state.draining.clone());
    let (elections, identity) = (state.elections.clone(), state.identity.clone());
    let session = state.session.clone();
    let snapshot = move || {
        let mut all = vec![sse_event("state", &state_data(&session))];
        for election in &elections {
            all.push(sse_event(
                "leader",
                &leader_body(&identity, &session, &election.view()),
            ));
        }
        all
    };
    tokio::spawn(async move {
        let _interests = interests;
        let mut open = true;
        for chunk in snapshot() {
            open = open && sse.send(chunk).await;
        }
        let mut keep_alive = tokio::time::interval_at(Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
        while open {
            tokio::select! {
                received = events.recv() => match received {
                    Ok(event) => open = sse.send(event.to_sse()).await,
                    Err(RecvError::Lagged(n)) => {
                        open = sse.send(sse_comment(&format!("lagged {n}"))).await;
                        for chunk in snapshot() {
                            open = open && sse.send(chunk).await;
                        }
                    }
                    Err(RecvError::Closed) => break,
                },
                _ = sse.closed() => break,
                _ = keep_alive.tick() => open = sse.send(sse_comment("keep-alive")).await,
            }
        }
    });
    event_stream(rx)
}

/// The body of `GET /leader`. `self.validUntil`: while this pod leads, until when it may act
/// as the leader without hearing from the ensemble again ([`SessionHandle::valid_until`]).
pub fn leader_body(
    identity: &str,
    session: &SessionHandle,
    view: &ElectionView,
) -> serde_json::Value {
    json!({
        "election": view.election,
        "leader": view.leader,
        "self": {
            "identity": identity,
            "isLeader": view.is_leader,
            "state": view.state,
            "validUntil": leadership_valid_until(session, view).map(rfc3339),
        },
    })
}

fn leadership_valid_until(session: &SessionHandle, view: &ElectionView) -> Option<SystemTime> {
    if view.is_leader {
        session.valid_until(view.generation)
    } else {
        None
    }
}

fn ready(state: &ApiState, election: &ElectionRecipe) -> Result<Response<Body>, ApiError> {
    let view = election.view();
    if view.is_leader && !state.is_draining() {
        return Ok(json(
            StatusCode::OK,
            &json!({
                "election": view.election,
                "isLeader": true,
                "token": view.leader_token(),
                "validUntil": leadership_valid_until(&state.session, &view).map(rfc3339),
            }),
        ));
    }
    let why = match view.state {
        ConnectionState::Connected if state.is_draining() => "this pod is shutting down".to_owned(),
        ConnectionState::Connected => "this pod is a candidate, not the leader".to_owned(),
        other => format!("the session is {}: leadership is uncertain", other.as_str()),
    };
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "NotLeader",
        format!("election {}: {why}", view.election),
    ))
}

async fn acquire(
    state: &ApiState,
    name: &ResourceName,
    query: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let q = Query::parse(query, &["wait", "ttl", "mode", "hold"])?;
    let (wait, ttl, stream) = hold_params(state, &q)?;
    let mode = match q.get("mode") {
        None | Some("exclusive") => LockMode::Exclusive,
        Some("read") => LockMode::Read,
        Some("write") => LockMode::Write,
        Some(other) => {
            return Err(ApiError::bad_request(
                "InvalidMode",
                format!("mode: {other:?} is not one of exclusive, read, write"),
            ));
        }
    };
    let shutting_down = || {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ShuttingDown",
            "this sidecar is shutting down",
        )
    };
    if stream {
        let hold = tokio::select! {
            hold = state.locks.acquire_stream(name, mode, wait) => hold?,
            _ = state.drained() => return Err(shutting_down()),
        };
        return Ok(stream_hold(state, hold));
    }
    let lease = tokio::select! {
        lease = state.locks.acquire(name, mode, wait, ttl) => lease?,
        _ = state.drained() => return Err(shutting_down()),
    };
    Ok(json(StatusCode::OK, &lease.to_json()))
}

/// `GET /members/NAME[?wait=30s&version=V]`: the live members of election NAME. With a
/// `version` equal to the current one, waits up to `wait` for a change; answers at once
/// otherwise (and always answers when `wait` runs out, with the version then current).
async fn members(
    state: &ApiState,
    name: &ResourceName,
    query: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let q = Query::parse(query, &["wait", "version"])?;
    let wait = q.duration("wait", Duration::ZERO, Duration::ZERO, MAX_WAIT)?;
    let deadline = Instant::now() + wait;
    loop {
        let (found, watcher) = read_members(&state.session, name).await?;
        if q.get("version") != Some(found.version.as_str())
            || Instant::now() >= deadline
            || state.is_draining()
        {
            return Ok(json(StatusCode::OK, &json!(found)));
        }
        tokio::select! {
            _ = watcher.changed() => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = state.drained() => return Ok(json(StatusCode::OK, &json!(found))),
        }
    }
}

/// Default `wait` at a barrier.
pub const DEFAULT_BARRIER_WAIT: Duration = Duration::from_secs(60);

/// `POST /barrier/NAME?parties=N&wait=60s`: 200 once N pods are in, 409 `NotPassed` when
/// `wait` runs out; this pod has left the barrier when the answer comes (or the call drops).
async fn barrier(
    state: &ApiState,
    name: &ResourceName,
    query: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let q = Query::parse(query, &["parties", "wait"])?;
    let wait = q.duration("wait", DEFAULT_BARRIER_WAIT, Duration::ZERO, MAX_WAIT)?;
    let parties = match q.get("parties").map(|raw| (raw, raw.parse::<u32>())) {
        Some((_, Ok(n))) if (1..=MAX_PERMITS).contains(&n) => n,
        Some((raw, _)) => {
            return Err(ApiError::bad_request(
                "InvalidParties",
                format!("parties: {raw:?} is not a whole number from 1 to {MAX_PERMITS}"),
            ));
        }
        None => {
            return Err(ApiError::bad_request(
                "MissingParties",
                "a barrier needs ?parties=N: how many pods must enter before any passes",
            ));
        }
    };
    let shutting_down = || {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ShuttingDown",
            "this sidecar is shutting down",
        )
    };
    if state.is_draining() {
        return Err(shutting_down());
    }
    let recipe = BarrierRecipe::new(
        state.session.clone(),
        name.clone(),
        state.identity.clone(),
        parties,
    );
    let passed = tokio::select! {
        passed = recipe.enter(wait) => passed,
        _ = state.drained() => return Err(shutting_down()),
    };
    match passed {
        Ok(()) => Ok(json(
            StatusCode::OK,
            &json!({ "barrier": name, "parties": parties, "passed": true }),
        )),
        Err(BarrierError::NotPassed { .. }) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "NotPassed",
            format!(
                "fewer than {parties} pods entered barrier {name} within wait={}",
                crate::duration::format_duration(wait)
            ),
        )),
        Err(e @ BarrierError::PartiesMismatch { .. }) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "PartiesMismatch",
            format!("barrier {name}: {e}"),
        )),
        Err(BarrierError::Recipe(e)) => Err(e.into()),
    }
}

/// Most holders a semaphore may have.
pub const MAX_PERMITS: u32 = 10_000;

/// `?permits=N` (1 to [`MAX_PERMITS`]); `None` when absent.
fn permits(q: &Query) -> Result<Option<u32>, ApiError> {
    let Some(raw) = q.get("permits") else {
        return Ok(None);
    };
    match raw.parse::<u32>() {
        Ok(n) if (1..=MAX_PERMITS).contains(&n) => Ok(Some(n)),
        _ => Err(ApiError::bad_request(
            "InvalidPermits",
            format!("permits: {raw:?} is not a whole number from 1 to {MAX_PERMITS}"),
        )),
    }
}

/// `POST /semaphore/NAME?permits=N`: one of N permits, held as a lock is (`ttl` or
/// `hold=stream`), first come first served.
async fn acquire_permit(
    state: &ApiState,
    name: &ResourceName,
    query: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let q = Query::parse(query, &["wait", "ttl", "hold", "permits"])?;
    let Some(permits) = permits(&q)? else {
        return Err(ApiError::bad_request(
            "MissingPermits",
            "a semaphore needs ?permits=N: how many pods may hold it at once (the same on every pod)",
        ));
    };
    let (wait, ttl, stream) = hold_params(state, &q)?;
    let ttl = (!stream).then_some(ttl);
    let (lease, ended) = tokio::select! {
        held = state.locks.acquire_permit(name, permits, wait, ttl) => held?,
        _ = state.drained() => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "ShuttingDown",
                "this sidecar is shutting down",
            ));
        }
    };
    match ended {
        Some(ended) => Ok(stream_hold(state, StreamHold { lease, ended })),
        None => Ok(json(StatusCode::OK, &lease.to_json())),
    }
}

/// The `wait`, `ttl` and `hold` of an acquisition (true: `hold=stream`); refused while the
/// sidecar drains.
fn hold_params(state: &ApiState, q: &Query) -> Result<(Duration, Duration, bool), ApiError> {
    let wait = q.duration("wait", DEFAULT_LOCK_WAIT, Duration::ZERO, MAX_WAIT)?;
    let ttl = q.duration("ttl", DEFAULT_TTL, MIN_TTL, MAX_TTL)?;
    let stream = match q.get("hold") {
        None | Some("lease") => false,
        Some("stream") if q.get("ttl").is_some() => {
            return Err(ApiError::bad_request(
                "TtlWithStream",
                "a stream hold (hold=stream) has no ttl: it lasts as long as the connection",
            ));
        }
        Some("stream") => true,
        Some(other) => {
            return Err(ApiError::bad_request(
                "InvalidHold",
                format!("hold: {other:?} is not one of lease, stream"),
            ));
        }
    };
    if state.is_draining() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ShuttingDown",
            "this sidecar is shutting down",
        ));
    }
    Ok((wait, ttl, stream))
}

/// The answer to `hold=stream`: `event: granted`, keep-alives, and `event: lost` or
/// `event: released` if the grant ends while the stream is open (then the stream ends). When
/// the app's connection closes, hyper drops the body and the task releases the lock at once.
fn stream_hold(state: &ApiState, hold: StreamHold) -> Response<Body> {
    let (mut sse, rx) = SseSender::channel(state.draining.clone());
    let locks = state.locks.clone();
    let StreamHold { lease, mut ended } = hold;
    tokio::spawn(async move {
        let mut open = sse.send(sse_event("granted", &lease.to_json())).await;
        let mut keep_alive = tokio::time::interval_at(Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
        while open {
            tokio::select! {
                ending = &mut ended => {
                    // Lost, released by DELETE, or the sidecar stopping: say so and end.
                    let ending = ending.unwrap_or(Ending::Released("released"));
                    sse.send_last(sse_event(ending.event(), &ending.to_json(&lease)));
                    return;
                }
                _ = sse.closed() => open = false,
                _ = keep_alive.tick() => open = sse.send(sse_comment("keep-alive")).await,
            }
        }
        // The app's connection closed (or the sidecar is draining): let go of the lock.
        let table = match lease.permits {
            Some(_) => locks.semaphores(),
            None => &locks,
        };
        table.release_stream(&lease.lock, lease.token).await;
    });
    event_stream(rx)
}

/// `GET /semaphore/NAME[?permits=N]`: holders and waiters in order. The count is the one
/// given, else this pod's own grant's, else the one the first node carries.
async fn inspect_semaphore(
    state: &ApiState,
    name: &ResourceName,
    permits: Option<u32>,
) -> Result<Response<Body>, ApiError> {
    let held = state.locks.semaphores().held(name);
    let mut permits = permits.or(held.as_ref().and_then(|l| l.permits));
    if permits.is_none() {
        // A first look with no count: every node is a waiter; read the count they carry.
        let probe = LockRecipe::semaphore(
            state.session.clone(),
            name.clone(),
            state.identity.clone(),
            MAX_PERMITS,
        );
        permits = probe
            .inspect()
            .await?
            .holders
            .iter()
            .find_map(|e| e.permits);
    }
    let recipe = LockRecipe::semaphore(
        state.session.clone(),
        name.clone(),
        state.identity.clone(),
        permits.unwrap_or(1),
    );
    let queue = recipe.inspect().await?;
    let entry = |e: &LockEntry| {
        json!({
            "identity": e.identity,
            "token": e.token,
            "permits": e.permits,
            "leaseExpiresAt": e.lease_expires_at,
            "node": e.node,
        })
    };
    let holders: Vec<_> = queue.holders.iter().map(entry).collect();
    let waiters: Vec<_> = queue.waiters.iter().map(entry).collect();
    Ok(json(
        StatusCode::OK,
        &json!({
            "semaphore": name,
            "permits": permits,
            "holders": holders,
            "waiters": waiters,
            "self": {
                "identity": state.identity,
                "holds": held.is_some(),
                "token": held.as_ref().map(|l| l.token),
                "hold": held.as_ref().map(|l| l.hold.as_str()),
                "expiresAt": held.as_ref().and_then(|l| l.expires_at).map(rfc3339),
                "validUntil": held.as_ref().and_then(|l| l.valid_until).map(rfc3339),
                "state": state.session.state(),
            },
        }),
    ))
}

async fn inspect(state: &ApiState, name: &ResourceName) -> Result<Response<Body>, ApiError> {
    let recipe = LockRecipe::new(state.session.clone(), name.clone(), state.identity.clone());
    let queue = recipe.inspect().await?;
    let held = state.locks.held(name);
    let entry = |e: &LockEntry| {
        json!({
            "identity": e.identity,
            "mode": e.mode,
            "token": e.token,
            "leaseExpiresAt": e.lease_expires_at,
            "node": e.node,
        })
    };
    let holders: Vec<_> = queue.holders.iter().map(entry).collect();
    let waiters: Vec<_> = queue.waiters.iter().map(entry).collect();
    Ok(json(
        StatusCode::OK,
        &json!({
            "lock": name,
            "holder": holders.first(),
            "holders": holders,
            "waiters": waiters,
            "self": {
                "identity": state.identity,
                "holds": held.is_some(),
                "mode": held.as_ref().map(|l| l.mode),
                "token": held.as_ref().map(|l| l.token),
                "hold": held.as_ref().map(|l| l.hold.as_str()),
                "expiresAt": held.as_ref().and_then(|l| l.expires_at).map(rfc3339),
                "validUntil": held.as_ref().and_then(|l| l.valid_until).map(rfc3339),
                "state": state.session.state(),
            },
        }),
    ))
}

fn readyz(state: &ApiState) -> Result<Response<Body>, ApiError> {
    if state.is_draining() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ShuttingDown",
            "this sidecar is shutting down",
        ));
    }
    match state.session.state() {
        ConnectionState::Connected => Ok(json(
            StatusCode::OK,
            &json!({ "status": "ready", "state": "CONNECTED" }),
        )),
        other => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "NotConnected",
            format!("the session is {}", other.as_str()),
        )),
    }
}
