//! External programs (kazoo scripts, zkCli.sh) run with a deadline and their output kept.

use std::fmt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::time::Instant;

/// What a finished program printed and how it ended.
#[derive(Debug)]
pub struct Finished {
    /// `None` when the program was killed at its deadline.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// Whether the program exited by itself with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|status| status.success())
    }
}

impl fmt::Display for Finished {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(status) => writeln!(f, "exit: {status}")?,
            None => writeln!(f, "exit: killed at its deadline")?,
        }
        writeln!(f, "--- stdout ---\n{}", self.stdout.trim_end())?;
        write!(f, "--- stderr ---\n{}", self.stderr.trim_end())
    }
}

/// Runs `command` to completion, killing it after `deadline`.
///
/// Output goes to temp files rather than pipes, so a chatty program can never block on a full
/// pipe while we poll for its exit.
pub async fn run(mut command: Command, deadline: Duration) -> Result<Finished> {
    let stdout = tempfile::tempfile().context("temp file for stdout")?;
    let stderr = tempfile::tempfile().context("temp file for stderr")?;
    command
        .stdin(Stdio::null())
        .stdout(stdout.try_clone().context("clone stdout handle")?)
        .stderr(stderr.try_clone().context("clone stderr handle")?);
    let mut child = command
        .spawn()
        .with_context(|| format!("spawn {command:?}"))?;
    let give_up = Instant::now() + deadline;
    let mut backoff = Duration::from_millis(10);
    let status = loop {
        if let Some(status) = child.try_wait().context("poll the child")? {
            break Some(status);
        }
        if Instant::now() >= give_up {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(100));
    };
    Ok(Finished {
        status,
        stdout: read_all(stdout)?,
        stderr: read_all(stderr)?,
    })
}

fn read_all(mut file: std::fs::File) -> Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    file.seek(SeekFrom::Start(0))
        .context("rewind captured output")?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .context("read captured output")?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
