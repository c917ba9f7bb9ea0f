//! A barrier client: the sidecar's double barrier (`sidecar/src/recipe/barrier.rs`), one
//! request at a time. It enters with an ephemeral sequential `party-` node carrying N, watches
//! its own node and the folder, and on each look reads every party: only live ephemeral nodes
//! count, released ones (`"passed":true`) and ones asking for another N do not. With N such
//! parties waiting it marks each released (a `setData` on the version it read) and passes; a
//! party marked by another passes when it sees the mark. It leaves (deletes its node) a moment
//! after passing, or gives up and leaves after [`BARRIER_WAIT`].

use baton_proto::{
    CreateMode, CreateRequest, DeleteRequest, ErrorCode, OpCode, PathWatchRequest, Request,
    Response, SetDataRequest, open_acl_unsafe,
};
use baton_sidecar::recipe::queue::{NodeKind, Queue};
use rand::Rng;
use rand::rngs::StdRng;

use super::{Action, Client, Purpose, Role};
use crate::record::Recorder;
use crate::time::{MS, Micros, SECOND};

/// How long a party waits for the others before it leaves (the sidecar's `wait`).
pub const BARRIER_WAIT: Micros = 3 * SECOND;
/// The `passed` mark in a party's JSON data.
const PASSED: &str = r#""passed":true"#;

/// A barrier request in flight (one at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierOp {
    Enter,
    /// Our own node's data, with a watch (someone marks it released).
    ReadOwn,
    /// The folder's children, with a watch (parties come and go).
    List,
    /// The next party in `to_read`.
    ReadParty,
    /// Marking the next party in `to_mark` released.
    Mark,
    Leave,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Step {
    #[default]
    Idle,
    /// A request of the look (or enter, mark, leave) is in flight.
    Busy,
    /// Blocked: waiting for a watch.
    Waiting,
    /// Passed; leaves at this time.
    Passed(Micros),
}

/// One client's barrier state.
#[derive(Debug, Default)]
pub struct BarrierRun {
    step: Step,
    /// Our node (full path) and its czxid.
    node: Option<(String, i64)>,
    entered_at: Micros,
    to_read: Vec<String>,
    /// The party whose read is in flight (full path).
    reading: Option<String>,
    /// Live, waiting parties read so far: (path, data, version).
    waiting: Vec<(String, String, i32)>,
    to_mark: Vec<(String, String, i32)>,
    /// A watch fired while a look was in flight: look again before waiting.
    dirty: bool,
}

/// Whether a party's data says it was released.
pub fn is_marked(data: &[u8]) -> bool {
    String::from_utf8_lossy(data).contains(PASSED)
}

