//! Faults on a real, isolated cluster (`Cluster::start_isolated`), as Jepsen's nemeses and
//! etcd's robustness tests inject them: partitions and random loss made with iptables inside
//! the members' namespaces, pauses (SIGSTOP/SIGCONT), and kill -9 with a restart. One fault at a time:
//! `apply` it, hold it, `heal` it; `run_schedule` does so over a schedule drawn from a seed.
//!
//! Partitions cut only member-to-member traffic: the test's clients, in the root namespace,
//! still reach every member (a client of a cut-off member stays with it, as in Jepsen).

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::cluster::Cluster;
use crate::netns::Network;
use crate::registers::Rng;

/// What the nemesis and the workloads need of an ensemble under test, each member in a network
/// namespace of its own: Baton's `Cluster` (`start_isolated`) or Apache ZooKeeper's
/// (`zk_quorum::ZkQuorum`), so both meet the same faults.
#[allow(async_fn_in_trait)]
pub trait Ensemble {
    /// "Baton" or "ZooKeeper", for reports.
    fn product(&self) -> &'static str;
    fn ids(&self) -> Vec<u64>;
    fn network(&self) -> Result<&Network>;
    /// Waits until the running members agree on a leader, and returns it.
    async fn wait_for_leader(&mut self) -> Result<u64>;
    /// Sends `signal` (`STOP`, `CONT`) to member `id`'s process.
    fn signal(&self, id: u64, signal: &str) -> Result<()>;
    fn kill9(&mut self, id: u64) -> Result<()>;
    /// Starts member `id` again on its data and waits until it serves.
    async fn restart(&mut self, id: u64) -> Result<()>;
    /// Every member's client address, for a client that fails over.
    fn connect_string(&self) -> String;
    /// Prints each member's log tail (after a failure).
    fn dump_logs(&mut self);
}

impl Ensemble for Cluster {
    fn product(&self) -> &'static str {
        "Baton"
    }

    fn ids(&self) -> Vec<u64> {
        Cluster::ids(self)
    }

    fn network(&self) -> Result<&Network> {
        Cluster::network(self)
    }

    async fn wait_for_leader(&mut self) -> Result<u64> {
        Cluster::wait_for_leader(self).await
    }

    fn signal(&self, id: u64, signal: &str) -> Result<()> {
        Cluster::signal(self, id, signal)
    }

    fn kill9(&mut self, id: u64) -> Result<()> {
        Cluster::kill9(self, id)
    }

    async fn restart(&mut self, id: u64) -> Result<()> {
        Cluster::restart(self, id).await
    }

    fn connect_string(&self) -> String {
        Cluster::connect_string(self)
    }

    fn dump_logs(&mut self) {
        Cluster::dump_logs(self)
    }
}

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A minority of members (chosen at random) cut off from the rest, both ways.
    Minority,
    /// The leader cut off from every other member, both ways.
    IsolateLeader,
    /// Two halves that cannot reach each other, and one member that reaches both.
    Bridge,
    /// Packets from one member to another dropped; the other way still flows.
    OneWay,
    /// One in four packets to and from one member (the leader half the time) dropped at
    /// random: TCP's retransmissions turn it into delays and stalls of hundreds of ms. (A
    /// delay of its own, `tc netem`, is not in every kernel; iptables' `statistic` match is.)
    Lossy,
    /// The leader stopped (SIGSTOP) for the hold, then continued (SIGCONT).
    PauseLeader,
    /// A follower stopped for the hold, then continued.
    PauseFollower,
    /// The leader killed with SIGKILL, restarted after the hold on its data dir.
    KillLeader,
    /// A follower killed with SIGKILL, restarted after the hold.
    KillFollower,
}

impl Fault {
    /// The partition shapes and the lossy member.
    pub const NETWORK: [Fault; 5] = [
        Fault::Minority,
        Fault::IsolateLeader,
        Fault::Bridge,
        Fault::OneWay,
        Fault::Lossy,
    ];
    /// Pauses and kills.
    pub const PROCESSES: [Fault; 4] = [
        Fault::PauseLeader,
        Fault::PauseFollower,
        Fault::KillLeader,
        Fault::KillFollower,
    ];
}

/// What `apply` did, to undo it and to print it.
#[derive(Debug, Clone)]
enum Active {
    /// iptables rules in some namespaces; healed by flushing every member's rules.
    Rules,
    Paused(u64),
    Killed(u64),
}

