//! The nemesis: a fault schedule drawn from the seed before the run starts, so a failing
//! seed replays the same faults. Targets named "the leader" are resolved when they fire.

use std::fmt;

use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::time::{MS, Micros, SECOND};

/// Who a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Member(u64),
    /// Whoever leads when the fault fires (any member if none does).
    Leader,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Member(id) => write!(f, "member {id}"),
            Target::Leader => write!(f, "the leader"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Cuts `side` off from everyone else, both ways.
    Partition { side: Vec<u64> },
    /// Cuts the target off from everyone else.
    Isolate(Target),
    /// Drops everything `from` sends to `to`, but not the reverse.
    OneWay { from: u64, to: u64 },
    /// Kills the target between two steps.
    Crash(Target),
    /// Brings every crashed member back.
    RestartAll,
    /// The target handles nothing for this long (an fsync stuck on a slow disk).
    Stall(Target, Micros),
    /// Loss probability and one-way delay range from now on.
    Weather { loss: f64, delay: (Micros, Micros) },
    /// Every link back, loss and delay back to normal.
    Heal,
    /// The admin asks the leader to change the replicated settings: quotas drawn from the
    /// value, and the tenancy policy (`checkIdentities`) turned over (on if the leader has it
    /// off, off if on).
    Settings(u64),
    /// The target's data volume is below its free-space watermark for this long: it raises
    /// the NOSPACE alarm, and every member refuses writes that add data until it clears.
    DiskFull(Target, Micros),
    /// A member that plays the previous release (capped at feature level 1) is upgraded: it
    /// stops cleanly and comes back 0.5 s later supporting this build's newest level.
    Upgrade(u64),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Partition { side } => write!(f, "partition {side:?} | rest"),
            Fault::Isolate(t) => write!(f, "isolate {t}"),
            Fault::OneWay { from, to } => write!(f, "drop {from} -> {to}"),
            Fault::Crash(t) => write!(f, "crash {t}"),
            Fault::RestartAll => write!(f, "restart crashed members"),
            Fault::Stall(t, us) => write!(f, "stall {t} for {} ms", us / MS),
            Fault::Weather { loss, delay } => write!(
                f,
                "loss {:.0}%, delay {}-{} us",
                loss * 100.0,
                delay.0,
                delay.1
            ),
            Fault::Heal => write!(f, "heal"),
            Fault::Settings(v) => {
                write!(f, "change the settings ({v}) and turn checkIdentities over")
            }
            Fault::DiskFull(t, us) => write!(f, "disk of {t} full for {} ms", us / MS),
            Fault::Upgrade(id) => write!(f, "upgrade member {id} (uncapped feature level)"),
        }
    }
}

/// Draws a schedule of faults over `[0, until)` for members `1..=n`.
pub fn schedule(rng: &mut StdRng, n: u64, until: Micros) -> Vec<(Micros, Fault)> {
    let ids: Vec<u64> = (1..=n).collect();
    let mut out = Vec::new();
    let mut t = rng.random_range(200 * MS..SECOND);
    while t < until {
        let pick_member = |rng: &mut StdRng| -> Target {
            if rng.random_bool(0.5) {
                Target::Leader
            } else {
                Target::Member(rng.random_range(1..=n))
            }
        };
        match rng.random_range(0..11) {
            0 => {
                let mut shuffled = ids.clone();
                shuffled.shuffle(rng);
                let k = rng.random_range(1..=(n as usize) / 2);
                let mut side = shuffled[..k].to_vec();
                side.sort_unstable();
                out.push((t, Fault::Partition { side }));
            }
            1 => out.push((t, Fault::Isolate(pick_member(rng)))),
            2 => {
                let from = rng.random_range(1..=n);
                let to = 1 + (from + rng.random_range(0..n - 1)) % n;
                out.push((t, Fault::OneWay { from, to }));
            }
            3 => {
                // Flapping: the leader's links go and come back several times.
                let period = rng.random_range(100 * MS..600 * MS);
                for i in 0..rng.random_range(3..8) {
                    let at = t + i * period;
                    out.push((at, Fault::Isolate(Target::Leader)));
                    out.push((at + period / 2, Fault::Heal));
                }
                t += 8 * period;
            }
            4 | 5 => {
                out.push((t, Fault::Crash(pick_member(rng))));
                let back = t + rng.random_range(300 * MS..3 * SECOND);
                out.push((back, Fault::RestartAll));
            }
            6 => {
                let stall = rng.random_range(100 * MS..1500 * MS);
                out.push((t, Fault::Stall(pick_member(rng), stall)));
            }
            7 => {
                let loss = [0.01, 0.05, 0.2][rng.random_range(0..3)];
                let hi = [MS, 10 * MS, 50 * MS][rng.random_range(0..3)];
                out.push((
                    t,
                    Fault::Weather {
                        loss,
                        delay: (50, hi),
                    },
                ));
            }
            9 => out.push((t, Fault::Settings(rng.random_range(0..1_000_000)))),
            10 => {
                let full = rng.random_range(200 * MS..2 * SECOND);
                out.push((t, Fault::DiskFull(pick_member(rng), full)));
            }
            _ => out.push((t, Fault::Heal)),
        }
        t += rng.random_range(300 * MS..2 * SECOND);
    }
    // A flapping burst or a restart can be drawn past the end; the faults stop at `until`, so
    // the settling phase (and the progress check after it) starts from a healed ensemble.
    out.retain(|(at, _)| *at < until);
    out.push((until, Fault::Heal));
    out.push((until, Fault::RestartAll));
    out.sort_by_key(|(at, _)| *at);
    out
}

/// The members that start as the previous release (capped at feature level 1), and when each
/// is upgraded: between 1 and n − 1 of them, so every run holds two versions for a while, all
/// upgraded one at a time between a fifth and four fifths of the faults. Drawn after the
/// schedule, from the same stream, so the other faults of a seed stay where they were.
pub fn upgrades(rng: &mut StdRng, n: u64, until: Micros) -> (Vec<u64>, Vec<(Micros, Fault)>) {
    let mut ids: Vec<u64> = (1..=n).collect();
    ids.shuffle(rng);
    let k = rng.random_range(1..n) as usize;
    let mut capped = ids[..k].to_vec();
    capped.sort_unstable();
    let mut times: Vec<Micros> = (0..k)
        .map(|_| rng.random_range(until / 5..until * 4 / 5))
        .collect();
    times.sort_unstable();
    let mut order = capped.clone();
    order.shuffle(rng);
    let upgrades = times
        .into_iter()
        .zip(order)
        .map(|(at, id)| (at, Fault::Upgrade(id)))
        .collect();
    (capped, upgrades)
}

/// The whole schedule of a run: the faults, then the upgrades merged in by time; and the
/// members that start capped at level 1.
pub fn full_schedule(rng: &mut StdRng, n: u64, until: Micros) -> (Vec<u64>, Vec<(Micros, Fault)>) {
    let mut out = schedule(rng, n, until);
    let (capped, upgrades) = upgrades(rng, n, until);
    out.extend(upgrades);
    // Stable: at equal times the heal and restart at `until` keep their order.
    out.sort_by_key(|(at, _)| *at);
    (capped, out)
}
