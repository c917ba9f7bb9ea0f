//! Command-line flags: the contract in DESIGN.md §1, plus tuning knobs with safe defaults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// A ZooKeeper-compatible coordination server whose writes are replicated with Raft.
///
/// Clients (Apache ZooKeeper's Java client, Curator, kazoo, zkCli.sh, the zookeeper-client crate)
/// connect to --client-addr. Every write is durable on a quorum's disks before it is acknowledged.
/// Members authenticate each other with certificates of the ensemble's CA (--tls-*); make them
/// with `baton-ensemble certs --help`. Back up and restore with `baton-ensemble snapshot --help`.
/// Durations are written as in Go and Kubernetes: 500ms, 30s, 1m30s, 2h.
#[derive(Parser, Debug, Clone)]
#[command(name = "baton-ensemble", version = version_text(), about, long_about)]
pub struct Config {
    /// This member's Raft id (a positive integer, unique in the ensemble, recorded in the data dir).
    #[arg(long, env = "BATON_ID", value_parser = clap::value_parser!(u64).range(1..))]
    pub id: u64,

    /// Where the Raft log, snapshots and the member identity live. Created if missing.
    #[arg(long, env = "BATON_DATA_DIR")]
    pub data_dir: PathBuf,

    /// Address for ZooKeeper clients and four-letter words, in plain TCP; `off` for none
    /// (clients then use --secure-client-addr).
    #[arg(long, env = "BATON_CLIENT_ADDR", default_value = "127.0.0.1:2181")]
    pub client_addr: crate::server::ListenAddr,

    /// Address for Raft traffic from other members (never decoded on the client port).
    #[arg(long, env = "BATON_PEER_ADDR", default_value = "127.0.0.1:2888")]
    pub peer_addr: SocketAddr,

    /// Address of the admin HTTP API: /healthz, /readyz, /metrics, /v1/status.
    #[arg(long, env = "BATON_ADMIN_ADDR", default_value = "127.0.0.1:8080")]
    pub admin_addr: SocketAddr,

    /// Initial members as ID=HOST:PORT of their peer address, comma-separated.
    /// Absent: a one-member ensemble of this member alone.
    #[arg(long, env = "BATON_MEMBERS", value_delimiter = ',', value_parser = parse_member)]
    pub members: Vec<(u64, String)>,

    /// The ensemble's cluster id (letters, digits, `._-`), recorded in the data dir on first start;
    /// members refuse peers and data dirs of another cluster. Absent: the one --tls-cert names,
    /// else derived from --members, so members bootstrapped together agree. A member added later must be given the ensemble's
    /// id (GET /v1/status shows it).
    #[arg(long, env = "BATON_CLUSTER_ID")]
    pub cluster_id: Option<String>,

    /// Join a running ensemble instead of bootstrapping one: start with no configuration and
    /// wait for the leader to add this member (POST /v1/members on the leader). Needs
    /// --cluster-id (or a certificate, which names it), and --members naming the current members so their addresses are known.
    /// Ignored once the data dir holds a configuration.
    #[arg(long, env = "BATON_JOIN")]
    pub join: bool,

    /// Smallest session timeout granted to clients.
    #[arg(long, default_value = "4s", value_parser = parse_session_timeout)]
    pub min_session_timeout: Duration,

    /// Largest session timeout granted to clients.
    #[arg(long, default_value = "40s", value_parser = parse_session_timeout)]
    pub max_session_timeout: Duration,

    /// Largest frame a client may send, in bytes (ZooKeeper's jute.maxbuffer, 1 MiB - 1 by
    /// default); a larger one closes the connection. This bounds znode data size too.
    #[arg(long, default_value_t = baton_proto::frame::DEFAULT_MAX_FRAME)]
    pub max_frame_bytes: usize,

    /// Most concurrent client connections; more are refused at accept.
    #[arg(long, default_value_t = 10_000)]
    pub max_client_connections: usize,

    /// Take a snapshot of the tree (and compact the log) after this many applied entries.
    #[arg(long, default_value_t = 100_000)]
    pub snapshot_entries: u64,

    /// Raft tick; elections time out after 10 ticks, heartbeats every 2.
    #[arg(long, default_value = "100ms", value_parser = baton_duration::parse)]
    pub tick: Duration,

