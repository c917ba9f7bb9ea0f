//! The agent's network: a bridge with a /24 of its own, one network namespace per pod (a veth
//! into the bridge), and per pod an `/etc/hosts` and a NAT table standing in for cluster DNS and
//! kube-proxy.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// Runs a command; fails with its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("run {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Runs a command with `input` on stdin.
pub fn run_with_input(program: &str, args: &[&str], input: &str) -> Result<()> {
    use std::io::Write as _;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("run {program}"))?;
    child
        .stdin
        .take()
        .context("no stdin")?
        .write_all(input.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The agent's bridge `bnaN` with 10.244.N.1/24; pods get 10.244.N.2 and up. Parallel agents
/// (one per test) each take the first free N; a bridge whose agent died is reclaimed.
pub struct Bridge {
    pub index: u8,
    pub name: String,
    pub gateway: Ipv4Addr,
}

impl Bridge {
    pub fn create() -> Result<Bridge> {
        for index in 1..=250u8 {
            let name = format!("bna{index}");
            if let Err(e) = run("ip", &["link", "add", &name, "type", "bridge"]) {
                if !std::path::Path::new(&format!("/sys/class/net/{name}")).exists() {
                    // Not taken, so not allowed (not root?) or no ip: no use trying others.
                    return Err(e.context("make the agent's bridge (the agent needs root)"));
                }
                let alias = std::fs::read_to_string(format!("/sys/class/net/{name}/ifalias"))
                    .unwrap_or_default();
                let alive = alias
                    .trim()
                    .strip_prefix("baton-node-agent ")
                    .and_then(|pid| pid.parse::<i32>().ok())
                    // SAFETY: kill with signal 0 only checks that the process exists.
                    .is_some_and(|pid| unsafe { libc::kill(pid, 0) } == 0);
                if alive || !alias.starts_with("baton-node-agent") {
                    continue;
                }
                eprintln!("reclaiming {name} of a dead agent ({})", alias.trim());
                cleanup_index(index);
                if run("ip", &["link", "add", &name, "type", "bridge"]).is_err() {
                    continue;
                }
            }
            let gateway = Ipv4Addr::new(10, 244, index, 1);
            let alias = format!("baton-node-agent {}", std::process::id());
            run("ip", &["link", "set", &name, "alias", &alias])?;
            run(
                "ip",
                &["addr", "add", &format!("{gateway}/24"), "dev", &name],
            )?;
            run("ip", &["link", "set", &name, "up"])?;
            return Ok(Bridge {
                index,
                name,
                gateway,
            });
        }
        bail!("no free bridge bna1..bna250 (leftovers of dead agents are reclaimed; is ip usable?)")
    }

    /// The pod address for host number `host` (2..=254).
    pub fn pod_ip(&self, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 244, self.index, host)
    }

    pub fn netns(&self, host: u8) -> String {
        format!("bna{}-{host}", self.index)
    }

    /// Makes the pod's namespace: a veth pair, `eth0` inside with the pod's IP, a default route
    /// via the bridge, and loopback up.
    pub fn add_pod(&self, host: u8) -> Result<()> {
        let ns = self.netns(host);
        let veth = format!("vna{}-{host}", self.index);
        let peer = format!("vpa{}-{host}", self.index);
        let ip = self.pod_ip(host);
        // A leftover of an earlier pod with this address (the agent was killed mid-teardown).
        let _ = run("ip", &["netns", "del", &ns]);
        let _ = run("ip", &["link", "del", &veth]);
        run("ip", &["netns", "add", &ns])?;
        run(
            "ip",
            &["link", "add", &veth, "type", "veth", "peer", "name", &peer],
        )?;
        run("ip", &["link", "set", &peer, "netns", &ns])?;
        run("ip", &["link", "set", &veth, "master", &self.name, "up"])?;
        run("ip", &["-n", &ns, "link", "set", &peer, "name", "eth0"])?;
        run(
            "ip",
            &["-n", &ns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"],
        )?;
        run("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
        run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
        run(
            "ip",
            &[
                "-n",
                &ns,
                "route",
                "add",
                "default",
                "via",
                &self.gateway.to_string(),
            ],
        )?;
        Ok(())
    }

    /// Removes the pod's namespace (its veth goes with it).
    pub fn remove_pod(&self, host: u8) {
        let _ = run("ip", &["netns", "del", &self.netns(host)]);
        let _ = run("ip", &["link", "del", &format!("vna{}-{host}", self.index)]);
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        cleanup_index(self.index);
    }
}

/// Deletes bridge `bnaN` and every pod namespace and veth of it.
fn cleanup_index(index: u8) {
    let prefix = format!("bna{index}-");
    if let Ok(entries) = std::fs::read_dir("/run/netns") {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) {
                let _ = run("ip", &["netns", "del", &name]);
            }
        }
    }
    let veth_prefix = format!("vna{index}-");
    if let Ok(entries) = std::fs::read_dir("/sys/class/net") {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&veth_prefix) {
                let _ = run("ip", &["link", "del", &name]);
            }
        }
    }
    let _ = run("ip", &["link", "del", &format!("bna{index}")]);
}

/// One Service port's ready endpoints: what kube-proxy would balance `cluster_ip:port` over.
pub struct ServiceRoute {
    pub cluster_ip: String,
    pub port: i32,
    pub endpoints: Vec<(String, i32)>,
}

/// The pod's NAT table (`iptables-restore` input): each ClusterIP:port DNATed to its endpoints,
/// chosen at random as kube-proxy does.
pub fn nat_table(routes: &[ServiceRoute]) -> String {
    let mut table = String::from(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
         :POSTROUTING ACCEPT [0:0]\n",
    );
    for route in routes {
        let n = route.endpoints.len();
        for (i, (ip, port)) in route.endpoints.iter().enumerate() {
            let _ = write!(
                table,
                "-A OUTPUT -d {}/32 -p tcp -m tcp --dport {}",
                route.cluster_ip, route.port
            );
            if i + 1 < n {
                let _ = write!(
                    table,
                    " -m statistic --mode random --probability {:.5}",
                    1.0 / (n - i) as f64
                );
            }
            let _ = writeln!(table, " -j DNAT --to-destination {ip}:{port}");
        }
        if n == 0 {
            // No ready endpoint: refused at once, as kube-proxy's REJECT does.
            let _ = writeln!(
                table,
                "-A OUTPUT -d {}/32 -p tcp -m tcp --dport {} -j DNAT --to-destination 127.0.0.1:1",
                route.cluster_ip, route.port
            );
        }
    }
    table.push_str("COMMIT\n");
    table
}
