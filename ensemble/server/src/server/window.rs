//! How much one connection may have in flight: the reader stops taking requests off the
//! socket while `max_requests` requests or `max_bytes` of request frames await their replies
//! (ZooKeeper's RequestThrottler stops reading the same way). The client's own writes then
//! block in TCP: backpressure, not memory.
//!
//! A request is in flight from the moment the reader forwards it until its reply has been
//! written to the socket. Replies leave in request order (ZooKeeper's FIFO guarantee), so the
//! writer retires requests from the front, one per reply frame.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::Notify;

/// The requests of one connection that await their replies.
#[derive(Debug)]
pub struct RequestWindow {
    max_requests: usize,
    max_bytes: usize,
    in_flight: Mutex<InFlight>,
    /// Woken whenever the writer made progress (a reply written, reply bytes drained).
    progress: Notify,
}

#[derive(Debug, Default)]
struct InFlight {
    sizes: VecDeque<usize>,
    bytes: usize,
}

impl RequestWindow {
    pub fn new(max_requests: usize, max_bytes: usize) -> Self {
        RequestWindow {
            max_requests: max_requests.max(1),
            max_bytes: max_bytes.max(1),
            in_flight: Mutex::new(InFlight::default()),
            progress: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InFlight> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether another request may be forwarded. One always may when none is in flight, so a
    /// request larger than `max_bytes` is never stuck.
    pub fn has_room(&self) -> bool {
        let f = self.lock();
        f.sizes.len() < self.max_requests && f.bytes < self.max_bytes
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.lock().sizes.len()
    }

    /// The reader forwarded a request of `bytes` (recorded before the core can answer it).
    pub fn sent(&self, bytes: usize) {
        let mut f = self.lock();
        f.sizes.push_back(bytes);
        f.bytes += bytes;
    }

    /// The writer wrote `replies` reply frames; the oldest requests are done.
    pub fn answered(&self, replies: usize) {
        if replies > 0 {
            let mut f = self.lock();
            for _ in 0..replies {
                // A reply to a request sent with xid -1 (reserved for notifications, which no
                // real client does) is not told apart from a notification: its slot stays
                // taken, which only slows that client down.
                let Some(size) = f.sizes.pop_front() else {
                    break;
                };
                f.bytes -= size;
            }
        }
        self.progress.notify_one();
    }

    /// Waits until the writer next makes progress (returns at once if it did since the last
    /// wait: `Notify` keeps one wake-up).
    pub async fn progressed(&self) {
        self.progress.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_requests_and_bytes_until_their_replies_are_written() {
        let w = RequestWindow::new(3, 100);
        assert!(w.has_room());
        w.sent(10);
        w.sent(10);
        w.sent(10);
        assert!(!w.has_room(), "three requests in flight");
        w.answered(1);
        assert!(w.has_room());
        w.sent(200);
        assert!(!w.has_room(), "over the byte limit");
        w.answered(3);
        assert_eq!(w.in_flight(), 0);
        assert!(w.has_room());
        // A frame bigger than the byte limit still goes when nothing else is in flight.
        w.sent(1000);
        assert!(!w.has_room());
        w.answered(5);
        assert!(w.has_room());
    }
}
