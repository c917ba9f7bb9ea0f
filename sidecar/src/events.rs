//! What happens on this pod, pushed to whoever listens (DESIGN.md §2, `GET /events`): leader
//! changes, lock grants, losses and releases, session state changes.
//!
//! One broadcast channel: publishing never waits, whoever listens gets a copy, and a listener
//! that falls more than [`EVENT_BUFFER`] events behind misses the oldest ones and is told so
//! (the HTTP stream writes a `: lagged N` comment and the current state again). So a slow
//! reader costs the sidecar nothing but the buffer.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::broadcast;

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
