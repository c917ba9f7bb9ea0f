//! What happens on this pod, pushed to whoever listens (DESIGN.md §2, `GET /events`): leader
//! changes, lock grants, losses and releases, session state changes.
//!
//! One broadcast channel: publishing never waits, whoever listens gets a copy, and a listener
//! that falls more than [`EVENT_BUFFER`] events behind misses the oldest ones and is told so
//! (the HTTP stream writes a `: lagged N` comment and the current state again). So a slow
//! reader costs the sidecar nothing but the buffer.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinSet;

use crate::http::leader_body;
use crate::recipe::timestamp::rfc3339;
use crate::recipe::{ConnectionState, ElectionRecipe, SessionHandle};

/// Events kept for listeners that are behind; past it the slowest skip ahead.
pub const EVENT_BUFFER: usize = 256;

/// One event: its SSE name (`leader`, `granted`, `lost`, `released`, `state`) and JSON data.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub name: &'static str,
    pub data: Value,
}

impl Event {
    /// The event as server-sent-event bytes: `event: NAME`, `data: JSON`, a blank line.
    pub fn to_sse(&self) -> Bytes {
        sse_event(self.name, &self.data)
    }
}

/// `event: NAME` / `data: JSON` / blank line. Compact JSON never contains a newline, so one
/// `data:` line carries it.
pub fn sse_event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// An SSE comment line (`: text`), which clients ignore: keep-alives and lag notices.
pub fn sse_comment(text: &str) -> Bytes {
    Bytes::from(format!(": {text}\n\n"))
}

/// The pod's event channel; cheap to clone.
#[derive(Debug, Clone)]
pub struct EventHub {
    tx: broadcast::Sender<Arc<Event>>,
}

impl Default for EventHub {
    fn default() -> Self {
        Self::new()
    }
}

impl EventHub {
    /// A channel nobody listens to yet.
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(EVENT_BUFFER);
        Self { tx }
    }

    /// Sends `name` with `data` to every listener (none: dropped).
    pub fn publish(&self, name: &'static str, data: Value) {
        let _ = self.tx.send(Arc::new(Event { name, data }));
    }

    /// A listener that sees every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }
}

/// What makes two `leader` answers different events: the leader's token, whether this pod
/// leads, and the session state (not `since` or `validUntil`, which move on their own).
pub fn leader_key(body: &Value) -> [Value; 3] {
    [
        body["leader"]["token"].clone(),
        body["self"]["isLeader"].clone(),
        body["self"]["state"].clone(),
    ]
}

/// The `state` event's data: `{state, generation}` (a new generation is a new session).
pub fn state_data(session: &SessionHandle) -> Value {
    let snap = session.snapshot();
    json!({ "state": snap.state, "generation": snap.generation })
}

/// A session's state as streams compare it: (state, generation).
pub type SessionMark = (ConnectionState, u64);

/// The session's current [`SessionMark`].
pub fn session_mark(session: &SessionHandle) -> SessionMark {
    let snap = session.snapshot();
    (snap.state, snap.generation)
}

/// What a stream that holds or follows something tells its app of a session change (the same
/// transitions `/events` reports as `state`): `suspended` (disconnected, what is held still
/// stands until `validUntil`), `resumed` (the same session reconnected: nothing was lost),
/// `lost` (the session expired: everything it held is gone) and `connected` (a new session).
pub fn session_changes(before: SessionMark, now: SessionMark) -> Vec<&'static str> {
    use ConnectionState::{Connected, Lost, Suspended};
    if before == now {
        return Vec::new();
    }
    let mut changes = Vec::new();
    let new_session = now.1 != before.1;
    // A session that expired while we were disconnected may reappear as a new generation
    // without LOST being published in between: it was lost all the same.
    if (now.0 == Lost || new_session) && before.0 != Lost {
        changes.push("lost");
    }
    match now.0 {
        Suspended if !new_session && before.0 == Connected => changes.push("suspended"),
        Connected if new_session => changes.push("connected"),
        Connected if before.0 == Suspended => changes.push("resumed"),
        _ => {}
    }
    changes
}

