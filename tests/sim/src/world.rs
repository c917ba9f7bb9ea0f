//! The event loop: members, clients, network and nemesis on one virtual clock.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash};
use std::sync::Arc;

use baton_ensemble::core::membership::AdminCommand;
use baton_ensemble::core::{CoreMsg, ManualClock, Outbound};
use baton_ensemble::peer::{PeerEvent, PeerInbound};
use baton_machine::Setting;
use raft::SnapshotStatus;
use raft::eraftpb::MessageType;
use rand::Rng;
use rand::rngs::StdRng;

use crate::barrierview::{self, BarrierView};
use crate::client::{Action, Client, SIM_PARTIES, SIM_PERMITS};
use crate::faults::{Fault, Target};
use crate::lockview::{self, LockView};
use crate::member::{Member, MemberSettings, Outgoing};
use crate::net::Network;
use crate::record::Recorder;
use crate::settingsview::SettingsView;
use crate::time::{MS, Micros, Queue, SECOND, duration};
use crate::treeview::TreeView;

/// The free bytes a member's volume reports when it is not "full"; the watermark is below.
const SIM_FREE_DISK: u64 = 1 << 30;
/// The simulated members' `--min-free-disk-bytes`.
pub const SIM_MIN_FREE_DISK: u64 = 64 << 20;

/// Client-to-member links are short and reliable (a pod and its sidecar, or a LAN).
const CLIENT_LINK: (Micros, Micros) = (20, 300);

/// A directed connection whose messages arrive in the order sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Link {
    Peer { from: u64, to: u64 },
    ToClient(usize),
    FromClient(usize),
}

#[derive(Debug)]
pub enum Event {
    Tick {
        member: u64,
    },
    Peer {
        to: u64,
        incarnation: u64,
        msg: PeerInbound,
    },
    /// What the transport would report to a member about one of its links.
    LinkReport {
        to: u64,
        incarnation: u64,
        event: PeerEvent,
    },
    FromClient {
        to: u64,
        incarnation: u64,
        msg: CoreMsg,
    },
    ToClient {
        client: usize,
        generation: u64,
        frame: Outbound,
    },
    Wake {
        client: usize,
    },
    Fault(Fault),
}

pub struct World {
    pub now: Micros,
    pub rng: StdRng,
    pub clock: Arc<ManualClock>,
    pub queue: Queue<Event>,
    pub members: BTreeMap<u64, Member>,
    pub settings: MemberSettings,
    pub net: Network,
    pub clients: Vec<Client>,
    pub rec: Recorder,
    pub lock_view: LockView,
    pub lock_dirs: Vec<String>,
    pub barrier_view: BarrierView,
    /// The barrier of [`SIM_PARTIES`] parties the barrier clients use, if any.
    pub barrier_dir: Option<String>,
    /// Per directed link: the last arrival time scheduled, so each link stays FIFO as TCP is.
    link_clock: BTreeMap<Link, Micros>,
    pub trace: DefaultHasher,
    pub events: u64,
    pub breach: Option<String>,
    pub tick: Micros,
    /// Each client's one pending wake-up: a later request for an earlier time replaces it.
    wake_at: BTreeMap<usize, Micros>,
    pub settings_view: SettingsView,
    pub tree_view: TreeView,
    /// When a member first applied a feature level above the base one.
    pub level_raised_at: Option<Micros>,
    /// Until when each member's data volume is "full" (below its watermark).
    disk_full_until: BTreeMap<u64, Micros>,
}

impl World {
    pub fn new(
        rng: StdRng,
        clock: Arc<ManualClock>,
        members: BTreeMap<u64, Member>,
        settings: MemberSettings,
        clients: Vec<Client>,
        lock_dirs: Vec<String>,
    ) -> World {
        World {
            now: 0,
            rng,
            clock,
            queue: Queue::default(),
            members,
            tick: settings.tick.as_micros() as Micros,
            settings,
            net: Network::default(),
            clients,
            rec: Recorder::default(),
            lock_view: LockView::default(),
            lock_dirs,
            barrier_view: BarrierView::default(),
            barrier_dir: None,
            link_clock: BTreeMap::new(),
            trace: DefaultHasher::new(),
            events: 0,
            breach: None,
            wake_at: BTreeMap::new(),
            settings_view: SettingsView::default(),
            tree_view: TreeView::default(),
            level_raised_at: None,
            disk_full_until: BTreeMap::new(),
        }
    }

