//! Every widely used ZooKeeper client survives a Baton refusal (DESIGN.md §4, quotas and the
//! disk alarm): a real member with a 5,000-byte shared quota refuses the second of two
//! 3,000-byte creates, and then, on the same session and connection, each client reads,
//! creates and deletes as usual. Baton-only: Apache ZooKeeper has no such refusal unless told to.
//!
//! Each client is a small program under `tests/clients/<lang>/` (`PROGRAM HOST:PORT`) that
//! prints each step, the refusal as the client reports it (`refused big-2: ...`), checks that
//! its session id did not change and no disconnection was reported, and ends with `ok`.
//! `tests/clients/install.sh` installs and builds them (`tests/scripts/test.sh` runs it first).
//! A client that hangs is killed at `CLIENT_DEADLINE` and fails its test.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use baton_tests::command::run;
use support::{Listeners, Member};

const PLAIN: Listeners = Listeners {
    plain: true,
    secure: false,
};
/// Room for one 3,000-byte node and its path, not for two.
const QUOTA: [&str; 2] = ["--quota-shared-bytes", "5000"];
/// A client that lost its connection on the refusal hangs: killed then, it fails its test. A
/// JVM's start on a loaded 2-core machine takes seconds, well within it.
const CLIENT_DEADLINE: Duration = Duration::from_secs(90);
const REFUSALS: &str = r#"baton_quota_refusals_total{reason="shared_bytes"}"#;
/// The Java client's (and so Curator's) name for BadArguments.
const JAVA_BAD_ARGUMENTS: &str = "KeeperException$BadArgumentsException";
/// Debian's ZooKeeper 3.8 client; its manifest names the jars it needs.
const DEBIAN_ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients")
}

/// A file `install.sh` makes, or an error that says to run it.
fn built(relative: &str) -> Result<PathBuf> {
    let path = clients_dir().join(relative);
    ensure!(
        path.exists(),
        "{} is missing: run tests/clients/install.sh",
        path.display()
    );
    Ok(path)
}

/// `java -cp CLASSES:CLASSPATH MAIN` for the Maven module `module` of tests/clients/java, on its
/// own dependencies (`None`) or on `classpath`.
fn java(module: &str, main: &str, classpath: Option<&str>) -> Result<Command> {
    let classes = built(&format!("java/{module}/target/classes"))?;
    let dependencies = match classpath {
        Some(classpath) => classpath.to_owned(),
        None => {
            let file = built(&format!("java/{module}/target/classpath.txt"))?;
            std::fs::read_to_string(&file)
                .with_context(|| format!("read {}", file.display()))?
                .trim()
                .to_owned()
        }
    };
    let mut command = Command::new("java");
    command
        .arg("-cp")
        .arg(format!("{}:{dependencies}", classes.display()))
        .arg(main);
    Ok(command)
}

/// Runs `client` against a member that refuses its second big create; passes when the client
/// went on as usual on the same session and reported the refusal with `expected` in it (its
/// own name for BadArguments, -8).
async fn survives(client: &str, mut command: Command, expected: &str) -> Result<()> {
    let member = Member::start(PLAIN, &QUOTA).await?;
    let addr = member.client.context("plain listener")?;
    command.arg(addr.to_string());
    let finished = run(command, CLIENT_DEADLINE).await?;
    ensure!(
        finished.success(),
        "{client} did not go on after the refusal\n{finished}"
    );
    ensure!(
        finished.stdout.lines().last() == Some("ok"),
        "{client} exited 0 without finishing\n{finished}"
    );
    let refusal = finished
        .stdout
        .lines()
        .find(|l| l.starts_with("refused big-2:"))
        .with_context(|| format!("{client} printed no refusal\n{finished}"))?;
    println!("{client}: {refusal}");
    ensure!(
        refusal.contains(expected),
        "{client} saw the refusal as {refusal:?}, not as {expected} (BadArguments, -8)\n{finished}"
    );
    // The member refused exactly once, and for the quota (not, say, a malformed request).
    let refused = member.wait_metric(REFUSALS, |v| v >= 1.0).await?;
    ensure!(refused == 1.0, "{refused} quota refusals, expected 1");
    Ok(())
}

#[tokio::test]
async fn kazoo() -> Result<()> {
    // Debian's Python, which has python3-kazoo (a python3 earlier in PATH may not).
    let mut command = Command::new("/usr/bin/python3");
    command.arg(clients_dir().join("python/refusal.py"));
    survives("kazoo", command, "BadArgumentsError").await
}

#[tokio::test]
async fn java_zookeeper_3_5() -> Result<()> {
    let command = java("zookeeper", "Refusal", None)?;
    survives("ZooKeeper 3.5", command, JAVA_BAD_ARGUMENTS).await
}

#[tokio::test]
async fn java_zookeeper_3_8_from_debian() -> Result<()> {
    // The same program, on Debian's jar.
    let command = java("zookeeper", "Refusal", Some(DEBIAN_ZOOKEEPER_JAR))?;
    survives("ZooKeeper 3.8", command, JAVA_BAD_ARGUMENTS).await
}

#[tokio::test]
async fn curator() -> Result<()> {
    let command = java("curator", "CuratorRefusal", None)?;
    survives("Curator", command, JAVA_BAD_ARGUMENTS).await
}

#[tokio::test]
async fn c_client() -> Result<()> {
    let command = Command::new(built("c/target/refusal")?);
    survives("C client", command, "ZBADARGUMENTS").await
}

#[tokio::test]
async fn node_zookeeper_client() -> Result<()> {
    built("node/node_modules/node-zookeeper-client")?;
    let mut command = Command::new("node");
    command.arg(clients_dir().join("node/refusal.js"));
    survives("node-zookeeper-client", command, "(code -8)").await
}

#[tokio::test]
async fn go_zookeeper() -> Result<()> {
    let command = Command::new(built("go/target/refusal")?);
    survives("go-zookeeper", command, "ErrBadArguments: true").await
}
