//! Runs the real `baton-playground` (which runs the ensemble and the sidecar as
//! `baton-playground ensemble|sidecar ...`), kills the demo leader's sidecar, and checks the hand-over is reported,
//! the sidecar comes back, the stream-hold demonstration hands its lock over, and no child
//! outlives the playground.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Bound on every wait: a cold start on a busy two-core machine, plus a Raft election.
const BOUND: Duration = Duration::from_secs(120);

/// Lines printed so far, and a wake-up for each new one.
type Lines = Arc<(Mutex<Vec<String>>, Condvar)>;

/// The playground process, stopped (SIGTERM, then SIGKILL) if a test fails midway.
struct Playground {
    child: Option<Child>,
    stdout: Lines,
    stderr: Arc<Mutex<String>>,
}

impl Playground {
    fn start(args: &[&str]) -> Self {
        // The ensemble and the sidecar are built into the playground (it re-runs itself).
        let exe = Path::new(env!("CARGO_BIN_EXE_baton-playground"));
        let mut child = Command::new(exe)
            .args(["--any-port"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start baton-playground");
        let stdout: Lines = Arc::default();
        let lines = Arc::clone(&stdout);
        let out = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let (store, wake) = &*lines;
                store.lock().unwrap_or_else(|p| p.into_inner()).push(line);
                wake.notify_all();
            }
        });
        let stderr: Arc<Mutex<String>> = Arc::default();
        let errors = Arc::clone(&stderr);
        let mut err = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_str(&text);
        });
        Self {
            child: Some(child),
            stdout,
            stderr,
        }
    }

    /// The first line at or after `from` that `matches`, and its index.
    fn wait_line(
        &self,
        from: usize,
        what: &str,
        matches: impl Fn(&str) -> bool,
    ) -> (usize, String) {
        let (store, wake) = &*self.stdout;
        let deadline = Instant::now() + BOUND;
        let mut lines = store.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some((i, line)) = lines
                .iter()
                .enumerate()
                .skip(from)
                .find(|(_, l)| matches(l))
            {
                return (i, line.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no line with {what} within {BOUND:?}; stdout:\n{}\nstderr:\n{}",
                lines.join("\n"),
                self.stderr.lock().unwrap_or_else(|p| p.into_inner())
            );
            lines = wake
                .wait_timeout(lines, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn output(&self) -> Vec<String> {
        self.stdout
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sends SIGTERM and waits, bounded, for the exit.
    fn terminate(&mut self) -> ExitStatus {
        let child = self.child.take().expect("still running");
        stop(child).expect("baton-playground did not exit within the bound after SIGTERM")
    }
}

impl Drop for Playground {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            let _ = stop(child);
        }
    }
}

/// SIGTERM, then a bounded wait for the exit; SIGKILL and `None` if it does not come.
fn stop(mut child: Child) -> Option<ExitStatus> {
    let pid = child.id();
    signal("-TERM", pid);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    match rx.recv_timeout(BOUND) {
        Ok(status) => Some(status.expect("wait for baton-playground")),
        Err(_) => {
            signal("-KILL", pid);
            None
        }
    }
}

fn signal(which: &str, pid: u32) {
    let status = Command::new("kill")
        .args([which, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {which} {pid} failed");
}

/// `pod-b` and `4242` from `… election "demo": pod-b leads (fencing token 7, sidecar pid 4242)`.
fn election_leader(line: &str) -> Option<(String, u32)> {
    let rest = line.split("election \"demo\": ").nth(1)?;
    let (identity, details) = rest.split_once(" leads (")?;
    let pid = details
        .split("sidecar pid ")
        .nth(1)?
        .trim_end_matches(')')
        .parse()
        .ok()?;
    Some((identity.to_owned(), pid))
}

/// Every `pid N` the playground printed: the members and sidecars it started.
fn printed_pids(lines: &[String]) -> Vec<u32> {
    let mut pids: Vec<u32> = lines
        .iter()
        .flat_map(|line| line.split("pid ").skip(1))
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Whether `pid` is still one of our servers (and not a zombie or an unrelated process).
fn server_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) state …`: comm may hold spaces, so split at the last ')'.
    let Some((head, tail)) = stat.rsplit_once(')') else {
        return false;
    };
    // The children are this playground binary re-run as `baton-playground ensemble|sidecar ...`.
    let _ = head;
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let mut argv = cmdline.split(|b| *b == 0);
    let program = argv.next().unwrap_or_default();
    let role = argv.next().unwrap_or_default();
    let is_ours =
        program.ends_with(b"baton-playground") && (role == b"ensemble" || role == b"sidecar");
    is_ours && !tail.trim_start().starts_with('Z')
}

#[test]
fn the_demo_leader_hands_over_and_nothing_outlives_the_playground() {
    let mut playground = Playground::start(&[]);

    let (at, line) = playground.wait_line(0, "the leader of \"demo\"", |l| {
        election_leader(l).is_some()
    });
    let (leader, leader_pid) = election_leader(&line).expect("parsed above");
    assert_eq!(
        leader, "pod-a",
        "the first pod is started alone, so it leads first"
    );
    let (watching, _) = playground.wait_line(at, "the watch header", |l| l.starts_with("Watching"));

    // Only a change printed after the banner counts as the hand-over.
    signal("-TERM", leader_pid);
    let (_, line) = playground.wait_line(watching, "a new leader of \"demo\"", |l| {
        election_leader(l).is_some_and(|(identity, _)| identity != leader)
    });
    let (successor, successor_pid) = election_leader(&line).expect("parsed above");
    assert_ne!(successor_pid, leader_pid);
    assert!(successor.starts_with("pod-"), "{line}");

    // The stream-hold demonstration (pod-b's app holds, pod-c waits, pod-b's app crashes).
    let (_, line) = playground.wait_line(watching, "the stream-hold demonstration", |l| {
        l.contains("lock \"crash-demo\": ") || l.contains("stream-hold demonstration skipped")
    });
    assert!(
        line.contains("pod-c got it ") && line.contains(" after pod-b's app crashed"),
        "{line}"
    );

    let restarted = format!("{leader}'s sidecar restarted: pid ");
    playground.wait_line(watching, "the killed sidecar's restart", |l| {
        l.contains(&restarted)
    });

    let status = playground.terminate();
    assert!(status.success(), "baton-playground exited with {status}");
    let output = playground.output();
    assert!(
        output.iter().any(|l| l == "Stopped."),
        "{}",
        output.join("\n")
    );
    let pids = printed_pids(&output);
    assert!(pids.len() >= 7, "3 members, 3 pods and a restart: {pids:?}");
    let survivors: Vec<u32> = pids.into_iter().filter(|&pid| server_alive(pid)).collect();
    assert!(
        survivors.is_empty(),
        "still running after the playground exited: {survivors:?}\n{}",
        output.join("\n")
    );
}
