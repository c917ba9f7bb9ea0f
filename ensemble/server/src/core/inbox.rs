//! The core thread's two queues, and how it waits on them without an async runtime.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::messages::CoreMsg;

/// Messages handled per batch at most. Batching takes what is already queued before handling
/// Raft's Ready, so one fsync covers every write that arrived while the previous one was in
/// progress (group commit).
pub(super) const MAX_BATCH: usize = 4096;
/// Client messages handled per batch at most.
const CLIENT_SHARE: usize = 1024;

/// Messages the core takes from its two queues.
///
/// Ticks, peer traffic and admin calls (`control`) are never stuck behind client traffic
/// (`clients`): the core looks at `control` first, and takes at most `CLIENT_SHARE` client
/// messages before it handles a batch's Raft work and looks at `control` again. So a
/// client flood delays a heartbeat by one bounded batch, never by the whole client queue.
pub struct CoreInbox {
    pub control: mpsc::Receiver<CoreMsg>,
    pub clients: mpsc::Receiver<CoreMsg>,
}

impl CoreInbox {
    /// Waits for the next message, then takes what else is queued into `batch`: `control`
    /// first, at most `CLIENT_SHARE` client messages, at most `MAX_BATCH` in all. False once
    /// both queues are closed and empty.
    pub fn next_batch(&mut self, batch: &mut Vec<CoreMsg>) -> bool {
        let Some(first) = self.next_blocking() else {
            return false;
        };
        let mut client_msgs = usize::from(!from_control_queue(&first));
        batch.push(first);
        while batch.len() < MAX_BATCH {
            let msg = match self.control.try_recv() {
                Ok(msg) => msg,
                Err(_) if client_msgs < CLIENT_SHARE => match self.clients.try_recv() {
                    Ok(msg) => {
                        client_msgs += 1;
                        msg
                    }
                    Err(_) => break,
                },
                Err(_) => break,
            };
            batch.push(msg);
        }
        true
    }

    /// Waits on the core thread for the next message, `control` first; `None` once both
    /// queues are closed and empty.
    fn next_blocking(&mut self) -> Option<CoreMsg> {
        use std::task::Poll;
        let mut control_open = true;
        let mut clients_open = true;
        block_on(std::future::poll_fn(|cx| {
            if control_open {
                match self.control.poll_recv(cx) {
                    Poll::Ready(Some(msg)) => return Poll::Ready(Some(msg)),
                    Poll::Ready(None) => control_open = false,
                    Poll::Pending => {}
                }
            }
            if clients_open {
                match self.clients.poll_recv(cx) {
                    Poll::Ready(Some(msg)) => return Poll::Ready(Some(msg)),
                    Poll::Ready(None) => clients_open = false,
                    Poll::Pending => {}
                }
            }
            if control_open || clients_open {
                Poll::Pending
            } else {
                Poll::Ready(None)
            }
        }))
    }
}

/// Whether a message is of the kinds the control queue carries (only used to count the first
/// message of a batch against the client share).
fn from_control_queue(msg: &CoreMsg) -> bool {
    matches!(
        msg,
        CoreMsg::Tick
            | CoreMsg::Peer(_)
            | CoreMsg::PeerEvent(_)
            | CoreMsg::Admin { .. }
            | CoreMsg::Backup(_)
            | CoreMsg::Shutdown
    )
}

/// Runs a future to completion on this (non-async) thread, parking it while nothing is ready:
/// `blocking_recv` for two queues at once.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_never_behind_more_than_one_client_share() {
        let (control_tx, control) = mpsc::channel(16);
        let (clients_tx, clients) = mpsc::channel(10_000);
        let mut inbox = CoreInbox { control, clients };
        for conn in 0..5000 {
            clients_tx
                .try_send(CoreMsg::Disconnected { conn })
                .expect("room");
        }
        control_tx.try_send(CoreMsg::Tick).expect("room");
        let mut batch = Vec::new();
        assert!(inbox.next_batch(&mut batch));
        assert!(matches!(batch[0], CoreMsg::Tick), "control comes first");
        assert_eq!(batch.len(), 1 + CLIENT_SHARE);

        // A tick that arrives while a batch is handled leads the next one.
        batch.clear();
        control_tx.try_send(CoreMsg::Tick).expect("room");
        assert!(inbox.next_batch(&mut batch));
        assert!(matches!(batch[0], CoreMsg::Tick));
        assert!(matches!(batch[1], CoreMsg::Disconnected { conn: c } if c == CLIENT_SHARE as u64));

        // Client messages alone still come in batches of the share.
        batch.clear();
        assert!(inbox.next_batch(&mut batch));
        assert_eq!(batch.len(), CLIENT_SHARE);

        drop((control_tx, clients_tx));
        let mut left = 0;
        loop {
            batch.clear();
            if !inbox.next_batch(&mut batch) {
                break;
            }
            left += batch.len();
        }
        assert_eq!(left, 5000 - 3 * CLIENT_SHARE);
    }

    #[test]
    fn a_message_sent_from_another_thread_wakes_the_waiting_core() {
        let (control_tx, control) = mpsc::channel(1);
        let (_clients_tx, clients) = mpsc::channel(1);
        let mut inbox = CoreInbox { control, clients };
        let sender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            control_tx.blocking_send(CoreMsg::Tick).expect("open");
        });
        let mut batch = Vec::new();
        assert!(inbox.next_batch(&mut batch));
        assert!(matches!(batch[..], [CoreMsg::Tick]));
        sender.join().expect("sender");
    }
}
