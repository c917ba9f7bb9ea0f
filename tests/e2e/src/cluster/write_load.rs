//! Clients that create sequential nodes in a loop and record what the ensemble acknowledged,
//! so a failover test can check afterwards that nothing acknowledged was lost or duplicated.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use zookeeper_client as zk;

/// Persistent sequential node, open ACL.
pub const PERSISTENT_SEQUENTIAL: zk::CreateOptions<'static> =
    zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());

/// Upper bound for one create; a create still unanswered then counts as a failure.
const OP_DEADLINE: Duration = Duration::from_secs(10);
/// Pause after a failed create, so a writer does not spin while its client reconnects.
const RETRY_BACKOFF: Duration = Duration::from_millis(25);
const POLL: Duration = Duration::from_millis(25);

/// A create the ensemble acknowledged.
#[derive(Debug, Clone)]
pub struct Ack {
    pub writer: usize,
    /// Full path of the node created (parent + prefix + the 10-digit sequence).
    pub path: String,
    pub sequence: i64,
    /// Unique per create: `writer-<w>-op-<n>`.
    pub data: Vec<u8>,
    pub issued: Instant,
    pub acked: Instant,
}

/// A create that failed or timed out (it may or may not have been applied).
#[derive(Debug, Clone)]
pub struct Failure {
    pub writer: usize,
    pub error: String,
    pub at: Instant,
}

/// Everything the writers saw, in the order each writer saw it.
#[derive(Debug, Default)]
pub struct WriteLog {
    pub acks: Vec<Ack>,
    pub failures: Vec<Failure>,
}

impl WriteLog {
    /// Acks of `writer`, in the order they arrived.
    pub fn acks_of(&self, writer: usize) -> impl Iterator<Item = &Ack> {
        self.acks.iter().filter(move |ack| ack.writer == writer)
    }

    /// Checks the log against the nodes under `parent` as one member has them (name → data):
    /// every acknowledged create is there with its own data, no sequential name was handed out
    /// twice, no create was applied twice, and each writer's sequence numbers rose in the order
    /// its creates were acknowledged. Returns how many nodes were applied without an ack (creates
    /// whose answer was lost to a failover).
    pub fn check_against(&self, parent: &str, nodes: &BTreeMap<String, Vec<u8>>) -> Result<usize> {
        let mut names = HashSet::new();
        for ack in &self.acks {
            let name = ack
                .path
                .strip_prefix(parent)
                .and_then(|rest| rest.strip_prefix('/'))
                .with_context(|| format!("acked path {} is not under {parent}", ack.path))?;
            ensure!(
                names.insert(name),
                "sequential name {name} was acknowledged twice"
            );
            let data = nodes.get(name).with_context(|| {
                format!(
                    "acknowledged create {} ({}) is lost",
                    ack.path,
                    show(&ack.data)
                )
            })?;
            ensure!(
                *data == ack.data,
                "{} holds {} but its acknowledged create wrote {}",
                ack.path,
                show(data),
                show(&ack.data)
            );
        }
        let mut seen: HashMap<&[u8], &str> = HashMap::new();
        for (name, data) in nodes {
            if let Some(first) = seen.insert(data, name) {
                bail!(
                    "one create was applied twice: {first} and {name} both hold {}",
                    show(data)
                );
            }
        }
        let writers: HashSet<usize> = self.acks.iter().map(|ack| ack.writer).collect();
        for writer in writers {
            let sequences: Vec<i64> = self.acks_of(writer).map(|ack| ack.sequence).collect();
            if let Some(pair) = sequences.windows(2).find(|pair| pair[0] >= pair[1]) {
                bail!(
                    "writer {writer} was acknowledged sequence {} after {}: sequence numbers went back",
                    pair[1],
                    pair[0]
                );
            }
        }
        Ok(nodes.len().saturating_sub(self.acks.len()))
    }
}

