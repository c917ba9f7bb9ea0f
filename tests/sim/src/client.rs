//! Simulated ZooKeeper clients. They speak to a member's core exactly as a connection task
//! does (decoded requests in, encoded frames out) and record what they saw. A register client
//! reads and writes a few znodes; a lock client runs the sidecar's recipe (ephemeral
//! sequential node, watch only the predecessor, the node's czxid as fencing token, and only
//! live ephemeral nodes count); a squatter plants persistent nodes in the queues that must
//! never lead or hold.

mod barrier;

use std::collections::{BTreeSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};

use baton_checker::{Call, Failure, Outcome, Reply};
use baton_ensemble::core::{
    ConnId, ConnectOutcome, CoreMsg, IdentityVerdict, Outbound, OutboundRx,
    unlimited_outbound_queue,
};
use baton_machine::tenancy::K8S_SCHEME;
use baton_proto::{
    ConnectRequest, CreateMode, CreateRequest, DeleteRequest, ErrorCode, Id, OpCode,
    PathWatchRequest, Request, Response, SetDataRequest, codec, open_acl_unsafe, xid,
};
use baton_sidecar::recipe::queue::{NodeKind, Queue};
use rand::Rng;
use rand::rngs::StdRng;
use tokio::sync::oneshot;

pub use barrier::is_marked;
use barrier::{BarrierOp, BarrierRun};

use crate::record::{Grant, Recorder, Ticket};
use crate::time::{MS, Micros, SECOND};

/// The session timeout clients ask for.
pub const SESSION_TIMEOUT_MS: i32 = 2_000;
/// A request unanswered this long means the connection is gone (ZooKeeper's read timeout is
/// two thirds of the session timeout).
const REQUEST_TIMEOUT: Micros = 2 * SESSION_TIMEOUT_MS as u64 * MS / 3;
const PING_EVERY: Micros = SESSION_TIMEOUT_MS as u64 * MS / 3;

/// What a client does.
#[derive(Debug, Clone)]
pub enum Role {
    /// Reads and writes these znodes.
    Register { keys: Vec<String> },
    /// Takes and releases the lock (or leadership) in `dir`, holding it up to `hold`.
    Lock {
        dir: String,
        kind: NodeKind,
        hold: Micros,
    },
    /// Creates these persistent znodes in order, then does nothing.
    Setup { paths: Vec<String> },
    /// Plants persistent nodes in these queues (folder, kinds of node it holds) with names
    /// below every live node's and data naming other clients, as a hostile client would.
    Squatter { queues: Vec<(String, NodeKind)> },
    /// Enters the double barrier in `dir` of `parties` parties, passes, leaves, again.
    Barrier { dir: String, parties: u32 },
}

/// The Kubernetes namespace of the recipe folders (`/baton/default/...`).
pub const SIM_NAMESPACE: &str = "default";

/// How many connections of a recipe client in ten authenticate as a pod of
/// [`SIM_NAMESPACE`] (as a sidecar does); the others stay anonymous, as a plain ZooKeeper
/// client is, so while the tenancy policy is on their recipe requests are refused NoAuth, and
/// a policy turned on under a waiting anonymous client shows whether its watch still fires.
const AUTHENTICATED_IN_TEN: u32 = 7;

/// How many nodes a squatter plants per queue over a run.
pub const PLANTS_PER_QUEUE: usize = 4;

/// What a client asks the world to do.
#[derive(Debug)]
pub enum Action {
    /// Deliver to member `member` (its incarnation `incarnation`).
    ToMember {
        member: u64,
        incarnation: u64,
        msg: CoreMsg,
    },
    /// Wake this client at the time given.
    WakeAt(Micros),
}

struct Conn {
    member: u64,
    incarnation: u64,
    id: ConnId,
    rx: OutboundRx,
    _done: oneshot::Receiver<ConnectOutcome>,
    session: Option<i64>,
    opened: Micros,
    last_sent: Micros,
    /// The identity this connection proves once its session is established, if any.
    identity: Option<Id>,
}

#[derive(Debug, Clone, Copy)]
enum Purpose {
    Write(Ticket),
    /// The `sync` in front of a checked read.
    Sync(Ticket),
    Read(Ticket),
    Ping,
    LockCreate,
    LockChildren,
    /// A semaphore waiter's listing with a children watch: any earlier node leaving may
    /// grant it.
    PermitWatch,
    /// A semaphore waiter's `exists` on a node before its own: a planted (persistent) one is
    /// skipped, as the sidecar skips it.
    PermitCheck,
    LockWatch,
    LockRelease,
    Setup,
    /// A squatter's listing of queue `usize` before it plants there.
    SquatList(usize),
    SquatPlant,
    Barrier(BarrierOp),
    /// The connection's Kubernetes identity (what the connection task's TokenReview grants).
    Auth,
}

