//! Leader election: candidates queue as `/baton/<namespace>/elections/<name>/candidate-<seq>`, the lowest
//! sequence leads, and each candidate watches only its predecessor.
//!
//! [`ElectionRecipe::start`] spawns one candidate task that owns the candidacy; the handle
//! reads its published [`ElectionView`] and sends it commands (resign, refresh, leave).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::election_task::CandidateTask;
use super::election_types::{Candidate, Command, ElectionView, Interest};
use super::{ConnectionState, RecipeError, ResourceName, SessionHandle};

/// While alive, the candidate task watches the leader's node as well as its predecessor, so
/// every leader change reaches the published view ([`ElectionRecipe::follow_leader`]).
#[must_use = "the leader is watched only while this is held"]
pub struct LeaderInterest(Arc<Interest>);

impl Drop for LeaderInterest {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why a candidacy stands: the app is healthy ([`ElectionRecipe::set_standing`]) and, with an
/// app-held candidacy, the app campaigns ([`ElectionRecipe::set_campaigning`]). Both must hold,
/// so a recovering app does not stand for an app that is not campaigning, and the reverse.
struct Standing {
    /// (healthy, campaigning)
    reasons: std::sync::Mutex<(bool, bool)>,
    tx: watch::Sender<bool>,
}

impl Standing {
    fn update(&self, change: impl FnOnce(&mut (bool, bool))) {
        let mut reasons = self.reasons.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut reasons);
        let standing = reasons.0 && reasons.1;
        self.tx
            .send_if_modified(|s| std::mem::replace(s, standing) != standing);
    }
}

/// A running candidacy in one election. Cloneable; the candidacy ends with [`Self::leave`].
#[derive(Clone)]
pub struct ElectionRecipe {
    name: ResourceName,
    session: SessionHandle,
    view: watch::Receiver<ElectionView>,
    commands: mpsc::Sender<Command>,
    interest: Arc<Interest>,
    standing: Arc<Standing>,
    task: Arc<std::sync::Mutex<Option<JoinHandle<()>>>>,
}

impl ElectionRecipe {
    /// Joins election `name` as `candidate` and keeps the candidacy alive across
    /// disconnections and lost sessions (re-entering at the back after a loss).
    pub fn start(session: SessionHandle, name: ResourceName, candidate: Candidate) -> Self {
        Self::start_as(session, name, candidate, true)
    }

    /// [`Self::start`], standing only while [`Self::set_campaigning`] says so when
    /// `campaigning` is false at first (an app-held candidacy, `--candidacy app`): the task
    /// still publishes who leads meanwhile.
    pub fn start_as(
        session: SessionHandle,
        name: ResourceName,
        candidate: Candidate,
        campaigning: bool,
    ) -> Self {
        let (view_tx, view_rx) = watch::channel(ElectionView::empty(name.clone()));
        let (cmd_tx, cmd_rx) = mpsc::channel(16);
        let interest = Arc::new(Interest::default());
        let (standing_tx, standing_rx) = watch::channel(campaigning);
        let task = CandidateTask::new(
            session.clone(),
            name.clone(),
            candidate,
            view_tx,
            cmd_rx,
            interest.clone(),
            standing_rx,
        );
        let join = tokio::spawn(task.run());
        Self {
            name,
            session,
            view: view_rx,
            commands: cmd_tx,
            interest,
            standing: Arc::new(Standing {
                reasons: std::sync::Mutex::new((true, campaigning)),
                tx: standing_tx,
            }),
            task: Arc::new(std::sync::Mutex::new(Some(join))),
        }
    }

    /// Stands in the election (`true`, the default) or stands aside (`false`): the
    /// candidacy is withdrawn (stepping down if leading, so the next candidate leads) and not
    /// renewed until standing again, when it queues at the back. The view keeps showing who
    /// leads meanwhile. App health's switch: the candidacy stands only while
    /// [`Self::set_campaigning`] also says so.
    pub fn set_standing(&self, standing: bool) {
        self.standing.update(|r| r.0 = standing);
    }

    /// An app-held candidacy: stands while the app campaigns (`true`), withdraws as
    /// [`Self::set_standing`] does when it stops.
    pub fn set_campaigning(&self, campaigning: bool) {
        self.standing.update(|r| r.1 = campaigning);
    }

    /// Whether this process stands in the election (see [`Self::set_standing`]).
    pub fn is_standing(&self) -> bool {
        *self.standing.tx.borrow()
    }

    /// The election's name.
    pub fn name(&self) -> &ResourceName {
        &self.name
    }

    /// The latest view, with `is_leader` cleared unless the session is CONNECTED right now (the
    /// task may not have processed a disconnection yet).
    pub fn view(&self) -> ElectionView {
        self.masked(self.view.borrow().clone())
    }

    /// Whether this process leads right now.
    pub fn is_leader(&self) -> bool {
        self.view().is_leader
    }

    fn masked(&self, mut view: ElectionView) -> ElectionView {
        let snap = self.session.snapshot();
        if snap.state != ConnectionState::Connected || snap.generation != view.generation {
            view.is_leader = false;
            view.state = snap.state;
        }
        view
    }

    /// A receiver of every view the task publishes (unmasked: combine with the session state).
    pub fn subscribe(&self) -> watch::Receiver<ElectionView> {
        self.view.clone()
    }

    /// Re-reads who leads (so followers far from the head are not stale) and returns the
    /// view; falls back to the last view if the task cannot answer within `bound`.
    pub async fn refresh(&self, bound: std::time::Duration) -> ElectionView {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Refresh(tx)).await.is_ok() {
            let _ = tokio::time::timeout(bound, rx).await;
        }
        self.view()
    }

    /// Waits until the leader's token differs from `token` (0: until there is a leader) or
    /// `deadline` passes, and returns the view then. While it waits, the task watches the
    /// leader's node, so a change anywhere in the queue is seen.
    pub async fn wait_for_leader_change(&self, token: i64, deadline: Instant) -> ElectionView {
        let _interest = self.follow_leader();
        let mut views = self.view.clone();
        let mut session = self.session.subscribe();
        loop {
            let view = self.masked(views.borrow_and_update().clone());
            if view.leader_token() != token {
                return view;
            }
            tokio::select! {
                changed = views.changed() => if changed.is_err() { return view },
                changed = session.changed() => if changed.is_err() { return view },
                _ = tokio::time::sleep_until(deadline) => return view,
            }
        }
    }

    /// Makes the candidate task watch the leader until the returned value is dropped: a
    /// follower otherwise watches only its predecessor (no herd effect), and learns of a new
    /// leader further ahead only when asked.
    pub fn follow_leader(&self) -> LeaderInterest {
        self.interest.waiting.fetch_add(1, Ordering::SeqCst);
        self.interest.arrived.notify_one();
        LeaderInterest(self.interest.clone())
    }

    /// Steps down if this process leads and queues again at the back. `Ok(true)` if it led.
    pub async fn resign(&self) -> Result<bool, RecipeError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Resign(tx))
            .await
            .map_err(|_| RecipeError::ShuttingDown)?;
        rx.await.map_err(|_| RecipeError::ShuttingDown)?
    }

    /// Withdraws the candidacy (deleting the node if connected) and stops the task.
    pub async fn leave(&self) {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Leave(tx)).await.is_ok() {
            let _ = rx.await;
        }
        let join = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(join) = join {
            let _ = join.await;
        }
    }
}
