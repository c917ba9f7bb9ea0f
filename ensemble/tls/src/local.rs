//! A folder of certificates for running an ensemble by hand, in the playground and in tests:
//! what `baton-ensemble certs` writes. The operator keeps the same things in Secrets instead.

use std::io::Write;
use std::path::Path;
use std::time::SystemTime;

use crate::TlsError;
use crate::issue::{Ca, HostNames, Issued};
use crate::material::TlsFiles;

/// Writes a new CA for `cluster`, a certificate for each of `members` (answering to `hosts`
/// too) and an admin certificate into `dir`: `ca.crt`, `ca.key`, `member-N.crt`,
/// `member-N.key`, `admin.crt`, `admin.key`. Keys are their owner's alone (0600, an old key
/// file's mode included), and so are the folders made for them (0700).
pub fn write_dir(
    dir: &Path,
    cluster: &str,
    members: &[u64],
    hosts: &HostNames,
) -> Result<Ca, TlsError> {
    let now = SystemTime::now();
    let ca = Ca::generate(cluster, now)?;
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| file_error(dir, e))?;
    }
    write(&dir.join("ca.crt"), ca.cert_pem(), false)?;
    write(&dir.join("ca.key"), ca.key_pem(), true)?;
    for &id in members {
        let issued = ca.issue_member(id, hosts, now)?;
        write_issued(dir, &format!("member-{id}"), &issued)?;
    }
    write_issued(dir, "admin", &ca.issue_admin(now)?)?;
    Ok(ca)
}

/// Adds a certificate for member `id` to a folder made by `write_dir` (a member that joins
/// later).
pub fn add_member(dir: &Path, cluster: &str, id: u64, hosts: &HostNames) -> Result<(), TlsError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).map_err(|e| file_error(&path, e))
    };
    let ca = Ca::from_pem(cluster, &read("ca.crt")?, &read("ca.key")?)?;
    let issued = ca.issue_member(id, hosts, SystemTime::now())?;
    write_issued(dir, &format!("member-{id}"), &issued)
}

/// The files of member `id` in a folder made by `write_dir`.
pub fn member_files(dir: &Path, id: u64) -> TlsFiles {
    TlsFiles::in_dir(dir, &format!("member-{id}"))
}

/// The admin's files in a folder made by `write_dir`.
pub fn admin_files(dir: &Path) -> TlsFiles {
    TlsFiles::in_dir(dir, "admin")
}

fn write_issued(dir: &Path, name: &str, issued: &Issued) -> Result<(), TlsError> {
    write(&dir.join(format!("{name}.crt")), &issued.cert_pem, false)?;
    write(&dir.join(format!("{name}.key")), &issued.key_pem, true)
}

fn write(path: &Path, pem: &str, secret: bool) -> Result<(), TlsError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    if secret {
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(|e| file_error(path, e))?;
    if secret {
        // `mode` applies only to a file it creates: a key file that was there keeps its old
        // mode otherwise. Narrowed before a byte of the new key is written.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| file_error(path, e))?;
    }
    file.write_all(pem.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| file_error(path, e))
}

fn file_error(path: &Path, e: std::io::Error) -> TlsError {
    TlsError::File {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}
