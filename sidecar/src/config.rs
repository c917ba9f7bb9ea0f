//! Command-line flags, each with an environment variable for the injected form (DESIGN.md §2).

use std::net::SocketAddr;
use std::time::Duration;

use baton_duration::DurationError;
use clap::Parser;

use crate::app_health::HealthUrl;
use crate::recipe::{DigestCredentials, Namespace, ResourceName};

/// Longest accepted --release-grace: it must fit in the pod's terminationGracePeriodSeconds.
pub const MAX_RELEASE_GRACE: Duration = Duration::from_secs(300);

/// The --session-timeout values the sidecar accepts.
pub const SESSION_TIMEOUT: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(600);

/// When this pod stands in its elections (`--candidacy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Candidacy {
    /// From start to SIGTERM (unless the app fails its health checks).
    Always,
    /// Only while the app holds `GET /leader/NAME/campaign` open.
    App,
}

/// Leader election and locks for one pod, over localhost HTTP.
///
/// Holds one session to a Baton (or Apache ZooKeeper) ensemble, stands in the named elections,
/// takes locks on the application's behalf, and serves:
///
///   GET  /leader[/NAME]            leader and this pod's role (?wait=30s&token=T long-polls)
///   GET  /leader[/NAME]?follow=stream   the answer now, then every change (text/event-stream)
///   GET  /leader[/NAME]/ready      200 on the leader, 503 elsewhere (a readinessProbe)
///   GET  /events                   text/event-stream: leader, state (CONNECTED, SUSPENDED,
///                                  LOST), and lock granted/lost/released events
///   POST /leader[/NAME]/resign     step down and queue again at the back
///   GET  /leader[/NAME]/campaign   with --candidacy app: stand in the election while this
///                                  stream is open (event: candidate, elected, deposed, lost,
///                                  suspended, resumed, stepping-down)
///   POST /leader[/NAME]/release    after a `stepping-down` event: hand leadership over now
///   POST /lock/NAME                ?wait=10s&ttl=30s&mode=exclusive|read|write
///   POST /lock/NAME?hold=stream    held while the connection stays open: text/event-stream
///                                  (event: granted, then lost or released; `: keep-alive`)
///   POST /lock/NAME/renew          ?token=T&ttl=30s (T: the grant's fencing token)
///   DELETE /lock/NAME              ?token=T  release (409 StaleToken if T is not the grant's)
///   GET  /lock/NAME                holders, waiters, whether this pod holds it
///   GET  /healthz, /readyz, /metrics
///
/// Answers about this pod's leadership and grants carry `validUntil`: until when it may act
/// without the sidecar hearing from the ensemble again (2/3 of the session timeout after the
/// newest request the ensemble answered; DESIGN.md §2).
///
/// Elections and locks live in /baton/<namespace>/elections/NAME and
/// /baton/<namespace>/locks/NAME; only live (ephemeral) nodes there lead or hold.
///
/// With --app-health, an app that fails its checks loses leadership and its locks until it is
/// healthy again.
///
/// SIGTERM releases every lock at once, and resigns every election at once unless this pod
/// leads it and the app follows it (GET /events, /leader/NAME?follow=stream or a campaign
/// stream): those streams get `event: stepping-down` and the election is resigned when the app
/// answers POST /leader/NAME/release, or after --release-grace. Then the sidecar closes the
/// session and exits 0.
#[derive(Parser, Debug, Clone)]
// The feature levels are those of this release's baton-ensemble (`baton_machine::feature::
// SUPPORTED`; tests/e2e/tests/upgrade.rs checks both binaries say the same).
#[command(
    name = "baton-sidecar",
    version = concat!(env!("CARGO_PKG_VERSION"), " (feature levels 1 to 2)"),
    verbatim_doc_comment
)]
pub struct Config {
    /// Ensemble client endpoints, HOST:PORT[,HOST:PORT...] (the session fails over between them).
    #[arg(long, env = "BATON_ENSEMBLE", value_parser = parse_ensemble)]
    pub ensemble: String,

    /// The ensemble's CA certificate (PEM): connect to --ensemble over TLS (its
    /// --secure-client-addr), accepting only a server certificate this CA signed. The CA is
    /// the ensemble's own and signs only its members, so the server's host name is not
    /// checked (as between members). Absent: plain TCP.
    #[arg(long, env = "BATON_ENSEMBLE_CA")]
    pub ensemble_ca: Option<std::path::PathBuf>,

    /// Where the HTTP API listens. Keep it on localhost: anyone who reaches it can take locks
    /// and resign as this pod. Port 0 picks a free port (logged at startup).
    #[arg(long, env = "BATON_LISTEN", default_value = "127.0.0.1:4040")]
    pub listen: SocketAddr,

