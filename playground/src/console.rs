//! What the person at the terminal reads: the banner and one timestamped line per event.
//!
//! This is the program's output, not its diagnostics, so it goes to stdout (logs go to stderr
//! through `tracing`). A closed stdout (`baton-playground | head`) must not bring the
//! playground down with its children still running, so write errors are ignored.

use std::io::Write;
use std::time::Instant;

/// Writes whole lines to stdout; cheap to copy into every task.
#[derive(Debug, Clone, Copy)]
pub struct Console {
    started: Instant,
}

impl Console {
    /// A console whose event timestamps count from now.
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
        }
    }

    /// Prints `text` as it is.
    pub fn line(&self, text: impl AsRef<str>) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", text.as_ref());
        let _ = out.flush();
    }

    /// Prints `text` after the seconds since start, so hand-over times can be read off.
    pub fn event(&self, text: impl AsRef<str>) {
        let elapsed = self.started.elapsed().as_secs_f64();
        self.line(format!("[{elapsed:8.3}s] {}", text.as_ref()));
    }
}
