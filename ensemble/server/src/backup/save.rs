//! `snapshot save`: fetch `GET /v1/snapshot`, check it, write it to a file or to S3.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime};

use baton_machine::StateMachine;
use serde::Serialize;

use super::cmd::SaveArgs;
use super::format::{self, hex, sha256};
use super::location::{self, S3Url};
use super::s3::{Bucket, S3Options};

/// How long the whole download may take (a large tree over a slow link).
const DOWNLOAD_DEADLINE: Duration = Duration::from_secs(600);

/// What `save` prints, as one JSON line.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SaveReport {
    /// The file written or `s3://BUCKET/KEY`.
    pub location: String,
    /// The cluster id of the ensemble backed up.
    pub cluster_id: String,
    /// The Raft index the backup reflects.
    pub index: u64,
    /// SHA-256 of the whole backup file, as `sha256sum` prints it.
    pub sha256: String,
    /// Size of the backup file.
    pub bytes: u64,
}

/// `https://HOST:PORT[/]` (or `http://` for an ensemble run with `--insecure-no-tls`) →
/// (`HOST:PORT`, whether TLS).
fn parse_admin_url(url: &str) -> Result<(String, bool), String> {
    let (rest, tls) = if let Some(rest) = url.strip_prefix("https://") {
        (rest, true)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (rest, false)
    } else {
        return Err(format!("--admin-url {url:?} is not https://HOST:PORT"));
    };
    let addr = rest.trim_end_matches('/');
    let port_ok = addr
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !port_ok || addr.contains('/') {
        return Err(format!("--admin-url {url:?} is not https://HOST:PORT"));
    }
    Ok((addr.to_string(), tls))
}

fn client(args: &SaveArgs, tls: bool) -> Result<baton_tls::HttpClient, String> {
    let client = if tls {
        let (Some(ca), Some(cert), Some(key)) = (&args.tls_ca, &args.tls_cert, &args.tls_key)
        else {
            return Err(
                "an https:// --admin-url needs --tls-ca, --tls-cert and --tls-key (the admin \
                 certificate: the snapshot endpoint refuses anyone else)"
                    .into(),
            );
        };
        let files = baton_tls::TlsFiles {
            ca: ca.clone(),
            cert: cert.clone(),
            key: key.clone(),
        };
        let config = baton_tls::client_config(ca, Some(files)).map_err(|e| e.to_string())?;
        baton_tls::HttpClient::tls(config, DOWNLOAD_DEADLINE)
    } else {
        baton_tls::HttpClient::plain(DOWNLOAD_DEADLINE)
    };
    Ok(client.with_max_body(usize::MAX))
}

/// Runs `snapshot save`.
pub async fn save(args: SaveArgs) -> Result<SaveReport, String> {
    let (addr, tls) = parse_admin_url(&args.admin_url)?;
    let s3 = args.s3_url.as_deref().map(S3Url::parse).transpose()?;
    let client = client(&args, tls)?;
    let answer = client
        .request(&addr, hyper::Method::GET, "/v1/snapshot", None)
        .await
        .map_err(|e| e.to_string())?;
    if answer.status != hyper::StatusCode::OK {
        let said = answer
            .json()
            .pointer("/error/message")
            .and_then(|m| m.as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&answer.body).into_owned());
        return Err(format!(
            "{} answered GET /v1/snapshot with {}: {said}",
            args.admin_url, answer.status
        ));
    }
    let file = answer.body.to_vec();
    // Everything is checked before anything is written: the header, the body's SHA-256, and that
    // the body is a state machine at the header's index.
    let (file, cluster_id, index) = tokio::task::spawn_blocking(move || {
        let (cluster_id, index) = verify(&file)?;
        Ok::<_, String>((file, cluster_id, index))
    })
    .await
    .map_err(|e| e.to_string())??;
    let name = location::object_name(&cluster_id, index, SystemTime::now());
    let digest = hex(&sha256(&file));
    let bytes = file.len() as u64;
    let location = match (&args.out, s3) {
        (Some(out), _) => {
            let path = location::out_file(out, &name);
            let written = path.clone();
            tokio::task::spawn_blocking(move || write_atomically(&written, &file))
                .await
                .map_err(|e| e.to_string())??;
            std::path::absolute(&path)
                .unwrap_or(path)
                .display()
                .to_string()
        }
        (None, Some(url)) => {
            let opts = S3Options {
                endpoint: args.s3_endpoint.clone(),
                region: args.s3_region.clone(),
            };
            let bucket = Bucket::open(&url.bucket, &opts)?;
            let prefix = url.prefix();
            let key = format!("{prefix}{name}");
            bucket.put(&key, file).await?;
            if let Some(keep) = args.keep {
                for gone in bucket.prune(&prefix, &cluster_id, keep as usize).await? {
                    eprintln!("pruned s3://{}/{gone}", url.bucket);
                }
            }
            format!("s3://{}/{key}", url.bucket)
        }
        (None, None) => return Err("give --out FILE or --s3-url s3://BUCKET/PREFIX/".into()),
    };
    Ok(SaveReport {
        location,
        cluster_id,
        index,
        sha256: digest,
        bytes,
    })
}

