//! One pod as the agent runs it: its network namespace, its volumes as directories, each
//! container a supervised process (restarted per restartPolicy), readiness probes and the
//! status the agent reports.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvVar, ObjectFieldSelector, PersistentVolumeClaim, Pod, Probe, Secret,
    ServiceAccount, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::Agent;

fn now() -> Value {
    serde_json::to_value(Time(k8s_openapi::jiff::Timestamp::now())).unwrap_or(Value::Null)
}

/// What the agent knows of one container's process.
#[derive(Default)]
struct State {
    pid: Option<i32>,
    started_at: Option<Value>,
    restart_count: i32,
    /// exit code, started, finished: of the last run that ended.
    last_exit: Option<(i32, Value, Value)>,
    /// Why it is not running (e.g. an error spawning it).
    waiting: Option<String>,
    ready: bool,
    /// An init container that ran to success.
    completed: bool,
    /// The supervisor thread has ended.
    done: bool,
}

struct Run {
    spec: Container,
    /// An init container (sidecar or not).
    init: bool,
    /// A native sidecar: an init container with `restartPolicy: Always`.
    sidecar: bool,
    state: Mutex<State>,
}

/// A running pod.
pub struct PodRun {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub host: u8,
    stopping: AtomicBool,
    stop_started: AtomicBool,
    containers: Mutex<Vec<Arc<Run>>>,
    /// The pod's `/etc/hosts` (bind-mounted into each container, rewritten in place).
    hosts_file: PathBuf,
    dir: PathBuf,
    last_hosts: Mutex<String>,
    last_nat: Mutex<String>,
    netns_ready: AtomicBool,
}

impl PodRun {
    pub fn new(agent: &Agent, pod: &Pod, host: u8) -> PodRun {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let dir = agent.work_dir.join("pods").join(&uid);
        PodRun {
            name: pod.metadata.name.clone().unwrap_or_default(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            uid,
            host,
            stopping: AtomicBool::new(false),
            stop_started: AtomicBool::new(false),
            containers: Mutex::new(Vec::new()),
            hosts_file: dir.join("hosts"),
            dir,
            last_hosts: Mutex::new(String::new()),
            last_nat: Mutex::new(String::new()),
            netns_ready: AtomicBool::new(false),
        }
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Rewrites the pod's `/etc/hosts` and NAT table when they changed.
    pub fn apply_view(&self, agent: &Agent, hosts: &str, nat: &str) {
        if !self.netns_ready.load(Ordering::SeqCst) || self.stopping() {
            return;
        }
        let mut last = self.last_hosts.lock().unwrap_or_else(|e| e.into_inner());
        if *last != hosts {
            // In place (not a rename): each container bind-mounted this very inode.
            match std::fs::write(&self.hosts_file, hosts) {
                Ok(()) => *last = hosts.to_string(),
                Err(e) => eprintln!("pod {}: write hosts: {e}", self.name),
            }
        }
        let mut last = self.last_nat.lock().unwrap_or_else(|e| e.into_inner());
        if *last != nat {
            let ns = agent.bridge.netns(self.host);
            match crate::net::run_with_input("ip", &["netns", "exec", &ns, "iptables-restore"], nat)
            {
                Ok(()) => *last = nat.to_string(),
                Err(e) => eprintln!("pod {}: iptables-restore: {e:#}", self.name),
            }
        }
    }

    /// Stops every process (SIGTERM, SIGKILL after `grace`), then removes the namespace.
    pub async fn stop(&self, agent: &Agent, grace: Duration) {
        self.stopping.store(true, Ordering::SeqCst);
        if self.stop_started.swap(true, Ordering::SeqCst) {
            return;
        }
        let runs = self
            .containers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        signal_all(&runs, libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && !all_done(&runs) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !all_done(&runs) {
            eprintln!(
                "pod {}: still running {grace:?} after SIGTERM: SIGKILL",
                self.name
            );
            signal_all(&runs, libc::SIGKILL);
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && !all_done(&runs) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        agent.bridge.remove_pod(self.host);
        let _ = std::fs::remove_dir_all(&self.dir);
        eprintln!("pod {} ({}) stopped", self.name, self.uid);
    }
}

fn signal_all(runs: &[Arc<Run>], signal: i32) {
    for run in runs {
        if let Some(pid) = run.state.lock().unwrap_or_else(|e| e.into_inner()).pid {
            // SAFETY: a signal to the process group the supervisor made for this container.
            unsafe { libc::kill(-pid, signal) };
        }
    }
}

fn all_done(runs: &[Arc<Run>]) -> bool {
    runs.iter()
        .all(|r| r.state.lock().unwrap_or_else(|e| e.into_inner()).done)
}

/// Runs `pod` until it is stopped: namespace, volumes, containers, probes, status.
pub async fn run_pod(agent: Arc<Agent>, pod: Pod, me: Arc<PodRun>) {
    if let Err(e) = run_pod_inner(&agent, &pod, &me).await {
        eprintln!("pod {}: {e:#}", me.name);
        let _ = patch_status(
            &agent,
            &me,
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "AgentError", "message": format!("{e:#}")}]}),
        )
        .await;
    }
}

