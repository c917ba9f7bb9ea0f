//! `/leader/NAME/campaign` (an app-held candidacy, `--candidacy app`) and
//! `/leader/NAME/release` (the app's answer to `stepping-down` on SIGTERM).
//!
//! A campaign stream is the candidacy: opening it stands in the election, and when hyper drops
//! its body (the app's socket closed, which a crash does too) the task's guard stops
//! campaigning, so the candidate node is deleted within milliseconds rather than when a lease
//! or the session runs out.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use hyper::{Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::ApiState;
use crate::config::Candidacy;
use crate::events::{session_change_data, session_changes, session_mark, sse_comment, sse_event};
use crate::http::error_code::ErrorCode;
use crate::http::reply::{ApiError, Body, event_stream, json};
use crate::http::sse::{KEEP_ALIVE, SseSender};
use crate::recipe::timestamp::rfc3339;
use crate::recipe::{ConnectionState, ElectionRecipe, ResourceName};

/// The elections with an open campaign stream. One per election: two streams of one pod
/// would be one candidacy that ends when either closes, which neither app could reason about.
#[derive(Debug, Clone, Default)]
pub struct Campaigns(Arc<Mutex<HashSet<ResourceName>>>);

/// An open campaign: while alive, the election campaigns and no second stream may open.
struct Claim {
    campaigns: Campaigns,
    election: ElectionRecipe,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.election.set_campaigning(false);
        tracing::info!(election = %self.election.name(), "campaign stream closed: withdrawing the candidacy");
        let mut open = self.campaigns.0.lock().unwrap_or_else(|p| p.into_inner());
        open.remove(self.election.name());
    }
}

impl Campaigns {
    fn claim(&self, election: &ElectionRecipe) -> Option<Claim> {
        let mut open = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !open.insert(election.name().clone()) {
            return None;
        }
        drop(open);
        election.set_campaigning(true);
        tracing::info!(election = %election.name(), "campaign stream opened: standing in the election");
        Some(Claim {
            campaigns: self.clone(),
            election: election.clone(),
        })
    }
}

/// `GET /leader[/NAME]/campaign`: stands in the election while the stream is open.
pub(super) async fn campaign(
    state: &ApiState,
    name: Option<&ResourceName>,
) -> Result<Response<Body>, ApiError> {
    let election = state.election(name)?;
    if state.candidacy != Candidacy::App {
        return Err(ApiError::new(
            ErrorCode::CandidacyAlways,
            format!(
                "this sidecar stands in election {} from start to shutdown (--candidacy always); \
                 start it with --candidacy app (annotation baton.dev/candidacy: app) for the app \
                 to campaign; GET /leader/{}?follow=stream follows the election",
                election.name(),
                election.name()
            ),
        ));
    }
    if state.is_draining() {
        return Err(ApiError::new(
            ErrorCode::ShuttingDown,
            "this sidecar is shutting down",
        ));
    }
    // Listen before standing: nothing between the two is missed.
    let interest = election.follow_leader();
    let following = state.handoff.follow(vec![election.name().clone()]);
    let mut events = state.locks.events().subscribe();
    let mut views = election.subscribe();
    let mut snapshots = state.session.subscribe();
    let Some(claim) = state.campaigns.claim(election) else {
        return Err(ApiError::new(
            ErrorCode::CampaignInProgress,
            format!(
                "another campaign stream of this pod stands in election {} already; one per \
                 election (the candidacy ends when that stream closes)",
                election.name()
            ),
        ));
    };
    let (mut sse, rx) = SseSender::channel(state.draining.clone());
    let (election, session) = (election.clone(), state.session.clone());
    tokio::spawn(async move {
        let (_interest, _following, _claim) = (interest, following, claim);
        let mut tracker = Tracker::default();
        let mut open = true;
        let mut keep_alive = tokio::time::interval_at(Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
        while open {
            views.borrow_and_update();
            snapshots.borrow_and_update();
            for (name, data) in tracker.look(&election, &session) {
                open = open && sse.send(sse_event(name, &data)).await;
            }
            if !open {
                break;
            }
            tokio::select! {
                changed = views.changed() => if changed.is_err() { break },
                changed = snapshots.changed() => if changed.is_err() { break },
                received = events.recv() => match received {
                    Ok(event) if event.name == "stepping-down"
                        && event.data["election"] == election.name().as_str() => {
                        open = sse.send(event.to_sse()).await;
                    }
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => break,
                },
                _ = sse.closed() => break,
                _ = keep_alive.tick() => open = sse.send(sse_comment("keep-alive")).await,
            }
        }
    });
    Ok(event_stream(rx))
}

/// What the campaign stream told its app so far, to send only changes.
#[derive(Default)]
struct Tracker {
    session: Option<(ConnectionState, u64)>,
    /// Our candidate node the app was told of.
    queued: Option<String>,
    /// The fencing token of the term the app was told it won.
    elected: Option<i64>,
}

impl Tracker {
    /// The events the current view and session call for.
    fn look(
        &mut self,
        election: &ElectionRecipe,
        session: &crate::recipe::SessionHandle,
    ) -> Vec<(&'static str, Value)> {
        let mut out = Vec::new();
        let name = election.name().as_str();
        let now = session_mark(session);
        let before = self.session.replace(now).unwrap_or(now);
        for change in session_changes(before, now) {
            let mut data = session_change_data(session, now);
            data["election"] = name.into();
            if change == "lost" {
                // The candidate node died with the session: so did any term.
                data["token"] = self.elected.take().into();
                self.queued = None;
            }
            out.push((change, data));
        }
        if now.0 != ConnectionState::Connected {
            // Suspended: whether we still lead is unknown until we reconnect; the app has
            // `suspended` with its validUntil.
            return out;
        }
        let view = election.view();
        match (view.is_leader, self.elected) {
            (true, elected) if elected != Some(view.leader_token()) => {
                let token = view.leader_token();
                self.elected = Some(token);
                self.queued = view.node.clone();
                out.push((
                    "elected",
                    json!({
                        "election": name,
                        "token": token,
                        "since": view.leader.as_ref().map(|l| l.since.clone()),
                        "validUntil": session.valid_until(view.generation).map(rfc3339),
                    }),
                ));
            }
            (false, Some(token)) => {
                self.elected = None;
                self.queued = None;
                let reason = if election.is_standing() {
                    "no longer the leader"
                } else {
                    "app unhealthy"
                };
                out.push((
                    "deposed",
                    json!({ "election": name, "token": token, "reason": reason }),
                ));
            }
            _ => {}
        }
        if !view.is_leader && view.node.is_some() && view.node != self.queued {
            self.queued = view.node.clone();
            out.push((
                "candidate",
                json!({ "election": name, "node": view.node, "leader": view.leader }),
            ));
        }
        out
    }
}

/// `POST /leader[/NAME]/release`: after `stepping-down`, resign now (200); outside a shutdown
/// 409, since releasing for good is what SIGTERM is for (`resign` steps down and stands again).
pub(super) async fn release(
    state: &ApiState,
    name: Option<&ResourceName>,
) -> Result<Response<Body>, ApiError> {
    let election = state.election(name)?;
    match state.handoff.release(election).await {
        Ok(led) => Ok(json(
            StatusCode::OK,
            &json!({ "election": election.name(), "released": true, "wasLeader": led }),
        )),
        Err(_) => Err(ApiError::new(
            ErrorCode::NotSteppingDown,
            format!(
                "release answers a stepping-down event while this sidecar shuts down; to step \
                 down now and stand again, POST /leader/{}/resign",
                election.name()
            ),
        )),
    }
}
