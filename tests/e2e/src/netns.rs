//! A private network for one test: a Linux bridge in the root namespace and one network
//! namespace per member, joined to the bridge by a veth pair, each with its own address on a
//! /24 of its own. A fault then hits one member's traffic alone (see `nemesis`). The test
//! process reaches every member through the bridge's address. Needs root.
//!
//! Names carry the test process's id, so tests run in parallel (nextest runs each in its own
//! process) never share one; everything is removed on drop (a panic included), and a later
//! test removes what a killed test process left behind.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, bail};

/// Every name this module makes starts so (interface names are at most 15 bytes).
const PREFIX: &str = "bf";
/// Second octet of the /24s handed out: 10.200.0.0/24 to 10.249.255.0/24.
const FIRST_OCTET2: u32 = 200;
const OCTET2_SPAN: u32 = 50;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The bridge, the namespaces and the addresses; all removed when dropped.
pub struct Network {
    /// `bf<pid hex>x<n>`: the bridge's name and every other name's stem.
    tag: String,
    subnet: [u8; 3],
    /// Namespace name of each member.
    members: BTreeMap<u64, String>,
    /// The FORWARD rule accepting the bridge's own traffic, if it was added (br_netfilter
    /// sends bridged frames through the root namespace's FORWARD chain).
    forward_rule: bool,
}

impl Network {
    /// A bridge and a namespace per member of `ids`, each member reachable at `ip(id)`.
    pub fn new(ids: &[u64]) -> Result<Network> {
        sweep_leftovers();
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let tag = format!("{PREFIX}{pid:x}x{n}");
        if tag.len() + 3 > 15 {
            bail!("interface names for {tag} would be too long");
        }
        let mut subnet = None;
        let used = run_output("ip", &["-4", "-o", "addr", "show"])?;
        for step in 0..OCTET2_SPAN * 256 {
            let slot = (pid.wrapping_mul(7).wrapping_add(n * 131) + step) % (OCTET2_SPAN * 256);
            let candidate = [10, (FIRST_OCTET2 + slot / 256) as u8, (slot % 256) as u8];
            let stem = format!(" {}.{}.{}.", candidate[0], candidate[1], candidate[2]);
            if !used.contains(&stem) {
                subnet = Some(candidate);
                break;
            }
        }
        let subnet = subnet.context("no free 10.x.y.0/24 for a test network")?;
        let mut network = Network {
            tag,
            subnet,
            members: BTreeMap::new(),
            forward_rule: false,
        };
        network.build(ids).with_context(|| {
            format!(
                "build the test network {} on {}",
                network.tag,
                network.cidr()
            )
        })?;
        Ok(network)
    }

    fn build(&mut self, ids: &[u64]) -> Result<()> {
        let bridge = self.tag.clone();
        run("ip", &["link", "add", &bridge, "type", "bridge"])?;
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", self.host_ip()),
                "dev",
                &bridge,
            ],
        )?;
        run("ip", &["link", "set", &bridge, "up"])?;
        run(
            "iptables",
            &[
                "-w", "-I", "FORWARD", "-i", &bridge, "-o", &bridge, "-j", "ACCEPT",
            ],
        )?;
        self.forward_rule = true;
        for &id in ids {
            let ns = format!("{}-m{id}", self.tag);
            run("ip", &["netns", "add", &ns])?;
            self.members.insert(id, ns.clone());
            let host_end = format!("{}h{id}", self.tag);
            run(
                "ip",
                &[
                    "link", "add", &host_end, "type", "veth", "peer", "name", "eth0", "netns", &ns,
                ],
            )?;
            run("ip", &["link", "set", &host_end, "master", &bridge, "up"])?;
            let addr = format!("{}/24", self.ip(id));
            run("ip", &["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            run("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
            run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// The address of member `id` (`10.x.y.(10 + id)`).
    pub fn ip(&self, id: u64) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 10 + id as u8)
    }

    /// The bridge's address in the root namespace (where the test process's clients are).
    pub fn host_ip(&self) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 1)
    }

    fn cidr(&self) -> String {
        let [a, b, c] = self.subnet;
        format!("{a}.{b}.{c}.0/24")
    }

    /// The namespace member `id` runs in.
    pub fn namespace(&self, id: u64) -> Result<&str> {
        self.members
            .get(&id)
            .map(String::as_str)
            .with_context(|| format!("no namespace for member {id}"))
    }

    /// Runs `iptables ARGS` inside member `id`'s namespace.
    pub fn iptables(&self, id: u64, args: &[&str]) -> Result<()> {
        let ns = self.namespace(id)?;
        let mut full = vec!["netns", "exec", ns, "iptables", "-w"];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// The ids of the members this network has a namespace for.
    pub fn ids(&self) -> Vec<u64> {
        self.members.keys().copied().collect()
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Processes still in a namespace keep it alive after `ip netns del`; the cluster kills
        // its members before dropping the network.
        for ns in self.members.values() {
            let _ = run("ip", &["netns", "del", ns]);
        }
        if self.forward_rule {
            let _ = run(
                "iptables",
                &[
                    "-w", "-D", "FORWARD", "-i", &self.tag, "-o", &self.tag, "-j", "ACCEPT",
                ],
            );
        }
        let _ = run("ip", &["link", "del", &self.tag]);
    }
}

/// Removes the namespaces, bridges and FORWARD rules of test processes that no longer run
/// (a test killed by a timeout never drops its network).
fn sweep_leftovers() {
    let alive = |name: &str| -> bool {
        let Some(rest) = name.strip_prefix(PREFIX) else {
            return true;
        };
        let Some((pid, _)) = rest.split_once('x') else {
            return true;
        };
        match u32::from_str_radix(pid, 16) {
            Ok(pid) => std::path::Path::new(&format!("/proc/{pid}")).exists(),
            Err(_) => true,
        }
    };
    if let Ok(list) = run_output("ip", &["netns", "list"]) {
        for ns in list
            .lines()
            .filter_map(|line| line.split_whitespace().next())
        {
            if !alive(ns) {
                let _ = run("ip", &["netns", "del", ns]);
            }
        }
    }
    if let Ok(links) = run_output("ip", &["-o", "link", "show", "type", "bridge"]) {
        for link in links.lines() {
            let Some(name) = link.split(": ").nth(1) else {
                continue;
            };
            if name.starts_with(PREFIX) && !alive(name) {
                let _ = run(
                    "iptables",
                    &[
                        "-w", "-D", "FORWARD", "-i", name, "-o", name, "-j", "ACCEPT",
                    ],
                );
                let _ = run("ip", &["link", "del", name]);
            }
        }
    }
}

/// Runs `program args`, failing with its stderr unless it exits 0.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<()> {
    run_output(program, args).map(drop)
}

fn run_output(program: &str, args: &[&str]) -> Result<String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("run {program} {}", args.join(" ")))?;
    if !output.status.success() {
        bail!(
            "{program} {} exited with {}: {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