struct InFlight {
    xid: i32,
    opcode: OpCode,
    purpose: Purpose,
    sent: Micros,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum LockState {
    Idle,
    Busy,
    /// Waiting for the predecessor's deletion.
    Watching {
        predecessor: String,
    },
    Holding {
        until: Micros,
    },
}

pub struct Client {
    pub id: usize,
    role: Role,
    /// Bumped per connection: frames of an earlier connection are ignored.
    pub generation: u64,
    conn: Option<Conn>,
    next_conn_at: Micros,
    next_xid: i32,
    inflight: VecDeque<InFlight>,
    last_zxid: i64,
    counter: u64,
    /// When the next operation may start.
    next_op_at: Micros,
    /// The client stops starting operations at this time (the run is settling).
    pub stop_at: Micros,
    lock: LockState,
    my_node: Option<(String, i64)>,
    /// Sync whose result decides whether the next read is checked.
    sync_ok: Option<bool>,
    /// When the last request other than a ping was answered.
    pub last_answer: Micros,
    /// Setup paths created so far.
    created: usize,
    /// The queue as last listed, minus the planted nodes found in it: whom to wait for next
    /// once a would-be predecessor turns out to be persistent.
    queue: Option<Queue>,
    /// Nodes a squatter has planted (full paths).
    pub planted: Vec<String>,
    barrier: BarrierRun,
    /// Semaphore nodes (names) found live and ephemeral in this look, and found planted (a
    /// planted name stays planted: no real node is ever created below the folder's counter).
    ephemeral_seen: BTreeSet<String>,
    planted_seen: BTreeSet<String>,
    /// Whether the semaphore look in progress came from a listing that set a children watch.
    watched_listing: bool,
    /// That watch fired while the look was still reading: list again rather than wait.
    permit_dirty: bool,
    /// The semaphore node a `PermitCheck` in flight asks about.
    checking: Option<String>,
    /// A deliberate bug: a barrier client passes with one party fewer than asked for.
    pub short_barrier: bool,
}

/// Whether a member's error answer to a write means the write never took effect. A refusal by
/// a quota, the disk alarm or the tenancy policy (BadArguments, NoAuth), or of a session the
/// ensemble no longer has or that another member owns, is decided before the write changes
/// anything. ConnectionLoss (a proposal dropped when its leader stepped down may still commit)
/// and SystemError say nothing either way. Recording a refusal as unknown is not wrong, but each
/// one the checker must consider placing or not doubles its search.
fn refused(err: ErrorCode) -> bool {
    matches!(
        err,
        ErrorCode::BadArguments
            | ErrorCode::NoAuth
            | ErrorCode::InvalidAcl
            | ErrorCode::NotEmpty
            | ErrorCode::SessionExpired
            | ErrorCode::SessionMoved
    )
}

/// Conn ids are unique across the whole run.
fn conn_id(client: usize, generation: u64) -> ConnId {
    ((client as u64) << 32) | generation
}

impl Client {
    /// A new client; it starts operations until `stop_at`, which is never until it is set.
    pub fn new(id: usize, role: Role) -> Client {
        Client {
            id,
            role,
            generation: 0,
            conn: None,
            next_conn_at: 0,
            next_xid: 1,
            inflight: VecDeque::new(),
            last_zxid: 0,
            counter: 0,
            next_op_at: 0,
            stop_at: Micros::MAX,
            lock: LockState::Idle,
            my_node: None,
            sync_ok: None,
            last_answer: 0,
            created: 0,
            queue: None,
            planted: Vec::new(),
            barrier: BarrierRun::default(),
            ephemeral_seen: BTreeSet::new(),
            planted_seen: BTreeSet::new(),
            checking: None,
            watched_listing: false,
            permit_dirty: false,
            short_barrier: false,
        }
    }

    /// The member this client is connected to, if any.
    pub fn member(&self) -> Option<(u64, u64)> {
        self.conn.as_ref().map(|c| (c.member, c.incarnation))
    }

    /// The session the ensemble gave this client's current connection.
    pub fn session(&self) -> Option<i64> {
        self.conn.as_ref().and_then(|c| c.session)
    }

