//! `baton-sim`: a deterministic simulation of a Baton ensemble and its clients.
//!
//! The members are the real `Core` (raft-rs, the state machine, sessions, forwarding) over real
//! Raft logs on disk; only the clock, the network between members and the client sockets are
//! simulated. One thread pops the earliest event from a queue, so a seed decides every
//! delay, loss, fault and interleaving, and a failing seed replays exactly.
//!
//! Each run records what the clients saw and checks it: linearizability of the znodes'
//! writes and of reads after `sync`, no acknowledged write lost, no sequential name handed out
//! twice, per-session FIFO answers; in the ensemble's view after every step: one holder per
//! lock and election, fencing tokens that only rise, members agreeing on the holder, never more
//! than N holders of a semaphore, nobody passing a barrier before N parties entered, and no
//! ephemeral outliving its session. Once the faults stop, everything must make progress again.

mod barrierview;
mod client;
mod faults;
mod lockview;
mod member;
mod net;
mod record;
mod settingsview;
mod time;
mod treeview;
mod world;

use std::collections::BTreeMap;
use std::fmt;
use std::hash::Hasher;
use std::sync::Arc;
use std::time::Duration;

use baton_checker::{Verdict, Znode};
use baton_ensemble::core::{DeliberateBugs, ManualClock};
use baton_sidecar::recipe::queue::NodeKind;
use rand::SeedableRng;
use rand::rngs::StdRng;

use client::{Client, LEADERSHIP_HOLD, LOCK_HOLD, Role};
use member::{Member, MemberSettings};
pub use time::{MS, Micros, SECOND};
use world::{Event, World};

/// Search steps the linearizability checker may spend per znode. A znode it cannot decide
/// within them fails the run: an undecided history proves nothing.
const CHECK_BUDGET: u64 = 2_000_000;

/// One run's shape; the seed decides everything else.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    pub members: u64,
    /// Virtual time with faults.
    pub faults_for: Micros,
    /// Virtual time after the faults heal, for the ensemble to settle and clients to finish.
    pub settle_for: Micros,
    pub register_clients: usize,
    pub lock_clients: usize,
    pub election_clients: usize,
    /// Clients of a semaphore of [`client::SIM_PERMITS`] permits.
    pub semaphore_clients: usize,
    /// Clients of a double barrier of [`client::SIM_PARTIES`] parties.
    pub barrier_clients: usize,
    /// Clients that plant persistent nodes in the lock, election, semaphore and barrier queues.
    pub squatters: usize,
    /// A deliberate bug, to prove the checks catch it; `None` in every real run.
    pub bug: Option<Bug>,
}

/// Deliberate bugs the simulation can switch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// `sync` answered from the member's own state without the leader's ReadIndex.
    StaleSync,
    /// The Raft log never fsyncs (`--unsafe-no-fsync`): appends are acknowledged before they
    /// are durable, and a crash loses them.
    NoFsync,
    /// The barrier clients pass once N − 1 parties are in (the rule off by one).
    ShortBarrier,
    /// Members with an even id ignore alarm entries: the alarm decided per member.
    LocalAlarm,
    /// Members with an even id keep null znode data below feature level 2: level-2 behaviour
    /// switched on by the build before the level entry.
    EarlyFeature,
    /// Members with an even id apply writes with the tenancy policy off whatever the
    /// replicated setting says: the policy decided by each member's own flag.
    LocalPolicy,
}

impl Bug {
    pub const ALL: [Bug; 6] = [
        Bug::StaleSync,
        Bug::NoFsync,
        Bug::ShortBarrier,
        Bug::LocalAlarm,
        Bug::EarlyFeature,
        Bug::LocalPolicy,
    ];

    /// The name `--bug` takes.
    pub fn name(self) -> &'static str {
        match self {
            Bug::StaleSync => "stale-sync",
            Bug::NoFsync => "no-fsync",
            Bug::ShortBarrier => "short-barrier",
            Bug::LocalAlarm => "local-alarm",
            Bug::EarlyFeature => "early-feature",
            Bug::LocalPolicy => "local-policy",
        }
    }
}

impl SimConfig {
    /// The configuration CI runs for `seed`: 3 or 5 members, by seed.
    pub fn for_seed(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            members: if seed % 3 == 2 { 5 } else { 3 },
            faults_for: 20 * SECOND,
            settle_for: 10 * SECOND,
            register_clients: 6,
            lock_clients: 4,
            election_clients: 3,
            semaphore_clients: 4,
            barrier_clients: 4,
            squatters: 1,
            bug: None,
        }
    }
}