/// A fault as it was injected.
#[derive(Debug, Clone)]
pub struct Injected {
    pub fault: Fault,
    /// Which members, which way: `isolate leader 2 from [1, 3]`.
    pub detail: String,
    /// When it was applied, from the nemesis's start.
    pub at: Duration,
    /// How long it was held before the heal began.
    pub held: Duration,
}

impl fmt::Display for Injected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "at {:>6.1}s for {:>4.1}s: {:?}: {}",
            self.at.as_secs_f64(),
            self.held.as_secs_f64(),
            self.fault,
            self.detail
        )
    }
}

/// How long faults are held and how long the cluster rests between them.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub partition: (Duration, Duration),
    pub pause: (Duration, Duration),
    pub kill: (Duration, Duration),
    pub rest: (Duration, Duration),
}

/// Injects faults one at a time and remembers each.
pub struct Nemesis {
    seed: u64,
    rng: Rng,
    started: Instant,
    active: Option<(Active, Injected, Instant)>,
    injected: Vec<Injected>,
}

/// Environment variable holding a seed to replay (decimal or 0x-hex).
pub const SEED_VAR: &str = "BATON_FAULTS_SEED";

impl Nemesis {
    /// A nemesis drawing its choices from `seed`.
    pub fn new(seed: u64) -> Nemesis {
        Nemesis {
            seed,
            rng: Rng(seed),
            started: Instant::now(),
            active: None,
            injected: Vec::new(),
        }
    }