    /// How often the leader deletes empty containers and expired TTL nodes (ZooKeeper: 60s).
    #[arg(long, default_value = "10s", value_parser = baton_duration::parse)]
    pub housekeeping_interval: Duration,

    /// Skip fsync. Acknowledged writes can be lost on power failure: for throwaway tests only.
    #[arg(long, hide = true)]
    pub unsafe_no_fsync: bool,

    /// The ensemble CA's certificate (PEM). Peers must present a member certificate it signed,
    /// naming the member id they claim; the admin API's status and membership calls need the
    /// admin certificate it signed. Make a CA and certificates with `baton-ensemble certs`.
    #[arg(long, env = "BATON_TLS_CA", requires_all = ["tls_cert", "tls_key"])]
    pub tls_ca: Option<PathBuf>,

    /// This member's certificate (PEM), signed by --tls-ca and naming this member's --id and
    /// the cluster id. Served on the peer, admin and secure client ports; re-read when the
    /// file changes, so a renewed certificate needs no restart.
    #[arg(long, env = "BATON_TLS_CERT", requires_all = ["tls_ca", "tls_key"])]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "BATON_TLS_KEY", requires_all = ["tls_ca", "tls_cert"])]
    pub tls_key: Option<PathBuf>,

    /// Run without certificates: peer links in the clear and unauthenticated (anyone who
    /// reaches the peer port can pose as a member), and the admin API open to anyone who
    /// reaches it. For a laptop, never for a shared network; logged as a warning at start.
    #[arg(long, env = "BATON_INSECURE_NO_TLS", conflicts_with = "tls_ca")]
    pub insecure_no_tls: bool,

    /// Test-only: how long a handshake may wait for its new session to apply, or for the leader
    /// to confirm a reconnect, before the connection closes and the client retries. A backstop
    /// that a leader change never waits for; tests set it past their own deadline to prove it.
    #[arg(long, hide = true, default_value = "5s", value_parser = baton_duration::parse)]
    pub handshake_timeout: Duration,

    /// Test-only: an admin endpoint that appends raw bytes to the Raft log, skipping every
    /// check, to prove that an entry nobody can apply does not stop the ensemble. Only in
    /// builds with the `testing` feature.
    #[cfg(feature = "testing")]
    #[arg(long, hide = true)]
    pub unsafe_testing_raw_proposals: bool,

    /// Test-only: read this member's free disk bytes from this file (a decimal number) instead
    /// of the data volume, so a test can fill and free a "disk" without filling one. Only in
    /// builds with the `testing` feature.
    #[cfg(feature = "testing")]
    #[arg(long, hide = true)]
    pub unsafe_testing_free_disk_bytes_file: Option<PathBuf>,

    // What one tenant can take (DESIGN.md §4). The quota flags and --check-identities only
    // give the values a NEW ensemble starts with: the settings are replicated state, changed
    // afterwards with PUT /v1/settings, and members never disagree on them.
    /// Znodes one namespace (`/baton/<ns>` and below) may hold; creates past it fail with
    /// BadArguments (-8), the code every ZooKeeper client understands.
    #[arg(long, env = "BATON_QUOTA_NAMESPACE_ZNODES", default_value_t = baton_machine::settings::DEFAULT_NAMESPACE_ZNODES)]
    pub quota_namespace_znodes: u64,

    /// Bytes (paths plus data) one namespace may hold; writes past it fail with
    /// BadArguments (-8).
    #[arg(long, env = "BATON_QUOTA_NAMESPACE_BYTES", default_value_t = baton_machine::settings::DEFAULT_NAMESPACE_BYTES)]
    pub quota_namespace_bytes: u64,

    /// Znodes everything outside `/baton/<ns>` may hold together (the shared pool).
    #[arg(long, env = "BATON_QUOTA_SHARED_ZNODES", default_value_t = baton_machine::settings::DEFAULT_SHARED_ZNODES)]
    pub quota_shared_znodes: u64,

    /// Bytes (paths plus data) everything outside `/baton/<ns>` may hold together.
    #[arg(long, env = "BATON_QUOTA_SHARED_BYTES", default_value_t = baton_machine::settings::DEFAULT_SHARED_BYTES)]
    pub quota_shared_bytes: u64,

