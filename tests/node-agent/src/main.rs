//! `baton-node-agent`: a TEST HARNESS, not a product. It stands in for a kubelet (and for the
//! scheduler and kube-proxy, which the test control plane does not run either) so that Baton's
//! pods run for real against a real kube-apiserver ("Pods that run").
//!
//! One agent serves the namespaces it is given (tests run in parallel on one control plane,
//! each in namespaces of its own): it registers a Node, binds those namespaces' unscheduled pods
//! to it, and runs each bound pod as local processes:
//!
//! - a network namespace per pod, with a veth into the agent's bridge `bnaN` and an address of
//!   10.244.N.0/24, so every pod listens on 0.0.0.0 and the host (the API server, probes,
//!   tests) reaches pod IPs;
//! - per container a new mount and UTS namespace: each volume (Secret, ConfigMap, projected
//!   token / CA / downward API, emptyDir, a directory per PersistentVolumeClaim that outlives
//!   the pod) bind-mounted at its mountPath, and the pod's `/etc/hosts` naming the served
//!   namespaces' Services (their ClusterIP), headless Services (their ready endpoints) and pods
//!   (`HOSTNAME.SUBDOMAIN.NS.svc.cluster.local`; short names for the pod's own namespace);
//! - in each pod's namespace a NAT table sending every ClusterIP:port to a ready endpoint, and
//!   the `kubernetes` Service to the API server (through a forwarder on the bridge: the API
//!   server listens on loopback only);
//! - a container of a Baton image runs its command with the build directory first on PATH (so
//!   `baton-ensemble`, `baton-sidecar`, `baton-operator` are the built binaries); any other
//!   image runs `sleep infinity`;
//! - containers are restarted per restartPolicy (1 s apart), readiness and liveness probes
//!   (httpGet, tcpSocket, exec) run every periodSeconds (a failed liveness probe kills the
//!   container, SIGKILL at once), status is reported as a kubelet does, and a pod being deleted
//!   gets SIGTERM, SIGKILL after its grace period, and is then removed.
//!
//! Secret and ConfigMap volumes are brought up to date every 10 s, as a kubelet syncs them.
//!
//! Not done: startup probes, resource limits, security contexts (everything runs as root),
//! image pulls. Mount paths are created on the host if missing (the mounts themselves stay in
//! each container's namespace). A container's output goes to `WORK/logs/POD_CONTAINER.log`,
//! its pid to `WORK/pids/POD_CONTAINER`.
//!
//! Usage: `baton-node-agent --kubeconfig FILE --namespace NS[,NS...] --node NAME --bin-dir DIR
//! --work-dir DIR`. It prints `ready` once its Node is registered; SIGTERM stops every pod and
//! removes the Node, the bridge and the namespaces.

mod net;
mod pod;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

use crate::net::{Bridge, ServiceRoute};
use crate::pod::PodRun;

pub struct Agent {
    pub client: Client,
    pub namespaces: Vec<String>,
    pub node: String,
    pub bin_dir: PathBuf,
    pub work_dir: PathBuf,
    pub bridge: Bridge,
    /// The `kubernetes` Service's ClusterIP (what pods get as KUBERNETES_SERVICE_HOST).
    pub kubernetes_ip: String,
    /// Where on the bridge the forwarder to the API server listens.
    api_forward: String,
    pods: Mutex<HashMap<String, Arc<PodRun>>>,
}

struct Args {
    kubeconfig: PathBuf,
    namespaces: Vec<String>,
    node: String,
    bin_dir: PathBuf,
    work_dir: PathBuf,
}

