//! A real S3-compatible server for backup tests: moto's `moto_server` (PyPI `moto[server]`) on
//! a loopback port, over plain HTTP or over HTTPS with a certificate of the test's own CA.
//! `tests/scripts/test.sh` installs it into the tools' virtualenv,
//! `${BATON_TOOLS:-$HOME/.cache/baton-tools}/venv`; `BATON_MOTO_SERVER` names another one.

use std::fs::OpenOptions;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use baton_tls::HttpClient;
use tempfile::TempDir;
use tokio::time::Instant;

/// How long moto may take to answer after it is started (it imports a lot of Python).
const START_DEADLINE: Duration = Duration::from_secs(60);
/// The credentials every test uses: moto accepts any.
pub const ACCESS_KEY_ID: &str = "baton-tests";
pub const SECRET_ACCESS_KEY: &str = "baton-tests-secret";
pub const REGION: &str = "us-east-1";

/// Where `moto_server` is: `BATON_MOTO_SERVER`, else the tools' virtualenv.
pub fn moto_server_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("BATON_MOTO_SERVER") {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
        bail!("BATON_MOTO_SERVER={} is not a file", path.display());
    }
    let tools = std::env::var_os("BATON_TOOLS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/baton-tools")))
        .context("neither BATON_TOOLS nor HOME is set")?;
    let path = tools.join("venv/bin/moto_server");
    if path.is_file() {
        return Ok(path);
    }
    bail!(
        "moto_server (an S3-compatible server for the backup tests) is not installed at {}: run \
         tests/scripts/test.sh, which installs it (`pip install 'moto[server]'` into that \
         virtualenv), or set BATON_MOTO_SERVER to a moto_server binary",
        path.display()
    )
}

/// A running `moto_server`; killed when dropped.
pub struct Moto {
    child: Child,
    addr: SocketAddr,
    dir: TempDir,
    http: HttpClient,
}

/// The certificate and key moto serves HTTPS with, and the CA this harness's own requests to
/// it trust.
pub struct MotoTls<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
    pub ca: &'a Path,
}

impl Moto {
    /// Starts moto on a free loopback port and waits until it answers.
    pub async fn start() -> Result<Moto> {
        Moto::spawn(Ipv4Addr::LOCALHOST, None).await
    }

    /// As `start`, serving HTTPS only (`moto_server --ssl-cert --ssl-key`).
    pub async fn start_tls(tls: MotoTls<'_>) -> Result<Moto> {
        Moto::spawn(Ipv4Addr::LOCALHOST, Some(tls)).await
    }

    /// As `start_tls`, on a free port of `host`, one of this machine's addresses (e.g. the one
    /// a node's pods reach the host at); the certificate must name it.
    pub async fn start_tls_at(host: Ipv4Addr, tls: MotoTls<'_>) -> Result<Moto> {
        Moto::spawn(host, Some(tls)).await
    }