    /// A second, read-only listener for the kubelet's probes and Prometheus, e.g. `[::]:4041`
    /// (probes reach the pod IP, never its localhost; `[::]` takes IPv6 and IPv4): GET /healthz,
    /// /readyz, /leader[/NAME], /leader[/NAME]/ready and /metrics; everything else is refused
    /// with 403.
    /// Absent: no second listener.
    #[arg(long, env = "BATON_PROBE_LISTEN")]
    pub probe_listen: Option<SocketAddr>,

    /// This member's name in elections and locks, unique among the members (the pod name).
    #[arg(long, env = "BATON_IDENTITY", value_parser = parse_identity)]
    pub identity: String,

    /// An election to stand in; repeat the flag for several (BATON_ELECTION takes a
    /// comma-separated list). The first is the one `/leader` without a name refers to.
    /// Names: letters, digits, '-', '_', '.'; "ready", "resign", "campaign" and "release" are
    /// reserved (`baton_names`).
    #[arg(long = "election", env = "BATON_ELECTION", value_delimiter = ',', value_parser = parse_election)]
    pub elections: Vec<ResourceName>,

    /// The application's address (e.g. POD_IP:8080), published to followers as the leader's
    /// `address` while this pod leads.
    #[arg(long, env = "BATON_ADDRESS")]
    pub address: Option<String>,

    /// Requested session timeout: how long the ensemble keeps this pod's leadership and locks
    /// through a disconnection (the server may clamp it). 1s to 10m.
    #[arg(long, env = "BATON_SESSION_TIMEOUT", default_value = "10s", value_parser = parse_session_timeout)]
    pub session_timeout: Duration,

    /// This pod's name (downward API), to label it `baton.dev/role=leader|candidate`. Needs
    /// --namespace.
    #[arg(long, env = "BATON_POD", requires = "namespace")]
    pub pod: Option<String>,

    /// This pod's namespace (downward API): elections and locks live in
    /// /baton/<namespace>/..., and with --pod the sidecar labels its pod there. Absent:
    /// `default` (outside Kubernetes), and no pod labels.
    #[arg(long, env = "BATON_NAMESPACE", value_parser = parse_namespace)]
    pub namespace: Option<Namespace>,

    /// With --pod/--namespace: mirror each election this pod leads into the Lease
    /// `baton-<election>` (coordination.k8s.io/v1) of its namespace: holderIdentity = the pod,
    /// acquireTime, renewTime (every third of --session-timeout, the leaseDurationSeconds),
    /// leaseTransitions, the fencing token as the annotation baton.dev/fencing-token; the holder
    /// is cleared when the pod steps down. Needs get, create and update on leases. Off by
    /// default (the RBAC is granted per service account); ignored without --pod.
    #[arg(long, env = "BATON_MIRROR_LEASE")]
    pub mirror_lease: bool,

    /// A projected ServiceAccount token (audience `baton`; the webhook mounts it at
    /// /var/run/secrets/baton/token): sent as ZooKeeper auth scheme `k8s` on every connection,
    /// read afresh each time and re-sent when the kubelet rotates it. The ensemble checks it
    /// with TokenReview, and the session becomes this pod. The sidecar refuses to start if the
    /// file cannot be read.
    #[arg(long, env = "BATON_TOKEN_FILE")]
    pub token_file: Option<std::path::PathBuf>,

    /// For Apache ZooKeeper (or Baton without identities): send digest auth as USER:PASSWORD
    /// and create this namespace's nodes with an ACL that grants everything to that user and
    /// nothing to anyone else.
    #[arg(long, env = "BATON_ZK_DIGEST", value_parser = DigestCredentials::parse, hide_env_values = true)]
    pub zk_digest: Option<DigestCredentials>,

    /// The app's health endpoint, http://HOST:PORT/PATH (e.g. http://127.0.0.1:8080/healthz),
    /// checked with a GET every --app-health-interval. After --app-health-failures checks in a
    /// row fail (not 2xx, refused, or no answer within the interval), the sidecar stands aside
    /// in every election (the next candidate leads), ends the app's locks and stream holds
    /// (`lost` events, reason "app unhealthy") and refuses new ones (503 AppUnhealthy); after
    /// as many healthy answers in a row it stands again, at the back of each queue. The app
    /// counts as healthy until checks say otherwise. Absent: no checks.
    #[arg(long, env = "BATON_APP_HEALTH", value_parser = HealthUrl::parse)]
    pub app_health: Option<HealthUrl>,

    /// Time between two app health checks, and how long one may take. 100ms to 1m.
    #[arg(long, env = "BATON_APP_HEALTH_INTERVAL", default_value = "2s", value_parser = parse_health_interval)]
    pub app_health_interval: Duration,

