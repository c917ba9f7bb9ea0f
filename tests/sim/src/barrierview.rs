//! Barrier safety in the ensemble's view: nobody passes before N parties entered.
//!
//! Every member's state is read after every step, and each live ephemeral party node goes into
//! one ledger (keyed by its czxid, so exact): when it was created, until when it was seen
//! alive, and the zxid of the `setData` that released it (its `mzxid` once it says
//! `"passed":true`). A node released at zxid M must have had N parties in its round: nodes
//! created by M (a party's entry precedes any release that counts it), not released before it
//! entered (those belong to an earlier round), and still there after it entered (the releaser
//! read each one alive after listing it). Persistent nodes planted by a squatter never count.
//! A client that has passed must, in its member's state, have a released node (or none left:
//! its session ended).

use std::collections::BTreeMap;

use baton_machine::StateMachine;
use baton_machine::tree::NodeKind;
use baton_sidecar::recipe::queue::{NodeKind as QueueKind, Queue};

use crate::client::is_marked;
use crate::lockview::Breach;

/// What the ledger knows of one party node.
#[derive(Debug, Clone)]
struct Party {
    name: String,
    created: i64,
    /// The highest applied index of a state that still had it.
    seen_alive: u64,
    released: Option<i64>,
}

#[derive(Debug, Default)]
pub struct BarrierView {
    /// Per (dir, czxid).
    parties: BTreeMap<(String, i64), Party>,
    /// Releases checked (to show the check was exercised).
    pub releases: u64,
}

impl BarrierView {
    /// Reads `dir` in a member's state at `applied` and checks every release seen first here.
    pub fn observe(
        &mut self,
        applied: u64,
        sm: &StateMachine,
        dir: &str,
        parties: u32,
    ) -> Result<(), Breach> {
        let Some(folder) = sm.tree().get(dir) else {
            return Ok(());
        };
        let children: Vec<&str> = folder.children().collect();
        let mut newly_released = Vec::new();
        for n in Queue::new(&children, QueueKind::BARRIER_KINDS).nodes() {
            let Some(node) = sm.tree().get(&format!("{dir}/{}", n.name)) else {
                continue;
            };
            if !matches!(node.kind(), NodeKind::Ephemeral { .. }) {
                continue;
            }
            let stat = node.stat();
            let party = self
                .parties
                .entry((dir.to_owned(), stat.czxid))
                .or_insert_with(|| Party {
                    name: n.name.clone(),
                    created: stat.czxid,
                    seen_alive: applied,
                    released: None,
                });
            party.seen_alive = party.seen_alive.max(applied);
            if party.released.is_none() && is_marked(node.data().unwrap_or_default()) {
                party.released = Some(stat.mzxid);
                newly_released.push(stat.czxid);
            }
        }
        for czxid in newly_released {
            self.check_release(dir, czxid, parties)?;
        }
        Ok(())
    }

    fn check_release(&mut self, dir: &str, czxid: i64, parties: u32) -> Result<(), Breach> {
        let Some(party) = self.parties.get(&(dir.to_owned(), czxid)) else {
            return Ok(());
        };
        let (entered, released) = (party.created, party.released.unwrap_or(i64::MAX));
        let round: Vec<&str> = self
            .parties
            .range((dir.to_owned(), i64::MIN)..=(dir.to_owned(), i64::MAX))
            .map(|(_, p)| p)
            .filter(|p| {
                p.created <= released
                    && p.released.is_none_or(|r| r >= entered)
                    && i64::try_from(p.seen_alive).unwrap_or(i64::MAX) >= entered
            })
            .map(|p| p.name.as_str())
            .collect();
        if round.len() < parties as usize {
            return Err(format!(
                "{dir}: {} (entered at zxid {entered}) was released at zxid {released} with \
                 only {} of {parties} parties in: {round:?}",
                party.name,
                round.len()
            ));
        }
        self.releases += 1;
        Ok(())
    }
}

/// A client that has passed with `node` must find it released in its member's state, or gone.
pub fn check_passed(member: u64, sm: &StateMachine, node: &str) -> Result<(), Breach> {
    match sm.tree().get(node) {
        Some(n) if !is_marked(n.data().unwrap_or_default()) => Err(format!(
            "a client passed the barrier with {node}, but on member {member} it is not released"
        )),
        _ => Ok(()),
    }
}
