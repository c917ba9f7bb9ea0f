//! ZooKeeper's four-letter words on the client port, in the formats monitoring tools parse,
//! for the words `--four-letter-words` allows (ZooKeeper's `4lw.commands.whitelist`).
//!
//! Whoever sends a word is anonymous: it arrives before any handshake, so no answer names a
//! session (ZooKeeper 3.8's `stat` leaves the ids out too; its `cons` has them, Baton answers
//! no `cons`). A session id is half of what rejoins a live session.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use baton_proto::frame::four_letter_word;

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

/// The words answered when `--four-letter-words` is not given: `srvr` alone, as in ZooKeeper
/// 3.5.3 and later.
pub const DEFAULT_WORDS: &str = "srvr";

/// The four-letter words a member answers (`--four-letter-words`); any other gets ZooKeeper's
/// answer for a word not in `4lw.commands.whitelist`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedWords {
    all: bool,
    words: BTreeSet<&'static str>,
}

impl AllowedWords {
    /// The allow-list from the flag's comma-separated items: ZooKeeper's word names, or `*` for
    /// every word. `srvr` is always allowed, as ZooKeeper always adds it (its own scripts and
    /// probes rely on it); it names no client. An unknown word is an error, so a typo is
    /// caught at start instead of silently disabling a probe.
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Self, String> {
        let mut allowed = AllowedWords {
            all: false,
            words: BTreeSet::from(["srvr"]),
        };
        for item in items {
            let item = item.as_ref().trim();
            if item.is_empty() {
                continue;
            }
            if item == "*" {
                allowed.all = true;
                continue;
            }
            let known = <&[u8; 4]>::try_from(item.as_bytes())
                .ok()
                .and_then(four_letter_word);
            match known {
                Some(word) => _ = allowed.words.insert(word),
                None => {
                    return Err(format!(
                        "{item:?} is not a four-letter word (ruok, srvr, stat, mntr, isro, ...) nor `*`"
                    ));
                }
            }
        }
        Ok(allowed)
    }

    /// Whether `word` is answered.
    pub fn allows(&self, word: &str) -> bool {
        self.all || self.words.contains(word)
    }
}

impl Default for AllowedWords {
    fn default() -> Self {
        AllowedWords::parse(&[DEFAULT_WORDS]).unwrap_or(AllowedWords {
            all: false,
            words: BTreeSet::from(["srvr"]),
        })
    }
}

/// ZooKeeper's answer (byte for byte, 3.8) to a word its allow-list leaves out.
pub fn refusal(word: &str) -> String {
    format!("{word} is not executed because it is not in the whitelist.\n")
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
                // ZooKeeper's brief connection lines: no session id (what `cons` adds).
                out.push_str("Clients:\n");
                for c in &d.clients {
                    let _ = writeln!(
                        out,
                        " /{}[1](queued={},recved={},sent={})",
                        c.peer, c.queued, c.received, c.sent
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

    #[test]
    fn stat_names_no_session() {
        let mut status = Status::default();
        status.detail.clients.push(crate::status::ClientLine {
            peer: "10.0.0.7:4711".into(),
            session_id: 0x0100_0000_0000_002a,
            queued: 0,
            received: 3,
            sent: 2,
        });
        let stat = answer("stat", &status);
        assert!(
            stat.contains(" /10.0.0.7:4711[1](queued=0,recved=3,sent=2)\n"),
            "{stat}"
        );
        assert!(!stat.contains("sid") && !stat.contains("2a"), "{stat}");
    }

    #[test]
    fn allow_lists() {
        let default = AllowedWords::default();
        assert!(default.allows("srvr"));
        for word in ["ruok", "stat", "mntr", "isro", "cons"] {
            assert!(!default.allows(word), "{word}");
        }
        let some = AllowedWords::parse(&["ruok", " mntr "]).expect("valid");
        assert!(some.allows("ruok") && some.allows("mntr") && some.allows("srvr"));
        assert!(!some.allows("stat"));
        let all = AllowedWords::parse(&["*"]).expect("valid");
        assert!(all.allows("stat") && all.allows("dump"));
        assert!(AllowedWords::parse(&["ruok", "stats"]).is_err());
        assert!(AllowedWords::parse(&["RUOK"]).is_err());
        assert_eq!(
            refusal("stat"),
            "stat is not executed because it is not in the whitelist.\n"
        );
    }
}
