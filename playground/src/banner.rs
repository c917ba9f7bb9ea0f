//! The text printed once everything is up: who runs where, who leads, what to try.

use std::path::Path;
use std::time::Duration;

use crate::api::Leader;
use crate::topology::{ELECTION, SESSION_TIMEOUT, Topology};
use crate::watch::{WatchedMember, WatchedPod, election_line, ensemble_line};

/// What the banner shows.
pub struct BannerFacts<'a> {
    pub topology: &'a Topology,
    pub members: &'a [WatchedMember],
    pub pods: &'a [WatchedPod],
    pub demo_leader: Option<&'a Leader>,
    pub raft_leader: Option<(u64, u64)>,
    /// Where data and logs live, and whether that directory is removed on exit.
    pub data: &'a Path,
    pub data_is_temporary: bool,
    pub restart_after: Option<Duration>,
}

/// The banner, line by line.
pub fn lines(facts: &BannerFacts<'_>) -> Vec<String> {
    let BannerFacts {
        topology,
        members,
        pods,
        demo_leader,
        raft_leader,
        ..
    } = *facts;
    let mut out = vec![
        String::new(),
        format!(
            "Baton playground: a {}-member ensemble and {} pods on 127.0.0.1",
            members.len(),
            pods.len()
        ),
        format!(
            "Data: {}{}; logs in {}",
            facts.data.display(),
            if facts.data_is_temporary {
                " (removed on exit)"
            } else {
                ""
            },
            topology.logs.display()
        ),
        String::new(),
        format!(
            "Ensemble (ZooKeeper clients connect to {})",
            topology.connect_string()
        ),
    ];
    for (member, watched) in topology.members.iter().zip(members) {
        let role = if raft_leader.map(|(id, _)| id) == Some(member.id) {
            "   Raft leader"
        } else {
            ""
        };
        out.push(format!(
            "  member {}   client {}   admin https://{}   pid {}{role}",
            member.id,
            member.client,
            member.admin,
            pid(watched.process.pid())
        ));
    }
    out.push(String::new());
    out.push(format!(
        "Pods (a baton-sidecar each, all standing in election \"{ELECTION}\")"
    ));
    for watched in pods {
        let role = if demo_leader.map(|l| &l.identity) == Some(&watched.pod.identity) {
            format!("   leads \"{ELECTION}\"")
        } else {
            String::new()
        };
        out.push(format!(
            "  {}   http://{}   pid {}{role}",
            watched.pod.identity,
            watched.pod.listen,
            pid(watched.sidecar.pid())
        ));
    }
    out.push(String::new());
    out.push(election_line(demo_leader, pods));
    out.push(ensemble_line(raft_leader, members));
    out.push(String::new());
    out.extend(try_lines(facts));
    out.push(String::new());
    out.push("Watching (one line per change):".to_owned());
    out
}