async fn run_pod_inner(agent: &Arc<Agent>, pod: &Pod, me: &Arc<PodRun>) -> Result<()> {
    let spec = pod.spec.clone().context("pod without spec")?;
    let ip = agent.bridge.pod_ip(me.host).to_string();
    tokio::task::block_in_place(|| agent.bridge.add_pod(me.host))
        .with_context(|| format!("network namespace for {ip}"))?;
    std::fs::create_dir_all(me.dir.join("volumes"))?;
    std::fs::write(&me.hosts_file, "127.0.0.1 localhost\n")?;
    me.netns_ready.store(true, Ordering::SeqCst);
    let started = now();
    patch_status(
        agent,
        me,
        json!({"phase": "Pending", "podIP": ip, "podIPs": [{"ip": ip}],
               "hostIP": agent.bridge.gateway.to_string(),
               "hostIPs": [{"ip": agent.bridge.gateway.to_string()}], "startTime": started}),
    )
    .await?;
    eprintln!("pod {} ({}) at {ip}", me.name, me.uid);

    // Volumes: wait for what they need (a Secret not made yet) as a kubelet does.
    let deadline = Instant::now() + Duration::from_secs(300);
    let mounts = loop {
        if me.stopping() {
            return Ok(());
        }
        match volumes(agent, pod, &me.dir.join("volumes")).await {
            Ok(m) => break m,
            Err(e) if Instant::now() < deadline => {
                eprintln!("pod {}: volumes not ready: {e:#}", me.name);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e),
        }
    };

    let restart_policy = spec
        .restart_policy
        .clone()
        .unwrap_or_else(|| "Always".into());
    let mut runs = Vec::new();
    for c in spec.init_containers.iter().flatten() {
        runs.push(Arc::new(Run {
            sidecar: c.restart_policy.as_deref() == Some("Always"),
            spec: c.clone(),
            init: true,
            state: Mutex::default(),
        }));
    }
    for c in &spec.containers {
        runs.push(Arc::new(Run {
            spec: c.clone(),
            init: false,
            sidecar: false,
            state: Mutex::default(),
        }));
    }
    *me.containers.lock().unwrap_or_else(|e| e.into_inner()) = runs.clone();

    // A task reports status and runs probes from here on.
    let status_task = tokio::spawn(report(agent.clone(), pod.clone(), me.clone(), ip.clone()));
    for run in &runs {
        if me.stopping() {
            break;
        }
        let env = match env(agent, pod, &run.spec, &ip).await {
            Ok(env) => env,
            Err(e) => {
                run.state.lock().unwrap_or_else(|e| e.into_inner()).waiting =
                    Some(format!("CreateContainerConfigError: {e:#}"));
                run.state.lock().unwrap_or_else(|e| e.into_inner()).done = true;
                eprintln!("pod {} container {}: {e:#}", me.name, run.spec.name);
                continue;
            }
        };
        let argv = argv(agent, &run.spec, &env);
        let script = mount_script(&agent.bin_dir, pod, &run.spec, &mounts, &me.hosts_file);
        let ns = agent.bridge.netns(me.host);
        let log = agent
            .work_dir
            .join("logs")
            .join(format!("{}_{}.log", me.name, run.spec.name));
        let pidfile = agent
            .work_dir
            .join("pids")
            .join(format!("{}_{}", me.name, run.spec.name));
        let policy = if run.sidecar {
            "Always".to_string()
        } else if run.init {
            // Init containers run to success; failures restart unless the pod's policy is Never.
            if restart_policy == "Never" {
                "Never"
            } else {
                "OnFailure"
            }
            .to_string()
        } else {
            restart_policy.clone()
        };
        let (run2, me2) = (run.clone(), me.clone());
        std::thread::spawn(move || {
            supervise(
                &run2, &me2, &ns, &script, &argv, &env, &log, &pidfile, &policy,
            )
        });
        // An init container must finish (a sidecar only start) before the next one starts.
        if run.init {
            let deadline = Instant::now() + Duration::from_secs(300);
            loop {
                let (go, stuck) = {
                    let s = run.state.lock().unwrap_or_else(|e| e.into_inner());
                    let go = if run.sidecar {
                        s.pid.is_some()
                    } else {
                        s.completed
                    };
                    (go, s.done && !s.completed)
                };
                if go || me.stopping() {
                    break;
                }
                if stuck || Instant::now() > deadline {
                    bail!("init container {} did not complete", run.spec.name);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let _ = status_task.await;
    Ok(())
}

/// The container's command line: a Baton image runs its command from the build (found on the
/// PATH the agent gives it, the build directory first); any other image a placeholder.
fn argv(agent: &Agent, c: &Container, env: &[(String, String)]) -> Vec<String> {
    let baton = c.image.as_deref().unwrap_or_default().contains("baton");
    if !baton {
        return vec!["sleep".into(), "infinity".into()];
    }
    let vars: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut argv: Vec<String> = match &c.command {
        Some(cmd) if !cmd.is_empty() => cmd.clone(),
        // The image's CMD (Dockerfile).
        _ => vec!["baton-operator".into(), "run".into()],
    };
    if c.command.as_ref().is_none_or(|c| c.is_empty()) && c.args.is_some() {
        argv.truncate(1);
    }
    argv.extend(c.args.iter().flatten().cloned());
    let _ = agent;
    argv.iter().map(|a| expand(a, &vars)).collect()
}

/// `$(VAR)` references as Kubernetes expands them (`$$` is a literal `$`).
fn expand(s: &str, vars: &BTreeMap<&str, &str>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some(value) = vars.get(&inner[..end])
        {
            out.push_str(value);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Where a container's volume sources are staged (a tmpfs in its own mount namespace).
const STAGE: &str = "/run/baton-node-agent-stage";

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The shell run inside the container's new mount and UTS namespaces before its program: the
/// hostname, each volume bind-mounted at its mountPath (parents first), `/etc/hosts`.
fn mount_script(
    bin_dir: &Path,
    pod: &Pod,
    c: &Container,
    volumes: &BTreeMap<String, PathBuf>,
    hosts: &Path,
) -> String {
    let hostname = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    // Every source is bind-mounted into a staging directory first: a mountPath may hide the
    // agent's own directory (a volume at /tmp when the agent works in /tmp).
    // The build directory too, at STAGE/bin (first on the container's PATH): a volume at /tmp
    // would hide a checkout under /tmp.
    let mut script = format!(
        "set -e\nhostname {}\nstage={STAGE}\nmkdir -p $stage\nmount -t tmpfs none $stage\n\
         mkdir $stage/bin\nmount --bind {} $stage/bin\n",
        quote(&hostname),
        quote(&bin_dir.to_string_lossy())
    );
    let mut mounts: Vec<_> = c.volume_mounts.iter().flatten().collect();
    mounts.sort_by_key(|m| m.mount_path.len());
    let mut staged = String::new();
    for (i, m) in mounts.into_iter().enumerate() {
        let Some(source) = volumes.get(&m.name) else {
            continue;
        };
        let source = match &m.sub_path {
            Some(sub) if !sub.is_empty() => source.join(sub),
            _ => source.clone(),
        };
        let target = quote(&m.mount_path);
        let is_dir = source.is_dir();
        let source = quote(&source.to_string_lossy());
        if is_dir {
            script += &format!("mkdir $stage/{i}\n");
            staged += &format!("mkdir -p {target}\n");
        } else {
            script += &format!(": > $stage/{i}\n");
            staged +=
                &format!("mkdir -p \"$(dirname {target})\"; [ -e {target} ] || : > {target}\n");
        }
        script += &format!("mount --bind {source} $stage/{i}\n");
        staged += &format!("mount --bind $stage/{i} {target}\n");
        if m.read_only == Some(true) {
            staged += &format!("mount -o remount,bind,ro {target}\n");
        }
    }
    script += &format!(
        ": > $stage/hosts\nmount --bind {} $stage/hosts\n",
        quote(&hosts.to_string_lossy())
    );
    script += &staged;
    script += "mount --bind $stage/hosts /etc/hosts\n";
    let dir = c.working_dir.clone().unwrap_or_else(|| "/".into());
    script += &format!("cd {}\nexec \"$@\"\n", quote(&dir));
    script
}

/// Runs one container until the pod stops: restarts it per `policy` (`Always`, `OnFailure`,
/// `Never`), one second apart (a kubelet backs off from 10 s; tests need not wait that long).
#[allow(clippy::too_many_arguments)]
fn supervise(
    run: &Run,
    pod: &PodRun,
    netns: &str,
    script: &str,
    argv: &[String],
    env: &[(String, String)],
    log: &Path,
    pidfile: &Path,
    policy: &str,
) {
    loop {
        if pod.stopping() {
            break;
        }
        let spawned = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .and_then(|out| {
                let err = out.try_clone()?;
                let mut cmd = Command::new("/usr/bin/nsenter");
                cmd.arg(format!("--net=/run/netns/{netns}"))
                    .args([
                        "--",
                        "/usr/bin/unshare",
                        "--mount",
                        "--uts",
                        "--propagation",
                    ])
                    .args(["private", "--", "/bin/sh", "-c", script, "container"])
                    .args(argv)
                    .env_clear()
                    .envs(env.iter().map(|(k, v)| (k, v)))
                    .stdin(Stdio::null())
                    .stdout(out)
                    .stderr(err)
                    .process_group(0);
                // SAFETY: only async-signal-safe calls between fork and exec. The container
                // dies with this supervisor thread (so with the agent, however it ends).
                unsafe {
                    cmd.pre_exec(|| {
                        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                        Ok(())
                    });
                }
                cmd.spawn()
            });
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let mut s = run.state.lock().unwrap_or_else(|e| e.into_inner());
                s.waiting = Some(format!("RunContainerError: {e}"));
                drop(s);
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        let pid = child.id() as i32;
        let started = now();
        let _ = std::fs::write(pidfile, pid.to_string());
        {
            let mut s = run.state.lock().unwrap_or_else(|e| e.into_inner());
            s.pid = Some(pid);
            s.started_at = Some(started.clone());
            s.waiting = None;
        }
        let code = match child.wait() {
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt as _;
                status.code().unwrap_or(128 + status.signal().unwrap_or(0))
            }
            Err(_) => 255,
        };
        // The group: what the program left behind goes with it.
        // SAFETY: signals the process group made for this container.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = std::fs::remove_file(pidfile);
        let mut s = run.state.lock().unwrap_or_else(|e| e.into_inner());
        s.pid = None;
        s.ready = false;
        s.last_exit = Some((code, started, now()));
        eprintln!("pod {} container {} exited {code}", pod.name, run.spec.name);
        if pod.stopping() {
            break;
        }
        let again = match policy {
            "Always" => true,
            "OnFailure" => code != 0,
            _ => false,
        };
        if !again {
            s.completed = code == 0;
            break;
        }
        s.restart_count += 1;
        s.waiting = Some("CrashLoopBackOff".into());
        drop(s);
        std::thread::sleep(Duration::from_secs(1));
    }
    run.state.lock().unwrap_or_else(|e| e.into_inner()).done = true;
}

/// Probes and status, every second, until the pod stops.
async fn report(agent: Arc<Agent>, pod: Pod, me: Arc<PodRun>, ip: String) {
    let mut last_sent = Value::Null;
    let mut next_probe: BTreeMap<String, Instant> = BTreeMap::new();
    let mut failures: BTreeMap<String, i32> = BTreeMap::new();
    let mut next_sync = Instant::now() + VOLUME_SYNC;
    let runs = me
        .containers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    while !me.stopping() {
        for run in &runs {
            let pid = run.state.lock().unwrap_or_else(|e| e.into_inner()).pid;
            let name = &run.spec.name;
            let Some(pid) = pid else {
                // Not running: a restart probes afresh.
                for kind in ["ready", "live"] {
                    next_probe.remove(&format!("{kind}:{name}"));
                    failures.remove(&format!("{kind}:{name}"));
                }
                continue;
            };
            if run.spec.readiness_probe.is_none() {
                run.state.lock().unwrap_or_else(|e| e.into_inner()).ready = true;
            }
            for (kind, probe) in [
                ("ready", run.spec.readiness_probe.as_ref()),
                ("live", run.spec.liveness_probe.as_ref()),
            ] {
                let Some(probe) = probe else {
                    continue;
                };
                let key = format!("{kind}:{name}");
                let due =
                    next_probe.entry(key.clone()).or_insert_with(|| {
                        Instant::now()
                            + Duration::from_secs(
                                probe.initial_delay_seconds.unwrap_or(0).max(0) as u64
                            )
                    });
                if Instant::now() < *due {
                    continue;
                }
                let period = probe.period_seconds.unwrap_or(10).max(1) as u64;
                *due = Instant::now() + Duration::from_secs(period);
                let ok = probe_once(&agent, &run.spec, probe, &ip, Some(pid)).await;
                let fails = failures.entry(key).or_default();
                *fails = if ok { 0 } else { *fails + 1 };
                let failed = *fails >= probe.failure_threshold.unwrap_or(3);
                match kind {
                    "ready" if ok => {
                        run.state.lock().unwrap_or_else(|e| e.into_inner()).ready = true
                    }
                    "ready" if failed => {
                        run.state.lock().unwrap_or_else(|e| e.into_inner()).ready = false
                    }
                    "live" if failed => {
                        // As a kubelet: the container is killed and restarted by its policy.
                        eprintln!(
                            "pod {} container {name}: liveness probe failed: killed",
                            me.name
                        );
                        *fails = 0;
                        // SAFETY: signals the process group made for this container.
                        unsafe { libc::kill(-pid, libc::SIGKILL) };
                    }
                    _ => {}
                }
            }
        }
        let status = status(&pod, &runs, &ip);
        if status != last_sent {
            match patch_status(&agent, &me, status.clone()).await {
                Ok(()) => last_sent = status,
                Err(e) => eprintln!("pod {}: status: {e:#}", me.name),
            }
        }
        // As a kubelet syncs them: Secret and ConfigMap volumes follow their objects (the
        // members re-read a renewed certificate without a restart).
        if Instant::now() >= next_sync {
            next_sync = Instant::now() + VOLUME_SYNC;
            for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
                if v.secret.is_some() || v.config_map.is_some() {
                    let dir = me.dir.join("volumes");
                    if let Err(e) = volume(&agent, &pod, v, &dir).await {
                        eprintln!("pod {}: refresh volume {}: {e:#}", me.name, v.name);
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// How often Secret and ConfigMap volumes of a running pod are brought up to date.
const VOLUME_SYNC: Duration = Duration::from_secs(10);

async fn probe_once(
    agent: &Agent,
    c: &Container,
    probe: &Probe,
    ip: &str,
    pid: Option<i32>,
) -> bool {
    let timeout = probe.timeout_seconds.unwrap_or(1).max(1) as u64;
    let port_of = |port: &IntOrString| -> Option<i32> {
        match port {
            IntOrString::Int(p) => Some(*p),
            IntOrString::String(name) => c
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name))
                .map(|p| p.container_port),
        }
    };
    if let Some(http) = &probe.http_get {
        let Some(port) = port_of(&http.port) else {
            return false;
        };
        let scheme = http.scheme.as_deref().unwrap_or("HTTP").to_lowercase();
        let url = format!(
            "{scheme}://{}:{port}{}",
            http.host.as_deref().unwrap_or(ip),
            http.path.as_deref().unwrap_or("/")
        );
        let out = tokio::task::block_in_place(|| {
            Command::new("curl")
                .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", "--max-time"])
                .arg(timeout.to_string())
                .arg(&url)
                .output()
        });
        let code: u16 = out
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(0);
        return (200..400).contains(&code);
    }
    if let Some(tcp) = &probe.tcp_socket {
        let Some(port) = port_of(&tcp.port) else {
            return false;
        };
        let addr = format!("{}:{port}", tcp.host.as_deref().unwrap_or(ip));
        return matches!(
            tokio::time::timeout(
                Duration::from_secs(timeout),
                tokio::net::TcpStream::connect(addr)
            )
            .await,
            Ok(Ok(_))
        );
    }
    if let (Some(exec), Some(pid)) = (&probe.exec, pid) {
        let _ = agent;
        let status = tokio::task::block_in_place(|| {
            Command::new("/usr/bin/nsenter")
                .args(["-t", &pid.to_string(), "--net", "--mount", "--uts", "--"])
                .args(exec.command.iter().flatten())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
        });
        return status.is_ok_and(|s| s.success());
    }
    false
}

fn container_status(run: &Run) -> Value {
    let s = run.state.lock().unwrap_or_else(|e| e.into_inner());
    let state = match (&s.pid, &s.last_exit, &s.waiting) {
        (Some(pid), _, _) => (
            json!({"running": {"startedAt": s.started_at}}),
            format!("baton-agent://{pid}"),
        ),
        (None, Some((code, started, finished)), None) => (
            json!({"terminated": {"exitCode": code, "startedAt": started, "finishedAt": finished,
                   "reason": if *code == 0 { "Completed" } else { "Error" }}}),
            String::new(),
        ),
        (None, _, waiting) => (
            json!({"waiting": {"reason": waiting.clone().unwrap_or_else(|| "ContainerCreating".into())}}),
            String::new(),
        ),
    };
    let mut status = json!({
        "name": run.spec.name,
        "image": run.spec.image,
        "imageID": "",
        "ready": s.ready && s.pid.is_some(),
        "started": s.pid.is_some(),
        "restartCount": s.restart_count,
        "state": state.0,
    });
    if !state.1.is_empty() {
        status["containerID"] = json!(state.1);
    }
    if let (Some((code, started, finished)), Some(_)) = (&s.last_exit, &s.pid) {
        status["lastState"] = json!({"terminated": {"exitCode": code, "startedAt": started,
            "finishedAt": finished, "reason": if *code == 0 { "Completed" } else { "Error" }}});
    }
    status
}

fn status(pod: &Pod, runs: &[Arc<Run>], ip: &str) -> Value {
    let inits: Vec<_> = runs.iter().filter(|r| r.init).collect();
    let mains: Vec<_> = runs.iter().filter(|r| !r.init).collect();
    let initialized = inits.iter().all(|r| {
        let s = r.state.lock().unwrap_or_else(|e| e.into_inner());
        if r.sidecar {
            s.pid.is_some()
        } else {
            s.completed
        }
    });
    let ready_of = |r: &Arc<Run>| {
        let s = r.state.lock().unwrap_or_else(|e| e.into_inner());
        s.ready && s.pid.is_some()
    };
    let ready = initialized
        && mains.iter().all(|r| ready_of(r))
        && inits.iter().filter(|r| r.sidecar).all(|r| ready_of(r));
    let running = initialized
        && mains.iter().all(|r| {
            r.state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .started_at
                .is_some()
        });
    let all_done = mains
        .iter()
        .all(|r| r.state.lock().unwrap_or_else(|e| e.into_inner()).done);
    let phase = if all_done && !mains.is_empty() {
        let ok = mains
            .iter()
            .all(|r| r.state.lock().unwrap_or_else(|e| e.into_inner()).completed);
        if ok { "Succeeded" } else { "Failed" }
    } else if running {
        "Running"
    } else {
        "Pending"
    };
    let cond =
        |kind: &str, ok: bool| json!({"type": kind, "status": if ok { "True" } else { "False" }});
    let _ = pod;
    json!({
        "phase": phase,
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [
            cond("PodReadyToStartContainers", true),
            cond("PodScheduled", true),
            cond("Initialized", initialized),
            cond("ContainersReady", ready),
            cond("Ready", ready),
        ],
        "initContainerStatuses": inits.iter().map(|r| container_status(r)).collect::<Vec<_>>(),
        "containerStatuses": mains.iter().map(|r| container_status(r)).collect::<Vec<_>>(),
    })
}

/// Writes `status` on the pod this run is for, and never on a newer pod of the same name (a
/// StatefulSet member made again): the patch carries the run's uid, which the API server refuses
/// to change, so a late report of a deleted pod cannot mark its successor Ready.
pub async fn patch_status(agent: &Agent, me: &PodRun, status: Value) -> Result<()> {
    Api::<Pod>::namespaced(agent.client.clone(), &me.namespace)
        .patch_status(
            &me.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"uid": me.uid}, "status": status})),
        )
        .await
        .with_context(|| format!("patch status of pod {} ({})", me.name, me.uid))?;
    Ok(())
}

/// Each volume of the pod as a directory under `dir` (name → path).
async fn volumes(agent: &Agent, pod: &Pod, dir: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let mut out = BTreeMap::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let path = volume(agent, pod, v, dir)
            .await
            .with_context(|| format!("volume {}", v.name))?;
        out.insert(v.name.clone(), path);
    }
    Ok(out)
}

fn write_file(dir: &Path, rel: &str, bytes: &[u8]) -> Result<()> {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension("agent-tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, &path)?;
    Ok(())
}

/// Files of a Secret's or ConfigMap's keys (`items` picks and renames).
fn key_files(
    data: BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<k8s_openapi::api::core::v1::KeyToPath>>,
) -> Result<Vec<(String, Vec<u8>)>> {
    match items {
        None => Ok(data.into_iter().collect()),
        Some(items) => items
            .iter()
            .map(|i| {
                data.get(&i.key)
                    .map(|b| (i.path.clone(), b.clone()))
                    .ok_or_else(|| anyhow!("no key {}", i.key))
            })
            .collect(),
    }
}

async fn secret_data(
    agent: &Agent,
    ns: &str,
    name: &str,
    optional: bool,
) -> Result<BTreeMap<String, Vec<u8>>> {
    let api = Api::<Secret>::namespaced(agent.client.clone(), ns);
    match api.get_opt(name).await? {
        Some(s) => Ok(s
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect()),
        None if optional => Ok(BTreeMap::new()),
        None => bail!("Secret {name} not found"),
    }
}

async fn config_map_data(
    agent: &Agent,
    ns: &str,
    name: &str,
    optional: bool,
) -> Result<BTreeMap<String, Vec<u8>>> {
    let api = Api::<ConfigMap>::namespaced(agent.client.clone(), ns);
    match api.get_opt(name).await? {
        Some(c) => {
            let mut data: BTreeMap<String, Vec<u8>> = c
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect();
            data.extend(
                c.binary_data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0)),
            );
            Ok(data)
        }
        None if optional => Ok(BTreeMap::new()),
        None => bail!("ConfigMap {name} not found"),
    }
}

async fn volume(agent: &Agent, pod: &Pod, v: &Volume, dir: &Path) -> Result<PathBuf> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    if let Some(claim) = &v.persistent_volume_claim {
        // A directory per claim object (its uid), in the agent's directory: it outlives the pod
        // as a volume would, and a claim deleted and made again starts empty, as a new volume.
        let api = Api::<PersistentVolumeClaim>::namespaced(agent.client.clone(), ns);
        let pvc = api
            .get_opt(&claim.claim_name)
            .await?
            .with_context(|| format!("PersistentVolumeClaim {} not found", claim.claim_name))?;
        let uid = pvc.metadata.uid.clone().unwrap_or_default();
        let path = agent
            .work_dir
            .join("pvc")
            .join(ns)
            .join(format!("{}-{uid}", claim.claim_name));
        std::fs::create_dir_all(&path)?;
        // No provisioner runs here: the claim is Bound to this directory, with what it asked.
        if pvc.status.and_then(|s| s.phase).as_deref() != Some("Bound") {
            let capacity = pvc
                .spec
                .and_then(|s| s.resources)
                .and_then(|r| r.requests)
                .and_then(|r| r.get("storage").cloned());
            api.patch_status(
                &claim.claim_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Bound",
                    "accessModes": ["ReadWriteOnce"], "capacity": {"storage": capacity}}})),
            )
            .await
            .with_context(|| format!("mark claim {} Bound", claim.claim_name))?;
        }
        return Ok(path);
    }
    if let Some(host) = &v.host_path {
        return Ok(PathBuf::from(&host.path));
    }
    let path = dir.join(&v.name);
    std::fs::create_dir_all(&path)?;
    if v.empty_dir.is_some() {
        return Ok(path);
    }
    let mut files = Vec::new();
    if let Some(s) = &v.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let data = secret_data(agent, ns, &name, s.optional == Some(true)).await?;
        files = key_files(data, s.items.as_ref())?;
    } else if let Some(c) = &v.config_map {
        let data = config_map_data(agent, ns, &c.name, c.optional == Some(true)).await?;
        files = key_files(data, c.items.as_ref())?;
    } else if let Some(d) = &v.downward_api {
        for item in d.items.iter().flatten() {
            if let Some(f) = &item.field_ref {
                files.push((item.path.clone(), field(pod, f, "")?.into_bytes()));
            }
        }
    } else if let Some(p) = &v.projected {
        for source in p.sources.iter().flatten() {
            if let Some(t) = &source.service_account_token {
                let token =
                    pod_token(agent, pod, t.audience.as_deref(), t.expiration_seconds).await?;
                files.push((t.path.clone(), token.into_bytes()));
            }
            if let Some(c) = &source.config_map {
                let data = config_map_data(agent, ns, &c.name, c.optional == Some(true)).await?;
                files.extend(key_files(data, c.items.as_ref())?);
            }
            if let Some(s) = &source.secret {
                let data = secret_data(agent, ns, &s.name, s.optional == Some(true)).await?;
                files.extend(key_files(data, s.items.as_ref())?);
            }
            if let Some(d) = &source.downward_api {
                for item in d.items.iter().flatten() {
                    if let Some(f) = &item.field_ref {
                        files.push((item.path.clone(), field(pod, f, "")?.into_bytes()));
                    }
                }
            }
        }
    } else {
        bail!("a volume type the agent does not know");
    }
    for (rel, bytes) in files {
        write_file(&path, &rel, &bytes)?;
    }
    Ok(path)
}