    /// Starts a member's core, with an election timeout drawn from the seed.
    pub fn start_member(&mut self, id: u64) -> Result<(), String> {
        let ticks = self.rng.random_range(10..20);
        let (settings, clock) = (self.settings.clone(), self.clock.clone());
        if let Some(m) = self.members.get_mut(&id) {
            m.start(&settings, clock, ticks)
                .map_err(|e| format!("member {id} could not start: {e}"))?;
        }
        self.lock_view.forget_member(id);
        self.tree_view.forget_member(id);
        self.exchange_hellos(id);
        Ok(())
    }

    /// What the peer hellos of a member that just started tell it and every member up: the
    /// highest feature level each supports (`PeerEvent::FeatureLevel`). The simulated links
    /// have no handshake, so the reports are made here, a millisecond later, partitions or not
    /// (a real member keeps reconnecting until a hello gets through).
    fn exchange_hellos(&mut self, id: u64) {
        let Some(new) = self.members.get(&id) else {
            return;
        };
        let (new_incarnation, Some(new_max)) = (new.incarnation, new.supported_level()) else {
            return;
        };
        let at = self.now + MS;
        let others: Vec<(u64, u64, u32)> = self
            .members
            .values()
            .filter(|o| o.id != id)
            .filter_map(|o| Some((o.id, o.incarnation, o.supported_level()?)))
            .collect();
        for (other, incarnation, max) in others {
            self.queue.push(
                at,
                Event::LinkReport {
                    to: other,
                    incarnation,
                    event: PeerEvent::FeatureLevel {
                        peer: id,
                        max: new_max,
                    },
                },
            );
            self.queue.push(
                at,
                Event::LinkReport {
                    to: id,
                    incarnation: new_incarnation,
                    event: PeerEvent::FeatureLevel { peer: other, max },
                },
            );
        }
    }

    /// Runs events until `until` or until a safety check fails.
    pub fn run_until(&mut self, until: Micros) -> Result<(), String> {
        while self.breach.is_none() {
            let Some((at, event)) = self.queue.pop() else {
                break;
            };
            if at > until {
                self.queue.push(at, event);
                break;
            }
            self.now = at;
            self.clock.set(duration(at));
            self.events += 1;
            self.handle(event)?;
        }
        Ok(())
    }

    fn handle(&mut self, event: Event) -> Result<(), String> {
        let now = self.now;
        match event {
            Event::Tick { member } => {
                (now, 0u8, member).hash(&mut self.trace);
                self.queue.push(now + self.tick, Event::Tick { member });
                self.deliver(member, None, CoreMsg::Tick)?;
                // The runtime measures the volume once a second (`disk_space.rs`).
                if now / SECOND != now.saturating_sub(self.tick) / SECOND {
                    let full = self.disk_full_until.get(&member).is_some_and(|u| now < *u);
                    let free_bytes = if full { 0 } else { SIM_FREE_DISK };
                    self.deliver(member, None, CoreMsg::DiskSpace { free_bytes })?;
                }
            }
            Event::Peer {
                to,
                incarnation,
                msg,
            } => {
                (now, 1u8, to).hash(&mut self.trace);
                self.deliver(to, Some(incarnation), CoreMsg::Peer(msg))?;
            }
            Event::LinkReport {
                to,
                incarnation,
                event,
            } => {
                (now, 2u8, to).hash(&mut self.trace);
                self.deliver(to, Some(incarnation), CoreMsg::PeerEvent(event))?;
            }
            Event::FromClient {
                to,
                incarnation,
                msg,
            } => {
                (now, 3u8, to).hash(&mut self.trace);
                self.deliver(to, Some(incarnation), msg)?;
            }
            Event::ToClient {
                client,
                generation,
                frame,
            } => {
                (now, 4u8, client).hash(&mut self.trace);
                let c = &mut self.clients[client];
                if c.generation == generation && c.member().is_some() {
                    let actions = c.on_frame(now, frame, &mut self.rng, &mut self.rec);
                    self.client_actions(client, actions);
                }
            }
            Event::Wake { client } => {
                if self.wake_at.get(&client) != Some(&now) {
                    return Ok(()); // superseded by an earlier wake-up
                }
                self.wake_at.remove(&client);
                (now, 5u8, client).hash(&mut self.trace);
                let members = self.member_list();
                let actions =
                    self.clients[client].wake(now, &members, &mut self.rng, &mut self.rec);
                self.client_actions(client, actions);
            }
            Event::Fault(fault) => {
                (now, 6u8).hash(&mut self.trace);
                tracing::debug!(at_ms = now / MS, %fault, "fault");
                self.apply_fault(fault)?;
            }
        }
        Ok(())
    }

