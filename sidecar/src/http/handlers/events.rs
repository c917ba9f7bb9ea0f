//! `/events`: one stream of everything this sidecar pushes.

use std::collections::HashMap;

use bytes::Bytes;
use hyper::Response;
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::ApiState;
use super::leader::leader_body;
use crate::events::{Event, leader_key, sse_comment, sse_event, state_data};
use crate::http::reply::{Body, event_stream};
use crate::http::sse::{KEEP_ALIVE, SseSender};
use crate::recipe::{ElectionRecipe, SessionHandle};

/// `GET /events`: the session's state and every election's leader at once, then every
/// change, lock grant, loss and release as it happens, and `stepping-down` on SIGTERM for
/// each election this pod leads (an open `/events` counts as following every election). A reader more than
/// [`crate::events::EVENT_BUFFER`] events behind gets `: lagged N` and the current state again.
/// Every `state` and `leader` it sends is what is true when it is sent ([`Sent`]).
pub(super) fn events(state: &ApiState) -> Response<Body> {
    let interests: Vec<_> = state.elections.iter().map(|e| e.follow_leader()).collect();
    let following = state
        .handoff
        .follow(state.elections.iter().map(|e| e.name().clone()).collect());
    let mut events = state.locks.events().subscribe();
    let (mut sse, rx) = SseSender::channel(state.draining.clone());
    let (elections, identity) = (state.elections.clone(), state.identity.clone());
    let session = state.session.clone();
    tokio::spawn(async move {
        let (_interests, _following) = (interests, following);
        let mut sent = Sent::default();
        let mut open = true;
        for chunk in sent.snapshot(&identity, &session, &elections) {
            open = open && sse.send(chunk).await;
        }
        let mut keep_alive = tokio::time::interval_at(Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
        while open {
            tokio::select! {
                received = events.recv() => match received {
                    Ok(event) => {
                        if let Some(chunk) = sent.current(&event, &identity, &session, &elections) {
                            open = sse.send(chunk).await;
                        }
                    }
                    Err(RecvError::Lagged(n)) => {
                        open = sse.send(sse_comment(&format!("lagged {n}"))).await;
                        for chunk in sent.snapshot(&identity, &session, &elections) {
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

/// The `state` and `leader` answers a stream sent last. The stream starts with a fresh look
/// (newer than any event queued since it subscribed), so a queued `state` or `leader` event
/// is never forwarded as it was published: it only says that something changed, and the
/// stream sends what is true now, if that differs from what it sent last. So it never goes
/// back to an older state (a leader stream saying "not leading, leading again" with the
/// same token for a term that never ended).
#[derive(Default)]
struct Sent {
    state: Option<Value>,
    leaders: HashMap<String, [Value; 3]>,
}

impl Sent {
    /// The session's state and every election's leader as they are now, all sent.
    fn snapshot(
        &mut self,
        identity: &str,
        session: &SessionHandle,
        elections: &[ElectionRecipe],
    ) -> Vec<Bytes> {
        let state = state_data(session);
        let mut all = vec![sse_event("state", &state)];
        self.state = Some(state);
        for election in elections {
            let body = leader_body(identity, session, &election.view());
            self.leaders
                .insert(election.name().as_str().to_owned(), leader_key(&body));
            all.push(sse_event("leader", &body));
        }
        all
    }

    /// What to send for `event`: other events as they are, `state` and `leader` as they are
    /// now, and nothing when that is what was sent last.
    fn current(
        &mut self,
        event: &Event,
        identity: &str,
        session: &SessionHandle,
        elections: &[ElectionRecipe],
    ) -> Option<Bytes> {
        match event.name {
            "state" => {
                let state = state_data(session);
                if self.state.as_ref() == Some(&state) {
                    return None;
                }
                let chunk = sse_event("state", &state);
                self.state = Some(state);
                Some(chunk)
            }
            "leader" => {
                let name = event.data["election"].as_str()?;
                let election = elections.iter().find(|e| e.name().as_str() == name)?;
                let body = leader_body(identity, session, &election.view());
                let key = leader_key(&body);
                if self.leaders.get(name) == Some(&key) {
                    return None;
                }
                self.leaders.insert(name.to_owned(), key);
                Some(sse_event("leader", &body))
            }
            _ => Some(event.to_sse()),
        }
    }
}