fn args() -> Result<Args> {
    let mut map = BTreeMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        map.insert(flag, value);
    }
    let mut take = |flag: &str| map.remove(flag).with_context(|| format!("missing {flag}"));
    Ok(Args {
        kubeconfig: take("--kubeconfig")?.into(),
        namespaces: take("--namespace")?
            .split(',')
            .map(str::to_string)
            .collect(),
        node: take("--node")?,
        bin_dir: take("--bin-dir")?.into(),
        work_dir: take("--work-dir")?.into(),
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("baton-node-agent: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<()> {
    let args = args()?;
    let kubeconfig = Kubeconfig::read_from(&args.kubeconfig)?;
    let server = kubeconfig
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.clone())
        .context("kubeconfig without a server")?;
    let api_addr = server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = Client::try_from(config)?;
    for dir in ["logs", "pids", "pods", "pvc"] {
        std::fs::create_dir_all(args.work_dir.join(dir))?;
    }
    let bridge = Bridge::create()?;
    let kubernetes_ip = Api::<Service>::namespaced(client.clone(), "default")
        .get("kubernetes")
        .await
        .context("get Service default/kubernetes")?
        .spec
        .and_then(|s| s.cluster_ip)
        .context("the kubernetes Service has no ClusterIP")?;
    let listener = tokio::net::TcpListener::bind((bridge.gateway, 0)).await?;
    let api_forward = listener.local_addr()?.to_string();
    tokio::spawn(forward(listener, api_addr));
    let agent = Arc::new(Agent {
        client,
        namespaces: args.namespaces,
        node: args.node,
        bin_dir: args.bin_dir,
        work_dir: args.work_dir,
        bridge,
        kubernetes_ip,
        api_forward,
        pods: Mutex::default(),
    });
    register_node(&agent).await?;
    eprintln!(
        "node {} for namespaces {:?} on {} ({}/24)",
        agent.node, agent.namespaces, agent.bridge.name, agent.bridge.gateway
    );
    println!("ready");

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        if let Err(e) = tick(&agent).await {
            eprintln!("tick: {e:#}");
        }
        tokio::select! {
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    eprintln!("stopping every pod");
    let runs: Vec<_> = agent
        .pods
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .cloned()
        .collect();
    let stops: Vec<_> = runs
        .into_iter()
        .map(|run| {
            let agent = agent.clone();
            tokio::spawn(async move { run.stop(&agent, Duration::from_secs(2)).await })
        })
        .collect();
    for stop in stops {
        let _ = stop.await;
    }
    // Their processes are gone: say so as a kubelet does (the final delete), or pods of a
    // deleted namespace would wait for a kubelet forever and keep the namespace Terminating.
    for ns in &agent.namespaces {
        let api = Api::<Pod>::namespaced(agent.client.clone(), ns);
        let Ok(pods) = api.list(&ListParams::default()).await else {
            continue;
        };
        for pod in pods.items {
            let on_me = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&agent.node);
            if let (true, Some(name)) = (on_me, pod.metadata.name.as_deref()) {
                let _ = api
                    .delete(
                        name,
                        &DeleteParams {
                            grace_period_seconds: Some(0),
                            ..DeleteParams::default()
                        },
                    )
                    .await;
            }
        }
    }
    let _ = Api::<Node>::all(agent.client.clone())
        .delete(&agent.node, &DeleteParams::default())
        .await;
    Ok(())
}

/// Copies connections on the bridge to the API server on loopback.
async fn forward(listener: tokio::net::TcpListener, to: String) {
    while let Ok((mut inbound, _)) = listener.accept().await {
        let to = to.clone();
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(&to).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

async fn register_node(agent: &Agent) -> Result<()> {
    let nodes = Api::<Node>::all(agent.client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": agent.node, "labels": {
            "kubernetes.io/hostname": agent.node, "kubernetes.io/os": "linux",
            "baton.dev/node-agent": "true"}},
    }))?;
    nodes.create(&PostParams::default(), &node).await?;
    let gateway = agent.bridge.gateway.to_string();
    nodes
        .patch_status(
            &agent.node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "addresses": [{"type": "InternalIP", "address": gateway},
                              {"type": "Hostname", "address": agent.node}],
                "capacity": {"cpu": "64", "memory": "256Gi", "pods": "250"},
                "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "250"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "AgentReady",
                                "message": "baton-node-agent (a test harness)"}],
            }})),
        )
        .await?;
    Ok(())
}