    /// (id, incarnation, up) of every member.
    fn member_list(&self) -> Vec<(u64, u64, bool)> {
        self.members
            .values()
            .map(|m| (m.id, m.incarnation, m.is_up()))
            .collect()
    }

    /// Hands `msg` to member `to` (if it is still the same life), then moves what it produced.
    fn deliver(&mut self, to: u64, incarnation: Option<u64>, msg: CoreMsg) -> Result<(), String> {
        let now = self.now;
        let Some(m) = self.members.get_mut(&to) else {
            return Ok(());
        };
        if incarnation.is_some_and(|i| i != m.incarnation) || !m.is_up() {
            return Ok(());
        }
        if m.stalled_until > now {
            // The slow disk: everything waits, in order, until the member is back. Ticks that
            // fall in the stall are missed, as the production ticker's are (`Delay`).
            let (incarnation, at) = (m.incarnation, m.stalled_until);
            let event = match msg {
                CoreMsg::Tick => return Ok(()),
                CoreMsg::Peer(msg) => Event::Peer {
                    to,
                    incarnation,
                    msg,
                },
                CoreMsg::PeerEvent(event) => Event::LinkReport {
                    to,
                    incarnation,
                    event,
                },
                msg => Event::FromClient {
                    to,
                    incarnation,
                    msg,
                },
            };
            self.queue.push(at, event);
            return Ok(());
        }
        m.step(vec![msg])
            .map_err(|e| format!("member {to} stopped: {e}"))?;
        self.after_step(to);
        Ok(())
    }

    /// Moves a member's output onto the network and to its clients, then checks its state.
    fn after_step(&mut self, id: u64) {
        let now = self.now;
        let Some(m) = self.members.get(&id) else {
            return;
        };
        let incarnation = m.incarnation;
        for out in m.take_outgoing() {
            let (to, inbound, snapshot) = match out {
                Outgoing::Raft(msg) => {
                    let snapshot = msg.get_msg_type() == MessageType::MsgSnapshot;
                    (msg.to, PeerInbound::Raft(msg), snapshot)
                }
                Outgoing::Control { to, payload } => {
                    (to, PeerInbound::Control { from: id, payload }, false)
                }
            };
            let target_incarnation = self.members.get(&to).map_or(0, |m| m.incarnation);
            let arrival = self
                .net
                .transit(&mut self.rng, id, to)
                .map(|delay| self.arrival(Link::Peer { from: id, to }, delay));
            match arrival {
                Some(at) => {
                    self.queue.push(
                        at,
                        Event::Peer {
                            to,
                            incarnation: target_incarnation,
                            msg: inbound,
                        },
                    );
                    if snapshot {
                        let status = SnapshotStatus::Finish;
                        self.queue.push(
                            at,
                            Event::LinkReport {
                                to: id,
                                incarnation,
                                event: PeerEvent::Snapshot { peer: to, status },
                            },
                        );
                    }
                }
                None if snapshot => {
                    let status = SnapshotStatus::Failure;
                    self.queue.push(
                        now + MS,
                        Event::LinkReport {
                            to: id,
                            incarnation,
                            event: PeerEvent::Snapshot { peer: to, status },
                        },
                    );
                }
                None => {}
            }
        }
        for client in 0..self.clients.len() {
            if self.clients[client].member().is_some_and(|(m, _)| m == id) {
                let generation = self.clients[client].generation;
                for frame in self.clients[client].take_frames() {
                    let delay = self.rng.random_range(CLIENT_LINK.0..=CLIENT_LINK.1);
                    let at = self.arrival(Link::ToClient(client), delay);
                    self.queue.push(
                        at,
                        Event::ToClient {
                            client,
                            generation,
                            frame,
                        },
                    );
                }
            }
        }
        self.check_member(id);
    }

