//! Signals to processes, and the check that a pid really is the server it is said to be.
//!
//! The failover workloads send SIGTERM to a sidecar and SIGKILL to an ensemble member through
//! kill(2) directly rather than a `kill` program, so the clock starts at the syscall, not at the
//! start of another process.

use std::collections::HashSet;

use crate::error::BenchError;

/// The signals the workloads send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// A graceful stop: the sidecar resigns and releases everything.
    Term,
    /// A crash: the process gets no chance to say goodbye.
    Kill,
}

/// Sends `signal` to process `pid` (never to a group: pids 0 and 1 and anything that is not a
/// plain positive pid are refused).
pub fn send_signal(pid: u32, signal: Signal) -> Result<(), BenchError> {
    let target = i32::try_from(pid)
        .ok()
        .filter(|p| *p > 1)
        .ok_or_else(|| BenchError::InvalidOption(format!("refusing to signal pid {pid}")))?;
    let number = match signal {
        Signal::Term => libc::SIGTERM,
        Signal::Kill => libc::SIGKILL,
    };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(target, number) } == 0 {
        Ok(())
    } else {
        Err(BenchError::Io {
            context: format!("sending {signal:?} to pid {pid}"),
            source: std::io::Error::last_os_error(),
        })
    }
}

/// Whether process `pid` holds a socket listening on TCP `port` (any address), read from
/// `/proc`. Before a kill -9 this proves the pid is the member serving that port, not a stale
/// pid file pointing at whatever process reused the number.
pub fn listens_on(pid: u32, port: u16) -> Result<bool, BenchError> {
    let io = |context: String| move |source| BenchError::Io { context, source };
    let mut listening = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        match std::fs::read_to_string(table) {
            Ok(text) => listening.extend(listening_inodes(&text, port)),
            // No IPv6 on this machine: nothing listens there.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(format!("reading {table}"))(e)),
        }
    }
    if listening.is_empty() {
        return Ok(false);
    }
    let fds = format!("/proc/{pid}/fd");
    let entries = match std::fs::read_dir(&fds) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io(format!("listing {fds}"))(e)),
    };
    for entry in entries.flatten() {
        // An fd closed between the listing and the readlink is simply not a match.
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let inode = target
            .to_str()
            .and_then(|t| t.strip_prefix("socket:["))
            .and_then(|t| t.strip_suffix(']'))
            .and_then(|t| t.parse::<u64>().ok());
        if inode.is_some_and(|i| listening.contains(&i)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The inodes of the sockets in a `/proc/net/tcp{,6}` table that listen on `port`.
fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    const LISTEN: &str = "0A";
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields.get(1)?.rsplit_once(':')?.1;
            let listens =
                u16::from_str_radix(local_port, 16).ok()? == port && *fields.get(3)? == LISTEN;
            listens.then(|| fields.get(9)?.parse().ok()).flatten()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_listeners_on_the_port_only() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A4A5 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0 100 0 0 10 0
   1: 0100007F:A4A5 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000        0 4343 1 0 20 4 30 10 -1
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 17 1 0 100 0 0 10 0";
        assert_eq!(listening_inodes(table, 42149), [4242]);
        assert_eq!(listening_inodes(table, 22), [17]);
        assert!(listening_inodes(table, 2181).is_empty());
        assert!(listening_inodes("header only", 22).is_empty());
    }

    #[test]
    fn a_listener_of_our_own_is_found() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        assert!(listens_on(std::process::id(), port).expect("reads /proc"));
        drop(listener);
        assert!(!listens_on(std::process::id(), port).expect("reads /proc"));
    }

    #[test]
    fn group_and_init_pids_are_refused() {
        for pid in [0, 1, u32::MAX] {
            assert!(send_signal(pid, Signal::Term).is_err(), "{pid}");
        }
    }
}
