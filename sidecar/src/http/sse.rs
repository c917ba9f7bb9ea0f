//! Feeding one `text/event-stream` answer from a task.

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};

/// How often an idle stream sends `: keep-alive`, so proxies and clients with read timeouts
/// keep it open (and a client that vanished without closing its socket is noticed when a
/// write fails).
pub const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// Chunks buffered between the feeding task and the socket: a client that stops reading
/// blocks only its own task (which then skips ahead or fails), never the sidecar.
const STREAM_BUFFER: usize = 16;

/// The feeding end of one stream.
pub struct SseSender {
    tx: mpsc::Sender<Bytes>,
    draining: watch::Receiver<bool>,
}

impl SseSender {
    /// A sender and the receiver to put in the answer's body ([`super::reply::event_stream`]).
    pub fn channel(draining: watch::Receiver<bool>) -> (Self, mpsc::Receiver<Bytes>) {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        (Self { tx, draining }, rx)
    }

    /// Sends `chunk`; false once the client is gone (hyper dropped the body) or the sidecar
    /// is shutting down, after which the stream should end.
    pub async fn send(&mut self, chunk: Bytes) -> bool {
        if *self.draining.borrow() {
            return false;
        }
        tokio::select! {
            sent = self.tx.send(chunk) => sent.is_ok(),
            _ = self.draining.wait_for(|d| *d) => false,
        }
    }

    /// Sends a stream's last chunk if there is room, without waiting (the sidecar may be
    /// shutting down, and a client that is not reading gets nothing more anyway).
    pub fn send_last(&self, chunk: Bytes) {
        let _ = self.tx.try_send(chunk);
    }

    /// Resolves when the client is gone: its connection ended and hyper dropped the body.
    pub async fn closed(&self) {
        self.tx.closed().await;
    }
}