    /// Ephemeral nodes one session may own; creates past it fail with
    /// BadArguments (-8).
    #[arg(long, env = "BATON_MAX_EPHEMERALS_PER_SESSION", default_value_t = baton_machine::settings::DEFAULT_EPHEMERALS_PER_SESSION)]
    pub max_ephemerals_per_session: u64,

    /// Free bytes this member keeps on its data volume: below it the member raises the NOSPACE
    /// alarm, and every member refuses writes that add data (BadArguments, -8) while reads,
    /// deletes and sessions go on; the alarm clears by itself once twice this is free. 0 turns
    /// the alarm off.
    #[arg(long, env = "BATON_MIN_FREE_DISK_BYTES", default_value_t = crate::disk_space::DEFAULT_MIN_FREE_BYTES)]
    pub min_free_disk_bytes: u64,

    // Client ports: TLS and limits (DESIGN.md §4).
    /// Address for ZooKeeper clients over TLS (ZooKeeper's secureClientPort): the same protocol
    /// and four-letter words, this member presenting --tls-cert. Needs --tls-ca/--tls-cert/--tls-key.
    #[arg(long, env = "BATON_SECURE_CLIENT_ADDR")]
    pub secure_client_addr: Option<SocketAddr>,

    /// Most client connections from one IP address, plain and TLS together (ZooKeeper's
    /// maxClientCnxns); more are closed at accept. 0: no limit.
    #[arg(long, default_value_t = 60)]
    pub max_client_connections_per_ip: usize,

    /// Time a client has from connecting to having its session: TLS handshake, ConnectRequest
    /// and the ensemble's answer (or a whole four-letter word). Slower ones are closed.
    #[arg(long, default_value = "10s", value_parser = baton_duration::parse)]
    pub client_handshake_timeout: Duration,

    /// Requests one connection may have awaiting their replies; past it the connection is not
    /// read until the client reads its replies (backpressure, as ZooKeeper's RequestThrottler).
    #[arg(long, default_value_t = 1000)]
    pub max_outstanding_requests: usize,

    /// Reply bytes one connection may leave unread (and request bytes it may have in flight)
    /// before its next reads wait and its socket is not read: what bounds a client that never
    /// reads its replies.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_unread_reply_bytes: usize,

    /// Distinct paths one session may watch on this member; a request that would watch more is
    /// refused with BadArguments (-8), the code every ZooKeeper client understands. ZooKeeper sets no limit.
    #[arg(long, default_value_t = crate::core::DEFAULT_MAX_WATCHES_PER_SESSION)]
    pub max_watches_per_session: usize,

    /// Bytes of the paths one session may watch on this member, each path counted once
    /// however many ways it is watched (1 MiB: ZooKeeper's jute.maxbuffer, which bounds the
    /// setWatches an older client sends on reconnect); a request that would watch more is
    /// refused with BadArguments (-8), the code every ZooKeeper client understands. ZooKeeper sets no limit.
    #[arg(long, default_value_t = crate::core::DEFAULT_MAX_WATCH_BYTES_PER_SESSION)]
    pub max_watch_bytes_per_session: usize,

