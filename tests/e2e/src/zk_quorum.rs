//! Apache ZooKeeper 3.8 as a quorum of real processes, each member in a network namespace of its
//! own on a bridge (`netns::Network`), like `Cluster::start_isolated`: the reference the fault
//! suite runs the same workload and faults against. Members run
//! `tests/scripts/reference-zookeeper.sh` with tickTime 1000 ms (syncLimit 2: a follower gives
//! up a silent leader after 2 s, close to Baton's election timeout) and listen on their own
//! address, client port 2181.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use tempfile::TempDir;

use crate::nemesis::Ensemble;
use crate::netns::Network;
use crate::wire::four_letter_word_within;

const CLIENT_PORT: u16 = 2181;
const TICK_MS: u32 = 1000;
/// A JVM's start and a first election, on a busy machine.
const START_DEADLINE: Duration = Duration::from_secs(90);
const PROBE_DEADLINE: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(200);
const LOG_TAIL_LINES: usize = 40;

struct ZkMember {
    dir: TempDir,
    child: Option<Child>,
}

impl ZkMember {
    fn log_path(&self) -> PathBuf {
        self.dir.path().join("member.log")
    }
}

/// A ZooKeeper quorum on its own network; members killed and the network removed on drop.
pub struct ZkQuorum {
    members: BTreeMap<u64, ZkMember>,
    quorum: String,
    /// Declared last: dropped after the members.
    network: Network,
}

impl ZkQuorum {
    /// Starts `n` members and waits until they have a leader.
    pub async fn start_isolated(n: usize) -> Result<ZkQuorum> {
        let ids: Vec<u64> = (1..=n as u64).collect();
        let network = Network::new(&ids)?;
        let quorum = ids
            .iter()
            .map(|id| format!("{id}={}", network.ip(*id)))
            .collect::<Vec<_>>()
            .join(",");
        let mut members = BTreeMap::new();
        for &id in &ids {
            let dir = tempfile::Builder::new()
                .prefix(&format!("baton-tests-zk-{id}-"))
                .tempdir()
                .context("a member dir")?;
            members.insert(id, ZkMember { dir, child: None });
        }
        let mut quorum = ZkQuorum {
            members,
            quorum,
            network,
        };
        for id in ids {
            quorum.spawn(id)?;
        }
        quorum.wait_for_leader().await?;
        Ok(quorum)
    }

    fn spawn(&mut self, id: u64) -> Result<()> {
        let netns = self.network.namespace(id)?.to_owned();
        let ip = self.network.ip(id).to_string();
        let member = self.members.get_mut(&id).context("no such member")?;
        ensure!(member.child.is_none(), "ZooKeeper member {id} runs already");
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(member.log_path())
            .context("open the member's log")?;
        writeln!(
            log,
            "===== baton-tests: starting ZooKeeper member {id} ====="
        )?;
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scripts/reference-zookeeper.sh");
        // `ip netns exec` and the script exec in turn: the process id is the JVM's.
        let child = Command::new("ip")
            .args(["netns", "exec", &netns])
            .arg(script)
            .arg(CLIENT_PORT.to_string())
            .arg(member.dir.path().join("data"))
            .env("ZK_QUORUM", &self.quorum)
            .env("ZK_MYID", id.to_string())
            .env("ZK_CLIENT_ADDR", &ip)
            .env("ZK_TICK_MS", TICK_MS.to_string())
            .env("ZK_LOG_LEVEL", "WARN")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start ZooKeeper member {id}"))?;
        member.child = Some(child);
        Ok(())
    }

    pub fn client_addr(&self, id: u64) -> SocketAddr {
        SocketAddr::new(self.network.ip(id).into(), CLIENT_PORT)
    }

    /// What `srvr` says member `id` is ("leader", "follower"...), if it answers.
    async fn mode(&self, id: u64) -> Option<String> {
        let answer = four_letter_word_within(self.client_addr(id), "srvr", PROBE_DEADLINE)
            .await
            .ok()?;
        answer
            .lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(str::to_owned)
    }

    fn check_alive(&mut self) -> Result<()> {
        for (id, member) in &mut self.members {
            if let Some(child) = member.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                member.child = None;
                bail!(
                    "ZooKeeper member {id} exited by itself with {status}; log:\n{}",
                    tail(&member.log_path(), LOG_TAIL_LINES)
                );
            }
        }
        Ok(())
    }

    fn running(&self) -> Vec<u64> {
        self.members
            .iter()
            .filter(|(_, m)| m.child.is_some())
            .map(|(id, _)| *id)
            .collect()
    }
}

impl Ensemble for ZkQuorum {
    fn product(&self) -> &'static str {
        "ZooKeeper"
    }

    fn ids(&self) -> Vec<u64> {
        self.members.keys().copied().collect()
    }

    fn network(&self) -> Result<&Network> {
        Ok(&self.network)
    }

    /// One running member says it leads and every other running member follows.
    async fn wait_for_leader(&mut self) -> Result<u64> {
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            self.check_alive()?;
            let mut modes = BTreeMap::new();
            for id in self.running() {
                modes.insert(id, self.mode(id).await);
            }
            let leaders: Vec<u64> = modes
                .iter()
                .filter(|(_, m)| m.as_deref() == Some("leader"))
                .map(|(id, _)| *id)
                .collect();
            let following = modes
                .values()
                .filter(|m| m.as_deref() == Some("follower"))
                .count();
            if leaders.len() == 1 && following + 1 == modes.len() {
                return Ok(leaders[0]);
            }
            if Instant::now() >= deadline {
                bail!("ZooKeeper members agree on no leader after {START_DEADLINE:?}: {modes:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn signal(&self, id: u64, signal: &str) -> Result<()> {
        let pid = self
            .members
            .get(&id)
            .and_then(|m| m.child.as_ref())
            .map(Child::id)
            .with_context(|| format!("ZooKeeper member {id} is not running"))?;
        crate::netns::run("kill", &[&format!("-{signal}"), &pid.to_string()])
    }

    fn kill9(&mut self, id: u64) -> Result<()> {
        let member = self.members.get_mut(&id).context("no such member")?;
        if let Some(mut child) = member.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    async fn restart(&mut self, id: u64) -> Result<()> {
        self.kill9(id)?;
        self.spawn(id)?;
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            self.check_alive()?;
            if matches!(self.mode(id).await.as_deref(), Some("leader" | "follower")) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(anyhow!(
                    "ZooKeeper member {id} did not rejoin within {START_DEADLINE:?}"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn connect_string(&self) -> String {
        self.members
            .keys()
            .map(|&id| self.client_addr(id).to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn dump_logs(&mut self) {
        for (id, member) in &self.members {
            eprintln!(
                "----- last {LOG_TAIL_LINES} log lines of ZooKeeper member {id} -----\n{}",
                tail(&member.log_path(), LOG_TAIL_LINES)
            );
        }
    }
}

impl Drop for ZkQuorum {
    fn drop(&mut self) {
        for member in self.members.values_mut() {
            if let Some(mut child) = member.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn tail(path: &std::path::Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
