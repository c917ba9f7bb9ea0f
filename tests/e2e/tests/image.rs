//! The image `tests/scripts/image.sh build DIR` assembles from the Dockerfile, without a registry
//! or Docker: its config is what the Dockerfile's run stage says (read here by a parser of its
//! own, not the script's), it holds what the programs need, and the programs run in it under
//! runc, as the image's user, on a read-only root file system.
//!
//! Ignored by default: it needs the built image, root and runc.
//!
//! ```sh
//! tests/scripts/image.sh build target/image
//! BATON_IMAGE_DIR=target/image cargo test -p baton-tests --test image -- --ignored
//! ```
//!
//! (`tests/scripts/image.sh check DIR` does both.) A relative BATON_IMAGE_DIR is taken from the
//! workspace root; the default is `target/image`.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use baton_tests::workspace;
use serde_json::Value;

fn image_dir() -> PathBuf {
    let dir = std::env::var_os("BATON_IMAGE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/image"));
    let dir = workspace().join(dir);
    assert!(
        dir.join("oci/index.json").is_file() && dir.join("bundle/rootfs").is_dir(),
        "no image in {}: run `tests/scripts/image.sh build {}` first",
        dir.display(),
        dir.display()
    );
    dir
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Dockerfile's instructions: continuations joined, comments dropped, keyword upper-cased.
fn instructions() -> Vec<(String, String)> {
    let text = read(&workspace().join("Dockerfile"));
    let mut out = Vec::new();
    let mut buf = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(head) = line.trim_end().strip_suffix('\\') {
            buf.push_str(head);
            buf.push(' ');
            continue;
        }
        buf.push_str(line);
        let whole = std::mem::take(&mut buf);
        let whole = whole.trim();
        let (keyword, rest) = whole.split_once(char::is_whitespace).unwrap_or((whole, ""));
        out.push((keyword.to_uppercase(), rest.trim().to_owned()));
    }
    out
}

/// Whitespace-separated words, double quotes grouping (and removed), as LABEL reads them.
fn words(text: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted, mut started) = (Vec::new(), String::new(), false, false);
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                started = true;
            }
            '\\' if quoted => cur.extend(chars.next()),
            c if c.is_whitespace() && !quoted => {
                if started || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    started = false;
                }
            }
            c => cur.push(c),
        }
    }
    if started || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// What the Dockerfile's run stage (after the last FROM) says the image is.
#[derive(Debug, Default)]
struct RunStage {
    labels: BTreeMap<String, String>,
    user: Option<String>,
    ports: BTreeSet<String>,
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    copy_dest: String,
    /// The programs the build stage copies out (its `cp target/release/NAME ...`).
    binaries: Vec<String>,
}

fn run_stage() -> RunStage {
    let all = instructions();
    let last_from = all.iter().rposition(|(k, _)| k == "FROM").expect("a FROM");
    let mut stage = RunStage::default();
    for (keyword, rest) in &all[..last_from] {
        if keyword == "RUN" {
            stage.binaries.extend(
                rest.split_whitespace()
                    .filter_map(|w| w.strip_prefix("target/release/"))
                    .map(str::to_owned),
            );
        }
    }
    let exec_form = |rest: &str| -> Vec<String> {
        serde_json::from_str(rest)
            .unwrap_or_else(|_| vec!["/bin/sh".into(), "-c".into(), rest.into()])
    };
    for (keyword, rest) in &all[last_from + 1..] {
        match keyword.as_str() {
            "LABEL" => {
                for w in words(rest) {
                    let (k, v) = w.split_once('=').expect("LABEL key=value");
                    stage.labels.insert(k.to_owned(), v.to_owned());
                }
            }
            "USER" => stage.user = Some(rest.clone()),
            "EXPOSE" => stage.ports.extend(rest.split_whitespace().map(|p| {
                if p.contains('/') {
                    p.to_owned()
                } else {
                    format!("{p}/tcp")
                }
            })),
            "ENTRYPOINT" => stage.entrypoint = Some(exec_form(rest)),
            "CMD" => stage.cmd = Some(exec_form(rest)),
            "COPY" => stage.copy_dest = rest.split_whitespace().last().expect("COPY DEST").into(),
            _ => {}
        }
    }
    assert!(
        !stage.binaries.is_empty() && !stage.copy_dest.is_empty(),
        "{stage:?}"
    );
    stage
}

