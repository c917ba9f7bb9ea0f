//! The reference ZooKeeper runs on the class path `tests/scripts/reference-zookeeper.sh` names,
//! not on whatever `/usr/share/java` holds, and says why when it cannot start.
//!
//! With `-cp "/usr/share/java/*"` the Java packages a machine happened to have chose ZooKeeper's
//! SLF4J binding: on one, the no-op one, and a reference that exited during start-up left a log of
//! SLF4J warnings only. Here the class path the JVM would really use (the script's entries and,
//! transitively, the jars their manifests' `Class-Path` names) is read jar by jar: it must hold
//! only jars of ZooKeeper's Debian package and the packages it depends on, exactly one SLF4J
//! binding (slf4j-log4j12) and one log4j 1.2 API; and a reference that fails to start must have
//! its own error in the harness's failure message.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use baton_tests::{Server, Target, command};

const DEADLINE: Duration = Duration::from_secs(30);

/// An SLF4J 1.x binding has this class; a 2.x provider registers the service below.
const SLF4J_1_BINDING: &str = "org/slf4j/impl/StaticLoggerBinder.class";
const SLF4J_2_PROVIDER: &str = "META-INF/services/org.slf4j.spi.SLF4JServiceProvider";
/// log4j 1.2's API: log4j itself, or a bridge such as log4j-over-slf4j (which with
/// slf4j-log4j12 would loop).
const LOG4J_API: &str = "org/apache/log4j/Logger.class";

/// Prints one jar's manifest `Class-Path` entries and its entry names as JSON (the JVM reads
/// jars; so does Python's standard library, which the kazoo tests already need).
const READ_JAR: &str = r#"
import json, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as jar:
    names = jar.namelist()
    class_path = []
    if "META-INF/MANIFEST.MF" in names:
        text = jar.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
        for line in text.replace("\r\n", "\n").replace("\n ", "").split("\n"):
            if line.lower().startswith("class-path:"):
                class_path += line.split(":", 1)[1].split()
    print(json.dumps({"class_path": class_path, "names": names}))
"#;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/reference-zookeeper.sh")
}

async fn output(command: Command) -> Result<String> {
    let what = format!("{command:?}");
    let done = command::run(command, DEADLINE).await?;
    ensure!(done.success(), "{what}:\n{done}");
    Ok(done.stdout)
}

struct Jar {
    class_path: Vec<PathBuf>,
    names: BTreeSet<String>,
}