    /// Whether a setup client has created all its paths.
    pub fn is_set_up(&self) -> bool {
        matches!(&self.role, Role::Setup { paths } if self.created == paths.len())
    }

    /// Whether the client owes no answers after the heal (setup done, or a squatter, which
    /// stops once it has planted).
    pub fn is_passive(&self) -> bool {
        self.is_set_up() || matches!(self.role, Role::Squatter { .. })
    }

    /// The node this client believes it holds (full path), if it does.
    pub fn holding(&self) -> Option<&str> {
        match (&self.lock, &self.my_node) {
            (LockState::Holding { .. }, Some((node, _))) => Some(node),
            _ => None,
        }
    }

    /// The actor id in the history: one sequential actor per connection.
    fn actor(&self) -> u64 {
        conn_id(self.id, self.generation)
    }

    /// Frames the member queued for this client since the last call.
    pub fn take_frames(&mut self) -> Vec<Outbound> {
        let mut out = Vec::new();
        if let Some(conn) = &mut self.conn {
            while let Some(frame) = conn.rx.try_recv() {
                out.push(frame);
            }
        }
        out
    }

    /// Connects, sends or gives up as time requires.
    pub fn wake(
        &mut self,
        now: Micros,
        members: &[(u64, u64, bool)],
        rng: &mut StdRng,
        rec: &mut Recorder,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        let Some(conn) = &self.conn else {
            if now >= self.next_conn_at {
                self.connect(now, members, rng, &mut actions);
            } else {
                actions.push(Action::WakeAt(self.next_conn_at));
            }
            return actions;
        };
        let stuck_since = match (conn.session, self.inflight.front()) {
            (None, _) => Some(conn.opened),
            (Some(_), Some(f)) => Some(f.sent),
            (Some(_), None) => None,
        };
        if stuck_since.is_some_and(|t| now >= t + REQUEST_TIMEOUT) {
            return self.lose_connection(now, rng, rec, true);
        }
        if conn.session.is_some() {
            self.act(now, rng, rec, &mut actions);
        }
        if let Some(conn) = &self.conn
            && conn.session.is_some()
            && self.inflight.is_empty()
            && now >= conn.last_sent + PING_EVERY
        {
            self.send(now, Request::Ping, Purpose::Ping, &mut actions);
        }
        actions.push(Action::WakeAt(now + 20 * MS));
        actions
    }

    fn connect(
        &mut self,
        now: Micros,
        members: &[(u64, u64, bool)],
        rng: &mut StdRng,
        actions: &mut Vec<Action>,
    ) {
        let up: Vec<&(u64, u64, bool)> = members.iter().filter(|m| m.2).collect();
        if up.is_empty() {
            self.next_conn_at = now + 200 * MS;
            actions.push(Action::WakeAt(self.next_conn_at));
            return;
        }
        let &&(member, incarnation, _) = &up[rng.random_range(0..up.len())];
        self.generation += 1;
        let id = conn_id(self.id, self.generation);
        let (out, rx) = unlimited_outbound_queue();
        let (done, done_rx) = oneshot::channel();
        let recipe = matches!(self.role, Role::Lock { .. } | Role::Barrier { .. });
        let identity = (recipe && rng.random_ratio(AUTHENTICATED_IN_TEN, 10)).then(|| {
            Id::new(
                K8S_SCHEME,
                format!("{SIM_NAMESPACE}/sim/client-{}", self.id),
            )
        });
        self.conn = Some(Conn {
            member,
            incarnation,
            id,
            rx,
            _done: done_rx,
            session: None,
            opened: now,
            last_sent: now,
            identity,
        });
        self.next_xid = 1;
        let req = ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: self.last_zxid,
            timeout_ms: SESSION_TIMEOUT_MS,
            session_id: 0,
            passwd: vec![0; 16],
            read_only: Some(false),
        };
        let peer = SocketAddr::from((Ipv4Addr::LOCALHOST, (self.id % 60_000) as u16 + 1));
        actions.push(Action::ToMember {
            member,
            incarnation,
            msg: CoreMsg::Connect {
                conn: id,
                peer,
                out,
                req,
                done,
            },
        });
        actions.push(Action::WakeAt(now + REQUEST_TIMEOUT));
    }

