//! A multi-member Baton ensemble of real `baton-ensemble` processes on loopback, for
//! replication, failover and membership tests.
//!
//! ```ignore
//! async fn replicates(cluster: &mut Cluster) -> anyhow::Result<()> {
//!     let leader = cluster.leader().await?;
//!     let client = cluster.connect_to(leader).await?;
//!     client.create("/a", b"x", &baton_tests::PERSISTENT).await?;
//!     Ok(())
//! }
//! #[tokio::test]
//! async fn replicates_test() { baton_tests::cluster::run_cluster_case(3, replicates).await }
//! ```
//!
//! Every wait polls `/v1/status` with a short backoff under an overall deadline, and fails
//! at once (with the log) if a member the harness did not kill has exited.

mod admin;
pub mod clients;
mod member;
mod membership;
pub mod write_load;

use std::collections::{BTreeMap, HashSet};
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use serde_json::Value;
use tokio::time::Instant;

pub use admin::{MemberEntry, Method, Reply, Status};
pub use member::Member;
use member::{LOG_TAIL_LINES, Ports};

/// Upper bound for one whole cluster case, start-up included.
pub const CLUSTER_CASE_DEADLINE: Duration = Duration::from_secs(240);
/// How long the harness waits for the cluster to reach a state (a leader, a catch-up...).
pub const CONVERGE_DEADLINE: Duration = Duration::from_secs(60);
/// How many times `start` begins again on fresh ports after a member died during start-up
/// (a port taken between our probe and its bind).
const START_ATTEMPTS: usize = 3;
/// `restart` keeps the ports, so an early exit (a port not yet released) is retried, spaced out.
const RESTART_ATTEMPTS: usize = 5;
const RESTART_BACKOFF: Duration = Duration::from_millis(300);
const POLL_MIN: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(200);

/// The ports of every member of an isolated cluster, each on its own address.
const ISOLATED_PORTS: Ports = Ports {
    client: 2181,
    peer: 2888,
    admin: 8080,
};

/// `/v1/status` of every running member that answered, by member id.
pub type Statuses = BTreeMap<u64, Status>;

/// Starts an `n`-member cluster, runs `case` on it within `CLUSTER_CASE_DEADLINE`, and panics
/// with the error and every member's log tail if the case fails.
pub async fn run_cluster_case<F>(n: usize, case: F)
where
    F: AsyncFnOnce(&mut Cluster) -> Result<()>,
{
    run_cluster_case_with_flags(n, &[], case).await
}

/// `run_cluster_case`, with `flags` added to every member's command line.
pub async fn run_cluster_case_with_flags<F>(n: usize, flags: &[&str], case: F)
where
    F: AsyncFnOnce(&mut Cluster) -> Result<()>,
{
    let mut cluster = match Cluster::start_with_flags(n, flags).await {
        Ok(cluster) => cluster,
        Err(err) => panic!("could not start a {n}-member cluster: {err:#}"),
    };
    let outcome = tokio::time::timeout(CLUSTER_CASE_DEADLINE, case(&mut cluster))
        .await
        .unwrap_or_else(|_| {
            Err(anyhow!(
                "case did not finish within {CLUSTER_CASE_DEADLINE:?}"
            ))
        });
    if let Err(err) = outcome {
        cluster.dump_logs();
        panic!("failed against a {n}-member cluster: {err:?}");
    }
}

/// Real member processes, each with its own data dir and ports; all killed when dropped.
pub struct Cluster {
    binary: PathBuf,
    /// Members of the ensemble (running or stopped by the harness), by id.
    members: BTreeMap<u64, Member>,
    /// Members removed from the ensemble: stopped, kept for their logs.
    removed: Vec<Member>,
    /// Every port ever handed to a member, so a new member never takes a stopped one's port.
    used_ports: HashSet<u16>,
    /// The ensemble's CA and certificates.
    pki: crate::pki::Pki,
    /// The bridge and namespaces of an isolated cluster (`start_isolated`). Declared last so
    /// it is dropped after the members are killed.
    network: Option<crate::netns::Network>,
}

/// The cluster id every test cluster's certificates name (each cluster has its own CA).
pub const CLUSTER_ID: &str = "baton-tests";