/// Every child of `parent` with its data, as `client`'s member has them.
pub async fn children_with_data(
    client: &zk::Client,
    parent: &str,
) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut nodes = BTreeMap::new();
    for name in client
        .list_children(parent)
        .await
        .with_context(|| format!("list {parent}"))?
    {
        let path = format!("{parent}/{name}");
        let (data, _) = client
            .get_data(&path)
            .await
            .with_context(|| format!("get {path}"))?;
        nodes.insert(name, data);
    }
    Ok(nodes)
}

fn show(data: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(data))
}

/// Writers running in the background; `stop` ends them and hands back the log.
pub struct SequentialWriters {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<WriteLog>>,
    tasks: Vec<JoinHandle<()>>,
    writers: usize,
}

impl SequentialWriters {
    /// Starts one writer per client, each creating `<prefix>NNNNNNNNNN` nodes back to back.
    pub fn start(clients: Vec<zk::Client>, prefix: &str) -> SequentialWriters {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(WriteLog::default()));
        let writers = clients.len();
        let tasks = clients
            .into_iter()
            .enumerate()
            .map(|(writer, client)| {
                let (stop, log, prefix) = (stop.clone(), log.clone(), prefix.to_owned());
                tokio::spawn(write_until_stopped(writer, client, prefix, stop, log))
            })
            .collect();
        SequentialWriters {
            stop,
            log,
            tasks,
            writers,
        }
    }

    /// Waits until every writer has at least `count` acks for creates issued at or after `since`;
    /// fails after `deadline` saying how far each writer got.
    pub async fn wait_for_acks(
        &self,
        count: usize,
        since: Instant,
        deadline: Duration,
    ) -> Result<()> {
        let give_up = Instant::now() + deadline;
        loop {
            let per_writer = self.acks_since(since);
            if per_writer.iter().all(|acks| *acks >= count) {
                return Ok(());
            }
            if Instant::now() >= give_up {
                let log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
                let recent: Vec<String> = log
                    .failures
                    .iter()
                    .rev()
                    .take(10)
                    .map(|failure| format!("writer {}: {}", failure.writer, failure.error))
                    .collect();
                bail!(
                    "writers acknowledged {per_writer:?} creates since the mark, wanted {count} each \
                     within {deadline:?}; latest failures: {recent:?}"
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn acks_since(&self, since: Instant) -> Vec<usize> {
        let log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        (0..self.writers)
            .map(|writer| {
                log.acks_of(writer)
                    .filter(|ack| ack.issued >= since)
                    .count()
            })
            .collect()
    }

    /// Stops every writer after its current create and returns what they saw.
    pub async fn stop(self) -> Result<WriteLog> {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            task.await
                .map_err(|err| anyhow!("a writer task failed: {err}"))?;
        }
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(std::mem::take(&mut *log))
    }
}

async fn write_until_stopped(
    writer: usize,
    client: zk::Client,
    prefix: String,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<WriteLog>>,
) {
    let mut op = 0u64;
    while !stop.load(Ordering::SeqCst) {
        op += 1;
        let data = format!("writer-{writer}-op-{op}").into_bytes();
        let issued = Instant::now();
        let outcome = tokio::time::timeout(
            OP_DEADLINE,
            client.create(&prefix, &data, &PERSISTENT_SEQUENTIAL),
        )
        .await;
        let now = Instant::now();
        let failure = match outcome {
            Ok(Ok((_, sequence))) => {
                let ack = Ack {
                    writer,
                    path: format!("{prefix}{sequence}"),
                    sequence: sequence.into_i64(),
                    data,
                    issued,
                    acked: now,
                };
                log.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .acks
                    .push(ack);
                continue;
            }
            Ok(Err(err)) => err.to_string(),
            Err(_) => format!("no answer within {OP_DEADLINE:?}"),
        };
        log.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .failures
            .push(Failure {
                writer,
                error: failure,
                at: now,
            });
        tokio::time::sleep(RETRY_BACKOFF).await;
    }
}