/// One pass: bind, start, stop, and refresh every pod's names and routes.
async fn tick(agent: &Arc<Agent>) -> Result<()> {
    let mut pods = Vec::new();
    for ns in &agent.namespaces {
        let api = Api::<Pod>::namespaced(agent.client.clone(), ns);
        pods.extend(api.list(&ListParams::default()).await?.items);
    }
    let mut seen = Vec::new();
    for pod in &pods {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let api = Api::<Pod>::namespaced(agent.client.clone(), &ns);
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let spec = pod.spec.as_ref();
        let node = spec.and_then(|s| s.node_name.as_deref());
        let deleting = pod.metadata.deletion_timestamp.is_some();
        seen.push(uid.clone());
        if node.is_none() && !deleting {
            bind(agent, &ns, &name, &uid).await?;
            continue;
        }
        if node != Some(agent.node.as_str()) {
            continue;
        }
        let existing = agent
            .pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&uid)
            .cloned();
        if deleting {
            let grace = pod
                .metadata
                .deletion_grace_period_seconds
                .or(spec.and_then(|s| s.termination_grace_period_seconds))
                .unwrap_or(30)
                .max(0) as u64;
            let (agent, api) = (agent.clone(), api.clone());
            tokio::spawn(async move {
                if let Some(run) = &existing {
                    if run.stopping() {
                        return; // already on its way
                    }
                    run.stop(&agent, Duration::from_secs(grace)).await;
                }
                // What a kubelet does once the containers are gone: the final delete.
                let params = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                if let Err(e) = api.delete(&name, &params).await {
                    eprintln!("pod {name}: final delete: {e}");
                }
                agent
                    .pods
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&uid);
            });
            continue;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if existing.is_none() && !matches!(phase, Some("Succeeded" | "Failed")) {
            let Some(host) = free_host(agent) else {
                bail!("no free address for pod {name}");
            };
            let run = Arc::new(PodRun::new(agent, pod, host));
            agent
                .pods
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(uid, run.clone());
            tokio::spawn(pod::run_pod(agent.clone(), pod.clone(), run));
        }
    }
    // Pods gone from the API (force-deleted, namespace deleted): kill what is left.
    let gone: Vec<_> = agent
        .pods
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(uid, _)| !seen.contains(uid))
        .map(|(uid, run)| (uid.clone(), run.clone()))
        .collect();
    for (uid, run) in gone {
        let agent = agent.clone();
        tokio::spawn(async move {
            run.stop(&agent, Duration::from_secs(2)).await;
            agent
                .pods
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&uid);
        });
    }
    refresh_view(agent, &pods).await
}

fn free_host(agent: &Agent) -> Option<u8> {
    let pods = agent.pods.lock().unwrap_or_else(|e| e.into_inner());
    (2..=254u8).find(|h| pods.values().all(|r| r.host != *h))
}

/// Binds the pod to this node: the agent is the namespace's scheduler too.
async fn bind(agent: &Agent, ns: &str, name: &str, uid: &str) -> Result<()> {
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": agent.node},
    });
    let api = Api::<Pod>::namespaced(agent.client.clone(), ns);
    match api
        .create_subresource::<_, serde_json::Value>(
            "binding",
            name,
            &PostParams::default(),
            &binding,
        )
        .await
    {
        Ok(_) => {
            eprintln!("bound pod {name}");
            Ok(())
        }
        // Bound meanwhile, or deleted: the next pass sees it.
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("bind pod {name}")),
    }
}

