//! Virtual time and the event queue: the whole simulation is one thread popping the earliest
//! event, so a seed fixes every interleaving.

use std::collections::BTreeMap;
use std::time::Duration;

/// Virtual microseconds since the run began.
pub type Micros = u64;

pub const MS: Micros = 1_000;
pub const SECOND: Micros = 1_000_000;

pub fn duration(us: Micros) -> Duration {
    Duration::from_micros(us)
}

/// Events ordered by (time, insertion order): ties go to whoever was scheduled first, so the
/// order never depends on anything but the seed.
#[derive(Debug)]
pub struct Queue<E> {
    events: BTreeMap<(Micros, u64), E>,
    next_seq: u64,
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Queue {
            events: BTreeMap::new(),
            next_seq: 0,
        }
    }
}

impl<E> Queue<E> {
    pub fn push(&mut self, at: Micros, event: E) {
        self.events.insert((at, self.next_seq), event);
        self.next_seq += 1;
    }

    pub fn pop(&mut self) -> Option<(Micros, E)> {
        self.events.pop_first().map(|((at, _), e)| (at, e))
    }
}
