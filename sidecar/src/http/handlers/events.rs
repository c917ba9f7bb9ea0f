//! `/events`: one stream of everything this sidecar pushes.

use hyper::Response;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::ApiState;
use super::leader::leader_body;
use crate::events::{sse_comment, sse_event, state_data};
use crate::http::reply::{Body, event_stream};
use crate::http::sse::{KEEP_ALIVE, SseSender};

/// `GET /events`: the session's state and every election's leader at once, then every
/// change, lock grant, loss and release as it happens, and `stepping-down` on SIGTERM for
/// each election this pod leads (an open `/events` counts as following every election). A reader more than
/// [`crate::events::EVENT_BUFFER`] events behind gets `: lagged N` and the current state again.
pub(super) fn events(state: &ApiState) -> Response<Body> {
    let interests: Vec<_> = state.elections.iter().map(|e| e.follow_leader()).collect();
    let following = state
        .handoff
        .follow(state.elections.iter().map(|e| e.name().clone()).collect());
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
        let (_interests, _following) = (interests, following);
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