    fn check_member(&mut self, id: u64) {
        let Some(core) = self.members.get(&id).and_then(|m| m.core.as_ref()) else {
            return;
        };
        let applied = core.raft_view().applied;
        let sm = core.state();
        if self.level_raised_at.is_none()
            && sm.settings().feature_level.get() > baton_machine::feature::BASE
        {
            self.level_raised_at = Some(self.now);
            // The leader raises the level only once every member supports it: a member still
            // playing the previous release means it rose too early (that member would stop at
            // the entry, unable to apply it).
            if let Some(capped) = self.members.values().find(|m| m.max_level.is_some()) {
                self.breach = Some(format!(
                    "at {} ms: member {id} applied feature level {} while member {} is still \
                     capped at {:?}",
                    self.now / MS,
                    sm.settings().feature_level.get(),
                    capped.id,
                    capped.max_level
                ));
                return;
            }
        }
        let result = self
            .settings_view
            .observe(id, applied, sm)
            .and_then(|()| self.tree_view.observe(id, applied, sm))
            .and_then(|()| self.lock_view.observe(id, applied, sm, &self.lock_dirs))
            .and_then(|()| lockview::check_ephemerals(id, sm))
            .and_then(|()| {
                // What the clients of this member believe they hold must be what it says.
                self.clients
                    .iter()
                    .filter(|c| c.member().is_some_and(|(m, _)| m == id))
                    .filter_map(|c| c.holding())
                    .try_for_each(|node| {
                        let dir = &node[..node.rfind('/').unwrap_or(0)];
                        if dir.contains("/semaphores/") {
                            lockview::check_permit(id, sm, dir, node, SIM_PERMITS)
                        } else {
                            lockview::check_belief(id, sm, dir, node)
                        }
                    })
            });
        let incarnation = self.members.get(&id).map_or(0, |m| m.incarnation);
        let result = result.and_then(|()| {
            let Some(dir) = &self.barrier_dir else {
                return Ok(());
            };
            self.barrier_view.observe(applied, sm, dir, SIM_PARTIES)?;
            // Only clients of this incarnation: a restarted member replays towards the release
            // it answered before its crash.
            self.clients
                .iter()
                .filter(|c| c.member() == Some((id, incarnation)))
                .filter_map(|c| c.barrier_passed())
                .try_for_each(|node| barrierview::check_passed(id, sm, node))
        });
        if let Err(breach) = result {
            self.breach = Some(format!("at {} ms: {breach}", self.now / MS));
        }
    }