/// A token of the pod's ServiceAccount bound to the pod, as the kubelet requests it.
async fn pod_token(
    agent: &Agent,
    pod: &Pod,
    audience: Option<&str>,
    seconds: Option<i64>,
) -> Result<String> {
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audience.map(|a| vec![a.to_string()]).unwrap_or_default(),
            expiration_seconds: Some(seconds.unwrap_or(3607)),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        ..TokenRequest::default()
    };
    let answer = Api::<ServiceAccount>::namespaced(
        agent.client.clone(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
    )
    .create_token_request(&sa, &PostParams::default(), &request)
    .await
    .with_context(|| format!("TokenRequest for ServiceAccount {sa}"))?;
    Ok(answer.status.context("TokenRequest without status")?.token)
}

/// A downward-API field of the pod.
fn field(pod: &Pod, f: &ObjectFieldSelector, ip: &str) -> Result<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let path = f.field_path.as_str();
    let from_map = |map: &Option<BTreeMap<String, String>>, prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|k| k.strip_suffix("']"))
            .and_then(|k| map.as_ref()?.get(k).cloned())
            .unwrap_or_default()
    };
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" => ip.to_string(),
        "status.hostIP" | "status.hostIPs" => ip
            .rsplit_once('.')
            .map(|(n, _)| format!("{n}.1"))
            .unwrap_or_default(),
        p if p.starts_with("metadata.labels['") => from_map(&meta.labels, "metadata.labels['"),
        p if p.starts_with("metadata.annotations['") => {
            from_map(&meta.annotations, "metadata.annotations['")
        }
        other => bail!("fieldRef {other} is not supported by the agent"),
    })
}

