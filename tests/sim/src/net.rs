//! The simulated network between members: per-message delay (so messages reorder), loss,
//! and partitions that block a direction of a link.

use std::collections::BTreeSet;

use rand::Rng;
use rand::rngs::StdRng;

use crate::time::{MS, Micros};

/// How the network between members behaves right now.
#[derive(Debug, Clone)]
pub struct Network {
    /// Directed links that drop everything: (from, to).
    blocked: BTreeSet<(u64, u64)>,
    /// Probability that a message is lost.
    pub loss: f64,
    /// One-way delay is uniform in this range; a wide range reorders messages.
    pub delay: (Micros, Micros),
}

impl Default for Network {
    fn default() -> Self {
        Network {
            blocked: BTreeSet::new(),
            loss: 0.0,
            delay: (100, MS),
        }
    }
}

impl Network {
    /// When a message sent now from `from` to `to` arrives, or `None` if it is lost.
    pub fn transit(&self, rng: &mut StdRng, from: u64, to: u64) -> Option<Micros> {
        if self.blocked.contains(&(from, to)) {
            return None;
        }
        if self.loss > 0.0 && rng.random_bool(self.loss) {
            return None;
        }
        let (lo, hi) = self.delay;
        Some(rng.random_range(lo..=hi.max(lo)))
    }

    pub fn block(&mut self, from: u64, to: u64) {
        self.blocked.insert((from, to));
    }

    /// Cuts every link between the two sides, both ways.
    pub fn split(&mut self, side: &[u64], others: &[u64]) {
        for &a in side {
            for &b in others {
                self.block(a, b);
                self.block(b, a);
            }
        }
    }

    /// Restores every link and the default loss and delay.
    pub fn heal(&mut self) {
        *self = Network::default();
    }
}
