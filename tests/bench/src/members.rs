//! Crashing and restarting ensemble members for the ensemble-failover workload.
//!
//! The bench did not start the members, so whoever did (tests/scripts/bench.sh) tells it, per member
//! number `{id}` (1-based, the order of `--servers`), where the member's pid file is and which
//! executable starts it again. The pid file must hold the pid of the server process itself (the
//! JVM, `baton-ensemble`), not of a wrapper: a kill -9 of a wrapper would leave the server up.

use std::path::PathBuf;
use std::process::Stdio;

use crate::error::BenchError;
use crate::process::{Signal, listens_on, send_signal};

/// The placeholder for the member number in both templates.
pub const ID_PLACEHOLDER: &str = "{id}";

/// Where member `{id}`'s pid is, and how to start it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberControl {
    pid_file: String,
    start: String,
}

impl MemberControl {
    /// Both templates must contain `{id}`, or every member would share one file.
    pub fn new(pid_file: &str, start: &str) -> Result<Self, BenchError> {
        for (flag, template) in [("--member-pid-file", pid_file), ("--member-start", start)] {
            if !template.contains(ID_PLACEHOLDER) {
                return Err(BenchError::InvalidOption(format!(
                    "{flag} {template:?} must contain {ID_PLACEHOLDER}"
                )));
            }
        }
        Ok(MemberControl {
            pid_file: pid_file.to_owned(),
            start: start.to_owned(),
        })
    }

    fn pid_file(&self, member: usize) -> PathBuf {
        PathBuf::from(self.pid_file.replace(ID_PLACEHOLDER, &member.to_string()))
    }

    fn start_program(&self, member: usize) -> PathBuf {
        PathBuf::from(self.start.replace(ID_PLACEHOLDER, &member.to_string()))
    }

    /// The pid of member `member`, checked to be the process listening on `server`'s port.
    pub fn pid(&self, member: usize, server: &str) -> Result<u32, BenchError> {
        let fail = |detail: String| BenchError::Member {
            member,
            server: server.to_owned(),
            detail,
        };
        let path = self.pid_file(member);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| fail(format!("reading pid file {}: {e}", path.display())))?;
        let pid: u32 = text
            .trim()
            .parse()
            .map_err(|_| fail(format!("pid file {} holds {text:?}", path.display())))?;
        let port = server
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse::<u16>().ok())
            .ok_or_else(|| fail("no port in the server address".into()))?;
        if !listens_on(pid, port)? {
            return Err(fail(format!(
                "pid {pid} (from {}) does not listen on port {port}: refusing to kill it",
                path.display()
            )));
        }
        Ok(pid)
    }

    /// kill -9 of the member's own process (see [`MemberControl::pid`]).
    pub fn crash(&self, pid: u32) -> Result<(), BenchError> {
        send_signal(pid, Signal::Kill)
    }

    /// Runs the member's start program in the background. It must write the new pid file and
    /// keep its output away from ours: its stdio is closed here, so a member that outlives this
    /// bench never holds the pipe bench.sh reads our report from.
    pub fn restart(&self, member: usize, server: &str) -> Result<(), BenchError> {
        let program = self.start_program(member);
        let child = std::process::Command::new(&program)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| BenchError::Member {
                member,
                server: server.to_owned(),
                detail: format!("running {}: {e}", program.display()),
            })?;
        // The member runs on after this bench exits; whoever started the ensemble stops it
        // through its pid file. Reap it if it ends while we still run, so no zombie lingers.
        std::thread::spawn(move || {
            let mut child = child;
            let _ = child.wait();
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_need_the_member_number() {
        assert!(MemberControl::new("/x/{id}.pid", "/x/start-{id}.sh").is_ok());
        assert!(MemberControl::new("/x/1.pid", "/x/start-{id}.sh").is_err());
        assert!(MemberControl::new("/x/{id}.pid", "/x/start.sh").is_err());
        let control = MemberControl::new("/x/{id}.pid", "/x/start-{id}.sh").expect("valid");
        assert_eq!(control.pid_file(2), PathBuf::from("/x/2.pid"));
        assert_eq!(control.start_program(3), PathBuf::from("/x/start-3.sh"));
    }

    #[test]
    fn a_pid_not_serving_the_port_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("1.pid"), std::process::id().to_string()).expect("write");
        let control = MemberControl::new(
            &format!("{}/{{id}}.pid", dir.path().display()),
            "/nonexistent/start-{id}",
        )
        .expect("valid");
        // Port 1 is nobody's here, least of all this test's.
        let err = control.pid(1, "127.0.0.1:1").expect_err("refused");
        assert!(err.to_string().contains("refusing"), "{err}");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let server = listener.local_addr().expect("addr").to_string();
        assert_eq!(control.pid(1, &server).expect("ours"), std::process::id());
    }
}