/// The chart's image: `image.repository` and the tag (`image.tag`, else `appVersion`).
fn chart_image() -> (String, String) {
    let values = read(&workspace().join("charts/baton/values.yaml"));
    let chart = read(&workspace().join("charts/baton/Chart.yaml"));
    let field = |text: &str, key: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .map(|v| {
                v.split('#')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .trim_matches('"')
                    .to_owned()
            })
            .unwrap_or_default()
    };
    let repository = field(&values, "repository:");
    let mut tag = field(&values, "tag:");
    if tag.is_empty() {
        tag = field(&chart, "appVersion:");
    }
    assert!(!repository.is_empty() && !tag.is_empty());
    (repository, tag)
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    let (algorithm, hex) = digest.split_once(':').expect("algorithm:hex");
    layout.join("blobs").join(algorithm).join(hex)
}

/// The manifest and config the layout's `tag` names.
fn manifest_and_config(layout: &Path, tag: &str) -> (Value, Value) {
    let index = json(&layout.join("index.json"));
    let desc = index["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .unwrap_or_else(|| panic!("no tag {tag} in {}", layout.display()));
    let manifest = json(&blob(layout, desc["digest"].as_str().expect("digest")));
    let config = json(&blob(
        layout,
        manifest["config"]["digest"].as_str().expect("config"),
    ));
    (manifest, config)
}

fn strings(v: &Value) -> Option<Vec<String>> {
    v.as_array().map(|a| {
        a.iter()
            .map(|s| s.as_str().expect("a string").to_owned())
            .collect()
    })
}

#[test]
#[ignore = "needs the image: tests/scripts/image.sh build target/image"]
fn config_is_the_dockerfiles_run_stage() {
    let dir = image_dir();
    let stage = run_stage();
    let (repository, tag) = chart_image();
    let layout = dir.join("oci");
    let (manifest, config) = manifest_and_config(&layout, &tag);
    let (latest, _) = manifest_and_config(&layout, "latest");
    assert_eq!(manifest, latest, "{tag} and latest are the same image");

    let c = &config["config"];
    assert_eq!(c["User"].as_str(), stage.user.as_deref(), "USER");
    assert_eq!(strings(&c["Cmd"]), stage.cmd, "CMD");
    assert_eq!(strings(&c["Entrypoint"]), stage.entrypoint, "ENTRYPOINT");
    let labels: BTreeMap<String, String> = c["Labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(labels, stage.labels, "LABEL");
    let ports: BTreeSet<String> = c["ExposedPorts"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(ports, stage.ports, "EXPOSE");
    let path = strings(&c["Env"])
        .unwrap_or_default()
        .into_iter()
        .find_map(|e| e.strip_prefix("PATH=").map(str::to_owned))
        .expect("PATH in the image's Env");
    assert!(
        path.split(':')
            .any(|p| p == stage.copy_dest.trim_end_matches('/')),
        "the programs' directory {} is on PATH {path}",
        stage.copy_dest
    );
    assert_eq!(config["os"], "linux");
    assert_eq!(
        labels.get("org.opencontainers.image.version"),
        Some(&tag),
        "the version label is the chart's tag"
    );
    assert!(
        manifest["layers"].as_array().is_some_and(|l| l.len() >= 2),
        "base, RUN and COPY layers: {manifest}"
    );

    // The archive containerd and docker import carries both names.
    let out = Command::new("tar")
        .arg("-xOf")
        .arg(dir.join("baton-image.tar"))
        .arg("manifest.json")
        .output()
        .expect("run tar");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let archive: Value = serde_json::from_slice(&out.stdout).expect("manifest.json");
    assert_eq!(
        strings(&archive[0]["RepoTags"]),
        Some(vec![
            format!("{repository}:{tag}"),
            format!("{repository}:latest")
        ])
    );
}

/// `path` inside `rootfs`, its symbolic links followed inside `rootfs` (not the host's root).
fn resolve(rootfs: &Path, path: &str) -> PathBuf {
    let mut parts: Vec<String> = path
        .split('/')
        .filter(|p| !p.is_empty())
        .map(Into::into)
        .collect();
    parts.reverse();
    let mut at = PathBuf::new();
    let mut hops = 0;
    while let Some(part) = parts.pop() {
        if part == ".." {
            at.pop();
            continue;
        }
        let next = at.join(&part);
        match std::fs::read_link(rootfs.join(&next)) {
            Ok(target) => {
                hops += 1;
                assert!(hops < 40, "symbolic link loop at {path}");
                let target = target.to_string_lossy().into_owned();
                if target.starts_with('/') {
                    at = PathBuf::new();
                }
                parts.extend(
                    target
                        .split('/')
                        .filter(|p| !p.is_empty())
                        .rev()
                        .map(Into::into),
                );
            }
            Err(_) => at = next,
        }
    }
    rootfs.join(at)
}

#[test]
#[ignore = "needs the image: tests/scripts/image.sh build target/image"]
fn the_image_holds_what_the_programs_need() {
    let rootfs = image_dir().join("bundle/rootfs");
    let stage = run_stage();
    for name in &stage.binaries {
        let path = resolve(&rootfs, &format!("{}/{name}", stage.copy_dest));
        let meta = std::fs::metadata(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(meta.is_file(), "{}", path.display());
        assert_eq!(
            meta.permissions().mode() & 0o111,
            0o111,
            "{name} executable by all"
        );
        assert_eq!(
            (meta.uid(), meta.gid()),
            (0, 0),
            "{name} owned by root, as COPY makes it"
        );
    }
    // The CA bundle baton-ensemble's S3 client trusts.
    let certs = read(&resolve(&rootfs, "/etc/ssl/certs/ca-certificates.crt"));
    assert!(
        certs.matches("BEGIN CERTIFICATE").count() > 50,
        "a CA bundle with the public roots"
    );
    // The members' start script runs with /bin/sh.
    let sh = std::fs::metadata(resolve(&rootfs, "/bin/sh")).expect("/bin/sh");
    assert!(sh.is_file() && sh.permissions().mode() & 0o111 != 0);
    // USER uid:gid is the nonroot user and group, without a home or a login shell.
    let user = stage.user.expect("USER");
    let (uid, gid) = user.split_once(':').unwrap_or((&user, &user));
    let passwd = read(&resolve(&rootfs, "/etc/passwd"));
    let entry = passwd
        .lines()
        .find(|l| l.starts_with("nonroot:"))
        .expect("nonroot in /etc/passwd");
    let fields: Vec<&str> = entry.split(':').collect();
    assert_eq!(
        (fields[2], fields[3], fields[6]),
        (uid, gid, "/usr/sbin/nologin"),
        "{entry}"
    );
    assert!(
        !resolve(&rootfs, fields[5]).exists(),
        "no home directory: {entry}"
    );
    let group = read(&resolve(&rootfs, "/etc/group"));
    assert!(
        group
            .lines()
            .any(|l| l.starts_with(&format!("nonroot:x:{gid}:"))),
        "{group}"
    );
    // What the base's RUN cleaned away stays away.
    let lists = resolve(&rootfs, "/var/lib/apt/lists");
    let left: Vec<_> = std::fs::read_dir(&lists)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name())
                .filter(|n| n != "partial" && n != "lock")
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "apt lists left in the image: {left:?}");
}

/// Runs `args` in the image with runc: the image's user, env and working directory (the bundle's
/// config.json, which umoci made from the image config), `extra_env` added, the root read-only.
fn run_in_image(args: &[&str], extra_env: &[&str]) -> Output {
    static N: AtomicUsize = AtomicUsize::new(0);
    let uid = Command::new("id").arg("-u").output().expect("run id");
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "runc needs root"
    );
    let bundle = image_dir().join("bundle");
    let mut config = json(&bundle.join("config.json"));
    config["process"]["terminal"] = Value::Bool(false);
    config["process"]["args"] = args.iter().map(|a| Value::from(*a)).collect();
    let env = config["process"]["env"].as_array_mut().expect("env");
    env.extend(extra_env.iter().map(|e| Value::from(*e)));
    config["root"] = serde_json::json!({
        "path": bundle.join("rootfs").canonicalize().expect("rootfs"),
        "readonly": true,
    });
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("config.json"), config.to_string()).expect("write config");
    let id = format!(
        "baton-image-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    Command::new("runc")
        .arg("run")
        .arg("--bundle")
        .arg(dir.path())
        .arg(&id)
        .output()
        .expect("run runc (apt-get install runc)")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs the image (tests/scripts/image.sh build target/image), root and runc"]
fn the_programs_run_in_the_image_as_its_user() {
    let stage = run_stage();
    let out = run_in_image(&["/bin/sh", "-c", "id -u; id -g"], &[]);
    let (stdout, stderr) = text(&out);
    let user = stage.user.clone().expect("USER");
    let (uid, gid) = user.split_once(':').unwrap_or((&user, &user));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stdout,
        format!("{uid}\n{gid}\n"),
        "the container runs as USER {user}"
    );

    // --version of each program: the release and the feature levels the labels name.
    let version = &stage.labels["org.opencontainers.image.version"];
    let (min, max) = stage.labels["baton.dev/feature-levels"]
        .split_once('-')
        .expect("MIN-MAX");
    for name in &stage.binaries {
        let out = run_in_image(&[name, "--version"], &[]);
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success(),
            "{name} --version in the image: {stderr}"
        );
        assert!(
            stdout.contains(version.as_str())
                && stdout.contains(&format!("feature levels {min} to {max}")),
            "{name} --version says {stdout:?}; the labels say {version}, levels {min}-{max}"
        );
    }

    // The default command's program and subcommand are in the image.
    let cmd = stage.cmd.clone().expect("CMD");
    let mut help: Vec<&str> = cmd.iter().map(String::as_str).collect();
    help.push("--help");
    let out = run_in_image(&help, &[]);
    assert!(out.status.success(), "{help:?}: {}", text(&out).1);
}