    /// Checks in a row that must fail to stand aside, and succeed to stand again. 1 to 100.
    #[arg(long, env = "BATON_APP_HEALTH_FAILURES", default_value = "3",
        value_parser = clap::value_parser!(u32).range(1..=100))]
    pub app_health_failures: u32,

    /// `always`: stand in every --election from start to SIGTERM. `app`: stand in election
    /// NAME only while the app holds `GET /leader/NAME/campaign` open (a text/event-stream
    /// telling it `candidate`, `elected` with the fencing token, `deposed`, `lost`); the
    /// sidecar withdraws within milliseconds of that connection closing, so a crashed app
    /// never keeps leadership. Either way /leader shows who leads.
    #[arg(long, env = "BATON_CANDIDACY", value_enum, default_value_t = Candidacy::Always)]
    pub candidacy: Candidacy,

    /// On SIGTERM, how long a leading pod whose app follows the election (a `stepping-down`
    /// event went to it) waits for `POST /leader/NAME/release` before resigning anyway. Must
    /// fit, with a few seconds to spare, in the pod's terminationGracePeriodSeconds (30s by
    /// default). Apps that follow nothing are handed over at once. 0s to 5m; 0s: never wait.
    #[arg(long, env = "BATON_RELEASE_GRACE", default_value = "10s", value_parser = parse_release_grace)]
    pub release_grace: Duration,
}

impl Config {
    /// The namespace the recipes work in: --namespace, else `default`.
    pub fn recipe_namespace(&self) -> Namespace {
        self.namespace.clone().unwrap_or_default()
    }

    /// Checks what single flags cannot: no election named twice.
    pub fn validate(&self) -> Result<(), String> {
        for (i, name) in self.elections.iter().enumerate() {
            if self.elections[..i].contains(name) {
                return Err(format!("election {name:?} is given twice"));
            }
        }
        Ok(())
    }
}

fn parse_ensemble(value: &str) -> Result<String, String> {
    let value = value.trim();
    if value.is_empty() {
        return Err("no endpoints given".into());
    }
    for endpoint in value.split(',') {
        let Some((host, port)) = endpoint.rsplit_once(':') else {
            return Err(format!("{endpoint:?} is not HOST:PORT"));
        };
        if host.is_empty() || host.contains('/') {
            return Err(format!(
                "{endpoint:?}: bad host (and no chroot: the recipes own /baton)"
            ));
        }
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => return Err(format!("{endpoint:?}: bad port {port:?}")),
        }
    }
    Ok(value.to_owned())
}

fn parse_identity(value: &str) -> Result<String, String> {
    if value.is_empty() || value.len() > 253 {
        return Err("must be 1 to 253 bytes".into());
    }
    if value.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(value.to_owned())
}

fn parse_election(value: &str) -> Result<ResourceName, String> {
    // The webhook refuses pods with the same rule (baton_names), so none crash-loops on it.
    baton_names::check_election(value).map_err(|e| e.to_string())?;
    ResourceName::new(value).map_err(|e| e.to_string())
}

fn parse_namespace(value: &str) -> Result<Namespace, String> {
    Namespace::new(value).map_err(|e| e.to_string())
}

fn parse_health_interval(value: &str) -> Result<Duration, DurationError> {
    baton_duration::parse_within(value, Duration::from_millis(100)..=Duration::from_secs(60))
}

fn parse_release_grace(value: &str) -> Result<Duration, String> {
    baton_duration::parse_within(value, Duration::ZERO..=MAX_RELEASE_GRACE).map_err(|e| match e {
        DurationError::OutOfRange { .. } => {
            format!("{e}, and it must fit in the pod's terminationGracePeriodSeconds")
        }
        e => e.to_string(),
    })
}

