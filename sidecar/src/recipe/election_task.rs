//! The task behind an [`ElectionRecipe`](super::ElectionRecipe): it owns the candidate node,
//! decides leadership from the folder's order, and publishes what it sees. How it reads the
//! folder (where our node stands, who leads) is in `election_folder`.
//!
//! Every ZooKeeper call is raced against the session leaving CONNECTED, so the task answers
//! commands and reports SUSPENDED promptly instead of hanging on a queued request.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot, watch};
use zookeeper_client as zk;

use super::election_folder::{Evaluation, evaluate, observe};
use super::election_types::{
    Candidate, CandidateData, Command, ElectionView, Interest, LeaderInfo,
};
use super::owned_node::{OwnedCreate, OwnedNode, delete_node};
use super::queue::NodeKind;
use super::timestamp::rfc3339;
use super::{Connection, ConnectionState, RecipeError, ResourceName, SessionHandle};

/// How long to wait before retrying after an unexpected ensemble error.
const ERROR_BACKOFF: Duration = Duration::from_secs(1);

/// What the task does after one step.
enum Flow {
    Continue,
    Stop,
}

pub(crate) struct CandidateTask {
    session: SessionHandle,
    name: ResourceName,
    dir: String,
    candidate: Candidate,
    view: watch::Sender<ElectionView>,
    commands: mpsc::Receiver<Command>,
    interest: Arc<Interest>,
    /// False while the candidacy stands aside ([`super::ElectionRecipe::set_standing`]).
    standing: watch::Receiver<bool>,
    /// Session generation the fields below belong to.
    generation: u64,
    create: Option<OwnedCreate>,
    node: Option<OwnedNode>,
    leader_since: Option<SystemTime>,
    refreshes: Vec<oneshot::Sender<()>>,
}

/// Runs `op` unless session `generation` stops being CONNECTED first.
async fn guarded<T>(
    session: &SessionHandle,
    generation: u64,
    op: impl Future<Output = Result<T, RecipeError>>,
) -> Result<T, RecipeError> {
    tokio::select! {
        result = op => result,
        _ = session.left_connected(generation) => Err(RecipeError::Suspended),
    }
}

async fn changed(watcher: Option<zk::OneshotWatcher>) {
    match watcher {
        Some(w) => {
            w.changed().await;
        }
        None => std::future::pending().await,
    }
}

impl CandidateTask {
    pub(crate) fn new(
        session: SessionHandle,
        name: ResourceName,
        candidate: Candidate,
        view: watch::Sender<ElectionView>,
        commands: mpsc::Receiver<Command>,
        interest: Arc<Interest>,
        standing: watch::Receiver<bool>,
    ) -> Self {
        Self {
            dir: name.election_dir(session.namespace()),
            session,
            name,
            candidate,
            view,
            commands,
            interest,
            standing,
            generation: 0,
            create: None,
            node: None,
            leader_since: None,
            refreshes: Vec::new(),
        }
    }

    pub(crate) async fn run(mut self) {
        let mut min_generation = 1;
        loop {
            let Some(conn) = self.await_connected(min_generation).await else {
                break;
            };
            if conn.generation != self.generation {
                // A new session: the old one's node died with it.
                self.generation = conn.generation;
                self.create = None;
                self.node = None;
                self.leader_since = None;
            }
            let standing = *self.standing.borrow_and_update();
            let step = if standing {
                self.step(&conn).await
            } else {
                self.aside(&conn).await
            };
            match step {
                Ok(Flow::Continue) | Err(RecipeError::Suspended) => {}
                Ok(Flow::Stop) | Err(RecipeError::ShuttingDown) => break,
                Err(RecipeError::SessionLost) => min_generation = conn.generation + 1,
                Err(e) => {
                    tracing::warn!(election = %self.name, error = %e, "election step failed; retrying");
                    self.step_down("error");
                    self.unpublish_leadership();
                    if !self.pause(ERROR_BACKOFF).await {
                        break;
                    }
                }
            }
        }
        self.step_down("left");
        self.unpublish_leadership();
        self.answer_refreshes();
    }

