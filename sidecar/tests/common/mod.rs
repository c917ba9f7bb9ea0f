//! Shared test harness: the ensemble to test against, sidecar processes, and HTTP calls to them.
//!
//! Every case runs twice ([`against_both!`]): against a one-member Baton ensemble
//! (`target/<profile>/baton-ensemble`) and against Apache ZooKeeper 3.8
//! (`tests/scripts/reference-zookeeper.sh`), each started on first use in the test process and
//! dying with it. `BATON_TEST_ZK=HOST:PORT` points every case at a running ensemble instead.

#![allow(dead_code)] // Each test binary uses a different part of the harness.

pub mod fake_zk;
pub mod proxy;
pub mod sse;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use baton_tls::HttpClient;
use hyper::Method;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long any single wait in these tests may take before the test fails.
pub const BOUND: Duration = Duration::from_secs(60);

pub use baton_tests::Target;

tokio::task_local! {
    /// The implementation the running test case is against (set by [`against_both!`]).
    static TARGET: Target;
}

/// Defines each listed `async fn case()` twice, as `case::baton` and `case::zookeeper`: the
/// same test against a one-member Baton ensemble and against Apache ZooKeeper 3.8, so a
/// ZooKeeper run proves the test right and a Baton run proves Baton.
#[macro_export]
macro_rules! against_both {
    ($($case:ident),+ $(,)?) => {
        $(
            mod $case {
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn baton() {
                    $crate::common::run_against($crate::common::Target::Baton, super::$case()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn zookeeper() {
                    $crate::common::run_against($crate::common::Target::ZooKeeper, super::$case())
                        .await;
                }
            }
        )+
    };
}

/// Runs a test case with `target` as the ensemble [`zk_address`] gives.
pub async fn run_against(target: Target, case: impl Future<Output = ()>) {
    TARGET.scope(target, case).await;
}

/// The ensemble under test: `BATON_TEST_ZK` if set, else a server of the case's target,
/// started on first use in this test process.
pub fn zk_address() -> String {
    if let Ok(addr) = std::env::var("BATON_TEST_ZK") {
        return addr;
    }
    static BATON: OnceLock<TestServer> = OnceLock::new();
    static ZOOKEEPER: OnceLock<TestServer> = OnceLock::new();
    let target = TARGET
        .try_with(|t| *t)
        .expect("zk_address() outside a case of against_both! (or inside a spawned task)");
    let cell = match target {
        Target::Baton => &BATON,
        Target::ZooKeeper => &ZOOKEEPER,
    };
    cell.get_or_init(|| TestServer::start(target))
        .address
        .clone()
}

/// A server for this test process. It is started by a shell that kills it when its stdin
/// reaches EOF, which happens when this process exits however it exits: statics are never
/// dropped, so no destructor could do it.
struct TestServer {
    address: String,
    _lifeline: Mutex<ChildStdin>,
    _shell: Mutex<Child>,
    /// Baton's certificates; the folder lives as long as the server.
    _pki: Option<baton_tests::pki::Pki>,
}

/// Start-up attempts on fresh ports: a port picked free may be taken before the server binds it
/// (by any process's outgoing connection: the picks come from the ephemeral range).
const START_ATTEMPTS: u32 = 3;

impl TestServer {
    fn start(target: Target) -> Self {
        let mut attempt = 1;
        loop {
            match Self::try_start(target) {
                Ok(server) => return server,
                Err(why) if attempt < START_ATTEMPTS => {
                    eprintln!("{target}: start attempt {attempt} failed ({why}); new ports");
                    attempt += 1;
                }
                Err(why) => panic!("{target} did not start: {why}"),
            }
        }
    }

    /// One start on freshly picked ports; `Err` when the server exited while starting (most
    /// likely it could not bind one of them).
    fn try_start(target: Target) -> Result<Self, String> {
        let port = free_port();
        let mut pki = None;
        let dir = std::env::temp_dir().join(format!(
            "baton-sidecar-{target}-{}-{port}",
            std::process::id()
        ));
        let server = match target {
            Target::ZooKeeper => {
                let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../tests/scripts/reference-zookeeper.sh");
                format!("{} {port} \"$dir\"", script.display())
            }
            Target::Baton => {
                let binary = baton_tests::baton_binary().expect("the baton-ensemble binary");
                let certs = pki.get_or_insert(
                    baton_tests::pki::Pki::new("sidecar-tests", &[1]).expect("certificates"),
                );
                let tls: Vec<String> = certs
                    .member_args(1)
                    .iter()
                    .map(|a| format!("'{}'", a.to_string_lossy()))
                    .collect();
                format!(
                    // `ruok` (below) is answered only when allowed, as in ZooKeeper.
                    "{} --id 1 --data-dir \"$dir\" --client-addr 127.0.0.1:{port} \
                     --peer-addr 127.0.0.1:{} --admin-addr 127.0.0.1:{} \
                     --four-letter-words ruok {}",
                    binary.display(),
                    free_port(),
                    free_port(),
                    tls.join(" ")
                )
            }
        };
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(format!(
                r#"{server} >"$dir.log" 2>&1 </dev/null & pid=$!; echo $pid >"$dir.pid"; cat >/dev/null; kill $pid; wait $pid; rm -rf "$dir" "$dir.log" "$dir.pid""#
            ))
            .env("dir", &dir)
            .stdin(Stdio::piped())
            // Not the test's own stdout/stderr: the shell outlives the test process by the
            // server's shutdown, and must not hold the test's output open meanwhile.
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the server under test");
        let lifeline = child.stdin.take().expect("piped stdin");
        let address = format!("127.0.0.1:{port}");
        let log = PathBuf::from(format!("{}.log", dir.display()));
        let pid_file = PathBuf::from(format!("{}.pid", dir.display()));
        let started = Instant::now();
        // Polling an external process's startup: there is no event to wait for.
        // Ours must answer, not another test's server that took the port first (`serves_on`).
        while four_letter_word(&address, "ruok").is_none_or(|r| r != "imok")
            || !serves_on(&pid_file, port)
        {
            let printed = std::fs::read_to_string(&log).unwrap_or_default();
            // A server that exits while starting most likely lost one of its ports (ZooKeeper
            // says nothing about it here: its logger is off).
            if server_exited(&pid_file) {
                // Closing its stdin makes the shell clean up after it.
                drop(lifeline);
                let _ = child.wait();
                return Err(format!("it exited while starting; its log:\n{printed}"));
            }
            // The log is quoted, not pointed to: the shell removes it when this process exits.
            assert!(
                started.elapsed() < BOUND,
                "{target} did not start on {address}; its log:\n{printed}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(Self {
            address,
            _lifeline: Mutex::new(lifeline),
            _shell: Mutex::new(child),
            _pki: pki,
        })
    }
}

fn four_letter_word(address: &str, word: &str) -> Option<String> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut out = String::new();
    std::io::Read::read_to_string(&mut stream, &mut out).ok()?;
    Some(out)
}

/// Whether the process whose pid the test server's shell wrote to `pid_file` has exited (a
/// zombie counts: the shell reaps it only at the end).
/// Whether the server whose pid is in `pid_file` listens on `port` itself. A port picked free
/// can be bound first by another test's server; ours then fails to bind and exits, but until it
/// does, the other one answers `ruok` there, and the tests would run against it.
fn serves_on(pid_file: &std::path::Path, port: u16) -> bool {
    std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|pid| pid.trim().parse().ok())
        .is_some_and(|pid| baton_tests::listener::is_listening_on(pid, port))
}

