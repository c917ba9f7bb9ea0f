//! `baton-ensemble certs` run as a user runs it: the keys it writes (the CA's signs any member
//! or admin certificate) are their owner's alone, in a folder that is too, even where an old
//! key file was readable by everyone.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn certs(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_baton-ensemble"))
        .arg("certs")
        .args(args)
        .output()
        .expect("run baton-ensemble certs");
    assert!(
        out.status.success(),
        "certs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn keys_and_their_folder_are_the_owners_alone() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("pki");
    let dir_arg = dir.to_str().expect("utf-8 path");
    certs(&["--out", dir_arg, "--cluster-id", "modes", "--ids", "1,2"]);
    assert_eq!(mode(&dir), 0o700, "the folder made for the keys");
    for key in ["ca.key", "member-1.key", "member-2.key", "admin.key"] {
        assert_eq!(mode(&dir.join(key)), 0o600, "{key}");
    }
    // Certificates are public.
    assert_eq!(mode(&dir.join("ca.crt")) & 0o600, 0o600);

    // A key file left readable by everyone (copied in by hand, an older tool) is narrowed
    // when it is written again, not only when it is created.
    let stale = dir.join("member-3.key");
    std::fs::write(&stale, "old").expect("write a stale key");
    std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    certs(&[
        "--out",
        dir_arg,
        "--cluster-id",
        "modes",
        "--ids",
        "3",
        "--add",
    ]);
    assert_eq!(mode(&stale), 0o600, "a rewritten key");
}