#[test]
#[ignore = "needs the image (tests/scripts/image.sh build target/image), root and runc"]
fn the_images_ensemble_has_no_test_only_flags() {
    let out = run_in_image(&["baton-ensemble", "--unsafe-testing-raw-proposals"], &[]);
    let (_, stderr) = text(&out);
    assert!(
        !out.status.success(),
        "the image's baton-ensemble took a test-only flag"
    );
    assert!(stderr.contains("unexpected argument"), "{stderr}");
}

/// The StatefulSet's start script (operator/src/build/statefulset.rs, START_SCRIPT), run by the
/// image's /bin/sh as the members run it, execs the image's baton-ensemble with the flags.
#[test]
#[ignore = "needs the image (tests/scripts/image.sh build target/image), root and runc"]
fn the_members_start_script_runs_in_the_image() {
    let source = read(&workspace().join("operator/src/build/statefulset.rs"));
    let start = source
        .find("START_SCRIPT: &str = r#\"")
        .expect("START_SCRIPT")
        + 24;
    let script = &source[start..start + source[start..].find("\"#;").expect("end")];
    let out = run_in_image(
        &["/bin/sh", "-c", script, "baton-ensemble", "--version"],
        &[
            "POD_NAME=ensemble-2",
            "BATON_TLS_DIR=/tls",
            "BATON_BOOTSTRAP_REPLICAS=3",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "the start script in the image: {stderr}"
    );
    assert!(stdout.starts_with("baton-ensemble "), "{stdout:?}");

    // The programs the backup and restore scripts (operator/src/build/backup.rs) call.
    let tools = "mkdir date rm mv ls sort tail cut";
    let check = format!("for t in {tools}; do command -v \"$t\" >/dev/null || echo \"$t\"; done");
    let out = run_in_image(&["/bin/sh", "-c", &check], &[]);
    let (missing, stderr) = text(&out);
    assert!(
        out.status.success() && missing.is_empty(),
        "missing in the image: {missing} {stderr}"
    );
}