impl Cluster {
    /// Starts `n` members bootstrapped together and waits until they agree on a leader and
    /// are all ready.
    pub async fn start(n: usize) -> Result<Cluster> {
        Self::start_with_flags(n, &[]).await
    }

    /// `start`, with `flags` added to every member's command line.
    pub async fn start_with_flags(n: usize, flags: &[&str]) -> Result<Cluster> {
        let pki = crate::pki::Pki::new(CLUSTER_ID, &(1..=n as u64).collect::<Vec<_>>())?;
        Self::start_prepared(n, pki, flags, async |_: &Member| Ok(())).await
    }

    /// Starts `n` members with the certificates of `pki` (members 1..=n), after `prepare` has
    /// been run for each, before any starts (with its data dir still missing and its ports and
    /// `--members` chosen): a test restores a backup into the data dirs so. On a retry (a port
    /// lost to a race) every member gets a new data dir and `prepare` runs again.
    pub async fn start_prepared<F>(
        n: usize,
        pki: crate::pki::Pki,
        flags: &[&str],
        prepare: F,
    ) -> Result<Cluster>
    where
        F: AsyncFnMut(&Member) -> Result<()>,
    {
        Self::start_prepared_with(n, pki, flags, |_: &Member| Vec::new(), prepare).await
    }

    /// `start_with_flags`, and each member also gets the flags `member_flags` makes for it
    /// (members started with different flags, a file in a member's own folder).
    pub async fn start_with_member_flags(
        n: usize,
        flags: &[&str],
        member_flags: impl Fn(&Member) -> Vec<String>,
    ) -> Result<Cluster> {
        let pki = crate::pki::Pki::new(CLUSTER_ID, &(1..=n as u64).collect::<Vec<_>>())?;
        Self::start_prepared_with(n, pki, flags, member_flags, async |_: &Member| Ok(())).await
    }

    /// `start_with_flags`, each member in a network namespace of its own on a bridge
    /// (`netns::Network`), listening on its own address with the usual ports, so `nemesis`
    /// can cut, slow or pause one member's traffic alone. Needs root. Members' certificates
    /// name their addresses.
    pub async fn start_isolated(n: usize, flags: &[&str]) -> Result<Cluster> {
        Self::start_isolated_with_spares(n, 0, flags).await
    }

    /// `start_isolated`, with `spares` more namespaces (ids `n + 1`...) and certificates, where
    /// `add_member` starts the members it adds.
    pub async fn start_isolated_with_spares(
        n: usize,
        spares: usize,
        flags: &[&str],
    ) -> Result<Cluster> {
        let ids: Vec<u64> = (1..=(n + spares) as u64).collect();
        let network = crate::netns::Network::new(&ids)?;
        let mut hosts: Vec<String> = ids.iter().map(|&id| network.ip(id).to_string()).collect();
        hosts.extend(["localhost".to_string(), "127.0.0.1".to_string()]);
        let pki = crate::pki::Pki::with_hosts(CLUSTER_ID, &ids, &hosts)?;
        Self::start_on(
            n,
            pki,
            flags,
            |_: &Member| Vec::new(),
            async |_: &Member| Ok(()),
            Some(network),
        )
        .await
    }

    /// The bridge and namespaces of a cluster made by `start_isolated`.
    pub fn network(&self) -> Result<&crate::netns::Network> {
        self.network
            .as_ref()
            .context("the cluster was not started with start_isolated")
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) to member `id`'s process.
    pub fn signal(&self, id: u64, signal: &str) -> Result<()> {
        self.member(id)?.signal(signal)
    }

    async fn start_prepared_with<F>(
        n: usize,
        pki: crate::pki::Pki,
        flags: &[&str],
        member_flags: impl Fn(&Member) -> Vec<String>,
        prepare: F,
    ) -> Result<Cluster>
    where
        F: AsyncFnMut(&Member) -> Result<()>,
    {
        Self::start_on(n, pki, flags, member_flags, prepare, None).await
    }

