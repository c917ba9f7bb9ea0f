//! Duration flags and their environment variables read by the real binary: a bare number stops
//! the sidecar at start with a message saying what to write; Go-style durations start it.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn sidecar() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_baton-sidecar"));
    command
        .args(["--ensemble", "127.0.0.1:1", "--identity", "x"])
        .args(["--listen", "127.0.0.1:0", "--probe-listen", "127.0.0.1:0"])
        .env_remove("BATON_SESSION_TIMEOUT")
        .env_remove("BATON_APP_HEALTH_INTERVAL")
        .env_remove("BATON_RELEASE_GRACE")
        .env_remove("BATON_ELECTION");
    command
}

/// Flags, environment, the flag the message names, and what it says to write.
type Case = (
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
    &'static str,
    &'static str,
);

#[test]
fn a_bare_number_is_refused_at_start_with_the_form_to_write() {
    let cases: [Case; 4] = [
        (
            &["--session-timeout", "10"],
            &[],
            "--session-timeout",
            "write 10s",
        ),
        (&["--release-grace=30"], &[], "--release-grace", "write 30s"),
        (
            &[],
            &[("BATON_SESSION_TIMEOUT", "15")],
            "--session-timeout",
            "write 15s",
        ),
        (
            &[],
            &[("BATON_APP_HEALTH_INTERVAL", "2 s")],
            "--app-health-interval",
            "1m30s",
        ),
    ];
    for (args, env, flag, hint) in cases {
        let out = sidecar()
            .args(args)
            .envs(env.iter().copied())
            .output()
            .expect("run baton-sidecar");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains(hint), "{args:?} {env:?}: {stderr}");
    }
}

#[test]
fn go_style_durations_start_the_sidecar() {
    // No ensemble listens on port 1: started, the sidecar keeps trying to connect, so it is
    // still running after its flags were read.
    let mut child = sidecar()
        .args(["--session-timeout", "1m30s", "--release-grace", "1.5s"])
        .env("BATON_APP_HEALTH_INTERVAL", "500ms")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start baton-sidecar");
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("wait") {
            let out = child.wait_with_output().expect("output");
            panic!(
                "the sidecar exited ({status}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}