    /// The seed in `BATON_FAULTS_SEED`, or a new one from the clock.
    pub fn seed_from_env() -> Result<u64> {
        match std::env::var(SEED_VAR) {
            Ok(text) => {
                let text = text.trim();
                match text.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16),
                    None => text.parse(),
                }
                .with_context(|| format!("{SEED_VAR}={text} is not a number"))
            }
            Err(_) => Ok(std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|since| since.as_nanos() as u64)
                .unwrap_or(1)),
        }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The random source the schedule is drawn from (the workload may draw from it too).
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// Every fault injected so far, in order.
    pub fn injected(&self) -> &[Injected] {
        &self.injected
    }

    /// Injects `fault` on `cluster`, whose members must agree on a leader now.
    pub async fn apply(&mut self, cluster: &mut impl Ensemble, fault: Fault) -> Result<()> {
        if self.active.is_some() {
            bail!("a fault is active already; heal it first");
        }
        let leader = cluster.wait_for_leader().await?;
        let ids = cluster.ids();
        let followers: Vec<u64> = ids.iter().copied().filter(|&id| id != leader).collect();
        let mut shuffled = ids.clone();
        self.shuffle(&mut shuffled);
        let (active, detail) = match fault {
            Fault::Minority => {
                let (minority, majority) = shuffled.split_at((ids.len() - 1) / 2);
                cut(cluster, minority, majority)?;
                (
                    Active::Rules,
                    format!("cut {minority:?} from {majority:?} (leader {leader})"),
                )
            }
            Fault::IsolateLeader => {
                cut(cluster, &[leader], &followers)?;
                (
                    Active::Rules,
                    format!("isolate leader {leader} from {followers:?}"),
                )
            }
            Fault::Bridge => {
                let (bridge, rest) = shuffled.split_first().context("no members")?;
                let (left, right) = rest.split_at(rest.len() / 2);
                cut(cluster, left, right)?;
                (
                    Active::Rules,
                    format!(
                        "bridge {bridge} between {left:?} and {right:?}, which do not see each \
                         other (leader {leader})"
                    ),
                )
            }
            Fault::OneWay => {
                let (from, to) = (shuffled[0], shuffled[1]);
                drop_one_way(cluster, from, to)?;
                (
                    Active::Rules,
                    format!("drop {from} -> {to} only (leader {leader})"),
                )
            }
            Fault::Lossy => {
                let id = if self.rng.below(2) == 0 {
                    leader
                } else {
                    self.pick(&followers)?
                };
                let others: Vec<u64> = ids.iter().copied().filter(|&m| m != id).collect();
                lossy(cluster, id, &others)?;
                (
                    Active::Rules,
                    format!(
                        "drop 1 in {LOSS_ONE_IN} packets to and from member {id} (leader {leader})"
                    ),
                )
            }
            Fault::PauseLeader | Fault::PauseFollower => {
                let id = match fault {
                    Fault::PauseLeader => leader,
                    _ => self.pick(&followers)?,
                };
                cluster.signal(id, "STOP")?;
                (
                    Active::Paused(id),
                    format!("SIGSTOP member {id} (leader {leader})"),
                )
            }
            Fault::KillLeader | Fault::KillFollower => {
                let id = match fault {
                    Fault::KillLeader => leader,
                    _ => self.pick(&followers)?,
                };
                cluster.kill9(id)?;
                (
                    Active::Killed(id),
                    format!("SIGKILL member {id} (leader {leader})"),
                )
            }
        };
        let now = Instant::now();
        let injected = Injected {
            fault,
            detail,
            at: now - self.started,
            held: Duration::ZERO,
        };
        println!("nemesis: {}", injected.detail);
        self.active = Some((active, injected, now));
        Ok(())
    }

    /// Injects `fault` aimed at member `target` instead of members drawn at random, for a test
    /// that follows one client's member: `Minority` and `IsolateLeader` cut `target` alone off
    /// from the rest (both ways), a pause stops it, a kill kills it. The fault is recorded under
    /// the name of what `target` is now (`PauseLeader` if it leads, else `PauseFollower`...).
    /// `Bridge` and `OneWay` have no single target and are refused.
    pub async fn apply_to(
        &mut self,
        cluster: &mut impl Ensemble,
        fault: Fault,
        target: u64,
    ) -> Result<()> {
        if self.active.is_some() {
            bail!("a fault is active already; heal it first");
        }
        let leader = cluster.wait_for_leader().await?;
        let others: Vec<u64> = cluster
            .ids()
            .into_iter()
            .filter(|&id| id != target)
            .collect();
        let leads = target == leader;
        let (fault, active, detail) = match fault {
            Fault::Minority | Fault::IsolateLeader => {
                cut(cluster, &[target], &others)?;
                (
                    if leads {
                        Fault::IsolateLeader
                    } else {
                        Fault::Minority
                    },
                    Active::Rules,
                    format!("cut member {target} off from {others:?} (leader {leader})"),
                )
            }
            Fault::PauseLeader | Fault::PauseFollower => {
                cluster.signal(target, "STOP")?;
                (
                    if leads {
                        Fault::PauseLeader
                    } else {
                        Fault::PauseFollower
                    },
                    Active::Paused(target),
                    format!("SIGSTOP member {target} (leader {leader})"),
                )
            }
            Fault::KillLeader | Fault::KillFollower => {
                cluster.kill9(target)?;
                (
                    if leads {
                        Fault::KillLeader
                    } else {
                        Fault::KillFollower
                    },
                    Active::Killed(target),
                    format!("SIGKILL member {target} (leader {leader})"),
                )
            }
            Fault::Bridge | Fault::OneWay | Fault::Lossy => {
                bail!("{fault:?} cannot be aimed at one member")
            }
        };
        let now = Instant::now();
        let injected = Injected {
            fault,
            detail,
            at: now - self.started,
            held: Duration::ZERO,
        };
        println!("nemesis: {}", injected.detail);
        self.active = Some((active, injected, now));
        Ok(())
    }

    /// Undoes the active fault (flushes every member's rules, continues or restarts the
    /// member), if there is one.
    pub async fn heal(&mut self, cluster: &mut impl Ensemble) -> Result<()> {
        let Some((active, mut injected, since)) = self.active.take() else {
            return Ok(());
        };
        injected.held = since.elapsed();
        self.injected.push(injected);
        match active {
            Active::Rules => heal_rules(cluster)?,
            Active::Paused(id) => cluster.signal(id, "CONT")?,
            Active::Killed(id) => cluster.restart(id).await?,
        }
        println!("nemesis: healed");
        Ok(())
    }

    /// Heals whatever is active, ignoring errors: for a test that failed mid-fault, so the
    /// members' logs and the cleanup are not held up by a stopped process.
    pub fn heal_quietly(&mut self, cluster: &mut impl Ensemble) {
        if let Some((active, _, _)) = self.active.take() {
            match active {
                Active::Rules => {
                    let _ = heal_rules(cluster);
                }
                Active::Paused(id) => {
                    let _ = cluster.signal(id, "CONT");
                }
                Active::Killed(_) => {}
            }
        }
    }

    /// Applies, holds and heals faults drawn from `kinds` (each once in a shuffled order,
    /// then at random), resting between them, until `rounds` times `kinds` faults were
    /// injected, or, if `soak` is given, until that much time has passed. Waits for the
    /// members to agree on a leader before each fault and at the end: a cluster that does
    /// not recover within the harness's deadline fails the run.
    pub async fn run_schedule(
        &mut self,
        cluster: &mut impl Ensemble,
        kinds: &[Fault],
        timing: Timing,
        rounds: usize,
        soak: Option<Duration>,
    ) -> Result<()> {
        let started = Instant::now();
        let mut order = kinds.to_vec();
        self.shuffle(&mut order);
        let mut count = 0;
        loop {
            let done = match soak {
                Some(soak) => started.elapsed() >= soak,
                None => count >= rounds * kinds.len(),
            };
            if done {
                break;
            }
            let fault = match order.get(count) {
                Some(&fault) => fault,
                None => kinds[self.rng.below(kinds.len() as u64) as usize],
            };
            count += 1;
            let rest = self.rng.between(timing.rest.0, timing.rest.1);
            tokio::time::sleep(rest).await;
            self.apply(cluster, fault).await?;
            let (low, high) = match fault {
                Fault::PauseLeader | Fault::PauseFollower => timing.pause,
                Fault::KillLeader | Fault::KillFollower => timing.kill,
                _ => timing.partition,
            };
            // Holding the fault is the point: nothing to wait for but time.
            tokio::time::sleep(self.rng.between(low, high)).await;
            self.heal(cluster).await?;
        }
        cluster
            .wait_for_leader()
            .await
            .context("the cluster did not recover after the last fault")?;
        Ok(())
    }

    /// Every injected fault, one a line.
    pub fn report(&self) -> String {
        let lines: Vec<String> = self
            .injected
            .iter()
            .map(|injected| format!("  {injected}"))
            .collect();
        format!(
            "{} faults injected (seed {:#x}, replay with {SEED_VAR}={:#x}):\n{}",
            self.injected.len(),
            self.seed,
            self.seed,
            lines.join("\n")
        )
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }

    fn pick(&mut self, ids: &[u64]) -> Result<u64> {
        if ids.is_empty() {
            bail!("no member to pick");
        }
        Ok(ids[self.rng.below(ids.len() as u64) as usize])
    }
}