    async fn spawn(host: Ipv4Addr, tls: Option<MotoTls<'_>>) -> Result<Moto> {
        let binary = moto_server_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("baton-tests-moto-")
            .tempdir()
            .context("temp dir for moto's log")?;
        let port = TcpListener::bind((host, 0))
            .and_then(|l| l.local_addr())
            .context("pick a port for moto")?
            .port();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("moto.log"))
            .context("open moto's log")?;
        let mut command = Command::new(&binary);
        command.args(["-H", &host.to_string(), "-p", &port.to_string()]);
        let http = match &tls {
            Some(tls) => {
                command
                    .arg("--ssl-cert")
                    .arg(tls.cert)
                    .arg("--ssl-key")
                    .arg(tls.key);
                let config = baton_tls::client_config(tls.ca, None)
                    .context("a TLS client of moto trusting the test CA")?;
                HttpClient::tls(config, Duration::from_secs(10))
            }
            None => HttpClient::plain(Duration::from_secs(10)),
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("clone the log handle")?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", binary.display()))?;
        let mut moto = Moto {
            child,
            addr: SocketAddr::from((host, port)),
            dir,
            http,
        };
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Some(status) = moto.child.try_wait().context("poll moto")? {
                bail!("moto_server exited with {status}; log:\n{}", moto.log());
            }
            let answered = moto
                .http
                .request(&moto.addr.to_string(), http::Method::GET, "/", None)
                .await;
            if answered.is_ok() {
                return Ok(moto);
            }
            if Instant::now() >= deadline {
                bail!(
                    "moto_server did not answer within {START_DEADLINE:?}; log:\n{}",
                    moto.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `http://HOST:PORT` (`https://` when started with `start_tls`), for `--s3-endpoint`.
    pub fn endpoint(&self) -> String {
        let scheme = if self.http.is_tls() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// What moto printed.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("moto.log")).unwrap_or_default()
    }

    /// Makes a bucket (path-style `PUT /BUCKET`; moto does not check signatures).
    pub async fn create_bucket(&self, bucket: &str) -> Result<()> {
        let reply = self
            .http
            .request(
                &self.addr.to_string(),
                http::Method::PUT,
                &format!("/{bucket}"),
                None,
            )
            .await
            .context("create a bucket in moto")?;
        if !reply.status.is_success() {
            bail!(
                "moto refused to create bucket {bucket}: {} {}",
                reply.status,
                String::from_utf8_lossy(&reply.body)
            );
        }
        Ok(())
    }

    /// Writes an object (`PUT /BUCKET/KEY`).
    pub async fn put(&self, bucket: &str, key: &str, body: &[u8]) -> Result<()> {
        let reply = self
            .http
            .request(
                &self.addr.to_string(),
                http::Method::PUT,
                &format!("/{bucket}/{key}"),
                Some(body.to_vec()),
            )
            .await
            .context("put an object into moto")?;
        if !reply.status.is_success() {
            bail!("moto refused to store {bucket}/{key}: {}", reply.status);
        }
        Ok(())
    }

    /// The objects in `bucket` under `prefix` with their sizes in bytes, sorted by key
    /// (ListObjectsV2, one page: tests hold few).
    pub async fn sizes(&self, bucket: &str, prefix: &str) -> Result<Vec<(String, u64)>> {
        let reply = self
            .http
            .request(
                &self.addr.to_string(),
                http::Method::GET,
                &format!("/{bucket}?list-type=2&max-keys=1000&prefix={prefix}"),
                None,
            )
            .await
            .context("list a bucket in moto")?;
        if !reply.status.is_success() {
            bail!("moto refused to list {bucket}: {}", reply.status);
        }
        let text = String::from_utf8_lossy(&reply.body);
        let field = |object: &str, tag: &str| {
            object
                .split(&format!("<{tag}>"))
                .nth(1)
                .and_then(|rest| rest.split(&format!("</{tag}>")).next())
                .map(str::to_string)
        };
        let mut objects = Vec::new();
        for object in text.split("<Contents>").skip(1) {
            let key = field(object, "Key").context("an object without a key")?;
            let size = field(object, "Size")
                .and_then(|s| s.parse().ok())
                .with_context(|| format!("no size of {key}"))?;
            objects.push((key, size));
        }
        objects.sort();
        Ok(objects)
    }

    /// The keys in `bucket` under `prefix`, sorted (ListObjectsV2, one page: tests hold few).
    pub async fn keys(&self, bucket: &str, prefix: &str) -> Result<Vec<String>> {
        let reply = self
            .http
            .request(
                &self.addr.to_string(),
                http::Method::GET,
                &format!("/{bucket}?list-type=2&max-keys=1000&prefix={prefix}"),
                None,
            )
            .await
            .context("list a bucket in moto")?;
        if !reply.status.is_success() {
            bail!("moto refused to list {bucket}: {}", reply.status);
        }
        let text = String::from_utf8_lossy(&reply.body);
        let mut keys: Vec<String> = text
            .split("<Key>")
            .skip(1)
            .map(|rest| rest.split("</Key>").next().unwrap_or_default().to_string())
            .collect();
        keys.sort();
        if text.contains("<IsTruncated>true</IsTruncated>") {
            return Err(anyhow!("more than 1000 keys under {prefix}"));
        }
        Ok(keys)
    }

    /// The environment a `baton-ensemble snapshot` command needs to reach moto.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY.to_string()),
            ("AWS_DEFAULT_REGION", REGION.to_string()),
        ]
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