async fn read_jar(path: &Path) -> Result<Jar> {
    let mut python = Command::new("/usr/bin/python3");
    python.arg("-c").arg(READ_JAR).arg(path);
    let json: serde_json::Value = serde_json::from_str(&output(python).await?)
        .with_context(|| format!("read {}", path.display()))?;
    let strings = |key: &str| -> Vec<String> {
        json[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    // Class-Path entries are URLs relative to the jar's directory.
    let dir = path.parent().unwrap_or(Path::new("/"));
    let class_path = strings("class_path")
        .into_iter()
        .map(|entry| dir.join(entry.trim_start_matches("file:")))
        .collect();
    Ok(Jar {
        class_path,
        names: strings("names").into_iter().collect(),
    })
}

/// Every jar the JVM loads classes from, symlinks resolved: the `-cp` entries, then the
/// manifests' `Class-Path` entries that exist (the JVM skips the others), transitively.
async fn effective_class_path(entries: &str) -> Result<BTreeMap<PathBuf, Jar>> {
    let mut jars = BTreeMap::new();
    let mut queue: Vec<PathBuf> = entries.trim().split(':').map(PathBuf::from).collect();
    ensure!(!queue.is_empty(), "an empty class path");
    while let Some(entry) = queue.pop() {
        let Ok(path) = entry.canonicalize() else {
            continue;
        };
        if jars.contains_key(&path) {
            continue;
        }
        ensure!(
            path.is_file(),
            "{} (from {}) is not a jar",
            path.display(),
            entry.display()
        );
        let jar = read_jar(&path).await?;
        queue.extend(jar.class_path.iter().cloned());
        jars.insert(path, jar);
    }
    Ok(jars)
}

/// The jars of ZooKeeper's Debian packages and of every package libzookeeper-java depends on,
/// symlinks resolved.
async fn allowed_jars() -> Result<BTreeSet<PathBuf>> {
    let mut query = Command::new("dpkg-query");
    query.args(["-W", "-f=${Depends}", "libzookeeper-java"]);
    let depends = output(query).await?;
    let mut packages = vec!["zookeeper".to_owned(), "libzookeeper-java".to_owned()];
    for dependency in depends.split(',') {
        // `pkg (>= 1) | other`: the first alternative, without version or architecture.
        let name = dependency
            .split(['|', '(', ':'])
            .next()
            .unwrap_or("")
            .trim();
        if !name.is_empty() {
            packages.push(name.to_owned());
        }
    }
    let mut jars = BTreeSet::new();
    for package in &packages {
        let mut list = Command::new("dpkg-query");
        list.args(["-L", package]);
        for file in output(list).await?.lines() {
            if file.ends_with(".jar")
                && let Ok(path) = Path::new(file).canonicalize()
            {
                jars.insert(path);
            }
        }
    }
    ensure!(
        jars.iter().any(|jar| jar.ends_with("zookeeper.jar")),
        "no zookeeper.jar among the files of {packages:?}"
    );
    Ok(jars)
}

#[tokio::test]
async fn zookeeper_class_path_has_its_own_jars_and_one_logging_binding() -> Result<()> {
    let mut print = Command::new(script());
    print.arg("--classpath");
    let entries = output(print).await?;
    ensure!(
        !entries.contains('*'),
        "the class path is a wildcard: {entries}"
    );
    let jars = effective_class_path(&entries).await?;
    let allowed = allowed_jars().await?;

    let outside: Vec<_> = jars.keys().filter(|jar| !allowed.contains(*jar)).collect();
    ensure!(
        outside.is_empty(),
        "jars on the reference's class path that belong to neither ZooKeeper's packages nor \
         their dependencies: {outside:?}"
    );
    let holding = |name: &str| -> Vec<&PathBuf> {
        jars.iter()
            .filter(|(_, jar)| jar.names.contains(name))
            .map(|(path, _)| path)
            .collect()
    };
    let mut bindings = holding(SLF4J_1_BINDING);
    bindings.extend(holding(SLF4J_2_PROVIDER));
    ensure!(
        bindings.len() == 1,
        "want exactly one SLF4J binding on the class path, found {bindings:?}"
    );
    let binding = bindings[0]
        .file_name()
        .unwrap_or_default()
        .to_string_lossy();
    ensure!(
        binding.starts_with("slf4j-log4j12"),
        "the SLF4J binding is {binding}, not slf4j-log4j12 (the script's log4j.properties \
         would configure nothing)"
    );
    let log4j = holding(LOG4J_API);
    ensure!(
        log4j.len() == 1,
        "want exactly one log4j 1.2 API on the class path, found {log4j:?}"
    );
    for class in [
        "org/apache/zookeeper/server/quorum/QuorumPeerMain.class",
        "org/apache/zookeeper/data/Stat.class",
        "org/slf4j/LoggerFactory.class",
        // The Netty connection factory's (TLS): SslHandler's base, the bootstrap's resolver,
        // epoll's native socket.
        "io/netty/handler/codec/ByteToMessageDecoder.class",
        "io/netty/resolver/AddressResolverGroup.class",
        "io/netty/channel/unix/Socket.class",
    ] {
        ensure!(
            !holding(class).is_empty(),
            "{class} is on no jar of the class path"
        );
    }
    Ok(())
}

#[tokio::test]
async fn zookeeper_logs_through_log4j_into_the_harness_log() -> Result<()> {
    let server = Server::start(Target::ZooKeeper).await?;
    let log = server.log_tail(usize::MAX);
    ensure!(
        !log.contains("SLF4J:"),
        "SLF4J complained about its bindings:\n{log}"
    );
    // The script's PatternLayout: `date time LEVEL [thread:Class@line] - message`.
    let bound = format!(
        "binding to port 0.0.0.0/0.0.0.0:{}",
        server.client_addr().port()
    );
    ensure!(
        log.lines()
            .any(|line| line.contains(" INFO  [") && line.contains(&bound)),
        "no log4j INFO line `{bound}` in the reference's log:\n{log}"
    );
    Ok(())
}

#[tokio::test]
async fn a_zookeeper_that_cannot_start_says_why_in_the_failure() -> Result<()> {
    // A config ZooKeeper refuses on every attempt: the allow-list's line carries a second one,
    // an unparsable client port (a later key wins in a Java properties file).
    let Err(err) = Server::start_allowing(Target::ZooKeeper, "srvr\nclientPort=not-a-port").await
    else {
        bail!("ZooKeeper started with clientPort=not-a-port");
    };
    let message = format!("{err:#}");
    ensure!(
        message.contains("exited during start-up"),
        "not a start-up exit: {message}"
    );
    ensure!(
        message.contains("ERROR") && message.contains("not-a-port"),
        "the failure does not carry ZooKeeper's own error:\n{message}"
    );
    Ok(())
}
