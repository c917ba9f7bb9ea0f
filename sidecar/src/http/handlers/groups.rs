//! `/members` and `/barrier`: the routes about a group of pods rather than one holder.

use hyper::{Response, StatusCode};
use serde_json::json;
use tokio::time::Instant;

use super::ApiState;
use crate::http::api;
use crate::http::error_code::ErrorCode;
use crate::http::query::Query;
use crate::http::reply::{ApiError, Body, json};
use crate::recipe::{BarrierError, BarrierRecipe, ResourceName, read_members};

/// `GET /members/NAME[?wait=30s&version=V]`: the live members of election NAME. With a
/// `version` equal to the current one, waits up to `wait` for a change; answers at once
/// otherwise (and always answers when `wait` runs out, with the version then current).
pub(super) async fn members(
    state: &ApiState,
    name: &ResourceName,
    q: &Query,
) -> Result<Response<Body>, ApiError> {
    let wait = q.duration_of(&api::MEMBERS_WAIT)?;
    let deadline = Instant::now() + wait;
    loop {
        let (found, watcher) = read_members(&state.session, name).await?;
        if q.get(api::VERSION.name) != Some(found.version.as_str())
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

/// `POST /barrier/NAME?parties=N&wait=60s`: 200 once N pods are in, 409 `NotPassed` when
/// `wait` runs out; this pod has left the barrier when the answer comes (or the call drops).
pub(super) async fn barrier(
    state: &ApiState,
    name: &ResourceName,
    q: &Query,
) -> Result<Response<Body>, ApiError> {
    let wait = q.duration_of(&api::BARRIER_WAIT)?;
    let parties = match q.count_of(&api::PARTIES)? {
        Some(n) => n,
        None => {
            return Err(ApiError::bad_request(
                ErrorCode::MissingParties,
                "a barrier needs ?parties=N: how many pods must enter before any passes",
            ));
        }
    };
    let shutting_down = || ApiError::new(ErrorCode::ShuttingDown, "this sidecar is shutting down");
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
            ErrorCode::NotPassed,
            format!(
                "fewer than {parties} pods entered barrier {name} within wait={}",
                baton_duration::format(wait)
            ),
        )),
        Err(e @ BarrierError::PartiesMismatch { .. }) => Err(ApiError::new(
            ErrorCode::PartiesMismatch,
            format!("barrier {name}: {e}"),
        )),
        Err(BarrierError::Recipe(e)) => Err(e.into()),
    }
}