fn parse_session_timeout(value: &str) -> Result<Duration, DurationError> {
    baton_duration::parse_within(value, SESSION_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        Config::try_parse_from(["baton-sidecar"].iter().chain(args))
    }

    #[test]
    fn the_contract_form_parses() {
        let cfg = parse(&[
            "--ensemble",
            "a:2181,b:2181",
            "--listen",
            "127.0.0.1:4040",
            "--identity",
            "pod-0",
            "--election",
            "orders",
            "--election",
            "billing",
            "--session-timeout",
            "15s",
            "--pod",
            "pod-0",
            "--namespace",
            "shop",
        ])
        .expect("parses");
        assert_eq!(cfg.ensemble, "a:2181,b:2181");
        assert_eq!(
            cfg.elections.iter().map(|e| e.as_str()).collect::<Vec<_>>(),
            ["orders", "billing"]
        );
        assert_eq!(cfg.session_timeout, Duration::from_secs(15));
        assert_eq!(cfg.recipe_namespace().as_str(), "shop");
        assert!(!cfg.mirror_lease, "no Lease mirror unless asked");
        assert!(cfg.validate().is_ok());
        let mirrored = parse(&[
            "--ensemble",
            "a:2181",
            "--identity",
            "pod-0",
            "--pod",
            "pod-0",
            "--namespace",
            "shop",
            "--mirror-lease",
        ])
        .expect("parses");
        assert!(mirrored.mirror_lease);
    }

    #[test]
    fn tenancy_flags_parse() {
        let base = ["--ensemble", "a:2181", "--identity", "x"];
        let with = |extra: &[&str]| parse(&[&base[..], extra].concat());
        let plain = with(&[]).expect("parses");
        assert_eq!(plain.recipe_namespace().as_str(), "default");
        assert!(plain.token_file.is_none() && plain.zk_digest.is_none());
        // A namespace alone names where the recipes live; it labels no pod.
        let ns = with(&["--namespace", "shop"]).expect("parses");
        assert_eq!(ns.recipe_namespace().as_str(), "shop");
        assert!(ns.pod.is_none());
        assert!(with(&["--namespace", "Shop"]).is_err());
        assert!(with(&["--namespace", "a/b"]).is_err());
        let auth = with(&["--token-file", "/t", "--zk-digest", "u:p"]).expect("parses");
        assert_eq!(auth.token_file.as_deref(), Some(std::path::Path::new("/t")));
        assert_eq!(auth.zk_digest.as_ref().map(|d| d.user()), Some("u"));
        assert!(with(&["--zk-digest", "nopassword"]).is_err());
    }

    #[test]
    fn bad_flags_are_refused() {
        let base = ["--ensemble", "a:2181", "--identity", "x"];
        let with = |extra: &[&str]| parse(&[&base[..], extra].concat());
        assert!(with(&[]).is_ok());
        assert!(with(&["--election", "ready"]).is_err());
        assert!(with(&["--election", "a/b"]).is_err());
        let err = with(&["--session-timeout", "10"]).expect_err("a bare number");
        assert!(err.to_string().contains("write 10s"), "{err}");
        let err = with(&["--session-timeout", "0"]).expect_err("below 1s");
        assert!(err.to_string().contains("from 1s to 10m"), "{err}");
        let grace = with(&["--release-grace", "6m"]).expect_err("past 5m");
        assert!(
            grace.to_string().contains("terminationGracePeriodSeconds"),
            "{grace}"
        );
        let ok = with(&[
            "--session-timeout",
            "1m30s",
            "--app-health-interval",
            "1.5s",
        ])
        .expect("Go-style durations parse");
        assert_eq!(ok.session_timeout, Duration::from_secs(90));
        assert_eq!(ok.app_health_interval, Duration::from_millis(1500));
        assert!(with(&["--pod", "p"]).is_err(), "--pod needs --namespace");
        assert!(parse(&["--ensemble", "a", "--identity", "x"]).is_err());
        assert!(parse(&["--ensemble", "a:0", "--identity", "x"]).is_err());
        assert!(parse(&["--ensemble", "a:2181/chroot", "--identity", "x"]).is_err());
        assert!(parse(&["--ensemble", "a:2181", "--identity", ""]).is_err());
        assert!(with(&["--app-health", "https://127.0.0.1:8080/"]).is_err());
        assert!(with(&["--app-health", "127.0.0.1:8080"]).is_err());
        assert!(with(&["--app-health-interval", "10ms"]).is_err());
        assert!(with(&["--app-health-failures", "0"]).is_err());
        assert!(with(&["--election", "campaign"]).is_err());
        assert!(with(&["--election", "release"]).is_err());
        assert!(with(&["--candidacy", "sometimes"]).is_err());
        assert!(with(&["--release-grace", "6m"]).is_err());
        let plain = with(&[]).expect("parses");
        assert_eq!(plain.candidacy, Candidacy::Always);
        assert_eq!(plain.release_grace, Duration::from_secs(10));
        let app = with(&["--candidacy", "app", "--release-grace", "0s"]).expect("parses");
        assert_eq!(
            (app.candidacy, app.release_grace),
            (Candidacy::App, Duration::ZERO)
        );
        let health = with(&[
            "--app-health",
            "http://127.0.0.1:8080/healthz?deep=1",
            "--app-health-failures",
            "2",
        ])
        .expect("parses");
        let url = health.app_health.expect("set");
        assert_eq!(
            (url.authority(), url.path()),
            ("127.0.0.1:8080", "/healthz?deep=1")
        );
        assert_eq!(health.app_health_interval, Duration::from_secs(2));
        assert_eq!(health.app_health_failures, 2);
        let twice = with(&["--election", "e", "--election", "e"]).expect("parses");
        assert!(twice.validate().is_err());
    }
}
