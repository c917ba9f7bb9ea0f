//! The chart's alerts (`charts/baton/files/alerts.yaml`) and dashboard
//! (`charts/baton/files/grafana/baton.json`) name only metrics Baton exports. Every `baton_…`
//! name in them must be a series or family that a running member or a running sidecar serves
//! on `/metrics`, or that the operator's registry renders. (The operator cannot run without a
//! Kubernetes API server; its registry is rendered in-process, the same code its `/metrics`
//! serves.) A renamed metric, or an alert written against one nobody exports, fails here.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use baton_tests::cluster::Cluster;
use baton_tests::cluster::Method as AdminMethod;
use baton_tls::HttpClient;
use http::Method;

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/baton/files");
const BOUND: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboards_and_alerts_name_only_exported_metrics() {
    let mut cluster = Cluster::start(1).await.expect("a one-member ensemble");
    cluster.wait_for_leader().await.expect("a leader");

    let sidecar = Sidecar::start(&cluster.connect_string());
    let http = HttpClient::plain(BOUND);
    // A lock taken and the election won, so labelled families have series too.
    let granted = http
        .request(
            &sidecar.addr,
            Method::POST,
            "/lock/observability?wait=10s&ttl=30s",
            None,
        )
        .await
        .expect("POST /lock");
    assert_eq!(granted.status, 200, "{:?}", granted.body);

    let member = cluster
        .admin(1, AdminMethod::Get, "/metrics", None)
        .await
        .expect("the member's /metrics");
    let member = member.body.as_str().expect("metrics text").to_owned();
    let sidecar_text = http
        .request(&sidecar.addr, Method::GET, "/metrics", None)
        .await
        .expect("the sidecar's /metrics");
    let sidecar_text = String::from_utf8_lossy(&sidecar_text.body).into_owned();
    let operator = operator_metrics();

    let mut exported = BTreeSet::new();
    for text in [&member, &sidecar_text, &operator] {
        exported.extend(exported_names(text));
    }
    assert!(
        exported.contains("baton_raft_term") && exported.contains("baton_sidecar_is_leader"),
        "the scrapes look empty: {exported:?}"
    );
    assert!(
        !exported.contains("baton_no_such_metric_total"),
        "the check must be able to fail"
    );

    for file in ["alerts.yaml", "grafana/baton.json"] {
        let text = std::fs::read_to_string(format!("{CHART}/{file}")).expect("read the chart file");
        let named = referenced_names(&text);
        assert!(named.len() > 10, "{file} names only {named:?}");
        let missing: Vec<&String> = named.difference(&exported).collect();
        assert!(
            missing.is_empty(),
            "{file} names metrics nobody exports: {missing:?}\nexported: {exported:?}"
        );
    }
}

/// The operator's registry after one reconcile (of an ensemble with a backup) and one review: a family split by labels shows
/// nothing until it has a series.
fn operator_metrics() -> String {
    let metrics = std::sync::Arc::new(baton_operator::metrics::Metrics::new());
    metrics.set_leader(true);
    metrics.start_reconcile().finish(None);
    let status = baton_operator::crd::CoordinationEnsembleStatus {
        members: vec![1, 2, 3],
        ready_replicas: 3,
        leader: Some(1),
        ..Default::default()
    };
    metrics.observe_ensemble("prod/zk", &status);
    let backup = baton_operator::crd::LastBackup {
        time: "2026-11-23T03:00:00Z".into(),
        result: baton_operator::crd::BackupResult::Succeeded,
        job: Some("zk-backup-29399580".into()),
        last_success_time: Some("2026-11-23T03:00:41Z".into()),
    };
    metrics.observe_backup("prod/zk", Some(Some(&backup)));
    metrics.record_review("injected");
    metrics.observe_missing_sidecars(&std::collections::BTreeMap::from([(
        "prod/zk".to_string(),
        1,
    )]));
    metrics.render()
}

/// Every name a scrape of `text` (OpenMetrics) can show: each sample's name, and for each
/// family the names its type gives samples (`_total`, `_bucket`/`_sum`/`_count`), since a
/// family with labels has no samples until something happened.
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') {
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// The `baton_…` metric names a rules file or dashboard uses.
fn referenced_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("baton_") {
        let start = i + at;
        let boundary = start == 0 || {
            let before = bytes[start - 1];
            !(before.is_ascii_alphanumeric() || before == b'_' || before == b'-' || before == b'.')
        };
        let end = text[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(text.len(), |n| start + n);
        if boundary {
            names.insert(text[start..end].to_string());
        }
        i = end;
    }
    names
}

/// A `baton-sidecar` process (built beside `baton-ensemble`), up with a session.
struct Sidecar {
    addr: String,
    child: Child,
}

impl Sidecar {
    fn start(ensemble: &str) -> Sidecar {
        let binary = baton_tests::baton_binary()
            .expect("the baton-ensemble binary")
            .with_file_name("baton-sidecar");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let mut child = Command::new(&binary)
            .args(["--ensemble", ensemble, "--listen", &addr])
            .args(["--identity", "observer", "--election", "observability"])
            .env("BATON_LOG", "info")
            .env_remove("BATON_NAMESPACE")
            .env_remove("BATON_TOKEN_FILE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        let stderr = child.stderr.take().expect("piped stderr");
        let (lines, seen) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let mut log = Vec::new();
        let deadline = std::time::Instant::now() + BOUND;
        while !log.iter().any(|l: &String| l.contains("became the leader")) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match seen.recv_timeout(left) {
                Ok(line) => log.push(line),
                Err(_) => panic!("the sidecar never led its election:\n{}", log.join("\n")),
            }
        }
        Sidecar { addr, child }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
