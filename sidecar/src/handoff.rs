//! Graceful hand-off on SIGTERM (DESIGN.md §2): a leading pod whose app follows the election
//! tells the app `stepping-down` and keeps leading until the app answers
//! `POST /leader/NAME/release` or `--release-grace` runs out. Elections nobody follows, or
//! that this pod does not lead, are resigned at once, as before.
//!
//! "Follows" is counted, not guessed: every open `GET /events`, `GET /leader/NAME?follow=stream`
//! and campaign stream holds a [`Following`] for the elections it reports, so the decision at
//! SIGTERM costs nothing and an app that follows nothing adds no delay.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::events::EventHub;
use crate::recipe::timestamp::rfc3339;
use crate::recipe::{ElectionRecipe, ResourceName};

/// The hand-off's shared state: who follows what, whether the pod is stepping down, and which
/// elections the app released.
#[derive(Debug)]
pub struct HandOff {
    grace: Duration,
    followers: Mutex<HashMap<ResourceName, usize>>,
    stepping_down: watch::Sender<bool>,
    released: watch::Sender<HashSet<ResourceName>>,
}

/// While held, the elections it names count as followed by the app.
#[derive(Debug)]
pub struct Following {
    handoff: Arc<HandOff>,
    elections: Vec<ResourceName>,
}

impl Drop for Following {
    fn drop(&mut self) {
        let mut followers = self.handoff.lock_followers();
        for name in &self.elections {
            if let Some(n) = followers.get_mut(name) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    followers.remove(name);
                }
            }
        }
    }
}

/// Why `POST /leader/NAME/release` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotSteppingDown;

impl HandOff {
    /// Waits up to `grace` for a release on SIGTERM (zero: never waits).
    pub fn new(grace: Duration) -> Arc<Self> {
        Arc::new(Self {
            grace,
            followers: Mutex::new(HashMap::new()),
            stepping_down: watch::channel(false).0,
            released: watch::channel(HashSet::new()).0,
        })
    }

    fn lock_followers(&self) -> std::sync::MutexGuard<'_, HashMap<ResourceName, usize>> {
        self.followers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts `elections` as followed until the result is dropped.
    pub fn follow(self: &Arc<Self>, elections: Vec<ResourceName>) -> Following {
        let mut followers = self.lock_followers();
        for name in &elections {
            *followers.entry(name.clone()).or_default() += 1;
        }
        drop(followers);
        Following {
            handoff: self.clone(),
            elections,
        }
    }

    /// Whether an open stream follows `election`.
    pub fn followed(&self, election: &ResourceName) -> bool {
        self.lock_followers().get(election).is_some_and(|n| *n > 0)
    }

    /// Whether SIGTERM arrived.
    pub fn is_stepping_down(&self) -> bool {
        *self.stepping_down.borrow()
    }

    /// Set once SIGTERM arrived.
    pub fn stepping_down(&self) -> watch::Receiver<bool> {
        self.stepping_down.subscribe()
    }

    /// `POST /leader/NAME/release`: resigns `election` for good now (`Ok(true)` if this pod
    /// led it). Only while stepping down: otherwise there is nothing to release early, and
    /// `resign` is the way to step down and stand again.
    pub async fn release(&self, election: &ElectionRecipe) -> Result<bool, NotSteppingDown> {
        if !self.is_stepping_down() {
            return Err(NotSteppingDown);
        }
        let led = election.is_leader();
        election.leave().await;
        tracing::info!(election = %election.name(), led, "the app released the election");
        self.released.send_modify(|r| {
            r.insert(election.name().clone());
        });
        Ok(led)
    }

    /// Marks SIGTERM's arrival: readiness fails, long-polls return, nothing new is granted.
    pub fn begin(&self) {
        self.stepping_down.send_replace(true);
    }

    /// On SIGTERM: `stepping-down` on the streams of every election this pod leads and the
    /// app follows, each resigned once released, no longer led, or after the grace; every
    /// other election resigned at once. Returns when every election is resigned.
    pub async fn step_down(&self, elections: Vec<ElectionRecipe>, hub: &EventHub) {
        self.begin();
        let mut resigning = JoinSet::new();
        for election in elections {
            let view = election.view();
            let graceful = view.is_leader && !self.grace.is_zero() && self.followed(&view.election);
            if !graceful {
                resigning.spawn(async move { election.leave().await });
                continue;
            }
            let release_by = SystemTime::now() + self.grace;
            tracing::info!(election = %view.election, grace = %baton_duration::format(self.grace),
                "stepping down: the app follows this election; waiting for POST /leader/{}/release", view.election);
            hub.publish(
                "stepping-down",
                json!({
                    "election": view.election,
                    "token": view.leader_token(),
                    "releaseBy": rfc3339(release_by),
                }),
            );
            let mut released = self.released.subscribe();
            let grace = self.grace;
            resigning.spawn(async move {
                let name = election.name().clone();
                let mut views = election.subscribe();
                tokio::select! {
                    _ = released.wait_for(|r| r.contains(&name)) => {}
                    _ = views.wait_for(|v| !v.is_leader) => {
                        tracing::info!(election = %name, "no longer the leader while stepping down");
                    }
                    _ = tokio::time::sleep(grace) => {
                        tracing::warn!(election = %name, grace = %baton_duration::format(grace),
                            "the app did not release the election within --release-grace; resigning");
                    }
                }
                election.leave().await;
            });
        }
        resigning.join_all().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn following_counts_until_dropped() {
        let handoff = HandOff::new(Duration::from_secs(1));
        let (a, b) = (
            ResourceName::new("a").expect("valid"),
            ResourceName::new("b").expect("valid"),
        );
        let both = handoff.follow(vec![a.clone(), b.clone()]);
        let only_a = handoff.follow(vec![a.clone()]);
        assert!(handoff.followed(&a) && handoff.followed(&b));
        drop(both);
        assert!(handoff.followed(&a) && !handoff.followed(&b));
        drop(only_a);
        assert!(!handoff.followed(&a));
    }
}