/// The container's environment: what a kubelet sets (PATH with the build directory, staged at
/// `STAGE/bin`, first, the
/// `kubernetes` Service's variables, HOSTNAME), then `envFrom`, then `env` with `$(VAR)`.
async fn env(agent: &Agent, pod: &Pod, c: &Container, ip: &str) -> Result<Vec<(String, String)>> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut env: Vec<(String, String)> = vec![
        (
            "PATH".into(),
            format!("{STAGE}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        ),
        ("HOME".into(), "/root".into()),
        (
            "HOSTNAME".into(),
            pod.metadata.name.clone().unwrap_or_default(),
        ),
        (
            "KUBERNETES_SERVICE_HOST".into(),
            agent.kubernetes_ip.clone(),
        ),
        ("KUBERNETES_SERVICE_PORT".into(), "443".into()),
        ("KUBERNETES_SERVICE_PORT_HTTPS".into(), "443".into()),
        (
            "KUBERNETES_PORT".into(),
            format!("tcp://{}:443", agent.kubernetes_ip),
        ),
    ];
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
        env.retain(|(key, _)| *key != k);
        env.push((k, v));
    };
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data = if let Some(cm) = &from.config_map_ref {
            config_map_data(agent, ns, &cm.name, cm.optional == Some(true)).await?
        } else if let Some(s) = &from.secret_ref {
            secret_data(agent, ns, &s.name, s.optional == Some(true)).await?
        } else {
            BTreeMap::new()
        };
        for (k, v) in data {
            set(
                &mut env,
                format!("{prefix}{k}"),
                String::from_utf8_lossy(&v).into_owned(),
            );
        }
    }
    for EnvVar {
        name,
        value,
        value_from,
    } in c.env.iter().flatten()
    {
        let v = if let Some(source) = value_from {
            if let Some(f) = &source.field_ref {
                field(pod, f, ip)?
            } else if let Some(s) = &source.secret_key_ref {
                let data = secret_data(agent, ns, &s.name, s.optional == Some(true)).await?;
                match data.get(&s.key) {
                    Some(v) => String::from_utf8_lossy(v).into_owned(),
                    None if s.optional == Some(true) => continue,
                    None => bail!("Secret {} has no key {}", s.name, s.key),
                }
            } else if let Some(cm) = &source.config_map_key_ref {
                let data = config_map_data(agent, ns, &cm.name, cm.optional == Some(true)).await?;
                match data.get(&cm.key) {
                    Some(v) => String::from_utf8_lossy(v).into_owned(),
                    None if cm.optional == Some(true) => continue,
                    None => bail!("ConfigMap {} has no key {}", cm.name, cm.key),
                }
            } else {
                // resourceFieldRef: no limits are enforced here; a neutral 1.
                "1".into()
            }
        } else {
            let vars: BTreeMap<&str, &str> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            expand(value.as_deref().unwrap_or_default(), &vars)
        };
        set(&mut env, name.clone(), v);
    }
    Ok(env)
}