fn server_exited(pid_file: &std::path::Path) -> bool {
    let Ok(pid) = std::fs::read_to_string(pid_file) else {
        return false; // not written yet
    };
    match std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Waits, on children watches rather than a clock, until the ensemble's `dir` holds at least
/// `n` nodes: a sidecar's request is then known to be queued, not merely sent.
pub async fn wait_for_children(dir: &str, n: usize) {
    use zookeeper_client as zk;
    let observe = async {
        let client = zk::Client::connect(&zk_address())
            .await
            .expect("observer session");
        loop {
            match client.list_and_watch_children(dir).await {
                Ok((children, _)) if children.len() >= n => return,
                Ok((_, watcher)) => {
                    watcher.changed().await;
                }
                Err(zk::Error::NoNode) => {
                    let (stat, watcher) = client.check_and_watch_stat(dir).await.expect("exists");
                    if stat.is_none() {
                        watcher.changed().await;
                    }
                }
                Err(e) => panic!("list {dir}: {e}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), observe)
        .await
        .unwrap_or_else(|_| panic!("{dir} never held {n} nodes"));
}

/// A name no other test (or earlier run against a shared ensemble) uses.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        nanos % 1_000_000_000,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A running `baton-sidecar` process, killed when dropped.
pub struct Sidecar {
    pub identity: String,
    pub addr: SocketAddr,
    child: Option<Child>,
    log: Arc<(Mutex<Vec<String>>, Condvar)>,
}

impl Sidecar {
    /// Starts a sidecar named `identity` standing in `elections`, and waits until it serves
    /// HTTP and has a session.
    pub fn start(identity: &str, elections: &[&str]) -> Self {
        Self::start_with(identity, elections, &[])
    }

    /// [`Sidecar::start`] with extra flags.
    pub fn start_with(identity: &str, elections: &[&str], extra: &[&str]) -> Self {
        Self::start_with_env(identity, elections, extra, &[])
    }

    /// [`Sidecar::start_with`] with extra environment variables.
    pub fn start_with_env(
        identity: &str,
        elections: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let sidecar = Self::spawn(&zk_address(), identity, elections, extra, env);
        sidecar.wait_log("recipe::session: session established");
        sidecar
    }

    /// Starts a sidecar on `ensemble` and waits only until it serves HTTP (not for a session).
    pub fn spawn(
        ensemble: &str,
        identity: &str,
        elections: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_baton-sidecar"));
        command
            .args([
                "--ensemble",
                ensemble,
                "--listen",
                "127.0.0.1:0",
                "--identity",
                identity,
            ])
            .args(extra)
            .env("BATON_LOG", "info,baton_sidecar=debug")
            .env_remove("BATON_ELECTION")
            .env_remove("BATON_NAMESPACE")
            .env_remove("BATON_TOKEN_FILE")
            .env_remove("BATON_ZK_DIGEST")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if !extra.contains(&"--session-timeout") {
            command.args(["--session-timeout", "10s"]);
        }
        for election in elections {
            command.args(["--election", election]);
        }
        let mut child = command.spawn().expect("start baton-sidecar");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let (lines, wake) = &*sink;
                lines.lock().unwrap_or_else(|p| p.into_inner()).push(line);
                wake.notify_all();
            }
        });
        let mut sidecar = Self {
            identity: identity.to_owned(),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            child: Some(child),
            log,
        };
        let line = sidecar.wait_log("serving the HTTP API");
        let addr = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("addr="))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        sidecar.addr = addr;
        sidecar
    }

    /// Waits for a log line containing `needle` (event-driven: lines arrive as they are logged).
    pub fn wait_log(&self, needle: &str) -> String {
        let (lines, wake) = &*self.log;
        let deadline = Instant::now() + BOUND;
        let mut guard = lines.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(line) = guard.iter().find(|l| l.contains(needle)) {
                return line.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{}: no log line with {needle:?}:\n{}",
                self.identity,
                guard.join("\n")
            );
            guard = wake
                .wait_timeout(guard, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The log so far.
    pub fn log(&self) -> String {
        self.log
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .join("\n")
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Sends SIGTERM and waits (bounded) for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal_term();
        self.wait_exit()
    }

    /// Sends SIGTERM and returns at once (the sidecar may be waiting for its app).
    pub fn signal_term(&self) {
        let pid = self.pid().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Waits (bounded) for the process to exit, e.g. after [`Self::signal_term`].
    pub fn wait_exit(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("still running");
        let pid = child.id().to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        match rx.recv_timeout(BOUND) {
            Ok(status) => status.expect("wait for the sidecar"),
            Err(_) => {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
                panic!(
                    "{} did not exit after SIGTERM:\n{}",
                    self.identity,
                    self.log()
                );
            }
        }
    }

    /// Sends SIGKILL (no resignation, no session close) and reaps the process.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("still running");
        child.kill().expect("kill -9 the sidecar");
        let _ = child.wait();
    }

    /// `METHOD path` against this sidecar; the JSON answer (or the text as a JSON string).
    pub async fn call(&self, method: &str, path: &str) -> Response {
        http(self.addr, method, path, None).await
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- log of {} ---\n{}", self.identity, self.log());
        }
    }
}

/// An HTTP answer.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Response {
    /// The header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The error code of an error answer, checking the envelope's shape on the way.
    pub fn error_code(&self) -> &str {
        let error = &self.body["error"];
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "no message: {self:?}"
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{self:?}"
        );
        error["code"]
            .as_str()
            .unwrap_or_else(|| panic!("not an error envelope: {self:?}"))
    }
}

