//! `/leader` and its readiness twin: the current leader of an election, long-polled or
//! followed as a stream, and whether this pod leads.

use std::time::{Duration, SystemTime};

use hyper::{Response, StatusCode};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::ApiState;
use crate::events::{
    leader_key, session_change_data, session_changes, session_mark, sse_comment, sse_event,
};
use crate::http::api;
use crate::http::error_code::ErrorCode;
use crate::http::query::Query;
use crate::http::reply::{ApiError, Body, event_stream, json};
use crate::http::sse::{KEEP_ALIVE, SseSender};
use crate::recipe::timestamp::rfc3339;
use crate::recipe::{ConnectionState, ElectionRecipe, ElectionView, ResourceName, SessionHandle};

/// How long a plain `GET /leader` waits for a fresh look at the queue before answering from
/// the last one.
const REFRESH_BOUND: Duration = Duration::from_secs(2);

pub(super) async fn leader(
    state: &ApiState,
    name: Option<&ResourceName>,
    q: &Query,
) -> Result<Response<Body>, ApiError> {
    let wait = q.duration_of(&api::LEADER_WAIT)?;
    let token = q.token_of(&api::LEADER_TOKEN)?.unwrap_or(0);
    let follow = match q.choice_of(&api::FOLLOW)? {
        None => false,
        Some(_) if q.get("wait").is_some() || q.get("token").is_some() => {
            return Err(ApiError::bad_request(
                ErrorCode::FollowWithWait,
                "follow=stream sends every change as it happens; it takes no wait or token",
            ));
        }
        Some(_) => true,
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
/// one per change ([`leader_key`]) until the client goes away or the sidecar stops; also
/// `suspended`, `resumed`, `lost` and `connected` as the session changes
/// ([`session_changes`]), and `stepping-down` on SIGTERM while this pod leads.
///
/// Every `leader` event is computed here, from the election's view and the session as they
/// are when the stream looks, never taken from the pod's event channel: an event queued
/// there between subscribing and the first look describes an older view than the first
/// event, and replaying it after that one said "not leading, leading again" with the same
/// token for a term that never ended. Computed this way, each event is at least as new as
/// the one before it.
async fn follow_leader(state: &ApiState, election: &ElectionRecipe) -> Response<Body> {
    // Listen first, then look: a change between the two is sent, not lost.
    let interest = election.follow_leader();
    let following = state.handoff.follow(vec![election.name().clone()]);
    let mut events = state.locks.events().subscribe();
    let mut views = election.subscribe();
    let mut snapshots = state.session.subscribe();
    let mut mark = session_mark(&state.session);
    let view = election.refresh(REFRESH_BOUND).await;
    let first = leader_body(&state.identity, &state.session, &view);
    let (mut sse, rx) = SseSender::channel(state.draining.clone());
    let (election, identity) = (election.clone(), state.identity.clone());
    let session = state.session.clone();
    tokio::spawn(async move {
        let (_interest, _following) = (interest, following);
        let mut last = leader_key(&first);
        let mut open = sse.send(sse_event("leader", &first)).await;
        let mut keep_alive = tokio::time::interval_at(Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
        while open {
            tokio::select! {
                changed = views.changed() => if changed.is_err() { break },
                changed = snapshots.changed() => if changed.is_err() { break },
                received = events.recv() => match received {
                    Ok(event) if event.name == "stepping-down"
                        && event.data["election"] == election.name().as_str() => {
                        open = sse.send(event.to_sse()).await;
                    }
                    Ok(_) | Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => break,
                },
                _ = sse.closed() => break,
                _ = keep_alive.tick() => {
                    open = sse.send(sse_comment("keep-alive")).await;
                    continue;
                }
            }
            // Mark both as seen before looking, so a change after the look wakes us again;
            // the session's changes are told from `mark` whichever woke us.
            views.borrow_and_update();
            snapshots.borrow_and_update();
            let now = session_mark(&session);
            for change in session_changes(std::mem::replace(&mut mark, now), now) {
                let mut data = session_change_data(&session, now);
                data["election"] = election.name().as_str().into();
                open = open && sse.send(sse_event(change, &data)).await;
            }
            let body = leader_body(&identity, &session, &election.view());
            let key = leader_key(&body);
            if open && key != last {
                last = key;
                open = sse.send(sse_event("leader", &body)).await;
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

/// `/leader[/NAME]/ready` on the probe port, which anyone on the pod network reaches: the
/// status alone (200 or 503) and the election's name, never the fencing token, `validUntil` or
/// why this pod does not lead (a kubelet reads the status; the app asks on localhost).
pub(super) fn ready_status(
    state: &ApiState,
    election: &ElectionRecipe,
) -> Result<Response<Body>, ApiError> {
    let view = election.view();
    if view.is_leader && !state.is_draining() {
        return Ok(json(
            StatusCode::OK,
            &json!({ "election": view.election, "isLeader": true }),
        ));
    }
    Err(ApiError::new(
        ErrorCode::NotLeader,
        format!("election {}: this pod does not lead it", view.election),
    ))
}

pub(super) fn ready(
    state: &ApiState,
    election: &ElectionRecipe,
) -> Result<Response<Body>, ApiError> {
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
        ErrorCode::NotLeader,
        format!("election {}: {why}", view.election),
    ))
}