/// What a clean run did.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    pub members: u64,
    pub operations: usize,
    pub grants: usize,
    /// Grants of the semaphore's permits (also in `grants`).
    pub permit_grants: usize,
    /// Times a barrier client passed, and barrier releases the ensemble's view checked.
    pub barrier_passes: usize,
    pub barrier_releases: u64,
    pub holder_changes: u64,
    /// Persistent nodes the squatters planted in the queues (none of which may ever hold).
    pub planted: usize,
    /// Times the NOSPACE alarm went up (a member's disk "filled").
    pub alarms: usize,
    /// Times the applied tenancy policy (`checkIdentities`) was turned on or off.
    pub policy_changes: usize,
    /// Members that started capped at feature level 1 and were upgraded during the faults.
    pub upgraded: usize,
    /// When the ensemble's feature level rose (a member applied the level entry).
    pub level_raised_at: Option<Micros>,
    pub faults: Vec<String>,
    pub events: u64,
    /// A hash of every event's time and target: equal for equal seeds.
    pub trace: u64,
    pub leader_at_end: Option<u64>,
}

/// Why a run failed, with what is needed to replay it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub seed: u64,
    pub members: u64,
    pub fault_seconds: u64,
    pub bug: Option<Bug>,
    pub what: String,
    pub faults: Vec<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {} ({} members): {}",
            self.seed, self.members, self.what
        )?;
        writeln!(f, "fault schedule:")?;
        for fault in &self.faults {
            writeln!(f, "  {fault}")?;
        }
        write!(
            f,
            "replay: cargo run --release -p baton-sim -- --seed {} --members {} --fault-seconds {}{} --verbose",
            self.seed,
            self.members,
            self.fault_seconds,
            self.bug
                .map(|b| format!(" --bug {}", b.name()))
                .unwrap_or_default()
        )
    }
}

impl std::error::Error for Failure {}

/// Runs one simulation. A panic anywhere in it (raft-rs panics on some impossible states)
/// is a failure of the run, reported like the others.
pub fn run(cfg: &SimConfig) -> Result<Report, Failure> {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_inner(cfg)));
    result.unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into());
        let mut fault_rng = StdRng::seed_from_u64(cfg.seed ^ FAULT_STREAM);
        Err(Failure {
            seed: cfg.seed,
            members: cfg.members,
            fault_seconds: cfg.faults_for / SECOND,
            bug: cfg.bug,
            what: format!("panicked: {what}"),
            faults: describe(&faults::full_schedule(&mut fault_rng, cfg.members, cfg.faults_for).1),
        })
    })
}

/// The fault schedule draws from its own stream, so changing a client does not move a fault.
const FAULT_STREAM: u64 = 0x9e37_79b9_7f4a_7c15;

fn describe(schedule: &[(Micros, faults::Fault)]) -> Vec<String> {
    schedule
        .iter()
        .map(|(at, f)| format!("{:>6} ms  {f}", at / MS))
        .collect()
}