    /// The connection broke (or is given up): whatever was in flight has an unknown outcome,
    /// and a held lock is no longer believed held.
    pub fn lose_connection(
        &mut self,
        now: Micros,
        rng: &mut StdRng,
        rec: &mut Recorder,
        tell_member: bool,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        tracing::debug!(client = self.id, at_ms = now / MS, member = ?self.member(), inflight = self.inflight.len(), front = ?self.inflight.front().map(|f| (f.opcode, f.purpose, f.sent / MS)), tell_member, "client lost its connection");
        if let Some(conn) = self.conn.take()
            && tell_member
        {
            actions.push(Action::ToMember {
                member: conn.member,
                incarnation: conn.incarnation,
                msg: CoreMsg::Disconnected { conn: conn.id },
            });
        }
        for f in self.inflight.drain(..) {
            match f.purpose {
                Purpose::Write(t) | Purpose::Read(t) => rec.complete(t, Outcome::Unknown, now),
                Purpose::Sync(t) => rec.uncheck(t),
                _ => {}
            }
        }
        self.lock = LockState::Idle;
        self.my_node = None;
        self.queue = None;
        self.reset_barrier();
        self.sync_ok = None;
        self.next_conn_at = now + rng.random_range(50 * MS..500 * MS);
        actions.push(Action::WakeAt(self.next_conn_at));
        actions
    }

    fn send(&mut self, now: Micros, request: Request, purpose: Purpose, actions: &mut Vec<Action>) {
        let Some(conn) = &mut self.conn else { return };
        let x = if matches!(request, Request::Ping) {
            xid::PING
        } else {
            self.next_xid += 1;
            self.next_xid
        };
        conn.last_sent = now;
        self.inflight.push_back(InFlight {
            xid: x,
            opcode: request.opcode(),
            purpose,
            sent: now,
        });
        actions.push(Action::ToMember {
            member: conn.member,
            incarnation: conn.incarnation,
            msg: CoreMsg::Request {
                conn: conn.id,
                xid: x,
                request,
            },
        });
    }

    /// Gives the new session its Kubernetes identity, if this connection has one: the verdict
    /// a connection task hands the core after a TokenReview accepted the pod's token, answered
    /// in order like the auth packet it stands for.
    fn authenticate(&mut self, now: Micros, actions: &mut Vec<Action>) {
        let Some(conn) = &mut self.conn else { return };
        let Some(id) = conn.identity.clone() else {
            return;
        };
        conn.last_sent = now;
        self.inflight.push_back(InFlight {
            xid: xid::AUTH,
            opcode: OpCode::Auth,
            purpose: Purpose::Auth,
            sent: now,
        });
        actions.push(Action::ToMember {
            member: conn.member,
            incarnation: conn.incarnation,
            msg: CoreMsg::Identity {
                conn: conn.id,
                xid: xid::AUTH,
                verdict: IdentityVerdict::Accepted(id),
            },
        });
    }

    fn unique_data(&mut self) -> Vec<u8> {
        self.counter += 1;
        format!("c{}-{}", self.id, self.counter).into_bytes()
    }