    /// Four-letter words answered on the client ports (ZooKeeper's 4lw.commands.whitelist),
    /// comma-separated, e.g. `srvr,ruok,mntr`; `*` for every word. `srvr` is always answered, as
    /// in ZooKeeper. Anyone who reaches a client port may send one, so no answer names a
    /// session; a word left out is answered "WORD is not executed because it is not in the
    /// whitelist.", as ZooKeeper does.
    #[arg(
        long,
        env = "BATON_FOUR_LETTER_WORDS",
        default_value = crate::server::four_letter::DEFAULT_WORDS,
        value_parser = parse_four_letter_words
    )]
    pub four_letter_words: crate::server::four_letter::AllowedWords,

    // Client identities and tenancy (DESIGN.md §4).
    /// Accept auth packets of scheme `k8s` carrying a projected ServiceAccount token (audience
    /// `baton`), checked with the Kubernetes TokenReview API (Kubernetes access as kubectl
    /// finds it: in-cluster, else KUBECONFIG; needs `create` on `tokenreviews`). The session's
    /// identity becomes `k8s:NAMESPACE/SERVICEACCOUNT/POD`. Without it such packets fail.
    #[arg(long, env = "BATON_K8S_AUTH")]
    pub k8s_auth: bool,

    /// Enforce the namespace policy: `/baton/<ns>` and below only for sessions with a `k8s`
    /// identity of namespace `<ns>` (and the super identity); `/baton` itself changed or
    /// deleted only by super. Only the value a new ensemble starts with: the policy is
    /// replicated state afterwards (PUT /v1/settings `checkIdentities`), so members started
    /// with different flags never disagree. Ephemeral nodes below `/baton/` are deleted only by
    /// their own session (or super) with or without it.
    #[arg(long, env = "BATON_CHECK_IDENTITIES")]
    pub check_identities: bool,

    /// The super identity, as ZooKeeper's `zookeeper.DigestAuthenticationProvider.superDigest`:
    /// `USER:BASE64(SHA1(USER:PASSWORD))` (e.g. `echo -n super:PW | openssl dgst -binary -sha1 |
    /// base64`). A session that sends `addauth digest USER:PASSWORD` passes every ACL and the
    /// namespace policy and may delete any node (for repairs).
    #[arg(long, env = "BATON_SUPER_DIGEST", hide_env_values = true)]
    pub super_digest: Option<String>,

    /// The highest feature level this member supports and advertises to its peers (default:
    /// this build's newest; `--version` lists them). Capping it makes this build behave as the
    /// previous release while the ensemble is at that level, for upgrade tests: the ensemble's
    /// level does not rise past it while this member is in the configuration, and the member
    /// refuses to start on a data dir at a higher level (exit status 78).
    #[arg(long, env = "BATON_MAX_FEATURE_LEVEL", hide_short_help = true,
          value_parser = clap::value_parser!(u32).range(
              i64::from(*baton_machine::feature::SUPPORTED.start())
                  ..=i64::from(*baton_machine::feature::SUPPORTED.end())))]
    pub max_feature_level: Option<u32>,

    /// Test-only: TokenReview verdicts kept, accepted and refused each (default 10000 and
    /// 4096), so a test can fill the cache with few tokens.
    #[arg(long, hide = true)]
    pub k8s_verdict_cache_entries: Option<usize>,
}

/// What `--version` prints: the release and the feature levels this build supports.
pub fn version_text() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let levels = baton_machine::feature::SUPPORTED;
        format!(
            "{} (feature levels {} to {})",
            env!("CARGO_PKG_VERSION"),
            levels.start(),
            levels.end()
        )
    })
}

impl Config {
    /// The highest feature level this member supports: `--max-feature-level`, else this
    /// build's newest.
    pub fn max_feature_level(&self) -> u32 {
        self.max_feature_level
            .unwrap_or(*baton_machine::feature::SUPPORTED.end())
    }

    /// The settings this member proposes if it leads an ensemble whose replicated settings
    /// were never set (a new one, or one made before they were replicated).
    pub fn initial_settings(&self) -> Vec<baton_machine::Setting> {
        use baton_machine::Setting::*;
        vec![
            CheckIdentities(self.check_identities),
            NamespaceZnodes(self.quota_namespace_znodes),
            NamespaceBytes(self.quota_namespace_bytes),
            SharedZnodes(self.quota_shared_znodes),
            SharedBytes(self.quota_shared_bytes),
            EphemeralsPerSession(self.max_ephemerals_per_session),
        ]
    }

    /// The full member list: `--members`, or this member alone.
    pub fn initial_members(&self) -> Vec<(u64, String)> {
        if self.members.is_empty() {
            vec![(self.id, self.peer_addr.to_string())]
        } else {
            self.members.clone()
        }
    }

