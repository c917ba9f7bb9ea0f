//! The task that watches each grant while it is in the table and ends it when its session
//! is lost or its lease runs out.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Ending;
use super::table::{Inner, Slot};
use crate::recipe::{ConnectionState, ResourceName};

/// Watches grant `token` of `lock` (taken on session `generation`) until it leaves the table:
/// ends it as lost when its session is lost (every ephemeral node of that session is gone, so
/// another pod may hold the lock now), and as released when its lease runs out (renewals push
/// the deadline).
pub(super) async fn guard_grant(
    inner: Arc<Inner>,
    lock: ResourceName,
    token: i64,
    generation: u64,
) {
    let mut session = inner.session.subscribe();
    loop {
        let deadline = match inner.slots().get(&lock) {
            Some(Slot::Held(h)) if h.token == token => h.lease.as_ref().map(|l| l.deadline),
            _ => return,
        };
        let lost = {
            let snap = session.borrow_and_update();
            snap.closed || snap.generation != generation || snap.state == ConnectionState::Lost
        };
        if lost {
            if let Some(held) = inner.take(&lock, token) {
                // The node went with the session; the delete is a no-op kept for symmetry.
                let grant = inner.end(held, Ending::Lost("session lost"));
                tokio::spawn(async move { grant.release(Duration::from_secs(1)).await });
            }
            return;
        }
        if let Some(deadline) = deadline
            && Instant::now() >= deadline
        {
            let expired = {
                let mut slots = inner.slots();
                match slots.get(&lock) {
                    Some(Slot::Held(h))
                        if h.token == token
                            && h.lease
                                .as_ref()
                                .is_some_and(|l| Instant::now() >= l.deadline) =>
                    {
                        slots.remove(&lock)
                    }
                    _ => None,
                }
            };
            if let Some(Slot::Held(held)) = expired {
                inner.metrics.lease_expirations.inc();
                tracing::warn!(lock = %lock, token, "lease ran out; releasing the lock");
                let grant = inner.end(held, Ending::Released("lease ran out"));
                if let Err(e) = grant.release(inner.release_bound()).await {
                    tracing::warn!(lock = %lock, error = %e, "expired lock node not deleted yet; deletion continues");
                }
                return;
            }
            continue;
        }
        tokio::select! {
            _ = sleep_until(deadline) => {}
            changed = session.changed() => if changed.is_err() { return },
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