    fn client_actions(&mut self, client: usize, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::ToMember {
                    member,
                    incarnation,
                    msg,
                } => {
                    let delay = self.rng.random_range(CLIENT_LINK.0..=CLIENT_LINK.1);
                    let at = self.arrival(Link::FromClient(client), delay);
                    self.queue.push(
                        at,
                        Event::FromClient {
                            to: member,
                            incarnation,
                            msg,
                        },
                    );
                }
                Action::WakeAt(at) => self.wake(client, at),
            }
        }
    }

    /// When a message sent now over `link` with `delay` arrives: never before one sent earlier.
    fn arrival(&mut self, link: Link, delay: Micros) -> Micros {
        let last = self.link_clock.entry(link).or_insert(0);
        *last = (*last).max(self.now + delay);
        *last
    }

    /// Schedules `client`'s wake-up at `at` unless one is due sooner.
    pub fn wake(&mut self, client: usize, at: Micros) {
        let at = at.max(self.now);
        if self.wake_at.get(&client).is_some_and(|due| *due <= at) {
            return;
        }
        self.wake_at.insert(client, at);
        self.queue.push(at, Event::Wake { client });
    }

    /// The member that believes it leads in the highest term, if any is up.
    pub fn leader(&self) -> Option<u64> {
        self.members
            .values()
            .filter_map(|m| m.core.as_ref().map(|c| (m.id, c.raft_view())))
            .filter(|(_, view)| view.is_leader)
            .max_by_key(|(_, view)| view.term)
            .map(|(id, _)| id)
    }

    fn resolve(&mut self, target: Target) -> u64 {
        match target {
            Target::Member(id) => id,
            Target::Leader => self.leader().unwrap_or_else(|| {
                let n = self.members.len() as u64;
                self.rng.random_range(1..=n)
            }),
        }
    }

    fn apply_fault(&mut self, fault: Fault) -> Result<(), String> {
        let ids: Vec<u64> = self.members.keys().copied().collect();
        match fault {
            Fault::Partition { side } => {
                let rest: Vec<u64> = ids.iter().copied().filter(|i| !side.contains(i)).collect();
                self.net.split(&side, &rest);
            }
            Fault::Isolate(target) => {
                let id = self.resolve(target);
                let rest: Vec<u64> = ids.iter().copied().filter(|i| *i != id).collect();
                self.net.split(&[id], &rest);
            }
            Fault::OneWay { from, to } => self.net.block(from, to),
            Fault::Crash(target) => {
                let id = self.resolve(target);
                self.crash(id)?;
            }
            Fault::RestartAll => {
                for id in ids {
                    if !self.members[&id].is_up() {
                        self.start_member(id)?;
                        self.after_step(id);
                    }
                }
            }
            Fault::Stall(target, us) => {
                let id = self.resolve(target);
                if let Some(m) = self.members.get_mut(&id) {
                    m.stalled_until = m.stalled_until.max(self.now + us);
                }
            }
            Fault::Weather { loss, delay } => {
                self.net.loss = loss;
                self.net.delay = delay;
            }
            Fault::Heal => {
                self.net.heal();
                // Healing frees every volume too: the settle phase starts without alarms
                // (members still have to clear them through the log).
                self.disk_full_until.clear();
            }
            Fault::Settings(v) => {
                let id = self.resolve(Target::Leader);
                let policy_on = self
                    .members
                    .get(&id)
                    .and_then(|m| m.core.as_ref())
                    .is_some_and(|c| c.state().tenancy().check_identities);
                let changes = vec![
                    Setting::NamespaceZnodes(50_000 + v % 50_000),
                    Setting::SharedBytes((64 << 20) + v),
                    Setting::EphemeralsPerSession(1_000 + v % 1_000),
                    // Under the faults, so that a member that decided a write by its own
                    // policy, or a client left waiting when it lost access, shows.
                    Setting::CheckIdentities(!policy_on),
                ];
                // Nobody waits for the answer: a lost change is as good as a refused one.
                let (reply, _) = tokio::sync::oneshot::channel();
                let command = AdminCommand::ChangeSettings { changes };
                self.deliver(id, None, CoreMsg::Admin { command, reply })?;
            }
            Fault::DiskFull(target, us) => {
                let id = self.resolve(target);
                let until = self.disk_full_until.entry(id).or_default();
                *until = (*until).max(self.now + us);
            }
            Fault::Upgrade(id) => {
                let Some(m) = self.members.get_mut(&id) else {
                    return Ok(());
                };
                m.max_level = None;
                // A member that is down comes back upgraded at the next restart.
                if m.is_up() {
                    self.stop(id, false)?;
                    self.queue
                        .push(self.now + 500 * MS, Event::Fault(Fault::RestartAll));
                }
            }
        }
        Ok(())
    }

    /// Kills a member: its clients see their connections drop.
    fn crash(&mut self, id: u64) -> Result<(), String> {
        self.stop(id, true)
    }

    /// Stops a member, by a crash (`power_loss`: its directory keeps only what was fsynced)
    /// or cleanly: its peers and clients see their connections drop.
    fn stop(&mut self, id: u64, power_loss: bool) -> Result<(), String> {
        let Some(m) = self.members.get_mut(&id) else {
            return Ok(());
        };
        if !m.is_up() {
            return Ok(());
        }
        if power_loss {
            m.crash().map_err(|e| {
                format!("member {id}: the simulated power loss could not rewind its directory: {e}")
            })?;
        } else {
            m.stop();
        }
        // Its sockets close with it: every member with a link to it notices at once.
        for other in self.members.values().filter(|o| o.id != id && o.is_up()) {
            let event = PeerEvent::Unreachable { peer: id };
            let (to, incarnation) = (other.id, other.incarnation);
            self.queue.push(
                self.now + MS,
                Event::LinkReport {
                    to,
                    incarnation,
                    event,
                },
            );
        }
        for client in 0..self.clients.len() {
            if self.clients[client].member().is_some_and(|(m, _)| m == id) {
                let actions = self.clients[client].lose_connection(
                    self.now,
                    &mut self.rng,
                    &mut self.rec,
                    false,
                );
                self.client_actions(client, actions);
            }
        }
        Ok(())
    }
}