    /// The cluster id to bootstrap with: `--cluster-id`, or one derived from the member list
    /// (FNV-1a over `id=addr,...` in id order, twice with different offsets: stable, not secret).
    pub fn bootstrap_cluster_id(&self) -> String {
        if let Some(id) = &self.cluster_id {
            return id.clone();
        }
        let mut members = self.initial_members();
        members.sort();
        let text: String = members
            .iter()
            .map(|(id, addr)| format!("{id}={addr},"))
            .collect();
        let fnv = |offset: u64| {
            text.bytes().fold(offset, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            })
        };
        format!(
            "{:016x}{:016x}",
            fnv(0xcbf2_9ce4_8422_2325),
            fnv(0x6c62_272e_07bb_0142)
        )
    }

    /// The member's TLS files, if it was given any.
    pub fn tls_files(&self) -> Option<baton_tls::TlsFiles> {
        Some(baton_tls::TlsFiles {
            ca: self.tls_ca.clone()?,
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
        })
    }

    /// Checks what clap cannot: cross-flag consistency.
    pub fn validate(&self) -> Result<(), String> {
        if !self.members.is_empty() && !self.members.iter().any(|(id, _)| *id == self.id) {
            return Err(format!(
                "--members does not include this member's --id {}",
                self.id
            ));
        }
        let mut ids: Vec<u64> = self.members.iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err("--members names the same id twice".into());
        }
        if self.join && self.cluster_id.is_none() && self.tls_files().is_none() {
            return Err(
                "--join needs --cluster-id (the ensemble's, from GET /v1/status) or a member \
                 certificate naming it"
                    .into(),
            );
        }
        if let Some(digest) = &self.super_digest {
            validate_super_digest(digest)?;
        }
        if self.min_session_timeout > self.max_session_timeout {
            return Err("--min-session-timeout is larger than --max-session-timeout".into());
        }
        if self.max_frame_bytes < 1024 {
            return Err("--max-frame-bytes must be at least 1024".into());
        }
        if self.tick.is_zero() {
            return Err("--tick must be positive".into());
        }
        if self.tls_files().is_none() && !self.insecure_no_tls {
            return Err(
                "no certificates: give --tls-ca, --tls-cert and --tls-key (make them \
                 with `baton-ensemble certs`), or --insecure-no-tls to run with unauthenticated \
                 peer links and an open admin API"
                    .into(),
            );
        }
        if self.secure_client_addr.is_some() && self.tls_files().is_none() {
            return Err(
                "--secure-client-addr needs certificates: --tls-ca, --tls-cert and --tls-key"
                    .into(),
            );
        }
        if self.client_addr.addr().is_none() && self.secure_client_addr.is_none() {
            return Err("--client-addr is off and there is no --secure-client-addr".into());
        }
        if self.max_outstanding_requests == 0 || self.client_handshake_timeout.is_zero() {
            return Err(
                "--max-outstanding-requests and --client-handshake-timeout must be positive".into(),
            );
        }
        Ok(())
    }

    /// Whether the test-only raw proposal endpoint is served (never without `testing`).
    pub fn raw_proposals(&self) -> bool {
        #[cfg(feature = "testing")]
        return self.unsafe_testing_raw_proposals;
        #[cfg(not(feature = "testing"))]
        false
    }

    /// The test-only file that stands for the volume's free space (never without `testing`).
    pub fn free_disk_bytes_file(&self) -> Option<PathBuf> {
        #[cfg(feature = "testing")]
        return self.unsafe_testing_free_disk_bytes_file.clone();
        #[cfg(not(feature = "testing"))]
        None
    }
}

pub(crate) fn parse_member(s: &str) -> Result<(u64, String), String> {
    let (id, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("member {s:?} is not ID=HOST:PORT"))?;
    let id: u64 = id
        .trim()
        .parse()
        .map_err(|_| format!("member id {id:?} is not a positive integer"))?;
    if id == 0 {
        return Err("member id 0 is reserved".into());
    }
    let addr = addr.trim();
    if addr
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .is_none()
    {
        return Err(format!("member address {addr:?} is not HOST:PORT"));
    }
    Ok((id, addr.to_string()))
}

/// What --min-session-timeout and --max-session-timeout accept: ZooKeeper's protocol carries
/// session timeouts as 32-bit milliseconds (24.8 days); the operator checks its CRD against the
/// same bound (`ENSEMBLE_SESSION_TIMEOUT`).
pub const SESSION_TIMEOUT: std::ops::RangeInclusive<Duration> =
    Duration::ZERO..=Duration::from_secs(24 * 3600);

fn parse_session_timeout(s: &str) -> Result<Duration, baton_duration::DurationError> {
    baton_duration::parse_within(s, SESSION_TIMEOUT)
}