    /// Starts the next operation if the client is idle.
    fn act(
        &mut self,
        now: Micros,
        rng: &mut StdRng,
        rec: &mut Recorder,
        actions: &mut Vec<Action>,
    ) {
        match self.role.clone() {
            Role::Register { keys } => {
                if !self.inflight.is_empty() || now < self.next_op_at || now >= self.stop_at {
                    return;
                }
                let key = keys[rng.random_range(0..keys.len())].clone();
                let actor = self.actor();
                let roll = rng.random_range(0..100);
                if roll < 35 {
                    let t = rec.invoke(actor, &key, Call::get_data(), now);
                    self.send(
                        now,
                        Request::Sync { path: key.clone() },
                        Purpose::Sync(t),
                        actions,
                    );
                    let read = Request::GetData(PathWatchRequest {
                        path: key,
                        watch: false,
                    });
                    self.send(now, read, Purpose::Read(t), actions);
                    return;
                }
                let data = self.unique_data();
                let (call, request) = if roll < 60 {
                    let req = CreateRequest {
                        path: key.clone(),
                        data: Some(data.clone()),
                        acl: open_acl_unsafe(),
                        flags: CreateMode::Persistent.flags(),
                        ttl: None,
                    };
                    (
                        Call::create(data),
                        Request::Create {
                            op: OpCode::Create,
                            req,
                        },
                    )
                } else if roll < 90 {
                    let version = if rng.random_bool(0.3) {
                        rng.random_range(0..4)
                    } else {
                        -1
                    };
                    (
                        Call::set_data(data.clone(), version),
                        Request::SetData(SetDataRequest {
                            path: key.clone(),
                            data: Some(data),
                            version,
                        }),
                    )
                } else {
                    (
                        Call::delete(-1),
                        Request::Delete(DeleteRequest {
                            path: key.clone(),
                            version: -1,
                        }),
                    )
                };
                let t = rec.invoke(actor, &key, call, now);
                self.send(now, request, Purpose::Write(t), actions);
            }
            Role::Setup { paths } => {
                if self.inflight.is_empty()
                    && let Some(path) = paths.get(self.created)
                {
                    let req = CreateRequest {
                        path: path.clone(),
                        data: Some(Vec::new()),
                        acl: open_acl_unsafe(),
                        flags: CreateMode::Persistent.flags(),
                        ttl: None,
                    };
                    self.send(
                        now,
                        Request::Create {
                            op: OpCode::Create,
                            req,
                        },
                        Purpose::Setup,
                        actions,
                    );
                }
            }
            Role::Squatter { queues } => {
                if !self.inflight.is_empty()
                    || now < self.next_op_at
                    || now >= self.stop_at
                    || self.planted.len() >= PLANTS_PER_QUEUE * queues.len()
                {
                    return;
                }
                let which = rng.random_range(0..queues.len());
                let req = Request::GetChildren(PathWatchRequest {
                    path: queues[which].0.clone(),
                    watch: false,
                });
                self.send(now, req, Purpose::SquatList(which), actions);
            }
            Role::Barrier { .. } => self.barrier_act(now, actions),
            Role::Lock { dir, kind, .. } => match self.lock {
                LockState::Idle if now >= self.next_op_at && now < self.stop_at => {
                    self.lock = LockState::Busy;
                    let data = self.unique_data();
                    // Null data now and then: stored as empty below feature level 2 and as
                    // null from it, so a member applying the wrong rule shows in the replicas
                    // check. Nobody reads a lock node's data.
                    let data = (!rng.random_bool(0.3)).then_some(data);
                    let req = CreateRequest {
                        path: format!("{dir}/{}", kind.prefix()),
                        data,
                        acl: open_acl_unsafe(),
                        flags: CreateMode::EphemeralSequential.flags(),
                        ttl: None,
                    };
                    self.send(
                        now,
                        Request::Create {
                            op: OpCode::Create2,
                            req,
                        },
                        Purpose::LockCreate,
                        actions,
                    );
                }
                LockState::Holding { until } if now >= until => {
                    self.lock = LockState::Busy;
                    if let Some((node, _)) = self.my_node.clone() {
                        self.send(
                            now,
                            Request::Delete(DeleteRequest {
                                path: node,
                                version: -1,
                            }),
                            Purpose::LockRelease,
                            actions,
                        );
                    }
                }
                _ => {}
            },
        }
    }

