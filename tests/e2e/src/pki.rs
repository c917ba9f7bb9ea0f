//! Certificates for the processes under test: every Baton member runs with mutual TLS on its
//! peer port and HTTPS on its admin port, as in production, from a CA made per test.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use baton_tls::{HostNames, HttpClient, local};
use tempfile::TempDir;

/// A CA and certificates in a temporary folder (what `baton-ensemble certs` writes).
pub struct Pki {
    dir: TempDir,
    cluster: String,
}

impl Pki {
    /// A new CA for `cluster` with certificates for members `ids` and the admin.
    pub fn new(cluster: &str, ids: &[u64]) -> Result<Pki> {
        let dir = tempfile::Builder::new()
            .prefix("baton-tests-pki-")
            .tempdir()
            .context("create a temp dir for certificates")?;
        local::write_dir(dir.path(), cluster, ids, &HostNames::loopback())
            .context("make test certificates")?;
        Ok(Pki {
            dir,
            cluster: cluster.to_string(),
        })
    }

    /// As `new`, with the members' certificates naming `hosts` (DNS names or IP addresses)
    /// instead of the loopback names: a server the test runs on another address.
    pub fn with_hosts(cluster: &str, ids: &[u64], hosts: &[String]) -> Result<Pki> {
        let dir = tempfile::Builder::new()
            .prefix("baton-tests-pki-")
            .tempdir()
            .context("create a temp dir for certificates")?;
        local::write_dir(dir.path(), cluster, ids, &HostNames(hosts.to_vec()))
            .context("make test certificates")?;
        Ok(Pki {
            dir,
            cluster: cluster.to_string(),
        })
    }

    /// The cluster id the certificates name.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The folder holding `ca.crt`, `member-N.crt`/`.key`, `admin.crt`/`.key`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// Issues a certificate for one more member (one added at run time).
    pub fn add_member(&self, id: u64) -> Result<()> {
        local::add_member(self.dir.path(), &self.cluster, id, &HostNames::loopback())
            .with_context(|| format!("issue a certificate for member {id}"))
    }

    /// `--tls-ca`, `--tls-cert`, `--tls-key` for member `id`.
    pub fn member_args(&self, id: u64) -> Vec<OsString> {
        let files = local::member_files(self.dir.path(), id);
        vec![
            "--tls-ca".into(),
            files.ca.into(),
            "--tls-cert".into(),
            files.cert.into(),
            "--tls-key".into(),
            files.key.into(),
        ]
    }

    /// An HTTPS client that presents the admin certificate.
    pub fn admin_client(&self, timeout: Duration) -> Result<HttpClient> {
        let config = baton_tls::client_config(&self.ca(), Some(local::admin_files(self.dir())))
            .context("admin client TLS settings")?;
        Ok(HttpClient::tls(config, timeout))
    }

    /// An HTTPS client that trusts the CA but presents no certificate (a probe, a stranger).
    pub fn anonymous_client(&self, timeout: Duration) -> Result<HttpClient> {
        let config =
            baton_tls::client_config(&self.ca(), None).context("anonymous client TLS settings")?;
        Ok(HttpClient::tls(config, timeout))
    }
}