/// Checks a whole backup file; its cluster id and index.
pub fn verify(file: &[u8]) -> Result<(String, u64), String> {
    let backup = format::decode(file).map_err(|e| e.to_string())?;
    let sm = StateMachine::restore(backup.body)
        .map_err(|e| format!("the backup's state machine snapshot is unusable: {e}"))?;
    if sm.last_applied() != backup.index as i64 {
        return Err(format!(
            "the backup's header says index {} but its state is at {}",
            backup.index,
            sm.last_applied()
        ));
    }
    Ok((backup.cluster_id.to_string(), backup.index))
}

/// Writes `bytes` to `path` so that it appears whole or not at all, and durably: a temporary
/// file beside it, fsync, rename, fsync of the directory.
///
/// A backup holds every session's password (enough to rejoin a live session and close it,
/// releasing its locks): the file is its owner's alone (0600) from the moment it exists, and
/// folders made for it are too (0700). A folder that exists is left as it is.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let fail = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| format!("{} names no file", path.display()))?;
    let temp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| fail("create the folder", &dir, e))?;
    }
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .map_err(|e| fail("create", &temp, e))?;
        f.write_all(bytes).map_err(|e| fail("write", &temp, e))?;
        f.sync_all().map_err(|e| fail("fsync", &temp, e))?;
        std::fs::rename(&temp, path).map_err(|e| fail("rename into", path, e))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
        return written;
    }
    std::fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| fail("fsync", &dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_urls() {
        assert_eq!(
            parse_admin_url("https://10.0.0.1:8080"),
            Ok(("10.0.0.1:8080".into(), true))
        );
        assert_eq!(
            parse_admin_url("https://m-0.ens.ns.svc:8080/"),
            Ok(("m-0.ens.ns.svc:8080".into(), true))
        );
        assert_eq!(
            parse_admin_url("http://127.0.0.1:8080"),
            Ok(("127.0.0.1:8080".into(), false))
        );
        for bad in [
            "127.0.0.1:8080",
            "https://host",
            "https://:80",
            "https://h:80/v1",
        ] {
            assert!(parse_admin_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn atomic_writes_leave_no_temporary_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("a.baton-backup");
        write_atomically(&path, b"one").expect("write");
        write_atomically(&path, b"two").expect("overwrite");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.baton-backup")]);
    }

    #[test]
    fn backups_are_the_owners_alone() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("made/for/it/a.baton-backup");
        write_atomically(&path, b"sessions and their passwords").expect("write");
        assert_eq!(mode(&path), 0o600);
        for made in ["made", "made/for", "made/for/it"] {
            assert_eq!(mode(&dir.path().join(made)), 0o700, "{made}");
        }
    }
}
