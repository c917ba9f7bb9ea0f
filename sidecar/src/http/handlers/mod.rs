//! What each route does. Every answer is JSON; errors use the envelope in [`super::reply`].
//! [`handle`] dispatches; the routes live in a module per family: `leader` (`/leader`),
//! `locks` (`/lock`, `/semaphore`), `groups` (`/members`, `/barrier`), `events`
//! (`/events`) and `campaign` (`/leader/NAME/campaign` and `/leader/NAME/release`).

mod campaign;
mod events;
mod groups;
mod leader;
mod locks;

use std::sync::Arc;

use hyper::{Response, StatusCode};
use serde_json::json;
use tokio::sync::watch;

use super::api;
use super::query::Query;
use super::reply::{ApiError, Body, json, text};
use super::route::Route;
use crate::config::Candidacy;
use crate::handoff::HandOff;
use crate::leases::LockTable;
use crate::metrics::Metrics;
use crate::recipe::{ConnectionState, ElectionRecipe, ResourceName, SessionHandle};

pub use campaign::Campaigns;
pub use leader::leader_body;

use crate::http::error_code::ErrorCode;
use campaign::{campaign, release};
use events::events;
use groups::{barrier, members};
use leader::{leader, ready, ready_status};
use locks::{acquire, acquire_permit, grant_token, inspect, inspect_semaphore};

/// Everything the handlers use.
pub struct ApiState {
    pub identity: String,
    pub session: SessionHandle,
    /// In flag order; the first is the default election of `/leader`.
    pub elections: Vec<ElectionRecipe>,
    pub locks: LockTable,
    pub metrics: Arc<Metrics>,
    /// Set once SIGTERM's hand-off is over: streams end. (Readiness, long-polls and new
    /// acquisitions follow [`HandOff::stepping_down`], set on SIGTERM itself.)
    pub draining: watch::Receiver<bool>,
    /// `--candidacy`: whether `/leader/NAME/campaign` is how this pod stands.
    pub candidacy: Candidacy,
    /// Who follows what, and the SIGTERM hand-off.
    pub handoff: Arc<HandOff>,
    /// The open campaign streams (one per election).
    pub campaigns: Campaigns,
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
                    ErrorCode::NoElection,
                    "this sidecar stands in no election; start it with --election NAME",
                ),
                (Some(name), false) => ApiError::new(
                    ErrorCode::UnknownElection,
                    format!(
                        "this sidecar does not stand in election {name}; it stands in: {}",
                        known.join(", ")
                    ),
                ),
                (None, false) => ApiError::new(ErrorCode::NoElection, "no default election"),
            }
        })
    }

    /// Whether SIGTERM arrived (readiness fails, nothing new is granted).
    fn is_draining(&self) -> bool {
        *self.draining.borrow() || self.handoff.is_stepping_down()
    }

    /// Resolves once SIGTERM arrived.
    async fn drained(&self) {
        let mut draining = self.handoff.stepping_down();
        // The guard `wait_for` returns must not live across an await.
        let _ = draining.wait_for(|d| *d).await.is_ok();
    }
}

/// Runs `route` on the probe port (`--probe-listen`), which answers with status only where the
/// localhost API says more (`/leader[/NAME]/ready`); `Exposure::serves` decides the routes.
pub async fn handle_probe(
    state: &ApiState,
    route: Route,
    query: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let endpoint = route.endpoint();
    match route {
        Route::LeaderReady(name) => {
            Query::for_endpoint(query, endpoint)?;
            ready_status(state, state.election(name.as_ref())?)
        }
        route => handle(state, route, query).await,
    }
}

/// Runs `route` with the raw query string, parsed with the parameters the route's entry in
/// [`api::ENDPOINTS`] lists (any other is refused).
pub async fn handle(
    state: &ApiState,
    route: Route,
    query: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let q = Query::for_endpoint(query, route.endpoint())?;
    match route {
        Route::Leader(name) => leader(state, name.as_ref(), &q).await,
        Route::LeaderReady(name) => ready(state, state.election(name.as_ref())?),
        Route::LeaderResign(name) => {
            let election = state.election(name.as_ref())?;
            let resigned = election.resign().await?;
            Ok(json(
                StatusCode::OK,
                &json!({ "election": election.name(), "resigned": resigned }),
            ))
        }
        Route::LeaderCampaign(name) => campaign(state, name.as_ref()).await,
        Route::LeaderRelease(name) => release(state, name.as_ref()).await,
        Route::LockAcquire(name) => acquire(state, &name, &q).await,
        Route::LockRenew(name) => {
            let ttl = q.optional_duration_of(&api::RENEW_TTL)?;
            let token = grant_token(&q, &name, "renew")?;
            let lease = state.locks.renew(&name, token, ttl).await?;
            Ok(json(StatusCode::OK, &lease.to_json()))
        }
        Route::LockRelease(name) => {
            let token = grant_token(&q, &name, "release")?;
            state.locks.release(&name, token).await?;
            Ok(json(
                StatusCode::OK,
                &json!({ "lock": name, "released": true }),
            ))
        }
        Route::LockInspect(name) => inspect(state, &name).await,
        Route::Members(name) => members(state, &name, &q).await,
        Route::Barrier(name) => barrier(state, &name, &q).await,
        Route::SemaphoreAcquire(name) => acquire_permit(state, &name, &q).await,
        Route::SemaphoreRenew(name) => {
            let ttl = q.optional_duration_of(&api::RENEW_TTL)?;
            let token = grant_token(&q, &name, "renew")?;
            let lease = state.locks.semaphores().renew(&name, token, ttl).await?;
            Ok(json(StatusCode::OK, &lease.to_json()))
        }
        Route::SemaphoreRelease(name) => {
            let token = grant_token(&q, &name, "release")?;
            state.locks.semaphores().release(&name, token).await?;
            Ok(json(
                StatusCode::OK,
                &json!({ "semaphore": name, "released": true }),
            ))
        }
        Route::SemaphoreInspect(name) => {
            let permits = q.count_of(&api::INSPECT_PERMITS)?;
            inspect_semaphore(state, &name, permits).await
        }
        Route::Events => Ok(events(state)),
        Route::Healthz => Ok(json(StatusCode::OK, &json!({ "status": "ok" }))),
        Route::OpenApi => Ok(json(StatusCode::OK, &super::openapi::document())),
        Route::Readyz => readyz(state),
        Route::Metrics => {
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

fn readyz(state: &ApiState) -> Result<Response<Body>, ApiError> {
    if state.is_draining() {
        return Err(ApiError::new(
            ErrorCode::ShuttingDown,
            "this sidecar is shutting down",
        ));
    }
    match state.session.state() {
        ConnectionState::Connected => Ok(json(
            StatusCode::OK,
            &json!({ "status": "ready", "state": "CONNECTED" }),
        )),
        other => Err(ApiError::new(
            ErrorCode::NotConnected,
            format!("the session is {}", other.as_str()),
        )),
    }
}