fn run_inner(cfg: &SimConfig) -> Result<Report, Failure> {
    baton_raftlog::crash_model::enable();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut fault_rng = StdRng::seed_from_u64(cfg.seed ^ FAULT_STREAM);
    let (capped, schedule) = faults::full_schedule(&mut fault_rng, cfg.members, cfg.faults_for);
    let mut faults = describe(&schedule);
    faults.insert(
        0,
        format!("     0 ms  members {capped:?} start capped at feature level 1"),
    );
    let fail = |what: String| Failure {
        seed: cfg.seed,
        members: cfg.members,
        fault_seconds: cfg.faults_for / SECOND,
        bug: cfg.bug,
        what,
        faults: faults.clone(),
    };

    let dir = tempfile::tempdir().map_err(|e| fail(format!("temp dir: {e}")))?;
    let ids: Vec<u64> = (1..=cfg.members).collect();
    let settings = MemberSettings {
        members: ids.iter().map(|id| (*id, format!("m{id}:2888"))).collect(),
        tick: Duration::from_millis(100),
        // Small, so snapshots are taken and sent to lagging members during the run.
        snapshot_entries: 300,
        bugs: DeliberateBugs {
            sync_without_read_index: cfg.bug == Some(Bug::StaleSync),
            alarms_on_odd_members_only: cfg.bug == Some(Bug::LocalAlarm),
            null_data_before_level: cfg.bug == Some(Bug::EarlyFeature),
            policy_off_on_even_members: cfg.bug == Some(Bug::LocalPolicy),
        },
        fsync: cfg.bug != Some(Bug::NoFsync),
    };
    let members: BTreeMap<u64, Member> = ids
        .iter()
        .map(|id| {
            let mut m = Member::new(*id, dir.path().join(format!("m{id}")));
            // The previous release, until its upgrade.
            m.max_level = capped.contains(id).then_some(baton_machine::feature::BASE);
            (*id, m)
        })
        .collect();
    let end = cfg.faults_for + cfg.settle_for;
    let mut clients = Vec::new();
    let keys: Vec<String> = (0..3).map(|i| format!("/k{i}")).collect();
    for _ in 0..cfg.register_clients {
        let role = Role::Register { keys: keys.clone() };
        clients.push(Client::new(clients.len(), role));
    }
    let lock_dir = "/baton/default/locks/sim".to_string();
    let election_dir = "/baton/default/elections/sim".to_string();
    let semaphore_dir = "/baton/default/semaphores/sim".to_string();
    let barrier_dir = "/baton/default/barriers/sim".to_string();
    for (count, dir, kind, hold) in [
        (cfg.lock_clients, &lock_dir, NodeKind::Exclusive, LOCK_HOLD),
        (
            cfg.election_clients,
            &election_dir,
            NodeKind::Candidate,
            LEADERSHIP_HOLD,
        ),
        (
            cfg.semaphore_clients,
            &semaphore_dir,
            NodeKind::Permit,
            LOCK_HOLD,
        ),
    ] {
        for _ in 0..count {
            let role = Role::Lock {
                dir: dir.clone(),
                kind,
                hold,
            };
            clients.push(Client::new(clients.len(), role));
        }
    }
    for _ in 0..cfg.barrier_clients {
        let role = Role::Barrier {
            dir: barrier_dir.clone(),
            parties: client::SIM_PARTIES,
        };
        let mut barrier = Client::new(clients.len(), role);
        barrier.short_barrier = cfg.bug == Some(Bug::ShortBarrier);
        clients.push(barrier);
    }
    for _ in 0..cfg.squatters {
        let role = Role::Squatter {
            queues: vec![
                (lock_dir.clone(), NodeKind::Exclusive),
                (election_dir.clone(), NodeKind::Candidate),
                (semaphore_dir.clone(), NodeKind::Permit),
                (barrier_dir.clone(), NodeKind::Party),
            ],
        };
        clients.push(Client::new(clients.len(), role));
    }
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let mut world = World::new(
        rng.clone(),
        clock,
        members,
        settings,
        clients,
        vec![lock_dir.clone(), election_dir.clone()],
    );
    world.barrier_dir = Some(barrier_dir.clone());
    for id in &ids {
        world.start_member(*id).map_err(fail)?;
        let phase = rand::Rng::random_range(&mut rng, 0..world.tick);
        world.queue.push(phase, Event::Tick { member: *id });
    }
    bootstrap_tree(
        &mut world,
        &[&lock_dir, &election_dir, &semaphore_dir, &barrier_dir],
    )
    .map_err(fail)?;
    let start = world.now;
    // Clients stop starting operations halfway through the settle phase, counted from when the
    // workload starts (after the bootstrap), so the final state is settled.
    for client in &mut world.clients {
        client.stop_at = start + end - cfg.settle_for / 2;
    }
    for c in 0..world.clients.len() {
        world.wake(c, start);
    }
    for (at, fault) in schedule {
        world.queue.push(start + at, Event::Fault(fault));
    }
    world.run_until(start + end).map_err(fail)?;
    if let Some(breach) = world.breach.take() {
        return Err(fail(breach));
    }
    tracing::info!(latency = %world.rec.latency_summary(), "mean latency by call");
    final_checks(&world, start + cfg.faults_for).map_err(fail)?;
    Ok(Report {
        seed: cfg.seed,
        members: cfg.members,
        operations: world.rec.operations(),
        grants: world.rec.grants.len(),
        permit_grants: world
            .rec
            .grants
            .iter()
            .filter(|g| g.dir == semaphore_dir)
            .count(),
        barrier_passes: world.rec.barrier_passes,
        alarms: world.settings_view.alarms_seen(),
        policy_changes: world.settings_view.policy_changes(),
        upgraded: capped.len(),
        level_raised_at: world.level_raised_at.map(|at| at - start),
        barrier_releases: world.barrier_view.releases,
        holder_changes: world.lock_view.changes,
        planted: world.clients.iter().map(|c| c.planted.len()).sum(),
        faults,
        events: world.events,
        trace: world.trace.finish(),
        leader_at_end: world.leader(),
    })
}

/// Creates the lock and election parents before clients start, applied through Raft like any
/// write (a setup client on the leader).
fn bootstrap_tree(world: &mut World, dirs: &[&str]) -> Result<(), String> {
    let mut paths = vec![
        "/baton".to_string(),
        "/baton/default".into(),
        "/baton/default/locks".into(),
        "/baton/default/elections".into(),
        "/baton/default/semaphores".into(),
        "/baton/default/barriers".into(),
    ];
    paths.extend(dirs.iter().map(|d| d.to_string()));
    // Wait for a leader, then have it apply the creates.
    let mut deadline = world.now;
    while world.leader().is_none() {
        deadline += 100 * MS;
        if deadline > 30 * SECOND {
            return Err("no leader was elected within 30 s of start".into());
        }
        world.run_until(deadline)?;
    }
    let setup = world.clients.len();
    world
        .clients
        .push(Client::new(setup, Role::Setup { paths }));
    world.wake(setup, world.now);
    while !world.clients[setup].is_set_up() {
        deadline += 100 * MS;
        if deadline > 60 * SECOND {
            return Err("the lock and election directories were not created within 60 s".into());
        }
        world.run_until(deadline)?;
    }
    Ok(())
}