    /// Handles one frame from the member.
    pub fn on_frame(
        &mut self,
        now: Micros,
        frame: Outbound,
        rng: &mut StdRng,
        rec: &mut Recorder,
    ) -> Vec<Action> {
        let bytes = match frame {
            Outbound::Close => return self.lose_connection(now, rng, rec, false),
            Outbound::Frame(b) => b,
        };
        let body = bytes.get(4..).unwrap_or_default();
        let Some(conn) = &mut self.conn else {
            return Vec::new();
        };
        if conn.session.is_none() {
            return match codec::decode_connect_response(body) {
                Ok(resp) if resp.session_id != 0 && resp.timeout_ms > 0 => {
                    conn.session = Some(resp.session_id);
                    let mut actions = vec![Action::WakeAt(now)];
                    self.authenticate(now, &mut actions);
                    actions
                }
                _ => self.lose_connection(now, rng, rec, true),
            };
        }
        if let Ok(n) = codec::decode_notification(body) {
            return self.on_notification(now, &n.event.path);
        }
        let Some(f) = self.inflight.pop_front() else {
            return self.lose_connection(now, rng, rec, true);
        };
        let (hdr, reply) = match codec::decode_reply(f.opcode, body) {
            Ok(decoded) if decoded.0.xid == f.xid => decoded,
            // Out of order or undecodable: the session's FIFO promise is broken. The history
            // checker sees it as a lost answer; the run report counts it.
            other => {
                tracing::warn!(client = self.id, expected = f.xid, opcode = ?f.opcode, got = ?other, "unexpected reply");
                self.inflight.push_front(f);
                return self.lose_connection(now, rng, rec, true);
            }
        };
        if hdr.zxid > 0 {
            self.last_zxid = self.last_zxid.max(hdr.zxid);
        }
        let err = ErrorCode::from_code(hdr.err);
        let mut actions = Vec::new();
        if !matches!(f.purpose, Purpose::Ping) {
            self.last_answer = now;
        }
        match f.purpose {
            Purpose::Ping => {}
            Purpose::Auth if hdr.err != 0 => return self.lose_connection(now, rng, rec, true),
            Purpose::Auth => {}
            Purpose::Setup => {
                if hdr.err == 0 || err == Some(ErrorCode::NodeExists) {
                    self.created += 1;
                }
            }
            Purpose::Sync(_) => self.sync_ok = Some(hdr.err == 0),
            Purpose::Read(t) => {
                if self.sync_ok.take() != Some(true) {
                    rec.uncheck(t);
                }
                let outcome = match (reply, err) {
                    // Simulated clients never write null data.
                    (Some(Response::GetData { data, stat }), _) => {
                        Outcome::read(data.unwrap_or_default(), stat.version)
                    }
                    (_, Some(ErrorCode::NoNode)) => Outcome::Failed(Failure::NoNode),
                    _ => Outcome::Unknown,
                };
                rec.complete(t, outcome, now);
                self.next_op_at = now + rng.random_range(0..20 * MS);
            }
            Purpose::Write(t) => {
                let outcome = match (reply, err) {
                    (Some(Response::Stat(stat)), _) => Outcome::Ok(Reply::Version(stat.version)),
                    (Some(_), _) => Outcome::Ok(Reply::Done),
                    (None, Some(ErrorCode::NodeExists)) => Outcome::Failed(Failure::NodeExists),
                    (None, Some(ErrorCode::NoNode)) => Outcome::Failed(Failure::NoNode),
                    (None, Some(ErrorCode::BadVersion)) => Outcome::Failed(Failure::BadVersion),
                    (None, Some(err)) if refused(err) => Outcome::Failed(Failure::Other),
                    // Anything else may or may not have taken effect.
                    (None, _) => Outcome::Unknown,
                };
                rec.complete(t, outcome, now);
                self.next_op_at = now + rng.random_range(0..20 * MS);
            }
            Purpose::LockCreate => match reply {
                Some(Response::Create2 { path, stat }) => {
                    rec.sequential.push((self.actor(), path.clone()));
                    self.my_node = Some((path, stat.czxid));
                    self.check_children(now, &mut actions);
                }
                _ => return self.lose_connection(now, rng, rec, true),
            },
            Purpose::LockChildren => match reply {
                Some(Response::GetChildren { children }) => {
                    self.on_children(now, children, rng, rec, &mut actions)
                }
                _ => return self.lose_connection(now, rng, rec, true),
            },
            Purpose::PermitWatch => match reply {
                Some(Response::GetChildren { children }) => {
                    let mut queue = Queue::new(&children, NodeKind::SEMAPHORE_KINDS);
                    for name in &self.planted_seen {
                        queue.remove(name);
                    }
                    // A fresh look: the nodes before ours are read again (a name once live
                    // may since have gone and been planted by the squatter), and if we still
                    // wait, the watch set with this listing wakes us.
                    self.ephemeral_seen.clear();
                    self.watched_listing = true;
                    self.decide(now, queue, rng, rec, &mut actions);
                }
                _ => return self.lose_connection(now, rng, rec, true),
            },
            Purpose::PermitCheck => {
                let Some(mut queue) = self.queue.clone() else {
                    return self.lose_connection(now, rng, rec, true);
                };
                let Some(name) = self.checking.take() else {
                    return self.lose_connection(now, rng, rec, true);
                };
                match (reply, err) {
                    (Some(Response::Stat(stat)), _) if stat.ephemeral_owner == 0 => {
                        queue.remove(&name);
                        self.planted_seen.insert(name);
                    }
                    (Some(Response::Stat(_)), _) => {
                        self.ephemeral_seen.insert(name);
                    }
                    (None, Some(ErrorCode::NoNode)) => {
                        queue.remove(&name);
                    }
                    _ => return self.lose_connection(now, rng, rec, true),
                }
                self.decide(now, queue, rng, rec, &mut actions);
            }
            Purpose::LockWatch => match (reply, err) {
                // The recipe's rule: a persistent node is planted, never waited for. Its watch
                // stays registered but is ignored (the state no longer names it); the next
                // would-be predecessor is checked in the same listing.
                (Some(Response::Stat(stat)), _) if stat.ephemeral_owner == 0 => {
                    if let LockState::Watching { predecessor } = self.lock.clone()
                        && let Some(queue) = self.queue.as_mut()
                    {
                        let name = predecessor.rsplit('/').next().unwrap_or_default();
                        queue.remove(name);
                        let queue = self.queue.clone().unwrap_or_default();
                        self.decide(now, queue, rng, rec, &mut actions);
                    }
                }
                (Some(Response::Stat(_)), _) => {}
                (None, Some(ErrorCode::NoNode)) => self.check_children(now, &mut actions),
                _ => return self.lose_connection(now, rng, rec, true),
            },
            Purpose::SquatList(which) => match reply {
                Some(Response::GetChildren { children }) => {
                    self.plant(now, which, children, rng, &mut actions)
                }
                _ => return self.lose_connection(now, rng, rec, true),
            },
            Purpose::SquatPlant => {
                self.next_op_at = now + rng.random_range(200 * MS..2 * SECOND);
            }
            Purpose::Barrier(op) => {
                if self
                    .on_barrier_reply(now, op, (reply, err), rng, rec, &mut actions)
                    .is_none()
                {
                    return self.lose_connection(now, rng, rec, true);
                }
            }
            Purpose::LockRelease => {
                if hdr.err != 0 {
                    return self.lose_connection(now, rng, rec, true);
                }
                self.my_node = None;
                self.lock = LockState::Idle;
                self.next_op_at = now + rng.random_range(0..200 * MS);
            }
        }
        actions.push(Action::WakeAt(self.next_op_at.max(now)));
        actions
    }

