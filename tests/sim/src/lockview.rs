//! Lock and election safety in the ensemble's view: after every step of every member, the
//! holder of each lock directory is its lowest live (ephemeral) sequential child (the leader
//! of an election, likewise): a planted persistent node never holds. Across a member's applied history a new node must never sort before the holder
//! (two holders), the holder's fencing token (its `czxid`) must only rise, and all members
//! must agree on the holder at each applied index. Also: no ephemeral outlives its session.

use std::collections::BTreeMap;

use baton_machine::StateMachine;
use baton_machine::tree::NodeKind;
use baton_sidecar::recipe::queue::{NodeKind as QueueKind, Queue};

/// A broken safety property, in words for the report.
pub type Breach = String;

#[derive(Debug, Default)]
pub struct LockView {
    /// Per (member, dir): the holder last seen, and its token.
    last: BTreeMap<(u64, String), (String, i64)>,
    /// Per (dir, applied index): the holder any member saw there.
    at_index: BTreeMap<(String, u64), Option<String>>,
    /// Holder changes seen, over all members and dirs (to show the check was exercised).
    pub changes: u64,
}

impl LockView {
    /// Inspects `member`'s state at `applied`. `restarted` members start their history over
    /// (their state regresses to the last snapshot plus replay, which is still a prefix).
    pub fn observe(
        &mut self,
        member: u64,
        applied: u64,
        sm: &StateMachine,
        dirs: &[String],
    ) -> Result<(), Breach> {
        for dir in dirs {
            let holder = holder(sm, dir);
            match self.at_index.get(&(dir.clone(), applied)) {
                Some(seen) if *seen != holder.as_ref().map(|h| h.0.clone()) => {
                    return Err(format!(
                        "{dir}: members disagree on the holder at applied index {applied}: \
                         {seen:?} elsewhere, {:?} on member {member}",
                        holder.as_ref().map(|h| &h.0)
                    ));
                }
                Some(_) => {}
                None => {
                    self.at_index
                        .insert((dir.clone(), applied), holder.as_ref().map(|h| h.0.clone()));
                }
            }
            let key = (member, dir.clone());
            let Some((name, token)) = holder else {
                continue;
            };
            if let Some((prev, prev_token)) = self.last.get(&key)
                && *prev != name
            {
                let prev_path = format!("{dir}/{prev}");
                // The same node (a planted one may have taken its name since it went).
                if sm
                    .tree()
                    .get(&prev_path)
                    .is_some_and(|n| n.stat().czxid == *prev_token)
                {
                    return Err(format!(
                        "{dir}: two holders on member {member} at index {applied}: {name} \
                         sorts before {prev}, which still holds"
                    ));
                }
                if token <= *prev_token {
                    return Err(format!(
                        "{dir}: fencing token went back on member {member} at index {applied}: \
                         {name} has {token} after {prev} had {prev_token}"
                    ));
                }
                self.changes += 1;
            }
            self.last.insert(key, (name, token));
        }
        Ok(())
    }

    /// A restarted member replays from its snapshot: its own history of holders starts anew.
    pub fn forget_member(&mut self, member: u64) {
        self.last.retain(|(m, _), _| *m != member);
    }
}

/// The lowest live (ephemeral) sequential child of `dir` (in the sidecar's own order) and its
/// czxid: the one node that may hold, whatever was planted below it.
pub fn holder(sm: &StateMachine, dir: &str) -> Option<(String, i64)> {
    let children: Vec<&str> = sm.tree().get(dir)?.children().collect();
    let kinds = [QueueKind::LOCK_KINDS, QueueKind::ELECTION_KINDS].concat();
    Queue::new(&children, &kinds).nodes().iter().find_map(|n| {
        let node = sm.tree().get(&format!("{dir}/{}", n.name))?;
        match node.kind() {
            NodeKind::Ephemeral { .. } => Some((n.name.clone(), node.stat().czxid)),
            _ => None,
        }
    })
}

/// A client that believes it holds `node` in `dir` must, in the state of the member that
/// answered it, hold it there (be the lowest live node) or have lost it (its session ended):
/// a planted node below it, or a live one it skipped, would show here.
pub fn check_belief(member: u64, sm: &StateMachine, dir: &str, node: &str) -> Result<(), Breach> {
    if sm.tree().get(node).is_none() {
        return Ok(());
    }
    let name = node.rsplit('/').next().unwrap_or_default();
    match holder(sm, dir) {
        Some((holder, _)) if holder == name => Ok(()),
        other => Err(format!(
            "{dir}: a client believes it holds {name}, but on member {member} the holder is {:?}",
            other.map(|h| h.0)
        )),
    }
}

/// A client that believes it holds permit `node` of the semaphore `dir` must, in the state of
/// the member that answered it, be among the first `permits` live nodes there (or have lost it
/// with its session): so no member's state ever has more than `permits` holders.
pub fn check_permit(
    member: u64,
    sm: &StateMachine,
    dir: &str,
    node: &str,
    permits: u32,
) -> Result<(), Breach> {
    if sm.tree().get(node).is_none() {
        return Ok(());
    }
    let name = node.rsplit('/').next().unwrap_or_default();
    let Some(folder) = sm.tree().get(dir) else {
        return Ok(());
    };
    let children: Vec<&str> = folder.children().collect();
    let live: Vec<String> = Queue::new(&children, QueueKind::SEMAPHORE_KINDS)
        .nodes()
        .iter()
        .filter(|n| {
            sm.tree()
                .get(&format!("{dir}/{}", n.name))
                .is_some_and(|node| matches!(node.kind(), NodeKind::Ephemeral { .. }))
        })
        .map(|n| n.name.clone())
        .collect();
    match live.iter().position(|n| n == name) {
        Some(i) if i < permits as usize => Ok(()),
        at => Err(format!(
            "{dir}: a client believes it holds permit {name} of {permits}, but on member \
             {member} it stands at {at:?} among the live nodes {live:?}: more than {permits} holders"
        )),
    }
}

/// Every ephemeral node's owner must be a live session in the same state.
pub fn check_ephemerals(member: u64, sm: &StateMachine) -> Result<(), Breach> {
    for (path, node) in sm.tree().iter() {
        let NodeKind::Ephemeral { owner } = node.kind() else {
            continue;
        };
        if sm.session(owner).is_none() {
            return Err(format!(
                "member {member}: ephemeral {path} belongs to session 0x{owner:x}, which has \
                 expired or closed"
            ));
        }
    }
    Ok(())
}
