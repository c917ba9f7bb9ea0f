//! `/lock` and `/semaphore`: acquiring (as a lease or a stream hold), renewing, releasing and
//! inspecting. A semaphore is held as a lock is, so both share the hold parameters and the
//! stream.

use hyper::{Response, StatusCode};
use serde_json::json;
use tokio::time::Instant;

use super::ApiState;
use crate::events::{session_change_data, session_changes, session_mark, sse_comment, sse_event};
use crate::http::api::{self, MAX_PERMITS};
use crate::http::error_code::ErrorCode;
use crate::http::query::Query;
use crate::http::reply::{ApiError, Body, event_stream, json};
use crate::http::sse::{KEEP_ALIVE, SseSender};
use crate::leases::{Ending, Lease, StreamHold};
use crate::recipe::timestamp::rfc3339;
use crate::recipe::{LockEntry, LockMode, LockRecipe, ResourceName};

/// The `token` a renew or release names: the fencing token its grant was answered with.
pub(super) fn grant_token(q: &Query, lock: &ResourceName, what: &str) -> Result<i64, ApiError> {
    let Some(token) = q.token_of(&api::GRANT_TOKEN)? else {
        return Err(ApiError::bad_request(
            ErrorCode::MissingToken,
            format!(
                "to {what} lock {lock}, pass the fencing token of your grant as ?token=T \
                 (the \"token\" in the answer to POST /lock/{lock})"
            ),
        ));
    };
    Ok(token)
}

pub(super) async fn acquire(
    state: &ApiState,
    name: &ResourceName,
    q: &Query,
) -> Result<Response<Body>, ApiError> {
    let (wait, ttl, stream) = hold_params(state, q)?;
    let mode = match q.choice_of(&api::MODE)? {
        None | Some("exclusive") => LockMode::Exclusive,
        Some("read") => LockMode::Read,
        Some(_) => LockMode::Write,
    };
    let shutting_down = || ApiError::new(ErrorCode::ShuttingDown, "this sidecar is shutting down");
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

/// `POST /semaphore/NAME?permits=N`: one of N permits, held as a lock is (`ttl` or
/// `hold=stream`), first come first served.
pub(super) async fn acquire_permit(
    state: &ApiState,
    name: &ResourceName,
    q: &Query,
) -> Result<Response<Body>, ApiError> {
    let Some(permits) = q.count_of(&api::PERMITS)? else {
        return Err(ApiError::bad_request(
            ErrorCode::MissingPermits,
            "a semaphore needs ?permits=N: how many pods may hold it at once (the same on every pod)",
        ));
    };
    let (wait, ttl, stream) = hold_params(state, q)?;
    let ttl = (!stream).then_some(ttl);
    let (lease, ended) = tokio::select! {
        held = state.locks.acquire_permit(name, permits, wait, ttl) => held?,
        _ = state.drained() => {
            return Err(ApiError::new(ErrorCode::ShuttingDown, "this sidecar is shutting down",
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
fn hold_params(
    state: &ApiState,
    q: &Query,
) -> Result<(std::time::Duration, std::time::Duration, bool), ApiError> {
    let wait = q.duration_of(&api::LOCK_WAIT)?;
    let ttl = q.duration_of(&api::TTL)?;
    let stream = match q.choice_of(&api::HOLD)? {
        None | Some("lease") => false,
        Some(_) if q.get(api::TTL.name).is_some() => {
            return Err(ApiError::bad_request(
                ErrorCode::TtlWithStream,
                "a stream hold (hold=stream) has no ttl: it lasts as long as the connection",
            ));
        }
        Some(_) => true,
    };
    if state.is_draining() {
        return Err(ApiError::new(
            ErrorCode::ShuttingDown,
            "this sidecar is shutting down",
        ));
    }
    Ok((wait, ttl, stream))
}

/// The answer to `hold=stream`: `event: granted`, keep-alives, `suspended` and `resumed` as
/// the session disconnects and reconnects (the grant stands until `validUntil` meanwhile),
/// and `event: lost` or `event: released` if the grant ends while the stream is open (then
/// the stream ends). When the app's connection closes, hyper drops the body and the task
/// releases the lock at once.
fn stream_hold(state: &ApiState, hold: StreamHold) -> Response<Body> {
    let (mut sse, rx) = SseSender::channel(state.draining.clone());
    let locks = state.locks.clone();
    let session = state.session.clone();
    let mut snapshots = session.subscribe();
    let mut mark = session_mark(&session);
    let StreamHold { lease, mut ended } = hold;
    tokio::spawn(async move {
        let mut open = sse.send(sse_event("granted", &lease.to_json())).await;
        let mut session_alive = true;
        let mut keep_alive = tokio::time::interval_at(Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
        while open {
            tokio::select! {
                ending = &mut ended => {
                    // Lost, released by DELETE, or the sidecar stopping: say so and end.
                    let ending = ending.unwrap_or(Ending::Released("released"));
                    sse.send_last(sse_event(ending.event(), &ending.to_json(&lease)));
                    return;
                }
                changed = snapshots.changed(), if session_alive => {
                    if changed.is_err() {
                        session_alive = false;
                        continue;
                    }
                    let now = session_mark(&session);
                    // `lost` comes from the grant's ending, with the grant's JSON.
                    for change in session_changes(std::mem::replace(&mut mark, now), now) {
                        if matches!(change, "suspended" | "resumed") {
                            let mut data = session_change_data(&session, now);
                            for (key, value) in lease.to_json().as_object().into_iter().flatten() {
                                if key != "validUntil" {
                                    data[key] = value.clone();
                                }
                            }
                            open = open && sse.send(sse_event(change, &data)).await;
                        }
                    }
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
pub(super) async fn inspect_semaphore(
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
            "self": own_hold(state, held.as_ref()),
        }),
    ))
}

pub(super) async fn inspect(
    state: &ApiState,
    name: &ResourceName,
) -> Result<Response<Body>, ApiError> {
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
    let mut me = own_hold(state, held.as_ref());
    me["mode"] = json!(held.as_ref().map(|l| l.mode));
    Ok(json(
        StatusCode::OK,
        &json!({
            "lock": name,
            "holder": holders.first(),
            "holders": holders,
            "waiters": waiters,
            "self": me,
        }),
    ))
}

/// This pod's side of a lock or semaphore answer (`self`): whether and how it holds it.
fn own_hold(state: &ApiState, held: Option<&Lease>) -> serde_json::Value {
    json!({
        "identity": state.identity,
        "holds": held.is_some(),
        "token": held.map(|l| l.token),
        "hold": held.map(|l| l.hold.as_str()),
        "expiresAt": held.and_then(|l| l.expires_at).map(rfc3339),
        "validUntil": held.and_then(|l| l.valid_until).map(rfc3339),
        "state": state.session.state(),
    })
}