    fn check_children(&mut self, now: Micros, actions: &mut Vec<Action>) {
        if let Role::Lock { dir, .. } = &self.role {
            let req = Request::GetChildren(PathWatchRequest {
                path: dir.clone(),
                watch: false,
            });
            self.lock = LockState::Busy;
            self.send(now, req, Purpose::LockChildren, actions);
        }
    }

    fn on_children(
        &mut self,
        now: Micros,
        children: Vec<String>,
        rng: &mut StdRng,
        rec: &mut Recorder,
        actions: &mut Vec<Action>,
    ) {
        let Role::Lock { kind, .. } = self.role.clone() else {
            return;
        };
        // The sidecar's own ordering: who holds, and whom a waiter watches.
        let kinds = match kind {
            NodeKind::Candidate => NodeKind::ELECTION_KINDS,
            NodeKind::Permit => NodeKind::SEMAPHORE_KINDS,
            _ => NodeKind::LOCK_KINDS,
        };
        let mut queue = Queue::new(&children, kinds);
        for name in &self.planted_seen {
            queue.remove(name);
        }
        self.ephemeral_seen.clear();
        self.watched_listing = false;
        self.decide(now, queue, rng, rec, actions);
    }

    /// Holds, or watches the node to wait for, in `queue` (which planted nodes found so far
    /// have been removed from).
    fn decide(
        &mut self,
        now: Micros,
        queue: Queue,
        rng: &mut StdRng,
        rec: &mut Recorder,
        actions: &mut Vec<Action>,
    ) {
        let Role::Lock { dir, hold, kind } = self.role.clone() else {
            return;
        };
        let Some((node, token)) = self.my_node.clone() else {
            return;
        };
        let mine = node.rsplit('/').next().unwrap_or_default();
        let Some(pos) = queue.position(mine) else {
            // Our node is gone: the session expired under us.
            actions.extend(self.lose_connection(now, rng, rec, true));
            return;
        };
        // A semaphore (the sidecar's rule: fewer than N nodes before ours) waits on the
        // folder's children: any earlier node leaving may grant it.
        let blocker = if kind == NodeKind::Permit {
            if queue.holds_permit(pos, SIM_PERMITS) {
                None
            } else if let Some(unknown) = queue.nodes()[..pos]
                .iter()
                .find(|n| !self.ephemeral_seen.contains(&n.name))
            {
                // The sidecar's rule: only live ephemeral nodes before ours count.
                let path = format!("{dir}/{}", unknown.name);
                self.checking = Some(unknown.name.clone());
                self.lock = LockState::Busy;
                self.queue = Some(queue.clone());
                let req = Request::Exists(PathWatchRequest { path, watch: false });
                self.send(now, req, Purpose::PermitCheck, actions);
                return;
            } else if self.watched_listing && !self.permit_dirty {
                // Every node before ours is live: wait for the watch of this listing.
                self.lock = LockState::Watching { predecessor: dir };
                self.queue = Some(queue);
                return;
            } else {
                self.lock = LockState::Watching {
                    predecessor: dir.clone(),
                };
                self.permit_dirty = false;
                let req = Request::GetChildren(PathWatchRequest {
                    path: dir,
                    watch: true,
                });
                self.send(now, req, Purpose::PermitWatch, actions);
                return;
            }
        } else {
            queue.blocker(pos)
        };
        let Some(blocker) = blocker else {
            rec.grants.push(Grant {
                client: self.id,
                dir,
                node,
                token,
                at: now,
            });
            self.lock = LockState::Holding {
                until: now + rng.random_range(10 * MS..hold.max(11 * MS)),
            };
            return;
        };
        let predecessor = format!("{dir}/{}", blocker.name);
        self.lock = LockState::Watching {
            predecessor: predecessor.clone(),
        };
        self.queue = Some(queue.clone());
        let req = Request::Exists(PathWatchRequest {
            path: predecessor,
            watch: true,
        });
        self.send(now, req, Purpose::LockWatch, actions);
    }

