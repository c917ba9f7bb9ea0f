//! Apache ZooKeeper's own command-line client, `zkCli.sh`, one command per run.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use baton_tests::command::{Finished, run};
use baton_tests::{Server, target_tests};

const ZKCLI: &str = "/usr/share/zookeeper/bin/zkCli.sh";
const CLI_DEADLINE: Duration = Duration::from_secs(60);

/// What one zkCli command printed, without the JVM's logging and connection chatter.
struct CliOutput {
    exit_ok: bool,
    stdout: Vec<String>,
    stderr: Vec<String>,
    raw: String,
}

fn meaningful_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim_end)
        .filter(|line| {
            !(line.is_empty()
                || line.starts_with("SLF4J:")
                || line.starts_with("Connecting to ")
                || line.starts_with("WATCHER::")
                || line.starts_with("WatchedEvent state:"))
        })
        .map(str::to_owned)
        .collect()
}

async fn zkcli(server: &Server, args: &[&str]) -> Result<CliOutput> {
    let mut command = Command::new(ZKCLI);
    command
        .arg("-server")
        .arg(server.connect_string())
        .args(args);
    let finished: Finished = run(command, CLI_DEADLINE).await?;
    ensure!(finished.status.is_some(), "zkCli {args:?} hung\n{finished}");
    Ok(CliOutput {
        exit_ok: finished.success(),
        stdout: meaningful_lines(&finished.stdout),
        stderr: meaningful_lines(&finished.stderr),
        raw: finished.to_string(),
    })
}

/// Runs a command that must succeed and returns its output.
async fn ok(server: &Server, args: &[&str]) -> Result<CliOutput> {
    let out = zkcli(server, args).await?;
    ensure!(out.exit_ok, "zkCli {args:?} failed\n{}", out.raw);
    Ok(out)
}

fn stat_field(stat: &[String], name: &str) -> Result<String> {
    stat.iter()
        .find_map(|line| {
            line.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(" = "))
        })
        .map(str::to_owned)
        .with_context(|| format!("no `{name} = ` line in {stat:?}"))
}

fn hex_zxid(value: &str) -> Result<i64> {
    let digits = value
        .strip_prefix("0x")
        .with_context(|| format!("zxid {value:?} is not 0x-prefixed"))?;
    i64::from_str_radix(digits, 16).with_context(|| format!("zxid {value:?} is not hex"))
}

async fn zkcli_commands_work(server: &mut Server) -> Result<()> {
    let listing = ok(server, &["ls", "/"]).await?;
    ensure!(
        listing.stdout == ["[zookeeper]"],
        "ls / on a fresh server: {:?}\n{}",
        listing.stdout,
        listing.raw
    );

    let created = ok(server, &["create", "/cli", "hello"]).await?;
    ensure!(
        created.stderr == ["Created /cli"],
        "create printed {:?}\n{}",
        created.stderr,
        created.raw
    );

    let sequential = ok(server, &["create", "-e", "-s", "/x", "data"]).await?;
    let name = sequential
        .stderr
        .iter()
        .find_map(|line| line.strip_prefix("Created /x"))
        .with_context(|| {
            format!(
                "create -e -s printed {:?}\n{}",
                sequential.stderr, sequential.raw
            )
        })?;
    ensure!(
        name.len() == 10 && name.bytes().all(|b| b.is_ascii_digit()),
        "sequential suffix {name:?}"
    );
    // zkCli exits without closing its session, so the ephemeral lives until the session expires.
    let ephemeral = format!("/x{name}");
    let listing = ok(server, &["ls", "/"]).await?;
    let expected = format!("[cli, x{name}, zookeeper]");
    ensure!(
        listing.stdout == [expected],
        "ls / after creates: {:?}\n{}",
        listing.stdout,
        listing.raw
    );
    let stat = ok(server, &["stat", &ephemeral]).await?.stdout;
    let owner = stat_field(&stat, "ephemeralOwner")?;
    ensure!(owner != "0x0", "{ephemeral} has no owner: {stat:?}");
    ensure!(
        stat_field(&stat, "dataLength")? == "4",
        "{ephemeral}: {stat:?}"
    );

    let got = ok(server, &["get", "/cli"]).await?;
    ensure!(
        got.stdout == ["hello"],
        "get printed {:?}\n{}",
        got.stdout,
        got.raw
    );
    ok(server, &["set", "/cli", "v2"]).await?;
    let got = ok(server, &["get", "/cli"]).await?;
    ensure!(
        got.stdout == ["v2"],
        "get after set printed {:?}\n{}",
        got.stdout,
        got.raw
    );

    let stat = ok(server, &["stat", "/cli"]).await?.stdout;
    for (field, expected) in [
        ("dataVersion", "1"),
        ("cversion", "0"),
        ("aclVersion", "0"),
        ("ephemeralOwner", "0x0"),
        ("dataLength", "2"),
        ("numChildren", "0"),
    ] {
        let value = stat_field(&stat, field)?;
        ensure!(
            value == expected,
            "stat {field} = {value}, expected {expected}"
        );
    }
    let czxid = hex_zxid(&stat_field(&stat, "cZxid")?)?;
    let mzxid = hex_zxid(&stat_field(&stat, "mZxid")?)?;
    let pzxid = hex_zxid(&stat_field(&stat, "pZxid")?)?;
    ensure!(
        mzxid > czxid && pzxid == czxid,
        "stat zxids c={czxid:#x} m={mzxid:#x} p={pzxid:#x}"
    );

    let again = zkcli(server, &["create", "/cli", "x"]).await?;
    ensure!(
        !again.exit_ok,
        "create of an existing node exited 0\n{}",
        again.raw
    );
    ensure!(
        again.stderr == ["Node already exists: /cli"],
        "create of an existing node: {:?}",
        again.stderr
    );

    ok(server, &["delete", "/cli"]).await?;
    let missing = zkcli(server, &["get", "/cli"]).await?;
    ensure!(
        !missing.exit_ok,
        "get of a deleted node exited 0\n{}",
        missing.raw
    );
    ensure!(
        missing.stderr == ["Node does not exist: /cli"],
        "get of a deleted node: {:?}",
        missing.stderr
    );
    let listing = ok(server, &["ls", "/"]).await?;
    let still_listed = listing.stdout.len() != 1 || listing.stdout[0].contains("cli");
    ensure!(
        !still_listed,
        "ls / after delete: {:?}\n{}",
        listing.stdout,
        listing.raw
    );
    Ok(())
}

target_tests!(zkcli_commands_work);