/// Ready-to-paste curl and kill lines.
fn try_lines(facts: &BannerFacts<'_>) -> Vec<String> {
    let pods = facts.pods;
    let mut out = vec!["Try, from another terminal:".to_owned()];
    let curl = |command: String, why: &str| format!("  {command:<62} # {why}");
    for watched in pods {
        out.push(curl(
            format!("curl -s {}/leader/{ELECTION}", watched.pod.listen),
            &format!("{}: who leads, and is it me", watched.pod.identity),
        ));
    }
    let (Some(first), Some(leader)) = (pods.first(), facts.demo_leader) else {
        return out;
    };
    let follower = pods
        .iter()
        .find(|p| p.pod.identity != leader.identity)
        .unwrap_or(first);
    out.push(curl(
        format!(
            "curl -s '{}/leader/{ELECTION}?wait=30s&token={}'",
            follower.pod.listen, leader.token
        ),
        "waits until the leader changes",
    ));
    // One pod takes the lock and another waits for it, to show the 409 of a busy lock.
    let taker = pods.get(1 % pods.len()).unwrap_or(first);
    let waiter = pods.get(2 % pods.len()).unwrap_or(first);
    out.push(curl(
        format!(
            "curl -s -X POST '{}/lock/{ELECTION}?ttl=30s'",
            taker.pod.listen
        ),
        &format!("{} takes lock \"{ELECTION}\" for 30s", taker.pod.identity),
    ));
    if waiter.pod.identity != taker.pod.identity {
        out.push(curl(
            format!(
                "curl -s -X POST '{}/lock/{ELECTION}?wait=5s'",
                waiter.pod.listen
            ),
            &format!(
                "{} waits 5s for it: 409 while {} holds it",
                waiter.pod.identity, taker.pod.identity
            ),
        ));
    }
    out.push(curl(
        format!("curl -s {}/lock/{ELECTION}", waiter.pod.listen),
        "who holds it, who waits",
    ));
    out.push(curl(
        format!(
            "curl -N -X POST '{}/lock/{ELECTION}?hold=stream'",
            taker.pod.listen
        ),
        "held while curl runs: Ctrl-C (a crash) frees it at once",
    ));
    out.push(curl(
        format!(
            "curl -s -X DELETE '{}/lock/{ELECTION}?token=T'",
            taker.pod.listen
        ),
        &format!(
            "{} releases it (T: the token its grant answered)",
            taker.pod.identity
        ),
    ));
    if let Some(leading) = pods.iter().find(|p| p.pod.identity == leader.identity) {
        out.push(curl(
            format!(
                "curl -s -X POST {}/leader/{ELECTION}/resign",
                leading.pod.listen
            ),
            &format!(
                "{} steps down and queues again at the back",
                leading.pod.identity
            ),
        ));
    }
    if let Some(member) = facts.members.first() {
        out.push(curl(
            format!(
                "curl -s --cacert {dir}/ca.crt --cert {dir}/admin.crt --key {dir}/admin.key https://{}/v1/status",
                member.admin,
                dir = facts.topology.certs.display()
            ),
            &format!(
                "member {}: role, Raft leader, term, commit index",
                member.id
            ),
        ));
    }
    out.push(String::new());
    out.extend(kill_lines(facts, leader));
    out
}

/// The commands that kill the demo leader's sidecar or the Raft leader.
fn kill_lines(facts: &BannerFacts<'_>, leader: &Leader) -> Vec<String> {
    let mut out = vec!["Kill something and watch the hand-over:".to_owned()];
    let line = |command: String, why: String| format!("  {command:<16} # {why}");
    let next = facts
        .pods
        .iter()
        .find(|p| p.pod.identity != leader.identity)
        .map_or("the next pod", |p| p.pod.identity.as_str());
    let sidecar_pid = facts
        .pods
        .iter()
        .find(|p| p.pod.identity == leader.identity)
        .and_then(|p| p.sidecar.pid());
    if let Some(sidecar_pid) = sidecar_pid {
        out.push(line(
            format!("kill {sidecar_pid}"),
            format!(
                "{}'s sidecar (leads \"{ELECTION}\"): it resigns on SIGTERM, {next} leads within milliseconds",
                leader.identity
            ),
        ));
        out.push(line(
            format!("kill -9 {sidecar_pid}"),
            format!("or crash it: {next} leads once its session expires ({SESSION_TIMEOUT})"),
        ));
    }
    let raft_leader = facts
        .raft_leader
        .and_then(|(id, _)| facts.members.iter().find(|m| m.id == id));
    if let Some((member, member_pid)) =
        raft_leader.and_then(|m| m.process.pid().map(|pid| (m, pid)))
    {
        out.push(line(
            format!("kill -9 {member_pid}"),
            format!(
                "member {} (Raft leader): the others elect a new one in about a second",
                member.id
            ),
        ));
    }
    out.push(match facts.restart_after {
        Some(delay) => format!(
            "Killed processes are restarted after {}s (--no-restart keeps them down). Ctrl-C stops everything.",
            delay.as_secs()
        ),
        None => "Killed processes stay down (--no-restart). Ctrl-C stops everything.".to_owned(),
    });
    out
}

fn pid(pid: Option<u32>) -> String {
    pid.map_or_else(|| "down".to_owned(), |pid| pid.to_string())
}