/// `--four-letter-words`: a comma-separated allow-list (checked here, so a typo fails at start).
fn parse_four_letter_words(s: &str) -> Result<crate::server::four_letter::AllowedWords, String> {
    let items: Vec<&str> = s.split(',').collect();
    crate::server::four_letter::AllowedWords::parse(&items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_flags_take_go_style_durations_only() {
        let base = ["baton-ensemble", "--id", "1", "--data-dir", "d"];
        let parse = |extra: &[&str]| {
            Config::try_parse_from(base.iter().chain(extra)).map_err(|e| e.to_string())
        };
        let cfg = parse(&[
            "--tick",
            "50ms",
            "--min-session-timeout",
            "1.5s",
            "--max-session-timeout",
            "1m30s",
            "--housekeeping-interval",
            "1h",
        ])
        .expect("Go-style durations parse");
        assert_eq!(cfg.tick, Duration::from_millis(50));
        assert_eq!(cfg.min_session_timeout, Duration::from_millis(1500));
        assert_eq!(cfg.max_session_timeout, Duration::from_secs(90));
        assert_eq!(cfg.housekeeping_interval, Duration::from_secs(3600));
        let defaults = parse(&[]).expect("the defaults parse");
        assert_eq!(defaults.tick, Duration::from_millis(100));
        assert_eq!(defaults.max_session_timeout, Duration::from_secs(40));
        // A bare number used to mean seconds: now it is refused, saying what to write.
        let err = parse(&["--tick", "100"]).expect_err("a bare number");
        assert!(err.contains("write 100s"), "{err}");
        let err = parse(&["--client-handshake-timeout", "10 s"]).expect_err("a space");
        assert!(err.contains("1m30s"), "{err}");
        let err = parse(&["--max-session-timeout", "25h"]).expect_err("past 24h");
        assert!(err.contains("from 0s to 24h"), "{err}");
    }

    #[test]
    fn members() {
        assert_eq!(
            parse_member("2=10.0.0.2:2888"),
            Ok((2, "10.0.0.2:2888".into()))
        );
        assert!(parse_member("0=a:1").is_err());
        assert!(parse_member("x=a:1").is_err());
        assert!(parse_member("1=a").is_err());
    }

    #[test]
    fn members_bootstrapped_together_agree_on_a_cluster_id() {
        let parse = |id: &str, members: &str| {
            Config::try_parse_from([
                "baton-ensemble",
                "--id",
                id,
                "--data-dir",
                "/tmp/x",
                "--members",
                members,
            ])
            .unwrap()
        };
        let a = parse("1", "1=a:1,2=b:2,3=c:3");
        let b = parse("3", "3=c:3,1=a:1,2=b:2");
        assert_eq!(a.bootstrap_cluster_id(), b.bootstrap_cluster_id());
        assert_ne!(
            a.bootstrap_cluster_id(),
            parse("1", "1=a:1,2=b:2").bootstrap_cluster_id()
        );
        assert_eq!(a.bootstrap_cluster_id().len(), 32);
    }

    #[test]
    fn members_must_include_self() {
        let c = Config::try_parse_from([
            "baton-ensemble",
            "--id",
            "4",
            "--data-dir",
            "/tmp/x",
            "--members",
            "1=a:1,2=b:2",
        ])
        .unwrap();
        assert!(c.validate().unwrap_err().contains("--id 4"));
    }
}

/// `USER:HASH` where HASH is base64 of a SHA-1 (28 characters), so that a typo (the password
/// itself, a hex digest) fails at start instead of never matching.
fn validate_super_digest(digest: &str) -> Result<(), String> {
    let hint = "--super-digest must be USER:BASE64(SHA1(USER:PASSWORD)), e.g. the output of \
                `echo -n super:PASSWORD | openssl dgst -binary -sha1 | base64` after `super:`";
    let Some((user, hash)) = digest.split_once(':') else {
        return Err(hint.into());
    };
    let base64_char = |c: char| c.is_ascii_alphanumeric() || c == '+' || c == '/' || c == '=';
    if user.is_empty() || hash.len() != 28 || !hash.ends_with('=') || !hash.chars().all(base64_char)
    {
        return Err(hint.into());
    }
    Ok(())
}

#[cfg(test)]
mod super_digest_tests {
    use super::validate_super_digest;

    #[test]
    fn super_digests() {
        assert!(validate_super_digest("super:D/InIHSb7yEEbrWz8b9l71RjZJU=").is_ok());
        for bad in [
            "super",
            "super:test",
            ":D/InIHSb7yEEbrWz8b9l71RjZJU=",
            "super:D/InIHSb7yEEbrWz8b9l71RjZJU",
        ] {
            assert!(validate_super_digest(bad).is_err(), "{bad}");
        }
    }
}
