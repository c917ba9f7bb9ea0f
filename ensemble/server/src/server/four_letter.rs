//! ZooKeeper's four-letter words on the client port, in the formats monitoring tools parse.

use std::fmt::Write as _;

use crate::status::{Role, Status};

/// The version string tools parse; the `3.8.0` prefix tells them which protocol we speak.
pub const VERSION: &str = concat!("3.8.0-baton-", env!("CARGO_PKG_VERSION"));

fn mode(status: &Status) -> &'static str {
    if status.members.len() <= 1 {
        return "standalone";
    }
    match status.role {
        Role::Leader => "leader",
        Role::Learner => "observer",
        Role::Follower | Role::Candidate => "follower",
    }
}

/// The text to send back for `word`; unknown words get ZooKeeper's refusal text.
pub fn answer(word: &str, status: &Status) -> String {
    let d = &status.detail;
    let mut out = String::new();
    match word {
        "ruok" => out.push_str("imok"),
        "isro" => out.push_str("rw"),
        "srvr" | "stat" => {
            let _ = writeln!(out, "Zookeeper version: {VERSION}, built by Baton");
            if word == "stat" {
                out.push_str("Clients:\n");
                for c in &d.clients {
                    let _ = writeln!(
                        out,
                        " /{}[1](queued={},recved={},sent={},sid=0x{:x})",
                        c.peer, c.queued, c.received, c.sent, c.session_id as u64
                    );
                }
                out.push('\n');
            }
            let _ = writeln!(
                out,
                "Latency min/avg/max: {:.0}/{:.4}/{:.0}",
                d.latency_min_ms, d.latency_avg_ms, d.latency_max_ms
            );
            let _ = writeln!(out, "Received: {}", d.packets_received);
            let _ = writeln!(out, "Sent: {}", d.packets_sent);
            let _ = writeln!(out, "Connections: {}", d.connections);
            let _ = writeln!(out, "Outstanding: {}", d.outstanding);
            let _ = writeln!(out, "Zxid: 0x{:x}", status.applied_index);
            let _ = writeln!(out, "Mode: {}", mode(status));
            let _ = writeln!(out, "Node count: {}", status.znodes);
        }
        "mntr" => {
            let lines: [(&str, String); 17] = [
                ("zk_version", VERSION.to_string()),
                ("zk_server_state", mode(status).to_string()),
                ("zk_avg_latency", format!("{:.4}", d.latency_avg_ms)),
                ("zk_max_latency", format!("{:.0}", d.latency_max_ms)),
                ("zk_min_latency", format!("{:.0}", d.latency_min_ms)),
                ("zk_packets_received", d.packets_received.to_string()),
                ("zk_packets_sent", d.packets_sent.to_string()),
                ("zk_num_alive_connections", d.connections.to_string()),
                ("zk_outstanding_requests", d.outstanding.to_string()),
                ("zk_znode_count", status.znodes.to_string()),
                ("zk_watch_count", d.watches.to_string()),
                ("zk_ephemerals_count", d.ephemerals.to_string()),
                (
                    "zk_approximate_data_size",
                    d.approximate_data_size.to_string(),
                ),
                ("zk_global_sessions", status.sessions.to_string()),
                ("baton_raft_term", status.term.to_string()),
                ("baton_raft_commit_index", status.commit_index.to_string()),
                ("baton_raft_leader_id", status.leader_id.to_string()),
            ];
            for (k, v) in lines {
                let _ = writeln!(out, "{k}\t{v}");
            }
        }
        other => {
            let _ = writeln!(
                out,
                "{other} is not executed because it is not supported by Baton."
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ruok_and_srvr() {
        let status = Status {
            znodes: 4,
            applied_index: 0x1f,
            members: vec![1],
            ..Default::default()
        };
        assert_eq!(answer("ruok", &status), "imok");
        let srvr = answer("srvr", &status);
        assert!(
            srvr.starts_with("Zookeeper version: 3.8.0-baton-"),
            "{srvr}"
        );
        assert!(srvr.contains("Zxid: 0x1f\n"));
        assert!(srvr.contains("Mode: standalone\n"));
        assert!(srvr.contains("Node count: 4\n"));
        let mntr = answer("mntr", &status);
        assert!(mntr.contains("zk_znode_count\t4\n"));
        assert!(answer("dump", &status).contains("not executed"));
    }
}
