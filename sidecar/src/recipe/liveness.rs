//! How long what a session holds certainly stands: the last time the ensemble heard from it,
//! kept fresh by a cheap probe, and the bound `validUntil` promises from it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use zookeeper_client as zk;

/// How much of the negotiated session timeout, counted from the last time the ensemble
/// certainly heard from this session, this pod may act on what it holds without hearing from
/// the ensemble again ([`SessionHandle::valid_until`]).
///
/// The bound: a ZooKeeper session expires only once the leader has not heard from it for the
/// whole negotiated timeout (ZooKeeper rounds expiry *up* to its next tick; a follower reports
/// the sessions it heard from to the leader, which only delays expiry; a new leader restarts
/// every session's clock). Every request touches the session when the server receives it, which
/// is after we sent it. So once a request sent at `t` is answered, the session lives, and its
/// ephemeral nodes (leadership, locks) stand, until at least `t + timeout` on the server's
/// clock. We promise only `t + 2/3 × timeout` on our own monotonic clock: the remaining third
/// absorbs a difference in clock rates, a pause of this process, and the app's own delay
/// between reading the answer and acting on it. 2/3 is also the ZooKeeper client's read
/// timeout: a client that has heard nothing for that long declares itself disconnected
/// (SUSPENDED here, which ends leadership in our answers anyway).
const SAFE_FRACTION: (u32, u32) = (2, 3);

/// How often a session is probed (a cheap `exists` on `/`), as a fraction of the negotiated
/// timeout: often enough that `validUntil` stays well ahead of now, and about as often as
/// the client library would ping an idle session (which our probe then makes unnecessary).
const PROBE_DIVISOR: u32 = 4;

/// The last time the ensemble certainly heard from a session: the send time of the newest
/// request it answered (or of the connect attempt that created the session).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Heard {
    generation: u64,
    at: Instant,
    /// The negotiated session timeout.
    timeout: Duration,
}

#[derive(Debug, Default)]
pub(super) struct Liveness(Mutex<Option<Heard>>);

impl Liveness {
    fn get(&self) -> Option<Heard> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that session `generation` was heard at `at` (never moving backwards).
    pub(super) fn heard(&self, generation: u64, at: Instant, timeout: Duration) {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let newer = match *last {
            Some(h) if h.generation == generation => at > h.at,
            Some(h) => generation > h.generation,
            None => true,
        };
        if newer {
            *last = Some(Heard {
                generation,
                at,
                timeout,
            });
        }
    }

    /// See [`super::SessionHandle::valid_until`].
    pub(super) fn valid_until(&self, generation: u64) -> Option<SystemTime> {
        let heard = self.get().filter(|h| h.generation == generation)?;
        let (num, den) = SAFE_FRACTION;
        let deadline = heard.at + heard.timeout * num / den;
        let now = Instant::now();
        let wall = SystemTime::now();
        Some(match deadline.checked_duration_since(now) {
            Some(left) => wall + left,
            None => wall - now.duration_since(deadline),
        })
    }
}

/// Keeps [`Liveness`] fresh for session `generation`: an `exists` on `/` every quarter of the
/// negotiated timeout while connected (and at once after a reconnection), recording the send
/// time of each one answered.
pub(super) async fn probe(client: zk::Client, generation: u64, liveness: Arc<Liveness>) {
    let timeout = client.session_timeout();
    let every = (timeout / PROBE_DIVISOR).max(Duration::from_millis(100));
    let mut states = client.state_watcher();
    loop {
        if matches!(
            client.state(),
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly
        ) {
            let sent = Instant::now();
            // Any answer the server made proves it heard us; a lost connection does not.
            if let Ok(Ok(_) | Err(zk::Error::NoAuth)) =
                tokio::time::timeout(timeout, client.check_stat("/")).await
            {
                liveness.heard(generation, sent, timeout);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            state = states.changed() => if state.is_terminated() { return },
        }
    }
}