/// The data of a [`session_changes`] event: `{state, generation, validUntil}`, `validUntil`
/// being how long what the session holds still stands (none once it is lost).
pub fn session_change_data(session: &SessionHandle, now: SessionMark) -> Value {
    let valid_until = match now.0 {
        ConnectionState::Lost => None,
        _ => session.valid_until(now.1),
    };
    json!({ "state": now.0, "generation": now.1, "validUntil": valid_until.map(rfc3339) })
}

/// Publishes `state` on every session state change and `leader` whenever an election's
/// `GET /leader` answer changes ([`leader_key`]), until `stop` is set.
pub async fn publish_changes(
    hub: EventHub,
    session: SessionHandle,
    elections: Vec<ElectionRecipe>,
    identity: String,
    stop: watch::Receiver<bool>,
) {
    let mut tasks = JoinSet::new();
    for election in elections {
        let (hub, session, identity) = (hub.clone(), session.clone(), identity.clone());
        let mut stop = stop.clone();
        tasks.spawn(async move {
            let mut views = election.subscribe();
            let mut snapshots = session.subscribe();
            let mut last = None;
            loop {
                views.borrow_and_update();
                snapshots.borrow_and_update();
                let body = leader_body(&identity, &session, &election.view());
                let key = leader_key(&body);
                if last.as_ref() != Some(&key) {
                    hub.publish("leader", body);
                    last = Some(key);
                }
                tokio::select! {
                    changed = views.changed() => if changed.is_err() { break },
                    changed = snapshots.changed() => if changed.is_err() { break },
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
        });
    }
    let mut snapshots = session.subscribe();
    let mut stop = stop;
    let mut last = None;
    loop {
        let now = {
            let snap = snapshots.borrow_and_update();
            (snap.state, snap.generation)
        };
        if last != Some(now) {
            hub.publish("state", state_data(&session));
            last = Some(now);
        }
        tokio::select! {
            changed = snapshots.changed() => if changed.is_err() { break },
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    tasks.join_all().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_render_as_sse() {
        let e = Event {
            name: "granted",
            data: serde_json::json!({ "lock": "db", "token": 7 }),
        };
        assert_eq!(
            e.to_sse(),
            Bytes::from("event: granted\ndata: {\"lock\":\"db\",\"token\":7}\n\n")
        );
        assert_eq!(sse_comment("keep-alive"), Bytes::from(": keep-alive\n\n"));
    }

    #[test]
    fn session_changes_name_each_transition() {
        use ConnectionState::{Connected, Lost, Suspended};
        let cases: [(SessionMark, SessionMark, &[&str]); 8] = [
            ((Connected, 1), (Connected, 1), &[]),
            ((Connected, 1), (Suspended, 1), &["suspended"]),
            ((Suspended, 1), (Connected, 1), &["resumed"]),
            ((Suspended, 1), (Lost, 1), &["lost"]),
            ((Lost, 1), (Connected, 2), &["connected"]),
            ((Suspended, 1), (Connected, 2), &["lost", "connected"]),
            ((Lost, 0), (Connected, 1), &["connected"]),
            ((Lost, 1), (Lost, 1), &[]),
        ];
        for (before, now, expected) in cases {
            assert_eq!(
                session_changes(before, now),
                expected,
                "{before:?} -> {now:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_listener_that_falls_behind_is_told_and_skips_ahead() {
        let hub = EventHub::new();
        let mut slow = hub.subscribe();
        for i in 0..(EVENT_BUFFER + 10) {
            hub.publish("state", serde_json::json!(i));
        }
        assert!(matches!(
            slow.recv().await,
            Err(broadcast::error::RecvError::Lagged(10))
        ));
        let next = slow.recv().await.expect("the oldest kept event");
        assert_eq!(next.data, serde_json::json!(10));
    }
}
