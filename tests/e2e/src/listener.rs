//! Which process listens on a TCP port, from Linux's `/proc`: a server under test is ready only
//! once the port it was given is its own, not merely once something answers there.

use std::collections::BTreeSet;

/// Whether process `pid` holds a socket listening on TCP `port` (any address, IPv4 or IPv6).
/// False when `/proc` cannot tell (not Linux, the process gone).
pub fn is_listening_on(pid: u32, port: u16) -> bool {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| socket_inode(&target.to_string_lossy()))
        .any(|inode| inodes.contains(&inode))
}

/// `socket:[12345]` → 12345.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Inodes of the sockets in state LISTEN on `port`, from `/proc/net/tcp` and `tcp6`.
fn listening_inodes(port: u16) -> BTreeSet<u64> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter_map(|line| listening_inode(line, port))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// One row of `/proc/net/tcp`: `sl local_address rem_address st ... uid timeout inode ...`,
/// the address as `HEXADDR:HEXPORT`, state `0A` for LISTEN.
fn listening_inode(line: &str, port: u16) -> Option<u64> {
    const LISTEN: &str = "0A";
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (_, local_port) = fields.get(1)?.rsplit_once(':')?;
    if u16::from_str_radix(local_port, 16).ok()? != port || *fields.get(3)? != LISTEN {
        return None;
    }
    fields.get(9)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_listener_is_found_and_a_free_port_is_not() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        assert!(is_listening_on(std::process::id(), port));
        drop(listener);
        assert!(!is_listening_on(std::process::id(), port));
    }

    #[test]
    fn rows_parse_by_port_and_state() {
        let listen = "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0 100 0 0 10 0";
        assert_eq!(listening_inode(listen, 0x1F90), Some(4242));
        assert_eq!(listening_inode(listen, 0x1F91), None);
        let established = listen.replace(" 0A ", " 01 ");
        assert_eq!(listening_inode(&established, 0x1F90), None);
        assert_eq!(socket_inode("socket:[4242]"), Some(4242));
        assert_eq!(socket_inode("pipe:[4242]"), None);
    }
}