/// Holds an answer to the API's table (`baton_sidecar::http::api`): a JSON success has the
/// shape of one of the endpoint's answers with that status, an error the envelope and one of the
/// endpoint's codes with its status. Every answer of every test goes through here (and every
/// event of [`sse::EventStream`] through [`check_event`]), so the table, the reference made from
/// it and the OpenAPI document cannot drift from what the sidecar answers.
pub fn check_contract(method: &str, target: &str, status: u16, json: bool, body: &Value) {
    use baton_sidecar::http::api::{self, Content};
    let path = target.split('?').next().unwrap_or(target);
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return;
    };
    let Ok(route) = baton_sidecar::http::route(&method, path) else {
        return;
    };
    let endpoint = route.endpoint();
    if !json {
        return;
    }
    if status < 300 {
        let mut schemas = endpoint
            .answers
            .iter()
            .filter(|a| a.status == status)
            .map(|a| a.content)
            .peekable();
        if schemas.peek().is_none() {
            panic!("{method} {target}: status {status} is not in the API's table");
        }
        let mut why = Vec::new();
        for content in schemas {
            match content {
                Content::Json(name) => match api::conforms(name, body) {
                    Ok(()) => return,
                    Err(e) => why.push(e),
                },
                Content::AnyJson => return,
                Content::EventStream(_) | Content::OpenMetrics => {}
            }
        }
        panic!("{method} {target}: {status} answer is not what the API's table says: {why:?}");
    }
    if let Err(e) = api::conforms("Error", body) {
        panic!("{method} {target}: {status} is not the error envelope: {e}");
    }
    let code = body["error"]["code"].as_str().unwrap_or_default();
    assert!(
        endpoint
            .all_errors()
            .iter()
            .any(|c| c.as_str() == code && c.status().as_u16() == status),
        "{method} {target}: {status} {code} is not among the endpoint's errors in the API's table"
    );
}