    /// One round: make sure we are queued, look at the folder, publish, wait for a change.
    async fn step(&mut self, conn: &Connection) -> Result<Flow, RecipeError> {
        let session = self.session.clone();
        let generation = conn.generation;
        let client = &conn.client;
        if self.node.is_none() {
            if self.create.is_none() {
                self.create = Some(self.new_candidacy(conn));
            }
            let Some(create) = self.create.as_mut() else {
                return Ok(Flow::Continue);
            };
            let node = guarded(&session, generation, create.run(client)).await?;
            tracing::info!(election = %self.name, node = %node.name, "queued as a candidate");
            self.node = Some(node);
        }
        let Some(node) = self.node.clone() else {
            return Ok(Flow::Continue);
        };
        let watch_leader = self.interest.waiting.load(Ordering::SeqCst) > 0;
        let evaluation = guarded(
            &session,
            generation,
            evaluate(
                client,
                &self.dir,
                &node,
                watch_leader,
                self.session.ignored_nodes(),
            ),
        )
        .await?;
        let (own, predecessor, leader_watch, behind_leader) = match evaluation {
            Evaluation::Missing => {
                tracing::warn!(election = %self.name, node = %node.name, "our candidate node is gone; queueing again");
                self.node = None;
                self.create = None;
                self.step_down("node deleted");
                return Ok(Flow::Continue);
            }
            Evaluation::Again => return Ok(Flow::Continue),
            Evaluation::Leading { own } => {
                if self.leader_since.is_none() {
                    let now = SystemTime::now();
                    self.leader_since = Some(now);
                    tracing::info!(election = %self.name, token = node.czxid, "became the leader");
                    self.publish(Some(self.own_leader_info(&node, now)), true);
                    // Tell followers when this term began; leadership does not depend on it.
                    let data = self.data(now, self.create.as_ref().map(|c| c.owner()));
                    let write = async {
                        client
                            .set_data(&node.path, &data, None)
                            .await
                            .map_err(|e| RecipeError::from_zk("set", &node.path, e))
                    };
                    if let Err(e) = guarded(&session, generation, write).await {
                        if !matches!(e, RecipeError::ZooKeeper { .. }) {
                            return Err(e);
                        }
                        tracing::warn!(election = %self.name, error = %e, "could not record when this term began");
                    }
                }
                let since = self.leader_since.unwrap_or_else(SystemTime::now);
                self.publish(Some(self.own_leader_info(&node, since)), true);
                (Some(own), None, None, false)
            }
            Evaluation::Following {
                leader,
                predecessor,
                leader_watch,
                behind_leader,
            } => {
                self.step_down("follower");
                self.publish(Some(leader), false);
                (None, Some(predecessor), leader_watch, behind_leader)
            }
        };
        self.answer_refreshes();
        // A new long-poller needs a fresh look only if nothing watches the leader yet: the
        // leader watches itself, and the candidate right behind it watches it as predecessor.
        let watching_leader = own.is_some() || leader_watch.is_some() || behind_leader;
        tokio::select! {
            _ = changed(own) => Ok(Flow::Continue),
            _ = changed(predecessor) => Ok(Flow::Continue),
            _ = changed(leader_watch) => Ok(Flow::Continue),
            _ = session.left_connected(generation) => Ok(Flow::Continue),
            _ = self.interest.arrived.notified(), if !watching_leader => Ok(Flow::Continue),
            Ok(()) = self.standing.changed() => Ok(Flow::Continue),
            command = self.commands.recv() => self.handle(command, conn, &node).await,
        }
    }

    /// One round while standing aside: withdraw our node if we have one (stepping down
    /// first), then publish who leads and wait for a change, a command, or standing again.
    async fn aside(&mut self, conn: &Connection) -> Result<Flow, RecipeError> {
        let session = self.session.clone();
        let generation = conn.generation;
        let client = &conn.client;
        if self.node.is_some() || self.create.as_ref().is_some_and(OwnedCreate::maybe_created) {
            self.step_down("standing aside");
            self.unpublish_leadership();
            let known = self.node.clone();
            if let Some(create) = self.create.as_mut() {
                guarded(&session, generation, create.cleanup(client, known.as_ref())).await?;
            } else if let Some(node) = &known {
                guarded(&session, generation, delete_node(client, &node.path)).await?;
            }
            tracing::info!(election = %self.name, "stood aside: candidacy withdrawn");
        }
        self.node = None;
        self.create = None;
        let (leader, watch) = guarded(
            &session,
            generation,
            observe(client, &self.dir, self.session.ignored_nodes()),
        )
        .await?;
        self.publish(leader, false);
        self.answer_refreshes();
        tokio::select! {
            _ = changed(watch) => Ok(Flow::Continue),
            _ = session.left_connected(generation) => Ok(Flow::Continue),
            Ok(()) = self.standing.changed() => Ok(Flow::Continue),
            command = self.commands.recv() => match command {
                Some(Command::Refresh(reply)) => {
                    self.refreshes.push(reply);
                    Ok(Flow::Continue)
                }
                Some(Command::Resign(reply)) => {
                    let _ = reply.send(Ok(false));
                    Ok(Flow::Continue)
                }
                Some(Command::Leave(reply)) => {
                    let _ = reply.send(());
                    Ok(Flow::Stop)
                }
                None => Ok(Flow::Stop),
            },
        }
    }

