//! The ensemble-facing steps against real `baton-ensemble` processes on loopback, through the
//! operator's own code: `plan` decides, `run_action` sends the admin calls over HTTPS with the
//! admin certificate (`HttpAdmin`), `wait_until` waits for their effect. Every member runs with
//! TLS, as in a pod. The test plays the StatefulSet controller: it starts a joining member
//! (with a certificate issued for it) when the plan raises the replicas and kills one when it
//! lowers them.
//!
//! Needs the binaries: `cargo build --workspace --bins` first.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use baton_operator::build::StoredMembership;
use baton_operator::ensemble::{
    AdminError, EnsembleAdmin, EnsembleView, HttpAdmin, MembershipStep, Roster, SettingsValues,
    run_action, settings, wait_until,
};
use baton_operator::pki::AdminCredentials;
use baton_operator::plan::{Action, Observed, ObservedPod, ObservedStatefulSet, Phase, plan};
use baton_tests::cluster::{Cluster, run_cluster_case};

/// The operator's admin client with the certificate named `name` (`admin`, or a member's to
/// play an impostor) from the folder `baton_tls::local::write_dir` made.
fn admin_client(dir: &std::path::Path, name: &str) -> Result<HttpAdmin> {
    let read = |file: String| {
        std::fs::read_to_string(dir.join(&file)).with_context(|| format!("read {file}"))
    };
    let credentials = AdminCredentials {
        ca_pem: read("ca.crt".into())?,
        cert_pem: read(format!("{name}.crt"))?,
        key_pem: read(format!("{name}.key"))?,
    };
    Ok(HttpAdmin::tls(&credentials, Duration::from_secs(2))?)
}

/// The operator's admin client for the harness's cluster.
fn cluster_admin(cluster: &Cluster) -> Result<HttpAdmin> {
    admin_client(cluster.pki().dir(), "admin")
}

/// How long one step may take to show its effect on a loaded CI machine.
const SETTLE: Duration = Duration::from_secs(60);

/// A member started the way a pod beyond the bootstrap set starts: `--join` with the
/// ensemble's cluster id. Killed when dropped.
struct Joiner {
    child: Child,
    dir: tempfile::TempDir,
}

impl Drop for Joiner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts of a joining member before the test gives up on finding it free ports.
const JOINER_START_ATTEMPTS: u32 = 3;

/// How long a joining member may take to listen on a loaded CI machine.
const LISTEN_WITHIN: Duration = Duration::from_secs(30);

/// Runs `spawn` until the member it starts serves, up to `JOINER_START_ATTEMPTS` times: its ports
/// are picked free, and another process's outgoing connection can take one before the member
/// binds it (both draw from the ephemeral range). Returns the member and what `spawn` said of it.
async fn start_serving<T>(
    what: &str,
    mut spawn: impl FnMut() -> Result<(Joiner, T)>,
) -> Result<(Joiner, T)> {
    for attempt in 1..=JOINER_START_ATTEMPTS {
        let (member, said) = spawn()?;
        if let Some(member) = listening(member).await? {
            return Ok((member, said));
        }
        eprintln!("{what}, attempt {attempt}, exited before it served (a port taken?); new ports");
    }
    bail!("{what} exited before it served, {JOINER_START_ATTEMPTS} times")
}