/// The `parties` a party's data asks for, if it says.
fn parties_of(data: &str) -> Option<u32> {
    let rest = data.split(r#""parties":"#).nth(1)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl Client {
    /// The barrier node this client has passed with and not yet left, if any.
    pub fn barrier_passed(&self) -> Option<&str> {
        match (&self.barrier.step, &self.barrier.node) {
            (Step::Passed(_), Some((node, _))) => Some(node),
            _ => None,
        }
    }

    /// Forgets the barrier run (the connection is gone; the node goes with the session).
    pub(super) fn reset_barrier(&mut self) {
        self.barrier = BarrierRun::default();
    }

    pub(super) fn barrier_act(&mut self, now: Micros, actions: &mut Vec<Action>) {
        let Role::Barrier { dir, parties } = self.role.clone() else {
            return;
        };
        if !self.inflight.is_empty() {
            return;
        }
        match self.barrier.step {
            Step::Idle if now >= self.next_op_at && now < self.stop_at => {
                self.counter += 1;
                let data = format!(
                    r#"{{"identity":"client-{id}","owner":"client-{id}/{}/{}","parties":{parties},"passed":false}}"#,
                    self.generation,
                    self.counter,
                    id = self.id,
                );
                let req = CreateRequest {
                    path: format!("{dir}/{}", NodeKind::Party.prefix()),
                    data: Some(data.into_bytes()),
                    acl: open_acl_unsafe(),
                    flags: CreateMode::EphemeralSequential.flags(),
                    ttl: None,
                };
                self.barrier.step = Step::Busy;
                self.barrier.entered_at = now;
                let request = Request::Create {
                    op: OpCode::Create2,
                    req,
                };
                self.send(now, request, Purpose::Barrier(BarrierOp::Enter), actions);
            }
            Step::Passed(until) if now >= until => self.leave(now, actions),
            Step::Waiting if now >= self.barrier.entered_at + BARRIER_WAIT => {
                self.leave(now, actions)
            }
            _ => {}
        }
    }

    fn leave(&mut self, now: Micros, actions: &mut Vec<Action>) {
        let Some((node, _)) = self.barrier.node.clone() else {
            self.barrier = BarrierRun::default();
            return;
        };
        self.barrier.step = Step::Busy;
        let req = Request::Delete(DeleteRequest {
            path: node,
            version: -1,
        });
        self.send(now, req, Purpose::Barrier(BarrierOp::Leave), actions);
    }

    /// Starts a look: our own node first (with a watch), then the folder.
    fn look(&mut self, now: Micros, actions: &mut Vec<Action>) {
        let Some((node, _)) = self.barrier.node.clone() else {
            return;
        };
        self.barrier.step = Step::Busy;
        self.barrier.dirty = false;
        let req = Request::GetData(PathWatchRequest {
            path: node,
            watch: true,
        });
        self.send(now, req, Purpose::Barrier(BarrierOp::ReadOwn), actions);
    }

    fn read_next(&mut self, now: Micros, dir: &str, parties: u32, actions: &mut Vec<Action>) {
        if let Some(name) = self.barrier.to_read.pop() {
            let path = format!("{dir}/{name}");
            self.barrier.reading = Some(path.clone());
            let req = Request::GetData(PathWatchRequest { path, watch: false });
            self.send(now, req, Purpose::Barrier(BarrierOp::ReadParty), actions);
            return;
        }
        // The sidecar's rule: N live parties not yet released (a deliberate bug lowers it).
        let needed = if self.short_barrier {
            parties.saturating_sub(1).max(1)
        } else {
            parties
        };
        if self.barrier.waiting.len() >= needed as usize {
            self.barrier.to_mark = std::mem::take(&mut self.barrier.waiting);
            self.barrier.to_mark.reverse();
            self.mark_next(now, actions);
        } else if self.barrier.dirty {
            self.look(now, actions);
        } else {
            self.barrier.step = Step::Waiting;
        }
    }

    fn mark_next(&mut self, now: Micros, actions: &mut Vec<Action>) {
        let Some((path, data, version)) = self.barrier.to_mark.pop() else {
            return;
        };
        let marked = data.replace(r#""passed":false"#, PASSED);
        let req = Request::SetData(SetDataRequest {
            path,
            data: Some(marked.into_bytes()),
            version,
        });
        self.send(now, req, Purpose::Barrier(BarrierOp::Mark), actions);
    }

    fn pass(&mut self, now: Micros, rng: &mut StdRng, rec: &mut Recorder) {
        rec.barrier_passes += 1;
        self.barrier.step = Step::Passed(now + rng.random_range(10 * MS..200 * MS));
    }

    /// Handles the reply to barrier request `op`; `None` means the connection must go.
    pub(super) fn on_barrier_reply(
        &mut self,
        now: Micros,
        op: BarrierOp,
        (reply, err): (Option<Response>, Option<ErrorCode>),
        rng: &mut StdRng,
        rec: &mut Recorder,
        actions: &mut Vec<Action>,
    ) -> Option<()> {
        let Role::Barrier { dir, parties } = self.role.clone() else {
            return Some(());
        };
        match op {
            BarrierOp::Enter => match reply {
                Some(Response::Create2 { path, stat }) => {
                    rec.sequential.push((self.actor(), path.clone()));
                    self.barrier.node = Some((path, stat.czxid));
                    self.look(now, actions);
                }
                _ => return None,
            },
            BarrierOp::ReadOwn => match reply {
                Some(Response::GetData { data, .. }) => {
                    if is_marked(&data.unwrap_or_default()) {
                        self.pass(now, rng, rec);
                    } else {
                        let req = Request::GetChildren(PathWatchRequest {
                            path: dir,
                            watch: true,
                        });
                        self.send(now, req, Purpose::Barrier(BarrierOp::List), actions);
                    }
                }
                // Our node is gone: the session expired under us.
                _ => return None,
            },
            BarrierOp::List => match reply {
                Some(Response::GetChildren { children }) => {
                    let queue = Queue::new(&children, NodeKind::BARRIER_KINDS);
                    // Read in queue order (popped from the back).
                    self.barrier.to_read =
                        queue.nodes().iter().rev().map(|n| n.name.clone()).collect();
                    self.barrier.waiting.clear();
                    self.read_next(now, &dir, parties, actions);
                }
                _ => return None,
            },
            BarrierOp::ReadParty => {
                match (reply, err) {
                    (Some(Response::GetData { data, stat }), _) => {
                        let data = String::from_utf8_lossy(&data.unwrap_or_default()).into_owned();
                        // Only live ephemeral nodes count; released ones belong to a past round.
                        let trusted = stat.ephemeral_owner != 0;
                        let theirs = parties_of(&data);
                        if trusted
                            && !data.contains(PASSED)
                            && theirs.is_none_or(|n| n == parties)
                            && let Some(path) = self.barrier.reading.clone()
                        {
                            self.barrier.waiting.push((path, data, stat.version));
                        }
                    }
                    // Left between the listing and the read.
                    (None, Some(ErrorCode::NoNode)) => {}
                    _ => return None,
                }
                self.barrier.reading = None;
                self.read_next(now, &dir, parties, actions);
            }
            BarrierOp::Mark => {
                // Gone (it left) or marked by another party meanwhile: released either way.
                if err.is_some_and(|e| !matches!(e, ErrorCode::NoNode | ErrorCode::BadVersion)) {
                    return None;
                }
                if self.barrier.to_mark.is_empty() {
                    self.pass(now, rng, rec);
                } else {
                    self.mark_next(now, actions);
                }
            }
            BarrierOp::Leave => {
                if err.is_some_and(|e| e != ErrorCode::NoNode) {
                    return None;
                }
                self.barrier = BarrierRun::default();
                self.next_op_at = now + rng.random_range(0..300 * MS);
            }
        }
        Some(())
    }

    /// A watch fired on `path`: look again if it is ours (at once if blocked, after the look in
    /// flight otherwise).
    pub(super) fn on_barrier_notification(
        &mut self,
        now: Micros,
        path: &str,
        actions: &mut Vec<Action>,
    ) {
        let Role::Barrier { dir, .. } = &self.role else {
            return;
        };
        let ours = path == dir || self.barrier.node.as_ref().is_some_and(|(n, _)| n == path);
        if !ours {
            return;
        }
        match self.barrier.step {
            Step::Waiting => self.look(now, actions),
            Step::Busy => self.barrier.dirty = true,
            _ => {}
        }
    }
}
