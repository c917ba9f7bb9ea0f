//! Who runs where: the ensemble members and the pods, their loopback addresses and data, and
//! the command line each is started with.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::binaries::Binaries;
use crate::ports::PortPicker;
use crate::supervisor::Spec;

/// The election every pod stands in.
pub const ELECTION: &str = "demo";

/// Session timeout the sidecars ask for: the ensemble's smallest plus a margin, so that a
/// `kill -9`ed leader is replaced within seconds rather than the sidecar's default 10s.
pub const SESSION_TIMEOUT: &str = "5s";

/// One ensemble member.
#[derive(Debug, Clone)]
pub struct Member {
    pub id: u64,
    /// ZooKeeper clients (the sidecars) connect here.
    pub client: SocketAddr,
    pub peer: SocketAddr,
    pub admin: SocketAddr,
    pub data_dir: PathBuf,
}

/// One "pod": a sidecar standing in the demo election.
#[derive(Debug, Clone)]
pub struct Pod {
    /// Its name in the election and in locks: `pod-a`, `pod-b`, …
    pub identity: String,
    pub listen: SocketAddr,
}

/// The whole playground: members, pods, and where their data, logs and certificates live.
#[derive(Debug, Clone)]
pub struct Topology {
    pub members: Vec<Member>,
    pub pods: Vec<Pod>,
    pub logs: PathBuf,
    /// What `baton-ensemble certs` wrote: the ensemble CA, member and admin certificates.
    pub certs: PathBuf,
}

/// The cluster id the playground's certificates name.
const CLUSTER_ID: &str = "playground";

impl Topology {
    /// Picks addresses for `members` members and `pods` pods (the familiar ports unless
    /// `any_port`) and creates their directories under `data`.
    pub async fn new(members: u64, pods: u8, any_port: bool, data: &Path) -> Result<Self> {
        if !(1..=26).contains(&pods) {
            bail!("--pods must be 1 to 26 (pods are named pod-a to pod-z), not {pods}");
        }
        let mut picker = PortPicker::new(any_port);
        let mut chosen = Vec::new();
        for id in 1..=members {
            // The ports of the README's three-member example: 2181…, 2888…, 8081….
            let offset = u16::try_from(id).context("member id")?;
            chosen.push(Member {
                id,
                client: picker.pick(2180 + offset).await?,
                peer: picker.pick(2887 + offset).await?,
                admin: picker.pick(8080 + offset).await?,
                data_dir: data.join(format!("member-{id}")),
            });
        }
        let mut pods_chosen = Vec::new();
        for (index, letter) in ('a'..='z').take(usize::from(pods)).enumerate() {
            let offset = u16::try_from(index).context("pod index")?;
            pods_chosen.push(Pod {
                identity: format!("pod-{letter}"),
                listen: picker.pick(4041 + offset).await?,
            });
        }
        picker.release();
        let logs = data.join("logs");
        std::fs::create_dir_all(&logs).with_context(|| format!("create {}", logs.display()))?;
        // Members authenticate each other as in production; a kept data dir keeps its CA.
        let certs = data.join("certs");
        if !certs.join("ca.crt").exists() {
            let ids: Vec<u64> = chosen.iter().map(|m| m.id).collect();
            baton_tls::local::write_dir(
                &certs,
                CLUSTER_ID,
                &ids,
                &baton_tls::HostNames::loopback(),
            )
            .context("make the ensemble's certificates")?;
        }
        Ok(Self {
            members: chosen,
            pods: pods_chosen,
            logs,
            certs,
        })
    }

    /// The client addresses of every member, as a ZooKeeper connect string.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(|m| m.client.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// How to start `member`.
    pub fn member_spec(&self, member: &Member, binaries: &Binaries) -> Spec {
        let initial = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.id, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let (program, mut args) = binaries.ensemble();
        args.extend([
            "--id".into(),
            member.id.to_string(),
            "--data-dir".into(),
            member.data_dir.display().to_string(),
            "--client-addr".into(),
            member.client.to_string(),
            "--peer-addr".into(),
            member.peer.to_string(),
            "--admin-addr".into(),
            member.admin.to_string(),
            "--members".into(),
            initial,
            "--tls-ca".into(),
            self.certs.join("ca.crt").display().to_string(),
            "--tls-cert".into(),
            self.certs
                .join(format!("member-{}.crt", member.id))
                .display()
                .to_string(),
            "--tls-key".into(),
            self.certs
                .join(format!("member-{}.key", member.id))
                .display()
                .to_string(),
        ]);
        Spec {
            label: format!("member {}", member.id),
            program,
            args,
            log: self.logs.join(format!("member-{}.log", member.id)),
        }
    }

    /// How to start `pod`'s sidecar.
    pub fn pod_spec(&self, pod: &Pod, binaries: &Binaries) -> Spec {
        let (program, mut args) = binaries.sidecar();
        args.extend([
            "--ensemble".into(),
            self.connect_string(),
            "--listen".into(),
            pod.listen.to_string(),
            "--identity".into(),
            pod.identity.clone(),
            "--election".into(),
            ELECTION.into(),
            "--session-timeout".into(),
            SESSION_TIMEOUT.into(),
        ]);
        Spec {
            label: format!("{}'s sidecar", pod.identity),
            program,
            args,
            log: self.logs.join(format!("{}.log", pod.identity)),
        }
    }
}