/// `Some(joiner)` once its log says it serves (it has bound every address by then), `None` if
/// it exits first.
async fn listening(mut joiner: Joiner) -> Result<Option<Joiner>> {
    let log = joiner.dir.path().join("log");
    let deadline = std::time::Instant::now() + LISTEN_WITHIN;
    loop {
        if joiner.child.try_wait()?.is_some() {
            return Ok(None);
        }
        if std::fs::read_to_string(&log)?.contains("baton-ensemble serving") {
            return Ok(Some(joiner));
        }
        if std::time::Instant::now() > deadline {
            bail!("the joining member did not start serving within {LISTEN_WITHIN:?}");
        }
        // Nothing tells this process when another one has bound its ports; a member does
        // within milliseconds of starting, so this looks a few times at most.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("probe a port")?;
    Ok(listener.local_addr()?.port())
}

/// The members the test runs: the harness's bootstrap members and its own joiners.
struct Members {
    roster: Roster,
    joiners: BTreeMap<u64, Joiner>,
    cluster_id: String,
}

impl Members {
    async fn new(cluster: &mut Cluster) -> Result<Members> {
        let mut roster = Roster::default();
        for id in cluster.ids() {
            let m = cluster.member(id)?;
            roster.insert(id, m.admin_addr().to_string(), m.peer_addr().to_string());
        }
        let leader = cluster.leader().await?;
        let cluster_id = cluster.status(leader).await?.cluster_id;
        Ok(Members {
            roster,
            joiners: BTreeMap::new(),
            cluster_id,
        })
    }

    /// Starts member `id` with `--join`, as a new pod of a scaled-up StatefulSet would, with
    /// a certificate the cluster's CA issues for it now (as the operator does before the
    /// StatefulSet grows). Only the ports it serves on enter the roster (`start_serving`).
    async fn start_joiner(&mut self, pki: &baton_tests::pki::Pki, id: u64) -> Result<()> {
        pki.add_member(id)?;
        let what = format!("joiner {id}");
        let (joiner, (peer, admin)) = start_serving(&what, || self.spawn_joiner(pki, id)).await?;
        self.roster.insert(id, admin.to_string(), peer.to_string());
        self.joiners.insert(id, joiner);
        Ok(())
    }

    /// Spawns member `id` with `--join` on fresh ports; returns it with its peer and admin
    /// addresses.
    fn spawn_joiner(
        &self,
        pki: &baton_tests::pki::Pki,
        id: u64,
    ) -> Result<(Joiner, (SocketAddr, SocketAddr))> {
        let peer = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
        let admin = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
        let client = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
        let members = self
            .roster
            .ids()
            .into_iter()
            .filter(|m| *m != id)
            .filter_map(|m| Some(format!("{m}={}", self.roster.peer_addr(m)?)))
            .chain([format!("{id}={peer}")])
            .collect::<Vec<_>>()
            .join(",");
        let dir = tempfile::Builder::new()
            .prefix(&format!("baton-operator-joiner-{id}-"))
            .tempdir()?;
        let log = std::fs::File::create(dir.path().join("log"))?;
        let child = Command::new(baton_tests::baton_binary()?)
            .args([
                "--id",
                &id.to_string(),
                "--join",
                "--cluster-id",
                &self.cluster_id,
            ])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--members", &members])
            .args(["--client-addr", &client.to_string()])
            .args(["--peer-addr", &peer.to_string()])
            .args(["--admin-addr", &admin.to_string()])
            .args(pki.member_args(id))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("spawn a joining member")?;
        Ok((Joiner { child, dir }, (peer, admin)))
    }

    /// The roster of members 1..=n.
    fn roster_of(&self, n: i32) -> Roster {
        let mut roster = Roster::default();
        for id in self.roster.ids().into_iter().filter(|id| *id <= n as u64) {
            if let (Some(a), Some(p)) = (self.roster.admin_addr(id), self.roster.peer_addr(id)) {
                roster.insert(id, a.to_string(), p.to_string());
            }
        }
        roster
    }
}

fn observed(replicas: i32, bootstrap: i32, view: EnsembleView) -> Observed {
    Observed {
        statefulset: Some(ObservedStatefulSet {
            replicas,
            generation: Some(1),
            observed_generation: Some(1),
            update_revision: Some("r1".into()),
        }),
        stored: Some(StoredMembership {
            replicas,
            bootstrap,
        }),
        pods: (1..=replicas as u64)
            .map(|id| ObservedPod {
                id,
                revision: Some("r1".into()),
                terminating: false,
                ready: true,
            })
            .collect(),
        ensemble: view,
        volumes: Vec::new(),
    }
}

/// Runs the operator's plan against the real ensemble until it is stable at `desired`
/// members, playing the StatefulSet controller; returns every membership step taken.
async fn converge(
    cluster: &mut Cluster,
    members: &mut Members,
    replicas: &mut i32,
    desired: i32,
) -> Result<Vec<MembershipStep>> {
    let admin = cluster_admin(cluster)?;
    let mut steps = Vec::new();
    for _ in 0..40 {
        let roster = members.roster_of(*replicas);
        let view = EnsembleView::observe(&admin, &roster).await;
        let p = plan(desired, &observed(*replicas, *replicas, view));
        // The StatefulSet controller's part: pods appear and go with the replicas.
        for id in (*replicas + 1)..=p.membership.replicas {
            members.start_joiner(cluster.pki(), id as u64).await?;
        }
        for id in (p.membership.replicas + 1)..=*replicas {
            let id = id as u64;
            if members.joiners.remove(&id).is_none() {
                cluster.kill9(id)?;
            }
        }
        *replicas = p.membership.replicas;
        let roster = members.roster_of(*replicas);
        match (p.action, &p.phase) {
            (Some(Action::Membership(step)), _) => {
                run_action(&admin, &roster, step).await?;
                wait_until(&admin, &roster, &step.to_string(), SETTLE, |v| {
                    step.is_settled(v)
                })
                .await?;
                steps.push(step);
            }
            (Some(Action::RestartMember { id }), _) => bail!("unexpected restart of {id}"),
            (Some(Action::ReplaceVolume { id }), _) => bail!("unexpected reseed of {id}"),
            (None, Phase::Stable) => return Ok(steps),
            (None, _) => {
                // Waiting (a learner catching up) or a replicas change: wait for any change.
                let desired_plan = p.clone();
                let r = *replicas;
                wait_until(&admin, &roster, "the plan to move on", SETTLE, |v| {
                    plan(desired, &observed(r, r, v.clone())) != desired_plan
                })
                .await?;
            }
        }
    }
    bail!("not stable at {desired} members after 40 rounds")
}

async fn scale_up_then_down(cluster: &mut Cluster) -> Result<()> {
    let mut members = Members::new(cluster).await?;
    let admin = cluster_admin(cluster)?;
    let mut replicas = 3;

    let steps = converge(cluster, &mut members, &mut replicas, 5).await?;
    let added: Vec<String> = steps.iter().map(ToString::to_string).collect();
    assert_eq!(added, vec!["add member 4", "add member 5"]);
    let roster = members.roster_of(5);
    let view = wait_until(&admin, &roster, "five healthy voters", SETTLE, |v| {
        v.is_healthy(&[1, 2, 3, 4, 5])
    })
    .await?;
    for id in 1..=5 {
        let status = &view.statuses[&id];
        assert_eq!(status.cluster_id, members.cluster_id, "member {id}");
    }

    // Put leadership on the member that goes first, so the scale-down must move it.
    let leader = view.leader().context("a leader")?;
    if leader != 5 {
        let step = MembershipStep::Transfer {
            leader,
            to: Some(5),
        };
        run_action(&admin, &roster, step).await?;
        wait_until(&admin, &roster, "member 5 to lead", SETTLE, |v| {
            step.is_settled(v)
        })
        .await?;
    }
    let steps = converge(cluster, &mut members, &mut replicas, 3).await?;
    let done: Vec<String> = steps.iter().map(ToString::to_string).collect();
    assert_eq!(
        done[0], "move leadership from member 5 to member 1",
        "{done:?}"
    );
    assert_eq!(done[1..], ["remove member 5", "remove member 4"]);
    assert_eq!(replicas, 3);
    wait_until(
        &admin,
        &members.roster_of(3),
        "three healthy voters",
        SETTLE,
        |v| v.is_healthy(&[1, 2, 3]),
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_three_to_five_and_back_on_real_members() {
    run_cluster_case(3, scale_up_then_down).await;
}

async fn rolling_restart(cluster: &mut Cluster) -> Result<()> {
    let admin = cluster_admin(cluster)?;
    let members = Members::new(cluster).await?;
    let roster = members.roster_of(3);
    let mut outdated: Vec<u64> = vec![1, 2, 3];
    let mut restarted = Vec::new();
    let mut transfers = Vec::new();
    for _ in 0..12 {
        let view = wait_until(&admin, &roster, "a healthy ensemble", SETTLE, |v| {
            v.is_healthy(&[1, 2, 3])
        })
        .await?;
        let leader = view.leader().context("a leader")?;
        let mut o = observed(3, 3, view);
        for pod in &mut o.pods {
            if outdated.contains(&pod.id) {
                pod.revision = Some("r0".into());
            }
        }
        let p = plan(3, &o);
        match p.action {
            Some(Action::RestartMember { id }) => {
                assert_ne!(id, leader, "the leader is never restarted while leading");
                cluster.restart(id).await?;
                outdated.retain(|m| *m != id);
                restarted.push(id);
            }
            Some(Action::Membership(step @ MembershipStep::Transfer { .. })) => {
                run_action(&admin, &roster, step).await?;
                wait_until(&admin, &roster, &step.to_string(), SETTLE, |v| {
                    step.is_settled(v)
                })
                .await?;
                transfers.push(leader);
            }
            None if p.phase == Phase::Stable => break,
            other => bail!("unexpected step {other:?} in {p:?}"),
        }
    }
    assert!(outdated.is_empty(), "still outdated: {outdated:?}");
    assert_eq!(restarted.len(), 3);
    // The member that led at the start was restarted last, after handing leadership over.
    assert_eq!(transfers.len(), 1);
    assert_eq!(restarted.last(), transfers.first());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_moves_leadership_before_the_leader_goes() {
    run_cluster_case(3, rolling_restart).await;
}

async fn admin_answers(cluster: &mut Cluster) -> Result<()> {
    let admin = cluster_admin(cluster)?;
    let members = Members::new(cluster).await?;
    let roster = members.roster_of(3);
    let leader = cluster.leader().await?;
    let follower = (1..=3).find(|id| *id != leader).context("a follower")?;
    let other = (1..=3)
        .find(|id| *id != leader && *id != follower)
        .context("another follower")?;
    let addr = |id: u64| roster.admin_addr(id).map(str::to_string).context("address");

    let status = admin.status(&addr(follower)?).await?;
    assert_eq!((status.id, status.leader_id), (follower, leader));
    assert_eq!(status.voters(), vec![1, 2, 3]);

    // A member's certificate is not the admin's: the member refuses, and says so.
    let impostor = admin_client(cluster.pki().dir(), &format!("member-{follower}"))?;
    for answer in [
        impostor.status(&addr(leader)?).await.map(|_| ()),
        impostor.remove_member(&addr(leader)?, follower).await,
    ] {
        match answer {
            Err(AdminError::Unexpected { status: 403, .. }) => {}
            other => bail!("expected 403 for a member's certificate, got {other:?}"),
        }
    }
    assert_eq!(admin.status(&addr(leader)?).await?.voters(), vec![1, 2, 3]);
    // A CA the members never heard of is refused in the handshake.
    let stranger_dir = tempfile::tempdir()?;
    baton_tls::local::write_dir(
        stranger_dir.path(),
        baton_tests::cluster::CLUSTER_ID,
        &[],
        &baton_tls::HostNames::loopback(),
    )?;
    match admin_client(stranger_dir.path(), "admin")?
        .status(&addr(leader)?)
        .await
    {
        Err(AdminError::Unreachable { .. }) => {}
        other => bail!("expected a refused handshake, got {other:?}"),
    }

    // Membership calls on a follower name the leader.
    match admin.add_member(&addr(follower)?, 9, "127.0.0.1:9").await {
        Err(AdminError::NotLeader { leader_id, .. }) => assert_eq!(leader_id, leader),
        other => bail!("expected NotLeader, got {other:?}"),
    }
    // Removing a member that is not there is refused by the ensemble, and is not an error for
    // the operator (it may be repeating a removal whose answer it never saw).
    match admin.remove_member(&addr(leader)?, 9).await {
        Err(AdminError::Conflict { message, .. }) => {
            assert!(message.contains("not in the ensemble"), "{message}")
        }
        other => bail!("expected Conflict, got {other:?}"),
    }
    run_action(&admin, &roster, MembershipStep::Remove { leader, id: 9 }).await?;
    // Anything else is reported with the status and body.
    match admin.transfer_leader(&addr(leader)?, Some(9)).await {
        Err(AdminError::Unexpected { status: 400, .. }) => {}
        other => bail!("expected a 400, got {other:?}"),
    }
    cluster.kill9(other)?;
    // An unreachable member is reported as such, within the call's deadline.
    match admin.status(&addr(other)?).await {
        Err(AdminError::Unreachable { .. }) => {}
        other => bail!("expected Unreachable, got {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_answers_become_typed_errors() {
    run_cluster_case(3, admin_answers).await;
}

/// `spec.limits` onto the real ensemble through the operator's own `settings::keep`: only the
/// differing settings are sent, a `NotLeader` is followed to the leader it names, the answer
/// is what the leader applied, every member comes to hold it, and a second pass sends nothing.
async fn settings_kept(cluster: &mut Cluster) -> Result<()> {
    let admin = cluster_admin(cluster)?;
    let members = Members::new(cluster).await?;
    let roster = members.roster_of(3);
    let view = wait_until(&admin, &roster, "a quorum with settings", SETTLE, |v| {
        v.has_quorum()
            && v.leader()
                .and_then(|l| v.statuses.get(&l))
                .is_some_and(|s| s.settings.as_ref().is_some_and(|s| s.set))
    })
    .await?;
    let leader = view.leader().context("a leader")?;
    let current = view.statuses[&leader]
        .settings
        .clone()
        .context("the leader's settings")?;
    // The harness starts members without --check-identities; the operator turns it on.
    assert!(!current.values.check_identities, "{current:?}");
    let desired = SettingsValues {
        check_identities: true,
        namespace_bytes: 32 << 20,
        ephemerals_per_session: 500,
        ..current.values
    };
    // A view one step behind: a follower still looks like the leader, as after an election
    // the operator has not seen. The follower answers 421 naming the leader.
    let follower = (1..=3).find(|id| *id != leader).context("a follower")?;
    let mut stale = view.clone();
    for s in stale.statuses.values_mut() {
        s.leader_id = follower;
        s.role = if s.id == follower {
            "leader"
        } else {
            "follower"
        }
        .into();
        s.settings = Some(current.clone());
    }
    assert_eq!(stale.leader(), Some(follower));
    let outcome = settings::keep(&admin, &roster, &stale, &desired).await?;
    assert_eq!(
        outcome.changed,
        Some(serde_json::json!({
            "checkIdentities": true, "namespaceBytes": 33554432, "ephemeralsPerSession": 500
        }))
    );
    let applied = outcome.applied.context("the applied settings")?;
    assert_eq!(applied.values, desired);
    assert!(applied.set);
    // Replicated: every member applies it.
    let view = wait_until(&admin, &roster, "every member to apply it", SETTLE, |v| {
        v.statuses.len() == 3
            && v.statuses
                .values()
                .all(|s| s.settings.as_ref().is_some_and(|s| s.values == desired))
    })
    .await?;
    let again = settings::keep(&admin, &roster, &view, &desired).await?;
    assert_eq!(again.changed, None, "nothing differs any more");
    assert_eq!(again.applied.map(|s| s.values), Some(desired));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_limits_become_the_ensembles_settings() {
    run_cluster_case(3, settings_kept).await;
}

/// The operator's PKI for `prod/zk` (members 1 and 2), as the reconciler issues it.
fn operator_pki() -> Result<baton_operator::pki::Pki> {
    use baton_operator::pki::{StoredPki, issue, plan};
    let names = baton_operator::names::EnsembleNames::new("zk", "prod");
    let now = k8s_openapi::jiff::Timestamp::now();
    let empty = StoredPki::default();
    Ok(issue(&empty, &plan(&empty, &[1, 2], now), &names, now)?)
}

/// Starts the real `baton-ensemble` the way a pod of the built StatefulSet does: the start
/// script under `/bin/sh`, the ConfigMap and the container's env as environment, the
/// container's arguments (with loopback ports instead of the pod's fixed ones), and the built
/// `zk-tls` Secret written out as files where the kubelet would mount it. Returns the process
/// and its admin address, once it serves (`start_serving`).
async fn start_pod(
    pod: &str,
    replicas: i32,
    bootstrap: i32,
    pki: &baton_operator::pki::Pki,
) -> Result<(Joiner, String)> {
    start_serving(&format!("pod {pod}"), || {
        start_pod_once(pod, replicas, bootstrap, pki)
    })
    .await
}

fn start_pod_once(
    pod: &str,
    replicas: i32,
    bootstrap: i32,
    pki: &baton_operator::pki::Pki,
) -> Result<(Joiner, String)> {
    use baton_operator::build::{OperatorPods, START_SCRIPT, build};
    use baton_operator::crd::CoordinationEnsemble;
    use baton_operator::names::MEMBER_TLS_DIR;
    use baton_operator::validate::validate;

    // Limits other than the defaults: a new ensemble must start with them (the ConfigMap's
    // BATON_QUOTA_* and the container's --min-free-disk-bytes are what the binary reads).
    let yaml = "apiVersion: baton.dev/v1alpha1\nkind: CoordinationEnsemble\n\
                metadata: {name: zk, namespace: prod, uid: u1}\nspec: {replicas: 3, \
                limits: {namespaceBytes: 2097152, sharedZnodes: 5000, ephemeralsPerSession: 500, \
                minFreeDiskBytes: 0}}\n";
    let ce: CoordinationEnsemble = serde_saphyr::from_str(yaml)?;
    let spec = validate(&ce, "baton:test")?;
    let built = build(
        &ce,
        &spec,
        StoredMembership {
            replicas,
            bootstrap,
        },
        pki,
        &OperatorPods::default(),
        None,
    )?;
    let container = built
        .statefulset
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.containers.into_iter().next())
        .context("a container")?;
    assert_eq!(
        container
            .command
            .as_ref()
            .and_then(|c| c.get(2))
            .map(String::as_str),
        Some(START_SCRIPT)
    );
    let dir = tempfile::Builder::new()
        .prefix(&format!("baton-operator-pod-{pod}-"))
        .tempdir()?;
    // The members' Secret, one file per key, as the kubelet mounts it.
    let tls_dir = dir.path().join("tls");
    std::fs::create_dir(&tls_dir)?;
    for (key, value) in built.secrets.members.data.iter().flatten() {
        std::fs::write(tls_dir.join(key), &value.0)?;
    }
    let env: Vec<(String, String)> = container
        .env
        .iter()
        .flatten()
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        // No API server here to answer TokenReviews; everything else runs as in the pod.
        .filter(|(name, _)| name != "BATON_K8S_AUTH")
        .map(|(name, value)| {
            let value = match value.strip_prefix(MEMBER_TLS_DIR) {
                Some(rest) => format!("{}{rest}", tls_dir.display()),
                None => value,
            };
            (name, value)
        })
        .collect();
    assert!(env.iter().any(|(n, _)| n == "BATON_TLS_CA"), "{env:?}");
    std::os::unix::fs::symlink(
        baton_tests::baton_binary()?,
        dir.path().join("baton-ensemble"),
    )?;
    let admin = format!("127.0.0.1:{}", free_port()?);
    let args: Vec<String> = container
        .args
        .unwrap_or_default()
        .into_iter()
        .map(|arg| {
            if arg.starts_with("--data-dir=") {
                format!("--data-dir={}", dir.path().join("data").display())
            } else if arg.starts_with("--admin-addr=") {
                format!("--admin-addr={admin}")
            } else if let Some((flag, _)) = arg.split_once("=[::]:") {
                format!("{flag}=127.0.0.1:{}", free_port().unwrap_or(0))
            } else {
                arg
            }
        })
        .collect();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let log = std::fs::File::create(dir.path().join("log"))?;
    let child = Command::new("/bin/sh")
        .args(["-c", START_SCRIPT, "baton-ensemble"])
        .args(&args)
        .envs(built.config_map.data.unwrap_or_default())
        .envs(env)
        .env("POD_NAME", pod)
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    Ok((Joiner { child, dir }, admin))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_contract_starts_a_bootstrap_member_and_a_joiner() -> Result<()> {
    let pki = operator_pki()?;
    // The operator's own admin client, from the admin Secret it builds.
    let built_admin = {
        use baton_operator::pki::secrets::secrets;
        let names = baton_operator::names::EnsembleNames::new("zk", "prod");
        secrets(&pki, &names, |name| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name),
                ..Default::default()
            }
        })
        .admin
    };
    let credentials = baton_operator::dereference::admin_credentials(&built_admin)
        .context("admin credentials in the built Secret")?;
    let admin = HttpAdmin::tls(&credentials, Duration::from_secs(2))?;
    // A one-member ensemble: pod zk-0 bootstraps and leads, with the ConfigMap's cluster id,
    // serving the certificate the start script picked from the mounted Secret.
    let (_first, first_admin) = start_pod("zk-0", 1, 1, &pki).await?;
    let mut roster = Roster::default();
    roster.insert(1, first_admin, "zk-0.zk-peers.prod.svc:2888".into());
    let view = wait_until(&admin, &roster, "zk-0 to lead", SETTLE, |v| {
        v.leader() == Some(1)
    })
    .await?;
    assert_eq!(view.statuses[&1].cluster_id, "prod.zk");
    assert_eq!(view.voters(), vec![1]);
    // Its first leader proposed the limits it was started with, identities checked.
    let view = wait_until(&admin, &roster, "zk-0's first settings", SETTLE, |v| {
        v.statuses
            .get(&1)
            .and_then(|s| s.settings.as_ref())
            .is_some_and(|s| s.set)
    })
    .await?;
    let first = view.statuses[&1].settings.clone().context("settings")?;
    assert_eq!(
        first.values,
        SettingsValues {
            check_identities: true,
            namespace_znodes: 100_000,
            namespace_bytes: 2 << 20,
            shared_znodes: 5_000,
            shared_bytes: 256 << 20,
            ephemerals_per_session: 500,
        }
    );
    // Pod zk-1 of a scaled-up StatefulSet is beyond the bootstrap set: it joins and waits.
    let (_second, second_admin) = start_pod("zk-1", 2, 1, &pki).await?;
    let mut roster = Roster::default();
    roster.insert(2, second_admin, "zk-1.zk-peers.prod.svc:2888".into());
    let view = wait_until(&admin, &roster, "zk-1 to answer", SETTLE, |v| {
        v.statuses.contains_key(&2)
    })
    .await?;
    let status = &view.statuses[&2];
    assert_eq!(status.id, 2);
    assert_eq!(status.cluster_id, "prod.zk");
    assert_eq!(
        status.leader_id, 0,
        "a joiner has no configuration until it is added"
    );
    assert!(status.members.is_empty(), "{status:?}");
    Ok(())
}