    async fn start_on<F>(
        n: usize,
        pki: crate::pki::Pki,
        flags: &[&str],
        member_flags: impl Fn(&Member) -> Vec<String>,
        mut prepare: F,
        network: Option<crate::netns::Network>,
    ) -> Result<Cluster>
    where
        F: AsyncFnMut(&Member) -> Result<()>,
    {
        if n == 0 {
            bail!("a cluster needs at least one member");
        }
        let mut cluster = Cluster {
            binary: crate::baton_binary()?,
            members: BTreeMap::new(),
            removed: Vec::new(),
            used_ports: HashSet::new(),
            pki,
            network,
        };
        let mut attempt = 1;
        loop {
            let ids: Vec<u64> = (1..=n as u64).collect();
            let (ports, members_flag) = match &cluster.network {
                // Each member has an address of its own: the same ports everywhere.
                Some(network) => {
                    let ports = vec![ISOLATED_PORTS; n];
                    let flag = ids
                        .iter()
                        .map(|&id| format!("{id}={}:{}", network.ip(id), ISOLATED_PORTS.peer))
                        .collect::<Vec<_>>()
                        .join(",");
                    (ports, flag)
                }
                None => {
                    let ports = cluster.pick_ports(n)?;
                    let flag = members_flag(ids.iter().copied().zip(ports.iter().copied()));
                    (ports, flag)
                }
            };
            cluster.members.clear();
            for (id, ports) in ids.iter().copied().zip(ports) {
                let mut member = Member::new(id, ports, members_flag.clone(), None, &cluster.pki)?;
                if let Some(network) = &cluster.network {
                    member.place(network.namespace(id)?.to_owned(), network.ip(id));
                }
                member.add_flags(flags);
                let own = member_flags(&member);
                member.add_flags(&own.iter().map(String::as_str).collect::<Vec<_>>());
                cluster.members.insert(id, member);
            }
            for member in cluster.members.values() {
                prepare(member)
                    .await
                    .with_context(|| format!("prepare member {}", member.id()))?;
            }
            let binary = cluster.binary.clone();
            for member in cluster.members.values_mut() {
                member.spawn(&binary)?;
            }
            match cluster.wait_for_leader().await {
                Ok(_) => return Ok(cluster),
                // A member that died during start-up most likely lost a race for its port.
                Err(err) if attempt < START_ATTEMPTS && cluster.any_stopped() => {
                    eprintln!(
                        "cluster start attempt {attempt} failed, retrying on new ports: {err:#}"
                    );
                    attempt += 1;
                    for member in cluster.members.values_mut() {
                        member.kill9()?;
                    }
                }
                Err(err) => {
                    cluster.dump_logs();
                    return Err(err.context(format!("start a {n}-member cluster")));
                }
            }
        }
    }

    /// The ensemble's CA and certificates (for tests that call ports themselves).
    pub fn pki(&self) -> &crate::pki::Pki {
        &self.pki
    }

    /// Ids of the ensemble's members (running or stopped; not removed ones), in order.
    pub fn ids(&self) -> Vec<u64> {
        self.members.keys().copied().collect()
    }

    /// Ids of the members the harness has running.
    pub fn running_ids(&self) -> Vec<u64> {
        self.members
            .values()
            .filter(|member| member.is_started())
            .map(Member::id)
            .collect()
    }

    /// Member `id` (its client and admin addresses, its log).
    pub fn member(&self, id: u64) -> Result<&Member> {
        self.members
            .get(&id)
            .with_context(|| format!("no member {id} in the cluster (members {:?})", self.ids()))
    }

    /// Changes member `id`'s command line from its next start on: `remove` (each a flag
    /// followed by a value) taken out, then `add` appended.
    pub fn change_flags(&mut self, id: u64, remove: &[&str], add: &[&str]) -> Result<()> {
        let member = self.member_mut(id)?;
        for flag in remove {
            member.remove_flag_with_value(flag);
        }
        member.add_flags(add);
        Ok(())
    }

    fn member_mut(&mut self, id: u64) -> Result<&mut Member> {
        let ids = self.ids();
        self.members
            .get_mut(&id)
            .with_context(|| format!("no member {id} in the cluster (members {ids:?})"))
    }

