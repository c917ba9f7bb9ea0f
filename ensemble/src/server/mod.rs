//! The client port: accepts connections (up to a limit) and runs one task pair per connection.

mod connection;
pub mod four_letter;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::core::CoreMsg;
use crate::status::Status;

/// What every connection task shares.
#[derive(Clone)]
pub struct ClientContext {
    pub core: mpsc::Sender<CoreMsg>,
    pub status: watch::Receiver<Status>,
    pub max_frame_bytes: usize,
}

/// Accepts clients until `shutdown` fires. Connections over `max_connections` are closed at once.
pub async fn serve_clients(
    listener: TcpListener,
    ctx: ClientContext,
    max_connections: usize,
    mut shutdown: watch::Receiver<bool>,
) {
    let limit = Arc::new(Semaphore::new(max_connections));
    let next_id = AtomicU64::new(1);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.changed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // EMFILE and friends: back off briefly rather than spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            tracing::warn!(%peer, max_connections, "too many client connections; refusing");
            drop(stream);
            continue;
        };
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        let ctx = ctx.clone();
        tokio::spawn(async move {
            connection::serve(stream, peer, id, ctx).await;
            drop(permit);
        });
    }
}