/// Holds an event of a stream opened with `METHOD target` to the API's table: its name is one
/// of the endpoint's events and its data has that event's shape.
pub fn check_event(method: &str, target: &str, name: &str, data: &Value) {
    use baton_sidecar::http::api::{self, Content};
    let path = target.split('?').next().unwrap_or(target);
    let Ok(m) = Method::from_bytes(method.as_bytes()) else {
        return;
    };
    let Ok(route) = baton_sidecar::http::route(&m, path) else {
        return;
    };
    let events = route
        .endpoint()
        .answers
        .iter()
        .find_map(|a| match a.content {
            Content::EventStream(events) => Some(events),
            _ => None,
        });
    let Some(events) = events else {
        panic!("{method} {target}: a stream, but the API's table lists no events");
    };
    let mut why = Vec::new();
    for event in events.iter().filter(|e| e.name == name) {
        match api::conforms(event.schema, data) {
            Ok(()) => return,
            Err(e) => why.push(e),
        }
    }
    panic!("{method} {target}: event {name} is not what the API's table says: {why:?} {data}");
}

/// `METHOD path` on `addr` (the sidecar's API or probe port), with an optional JSON body,
/// through the client Baton's tools share; the answer with its body as JSON (or its text as
/// a JSON string).
pub async fn http(addr: SocketAddr, method: &str, path: &str, body: Option<Vec<u8>>) -> Response {
    let method = Method::from_bytes(method.as_bytes()).expect("an HTTP method");
    let answer = HttpClient::plain(BOUND)
        .request(&addr.to_string(), method.clone(), path, body)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let response = Response {
        status: answer.status.as_u16(),
        headers: answer
            .headers
            .iter()
            .map(|(k, v)| {
                let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
                (k.as_str().to_owned(), value)
            })
            .collect(),
        body: answer.json(),
    };
    let json = response.header("content-type") == Some("application/json");
    check_contract(method.as_str(), path, response.status, json, &response.body);
    response
}

/// Sends `bytes` as they are (then half-closes if `close`), and returns all the sidecar sends
/// before it closes the connection, within `BOUND`: for requests no HTTP client would send
/// (garbage, or framing a test wants exactly).
pub async fn send_raw(addr: SocketAddr, bytes: &[u8], close: bool) -> Vec<u8> {
    let talk = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connect to the sidecar");
        // The sidecar may refuse and close before reading all of it: keep what it answered.
        let _ = stream.write_all(bytes).await;
        if close {
            let _ = stream.shutdown().await;
        }
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        answer
    };
    tokio::time::timeout(BOUND, talk).await.unwrap_or_else(|_| {
        panic!(
            "neither an answer nor a close within {BOUND:?} after {:?}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(80)])
        )
    })
}

/// The status of the first response in a raw `answer`, if there is one.
pub fn raw_status(answer: &[u8]) -> Option<u16> {
    let rest = answer
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| answer.strip_prefix(b"HTTP/1.0 "))?;
    std::str::from_utf8(rest.get(..3)?).ok()?.parse().ok()
}