    /// `host:port,...` of every member's client port, for clients that fail over.
    pub fn connect_string(&self) -> String {
        self.members
            .values()
            .map(|member| member.client_addr().to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The leader every running member agrees on, once they are all ready.
    pub async fn leader(&mut self) -> Result<u64> {
        self.wait_for_leader().await
    }

    /// Waits until every running member reports the same leader, that leader is running and
    /// says it leads, and every running member has applied what it knows committed.
    pub async fn wait_for_leader(&mut self) -> Result<u64> {
        let running = self.running_ids();
        self.wait_for_leader_among(&running).await
    }

    /// `wait_for_leader` over `ids` only (a member started to join is not in the ensemble yet).
    async fn wait_for_leader_among(&mut self, ids: &[u64]) -> Result<u64> {
        let statuses = self
            .wait_for(
                &format!("members {ids:?} to agree on a leader and be ready"),
                |statuses| agreed_leader(ids, statuses).is_some(),
            )
            .await?;
        agreed_leader(ids, &statuses).context("the leader vanished between two looks")
    }

    /// `/v1/status` of every running member that answers within the probe deadline.
    pub async fn statuses(&mut self) -> Result<Statuses> {
        let mut statuses = Statuses::new();
        for member in self.members.values_mut() {
            member.check_alive()?;
            if !member.is_started() {
                continue;
            }
            if let Ok(status) = member.status().await {
                statuses.insert(member.id(), status);
            }
        }
        Ok(statuses)
    }

    /// Polls the running members' statuses until `condition` holds, and returns those statuses.
    /// Fails after `CONVERGE_DEADLINE` with the last statuses seen, or at once if a member the
    /// harness did not stop has exited.
    pub async fn wait_for<F>(&mut self, what: &str, mut condition: F) -> Result<Statuses>
    where
        F: FnMut(&Statuses) -> bool,
    {
        let deadline = Instant::now() + CONVERGE_DEADLINE;
        let mut backoff = POLL_MIN;
        loop {
            let statuses = self
                .statuses()
                .await
                .with_context(|| format!("waiting for {what}"))?;
            if condition(&statuses) {
                return Ok(statuses);
            }
            if Instant::now() >= deadline {
                let seen: Vec<String> = statuses.values().map(Status::to_string).collect();
                bail!(
                    "{what}: not reached within {CONVERGE_DEADLINE:?}; running {:?}; last statuses:\n  {}",
                    self.running_ids(),
                    seen.join("\n  ")
                );
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(POLL_MAX);
        }
    }

    /// `/v1/status` of member `id`.
    pub async fn status(&self, id: u64) -> Result<Status> {
        self.member(id)?.status().await
    }

    /// Kills member `id` with SIGKILL; its data dir and ports are kept for `restart`.
    pub fn kill9(&mut self, id: u64) -> Result<()> {
        self.member_mut(id)?.kill9()
    }

    /// Waits until member `id` exits by itself (a member that must stop on a fault) and returns
    /// how, with its log tail; fails if it still runs after `CONVERGE_DEADLINE`.
    pub async fn wait_for_exit(&mut self, id: u64) -> Result<String> {
        let deadline = Instant::now() + CONVERGE_DEADLINE;
        let mut backoff = POLL_MIN;
        loop {
            let member = self.member_mut(id)?;
            ensure!(member.is_started(), "member {id} is not running");
            if let Err(exited) = member.check_alive() {
                return Ok(format!("{exited:#}"));
            }
            ensure!(
                Instant::now() < deadline,
                "member {id} still runs after {CONVERGE_DEADLINE:?}"
            );
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(POLL_MAX);
        }
    }

    /// Starts member `id` again (killing it first if it runs) with the same data dir, ports and
    /// flags, and waits until its `/readyz` answers 200.
    pub async fn restart(&mut self, id: u64) -> Result<()> {
        self.restart_all(&[id]).await
    }

    /// Restarts several members at once (a member alone may have no quorum to become ready
    /// with), then waits until each is ready.
    pub async fn restart_all(&mut self, ids: &[u64]) -> Result<()> {
        let binary = self.binary.clone();
        for &id in ids {
            let member = self.member_mut(id)?;
            member.kill9()?;
            member.spawn(&binary)?;
        }
        let mut attempts = BTreeMap::new();
        let deadline = Instant::now() + CONVERGE_DEADLINE;
        let mut pending: Vec<u64> = ids.to_vec();
        let mut backoff = POLL_MIN;
        while !pending.is_empty() {
            let mut still = Vec::new();
            for id in pending {
                let member = self.member_mut(id)?;
                if let Err(exited) = member.check_alive() {
                    // The old incarnation's ports can stay busy for a moment after it died.
                    let attempt = attempts.entry(id).or_insert(1);
                    if *attempt >= RESTART_ATTEMPTS {
                        return Err(exited.context(format!("restart member {id}")));
                    }
                    *attempt += 1;
                    tokio::time::sleep(RESTART_BACKOFF).await;
                    member.spawn(&binary)?;
                    still.push(id);
                    continue;
                }
                let ready = member
                    .admin(Method::Get, "/readyz", None)
                    .await
                    .is_ok_and(|reply| reply.status == 200);
                if !ready {
                    still.push(id);
                }
            }
            pending = still;
            if pending.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                let tails: Vec<String> = pending
                    .iter()
                    .filter_map(|id| self.members.get(id))
                    .map(|member| {
                        format!(
                            "member {}:\n{}",
                            member.id(),
                            member.log_tail(LOG_TAIL_LINES)
                        )
                    })
                    .collect();
                bail!(
                    "members {pending:?} not ready within {CONVERGE_DEADLINE:?} after a restart\n{}",
                    tails.join("\n")
                );
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(POLL_MAX);
        }
        Ok(())
    }

    /// One admin API request to member `id`.
    pub async fn admin(
        &self,
        id: u64,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply> {
        self.member(id)?.admin(method, path, body).await
    }

    /// Waits until member `id` answers `/healthz` (its listeners are up).
    async fn wait_until_serving(&mut self, id: u64) -> Result<()> {
        let deadline = Instant::now() + CONVERGE_DEADLINE;
        let mut backoff = POLL_MIN;
        loop {
            let member = self.member_mut(id)?;
            member.check_alive()?;
            if member
                .admin(Method::Get, "/healthz", None)
                .await
                .is_ok_and(|reply| reply.status == 200)
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("member {id} did not answer /healthz within {CONVERGE_DEADLINE:?}");
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(POLL_MAX);
        }
    }

    /// Prints every member's log tail to stderr (each at most once).
    pub fn dump_logs(&mut self) {
        for member in self.members.values_mut().chain(self.removed.iter_mut()) {
            member.dump_log();
        }
    }

    /// Whether a member is not running although `start` spawned them all: it exited.
    fn any_stopped(&self) -> bool {
        self.members.values().any(|member| !member.is_started())
    }

    /// `n` sets of ports that were free a moment ago and were never given to another member.
    fn pick_ports(&mut self, n: usize) -> Result<Vec<Ports>> {
        // Hold every probe listener at once so no port is handed out twice.
        let mut listeners = Vec::new();
        let mut ports = Vec::new();
        while ports.len() < 3 * n {
            let listener =
                TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("bind a probe port")?;
            let port = listener.local_addr().context("probe port")?.port();
            if self.used_ports.insert(port) {
                ports.push(port);
            }
            listeners.push(listener);
        }
        drop(listeners);
        Ok(ports
            .chunks_exact(3)
            .map(|chunk| Ports {
                client: chunk[0],
                peer: chunk[1],
                admin: chunk[2],
            })
            .collect())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Members kill themselves on drop and print their logs if a test panicked.
        if std::thread::panicking() {
            self.dump_logs();
        }
    }
}

/// The member whose status says it leads, if exactly one does.
pub fn sole_leader(statuses: &Statuses) -> Option<&Status> {
    let mut leaders = statuses.values().filter(|status| status.role == "leader");
    let leader = leaders.next()?;
    leaders.next().is_none().then_some(leader)
}

/// The leader all of `ids` agree on, if they all answered and agree, it is one of them, it says
/// it leads, and every one of them is ready.
fn agreed_leader(ids: &[u64], statuses: &Statuses) -> Option<u64> {
    let first = statuses.get(ids.first()?)?.leader_id;
    let agreed = ids.iter().all(|id| {
        statuses
            .get(id)
            .is_some_and(|status| status.leader_id == first && status.is_ready())
    });
    let leads = ids.contains(&first)
        && statuses
            .get(&first)
            .is_some_and(|status| status.role == "leader");
    (first != 0 && agreed && leads).then_some(first)
}

fn members_flag(members: impl Iterator<Item = (u64, Ports)>) -> String {
    members
        .map(|(id, ports)| format!("{id}=127.0.0.1:{}", ports.peer))
        .collect::<Vec<_>>()
        .join(",")
}