    /// Plants one persistent node in queue `which`, below every node listed there, with data
    /// that names another client as a candidate or holder would.
    fn plant(
        &mut self,
        now: Micros,
        which: usize,
        children: Vec<String>,
        rng: &mut StdRng,
        actions: &mut Vec<Action>,
    ) {
        let Role::Squatter { queues } = self.role.clone() else {
            return;
        };
        let (dir, kind) = &queues[which];
        let kinds = match kind {
            NodeKind::Candidate => NodeKind::ELECTION_KINDS,
            NodeKind::Permit => NodeKind::SEMAPHORE_KINDS,
            NodeKind::Party => NodeKind::BARRIER_KINDS,
            _ => NodeKind::LOCK_KINDS,
        };
        let queue = Queue::new(&children, kinds);
        // Below the lowest node there: the folder's sequence counter is past it, so no real
        // create can ever collide with the planted name.
        let Some(lowest) = queue.head().map(|n| n.sequence) else {
            self.next_op_at = now + rng.random_range(50 * MS..300 * MS);
            return;
        };
        let taken = |seq: i64| queue.nodes().iter().any(|n| n.sequence == seq);
        let Some(seq) = (0..lowest).rev().find(|s| !taken(*s)) else {
            self.next_op_at = now + rng.random_range(50 * MS..300 * MS);
            return;
        };
        let prefix = kinds[rng.random_range(0..kinds.len())].prefix();
        let victim = rng.random_range(0..64);
        // A planted party asks for this run's N and is not released: counted, it would open
        // the barrier early.
        let party = if *kind == NodeKind::Party {
            format!(r#","parties":{SIM_PARTIES},"passed":false"#)
        } else {
            String::new()
        };
        let data = format!(
            r#"{{"identity":"client-{victim}","address":"10.0.0.{victim}:8080","owner":"client-{victim}/1/1","since":"2026-01-01T00:00:00Z"{party}}}"#
        )
        .into_bytes();
        let path = format!("{dir}/{prefix}{seq:010}");
        self.planted.push(path.clone());
        let req = CreateRequest {
            path,
            data: Some(data),
            acl: open_acl_unsafe(),
            flags: CreateMode::Persistent.flags(),
            ttl: None,
        };
        self.send(
            now,
            Request::Create {
                op: OpCode::Create,
                req,
            },
            Purpose::SquatPlant,
            actions,
        );
    }

    fn on_notification(&mut self, now: Micros, path: &str) -> Vec<Action> {
        let mut actions = Vec::new();
        if matches!(&self.role, Role::Lock { dir, kind: NodeKind::Permit, .. } if dir == path) {
            self.permit_dirty = true;
        }
        if matches!(&self.lock, LockState::Watching { predecessor } if predecessor == path) {
            self.check_children(now, &mut actions);
        }
        self.on_barrier_notification(now, path, &mut actions);
        actions.push(Action::WakeAt(now));
        actions
    }
}

/// The permits of the simulation's semaphore (`/baton/default/semaphores/sim`).
pub const SIM_PERMITS: u32 = 2;

/// The parties of the simulation's barrier (`/baton/default/barriers/sim`).
pub const SIM_PARTIES: u32 = 3;

/// Lock clients hold for up to this long; election candidates lead longer.
pub const LOCK_HOLD: Micros = 300 * MS;
pub const LEADERSHIP_HOLD: Micros = 2 * SECOND;
