//! ZooKeeper's four-letter words on the client port: ruok, srvr, stat, mntr.

use anyhow::{Context, Result, bail, ensure};
use baton_tests::wire::four_letter_word;
use baton_tests::{PERSISTENT, Server, connect, target_tests};

/// `Node count: N` from srvr/stat output.
fn srvr_node_count(srvr: &str) -> Result<u64> {
    let line = srvr
        .lines()
        .find_map(|line| line.strip_prefix("Node count:"))
        .with_context(|| format!("no `Node count:` line in {srvr:?}"))?;
    line.trim()
        .parse()
        .with_context(|| format!("`Node count:{line}` is not a number"))
}

/// The value of `key` in mntr's tab-separated output.
fn mntr_value<'a>(mntr: &'a str, key: &str) -> Result<&'a str> {
    mntr.lines()
        .find_map(|line| {
            line.split_once('\t')
                .filter(|(k, _)| *k == key)
                .map(|(_, v)| v)
        })
        .with_context(|| format!("no {key} in mntr output {mntr:?}"))
}

async fn ruok_answers_imok(server: &mut Server) -> Result<()> {
    let answer = four_letter_word(server.client_addr(), "ruok").await?;
    ensure!(answer == "imok", "ruok answered {answer:?}");
    Ok(())
}

async fn srvr_and_stat_report_the_node_count(server: &mut Server) -> Result<()> {
    let before = four_letter_word(server.client_addr(), "srvr").await?;
    for needle in ["Zookeeper version:", "Mode:", "Node count:"] {
        ensure!(before.contains(needle), "srvr lacks {needle:?}: {before:?}");
    }
    let count_before = srvr_node_count(&before)?;

    let client = connect(server).await?;
    client.create("/four-letter-srvr", b"", &PERSISTENT).await?;

    let after = four_letter_word(server.client_addr(), "srvr").await?;
    ensure!(
        srvr_node_count(&after)? == count_before + 1,
        "srvr node count went from {count_before} to {} after one create",
        srvr_node_count(&after)?
    );
    let stat = four_letter_word(server.client_addr(), "stat").await?;
    for needle in ["Zookeeper version:", "Clients:", "Mode:", "Node count:"] {
        ensure!(stat.contains(needle), "stat lacks {needle:?}: {stat:?}");
    }
    ensure!(
        srvr_node_count(&stat)? == count_before + 1,
        "stat and srvr disagree: {stat:?}"
    );
    Ok(())
}

async fn mntr_reports_znode_count(server: &mut Server) -> Result<()> {
    let before = four_letter_word(server.client_addr(), "mntr").await?;
    let count_before: u64 = mntr_value(&before, "zk_znode_count")?.parse()?;
    let client = connect(server).await?;
    client
        .create("/four-letter-mntr-a", b"", &PERSISTENT)
        .await?;
    client
        .create("/four-letter-mntr-b", b"", &PERSISTENT)
        .await?;
    let after = four_letter_word(server.client_addr(), "mntr").await?;
    let count_after: u64 = mntr_value(&after, "zk_znode_count")?.parse()?;
    if count_after != count_before + 2 {
        bail!("zk_znode_count went from {count_before} to {count_after} after two creates");
    }
    mntr_value(&after, "zk_version")?;
    mntr_value(&after, "zk_server_state")?;
    Ok(())
}

target_tests!(
    ruok_answers_imok,
    srvr_and_stat_report_the_node_count,
    mntr_reports_znode_count
);
