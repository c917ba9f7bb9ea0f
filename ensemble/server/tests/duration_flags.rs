//! Duration flags read by the real binary: a bare number (which once meant seconds) stops the
//! member at start with a message saying what to write; Go-style durations start it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn member(data_dir: &std::path::Path, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_baton-ensemble"));
    command
        .args(["--id", "1", "--insecure-no-tls", "--data-dir"])
        .arg(data_dir)
        .arg(format!("--client-addr=127.0.0.1:{}", free_port()))
        .arg(format!("--peer-addr=127.0.0.1:{}", free_port()))
        .args(extra)
        .env_remove("BATON_ID")
        .env_remove("BATON_DATA_DIR");
    command
}

#[test]
fn a_bare_number_is_refused_at_start_with_the_form_to_write() {
    let tmp = tempfile::tempdir().expect("temp dir");
    for (flag, value, hint) in [
        ("--tick", "100", "write 100s"),
        ("--min-session-timeout", "4", "write 4s"),
        ("--housekeeping-interval", "1.5", "write 1.5s"),
        ("--client-handshake-timeout", "10 s", "1m30s"),
    ] {
        let out = member(tmp.path(), &[flag, value])
            .output()
            .expect("run baton-ensemble");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
        assert!(stderr.contains(hint), "{flag} {value}: {stderr}");
    }
}

#[test]
fn go_style_durations_start_a_member() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let admin = format!("127.0.0.1:{}", free_port());
    let mut child = member(
        tmp.path(),
        &[
            &format!("--admin-addr={admin}"),
            "--tick=50ms",
            "--min-session-timeout=1.5s",
            "--max-session-timeout=1m30s",
            "--housekeeping-interval=1h",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("start baton-ensemble");
    let deadline = Instant::now() + Duration::from_secs(30);
    let healthy = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr);
            }
            panic!("the member exited ({status}): {stderr}");
        }
        if healthz(&admin) {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(healthy, "the member never answered /healthz on {admin}");
}

/// Whether `GET /healthz` answers 200.
fn healthz(addr: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}