/// Drops every packet between each member of `side` and each member of `other`, both ways.
fn cut(cluster: &impl Ensemble, side: &[u64], other: &[u64]) -> Result<()> {
    for &a in side {
        for &b in other {
            drop_one_way(cluster, a, b)?;
            drop_one_way(cluster, b, a)?;
        }
    }
    Ok(())
}

/// Drops packets from `from` to `to`: on the way out of `from`'s namespace. (TCP cannot
/// deliver either way over such a link for long, but each side's packets to the other still
/// arrive: the half-open link Jepsen's one-way partitions make.)
fn drop_one_way(cluster: &impl Ensemble, from: u64, to: u64) -> Result<()> {
    let network = cluster.network()?;
    let dest = network.ip(to).to_string();
    network.iptables(from, &["-A", "OUTPUT", "-d", &dest, "-j", "DROP"])
}

/// `Fault::Lossy`'s rate.
const LOSS_ONE_IN: u32 = 4;

/// Drops one in `LOSS_ONE_IN` packets between `id` and each of `others`, both ways, at random.
fn lossy(cluster: &impl Ensemble, id: u64, others: &[u64]) -> Result<()> {
    let network = cluster.network()?;
    let probability = format!("{:.2}", 1.0 / f64::from(LOSS_ONE_IN));
    let drop_some = |from: u64, to: u64| {
        let dest = network.ip(to).to_string();
        network.iptables(
            from,
            &[
                "-A",
                "OUTPUT",
                "-d",
                &dest,
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                &probability,
                "-j",
                "DROP",
            ],
        )
    };
    for &other in others {
        drop_some(id, other)?;
        drop_some(other, id)?;
    }
    Ok(())
}

/// Removes every rule `cut`, `drop_one_way` and `lossy` added.
fn heal_rules(cluster: &impl Ensemble) -> Result<()> {
    let network = cluster.network()?;
    for id in network.ids() {
        network.iptables(id, &["-F", "OUTPUT"])?;
    }
    Ok(())
}