/// Checks made once the run is over: the client history, and progress after the faults.
fn final_checks(world: &World, healed_at: Micros) -> Result<(), String> {
    let history = world
        .rec
        .history()
        .map_err(|e| format!("the recorded history is malformed: {e}"))?;
    match baton_checker::check(&history, CHECK_BUDGET) {
        Verdict::Ok => {}
        Verdict::Violation(v) => return Err(format!("not linearizable:\n{v}")),
        Verdict::Inconclusive { key, steps } => {
            return Err(format!(
                "the linearizability of {key} is undecided after {steps} search steps \
                 (the budget): an undecided history proves nothing"
            ));
        }
    }
    baton_checker::check_session_fifo(&history).map_err(|e| e.to_string())?;
    baton_checker::check_sequential_names(
        world.rec.sequential.iter().map(|(s, n)| (*s, n.as_str())),
    )
    .map_err(|e| e.to_string())?;
    let leader = world
        .leader()
        .ok_or("no leader 10 s after the faults healed")?;
    let sm = world.members[&leader]
        .core
        .as_ref()
        .map(|c| c.state())
        .ok_or("leader is down")?;
    let finals: BTreeMap<String, Znode> = history
        .keys()
        .map(|k| {
            let z = match sm.tree().get(k) {
                Some(node) => Znode::Present {
                    data: node.data().unwrap_or_default().to_vec(),
                    version: node.stat().version,
                },
                None => Znode::Absent,
            };
            (k.to_string(), z)
        })
        .collect();
    baton_checker::check_no_lost_writes(&history, &finals).map_err(|e| e.to_string())?;
    // Every session still open belongs to a connected client: the abandoned ones expired,
    // and their ephemerals with them.
    let live: Vec<i64> = world.clients.iter().filter_map(|c| c.session()).collect();
    if let Some(orphan) = sm.sessions().find(|s| !live.contains(&s.id)) {
        return Err(format!(
            "session 0x{:x} is still open at the end though no client uses it (its timeout is {} ms)",
            orphan.id, orphan.timeout_ms
        ));
    }
    check_grants(&world.rec.grants)?;
    // Every member was upgraded during the faults: once they all said so, the level rose.
    let level = sm.settings().feature_level.get();
    let newest = *baton_machine::feature::SUPPORTED.end();
    if level != newest {
        return Err(format!(
            "the feature level is {level} 10 s after the last member was upgraded (expected {newest})"
        ));
    }
    // Disks were freed at the heal: every alarm cleared by itself through the log.
    if let Some(alarm) = sm.settings().alarms.iter().next() {
        return Err(format!(
            "the alarm {alarm:?} is still up 10 s after every disk was freed"
        ));
    }
    // Every client got an answer after the heal: nothing is stuck (a lost watch, a session
    // that never expires, a request the ensemble forgot).
    if let Some(stuck) = world
        .clients
        .iter()
        .find(|c| c.last_answer < healed_at && !c.is_passive())
    {
        return Err(format!(
            "client {} got no answer after the faults healed at {} ms (last at {} ms)",
            stuck.id,
            healed_at / MS,
            stuck.last_answer / MS
        ));
    }
    Ok(())
}

/// Fencing tokens as clients received them: no token granted twice in a directory (two
/// holders would share it), and each client's tokens strictly rising.
fn check_grants(grants: &[record::Grant]) -> Result<(), String> {
    let mut seen: BTreeMap<(&str, i64), &record::Grant> = BTreeMap::new();
    let mut last: BTreeMap<(usize, &str), i64> = BTreeMap::new();
    for g in grants {
        if let Some(first) = seen.insert((g.dir.as_str(), g.token), g) {
            return Err(format!(
                "{}: fencing token {} granted twice: to client {} ({} at {} ms) and to client {} ({} at {} ms)",
                g.dir,
                g.token,
                first.client,
                first.node,
                first.at / MS,
                g.client,
                g.node,
                g.at / MS
            ));
        }
        if let Some(prev) = last.insert((g.client, g.dir.as_str()), g.token)
            && prev >= g.token
        {
            return Err(format!(
                "{}: client {} was granted token {} at {} ms after token {prev}",
                g.dir,
                g.client,
                g.token,
                g.at / MS
            ));
        }
    }
    Ok(())
}