/// Recomputes each namespace's `/etc/hosts` and the NAT table and hands them to every pod.
async fn refresh_view(agent: &Agent, pods: &[Pod]) -> Result<()> {
    let mut services = Vec::new();
    let mut slices = Vec::new();
    for ns in &agent.namespaces {
        services.extend(
            Api::<Service>::namespaced(agent.client.clone(), ns)
                .list(&ListParams::default())
                .await?
                .items,
        );
        slices.extend(
            Api::<EndpointSlice>::namespaced(agent.client.clone(), ns)
                .list(&ListParams::default())
                .await?
                .items,
        );
    }
    // (address, name in namespace NS without the cluster suffix, NS)
    let mut entries: Vec<(String, String, String)> = Vec::new();
    let mut routes = vec![ServiceRoute {
        cluster_ip: agent.kubernetes_ip.clone(),
        port: 443,
        endpoints: agent
            .api_forward
            .rsplit_once(':')
            .map(|(ip, port)| vec![(ip.to_string(), port.parse().unwrap_or(0))])
            .unwrap_or_default(),
    }];
    entries.push((
        agent.kubernetes_ip.clone(),
        "kubernetes".into(),
        "default".into(),
    ));
    for pod in pods {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let (Some(ip), Some(spec)) = (
            pod.status.as_ref().and_then(|s| s.pod_ip.clone()),
            pod.spec.as_ref(),
        ) else {
            continue;
        };
        if let (Some(host), Some(sub)) = (&spec.hostname, &spec.subdomain) {
            entries.push((ip, format!("{host}.{sub}"), ns));
        }
    }
    for svc in &services {
        let ns = svc.metadata.namespace.clone().unwrap_or_default();
        let (Some(name), Some(spec)) = (svc.metadata.name.as_deref(), svc.spec.as_ref()) else {
            continue;
        };
        let own: Vec<&EndpointSlice> = slices
            .iter()
            .filter(|s| {
                s.metadata.namespace.as_deref() == Some(ns.as_str())
                    && s.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("kubernetes.io/service-name"))
                        .map(String::as_str)
                        == Some(name)
            })
            .collect();
        let publish_all = spec.publish_not_ready_addresses == Some(true);
        let ready_ips = |slice: &EndpointSlice| -> Vec<String> {
            slice
                .endpoints
                .iter()
                .filter(|e| {
                    publish_all || e.conditions.as_ref().and_then(|c| c.ready) != Some(false)
                })
                .flat_map(|e| e.addresses.clone())
                .collect()
        };
        match spec.cluster_ip.as_deref() {
            Some("None") | None => {
                for slice in &own {
                    for ip in ready_ips(slice) {
                        entries.push((ip, name.to_string(), ns.clone()));
                    }
                }
            }
            Some(cluster_ip) => {
                entries.push((cluster_ip.to_string(), name.to_string(), ns.clone()));
                for port in spec.ports.iter().flatten() {
                    let mut endpoints = Vec::new();
                    for slice in &own {
                        let Some(target) = slice
                            .ports
                            .iter()
                            .flatten()
                            .find(|p| p.name == port.name)
                            .and_then(|p| p.port)
                        else {
                            continue;
                        };
                        for ip in ready_ips(slice) {
                            endpoints.push((ip, target));
                        }
                    }
                    routes.push(ServiceRoute {
                        cluster_ip: cluster_ip.to_string(),
                        port: port.port,
                        endpoints,
                    });
                }
            }
        }
    }
    let nat = net::nat_table(&routes);
    // A pod's /etc/hosts: every name fully qualified, and the short forms of its own namespace.
    let hosts_for = |own: &str| {
        let mut hosts = String::from("127.0.0.1 localhost\n");
        for (ip, name, ns) in &entries {
            let _ = write!(
                hosts,
                "{ip} {name}.{ns}.svc.cluster.local {name}.{ns}.svc {name}.{ns}"
            );
            if ns == own {
                let _ = write!(hosts, " {name}");
            }
            hosts.push('\n');
        }
        hosts
    };
    let runs: Vec<_> = agent
        .pods
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .cloned()
        .collect();
    for run in runs {
        let hosts = hosts_for(&run.namespace);
        tokio::task::block_in_place(|| run.apply_view(agent, &hosts, &nat));
    }
    Ok(())
}