    async fn handle(
        &mut self,
        command: Option<Command>,
        conn: &Connection,
        node: &OwnedNode,
    ) -> Result<Flow, RecipeError> {
        match command {
            Some(Command::Refresh(reply)) => {
                self.refreshes.push(reply);
                Ok(Flow::Continue)
            }
            Some(Command::Resign(reply)) => {
                if self.leader_since.is_none() {
                    let _ = reply.send(Ok(false));
                    return Ok(Flow::Continue);
                }
                match self.withdraw("resigned", conn, node).await {
                    Ok(()) => {
                        tracing::info!(election = %self.name, node = %node.name, "resigned; queueing again at the back");
                        self.node = None;
                        self.create = None;
                        let _ = reply.send(Ok(true));
                        Ok(Flow::Continue)
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e.clone()));
                        Err(e)
                    }
                }
            }
            Some(Command::Leave(reply)) => {
                if let Err(e) = self.withdraw("leaving", conn, node).await {
                    tracing::warn!(election = %self.name, error = %e, "could not withdraw the candidacy; it ends with the session");
                }
                self.node = None;
                let _ = reply.send(());
                Ok(Flow::Stop)
            }
            None => Ok(Flow::Stop),
        }
    }

    /// Publishes the disconnected state and serves commands until a session of
    /// `min_generation` or later is CONNECTED; `None` when the task must stop.
    async fn await_connected(&mut self, min_generation: u64) -> Option<Connection> {
        let mut updates = self.session.subscribe();
        loop {
            if let Some(conn) = self.session.connected_now()
                && conn.generation >= min_generation
            {
                return Some(conn);
            }
            let snap = updates.borrow_and_update().clone();
            if snap.closed {
                return None;
            }
            self.step_down("disconnected");
            self.view.send_if_modified(|v| {
                let mut next = v.clone();
                next.is_leader = false;
                next.state = snap.state;
                if snap.state == ConnectionState::Lost {
                    next.leader = None;
                    next.node = None;
                }
                let modified = next != *v;
                *v = next;
                modified
            });
            self.answer_refreshes();
            tokio::select! {
                changed = updates.changed() => if changed.is_err() { return None },
                command = self.commands.recv() => if !self.answer_while_idle(command) { return None },
            }
        }
    }

    /// Sleeps `delay` while answering commands; false when the task must stop.
    async fn pause(&mut self, delay: Duration) -> bool {
        let until = tokio::time::Instant::now() + delay;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return true,
                command = self.commands.recv() => if !self.answer_while_idle(command) { return false },
            }
        }
    }

    /// Answers a command when nothing can be done on the ensemble; false on leave.
    fn answer_while_idle(&mut self, command: Option<Command>) -> bool {
        match command {
            Some(Command::Refresh(reply)) => {
                let _ = reply.send(());
                true
            }
            Some(Command::Resign(reply)) => {
                let _ = reply.send(Err(RecipeError::Suspended));
                true
            }
            Some(Command::Leave(reply)) => {
                let _ = reply.send(());
                false
            }
            None => false,
        }
    }

    fn new_candidacy(&self, conn: &Connection) -> OwnedCreate {
        let owner = self.session.next_owner_id(&self.candidate.identity, conn);
        let data = self.data(SystemTime::now(), Some(&owner));
        let namespace = self.session.namespace();
        OwnedCreate::new(
            namespace,
            namespace.elections(),
            self.dir.clone(),
            NodeKind::Candidate.prefix(),
            owner,
            data,
            self.session.acls(),
        )
    }

    fn data(&self, since: SystemTime, owner: Option<&str>) -> Vec<u8> {
        let data = CandidateData {
            identity: self.candidate.identity.clone(),
            address: self.candidate.address.clone(),
            pod: self.candidate.pod.clone(),
            since: rfc3339(since),
            owner: owner.map(str::to_owned),
        };
        // Serializing plain strings cannot fail; an empty body would only hide the owner.
        serde_json::to_vec(&data).unwrap_or_default()
    }

    fn own_leader_info(&self, node: &OwnedNode, since: SystemTime) -> LeaderInfo {
        LeaderInfo {
            identity: self.candidate.identity.clone(),
            address: self.candidate.address.clone(),
            pod: self.candidate.pod.clone(),
            since: rfc3339(since),
            token: node.czxid,
            node: node.name.clone(),
        }
    }

    /// Steps down (saying `why`) and deletes our node, unless the session leaves CONNECTED
    /// first. Leadership is unpublished before the node goes, so no instant has two leaders.
    async fn withdraw(
        &mut self,
        why: &'static str,
        conn: &Connection,
        node: &OwnedNode,
    ) -> Result<(), RecipeError> {
        self.step_down(why);
        self.unpublish_leadership();
        let delete = delete_node(&conn.client, &node.path);
        guarded(&self.session, conn.generation, delete).await
    }

    /// Stops claiming leadership in the published view before our node goes: the leader is
    /// then unknown (not us) until the next look at the folder.
    fn unpublish_leadership(&self) {
        self.view.send_modify(|v| {
            v.is_leader = false;
            v.leader = None;
            v.leader_since = None;
        });
    }

    /// Forgets leadership (logging a step-down if we led).
    fn step_down(&mut self, why: &'static str) {
        if self.leader_since.take().is_some() {
            tracing::info!(election = %self.name, why, "no longer the leader");
        }
    }

    fn publish(&self, leader: Option<LeaderInfo>, is_leader: bool) {
        let next = ElectionView {
            election: self.name.clone(),
            leader,
            is_leader,
            state: ConnectionState::Connected,
            node: self.node.as_ref().map(|n| n.name.clone()),
            leader_since: if is_leader { self.leader_since } else { None },
            generation: self.generation,
        };
        self.view.send_if_modified(|v| {
            let modified = *v != next;
            *v = next;
            modified
        });
    }

    fn answer_refreshes(&mut self) {
        for reply in self.refreshes.drain(..) {
            let _ = reply.send(());
        }
    }
}
