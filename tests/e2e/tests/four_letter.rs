//! ZooKeeper's four-letter words on the client port: ruok, srvr, stat, mntr, and the
//! allow-list that decides which are answered (Baton's `--four-letter-words`, ZooKeeper's
//! `4lw.commands.whitelist`): by default `srvr` alone, and no answer names a session, since
//! whoever asks is anonymous.

use anyhow::{Context, Result, bail, ensure};
use baton_tests::wire::four_letter_word;
use baton_tests::{PERSISTENT, Server, Target, connect, run_case, run_case_allowing};

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

/// ZooKeeper's answer to a word its allow-list leaves out.
fn refused(word: &str) -> String {
    format!("{word} is not executed because it is not in the whitelist.\n")
}

/// Out of the box only `srvr` is answered (Baton without the flag; ZooKeeper 3.8 without
/// `4lw.commands.whitelist`, which the reference script otherwise sets to `*`): `stat` would
/// list every client, `mntr` the member's internals, to anyone who reaches the port.
async fn only_srvr_is_answered_by_default(server: &mut Server) -> Result<()> {
    let _session = connect(server).await?;
    let srvr = four_letter_word(server.client_addr(), "srvr").await?;
    ensure!(srvr.contains("Mode:"), "srvr: {srvr:?}");
    for word in [
        "stat", "ruok", "mntr", "cons", "isro", "dump", "wchs", "envi", "conf",
    ] {
        let answer = four_letter_word(server.client_addr(), word).await?;
        ensure!(answer == refused(word), "{word} answered {answer:?}");
    }
    Ok(())
}

/// An allow-list answers its words and `srvr` (which ZooKeeper always adds), nothing else.
async fn an_allow_list_answers_its_words_and_srvr(server: &mut Server) -> Result<()> {
    let ruok = four_letter_word(server.client_addr(), "ruok").await?;
    ensure!(ruok == "imok", "ruok: {ruok:?}");
    let mntr = four_letter_word(server.client_addr(), "mntr").await?;
    mntr_value(&mntr, "zk_znode_count")?;
    let srvr = four_letter_word(server.client_addr(), "srvr").await?;
    ensure!(srvr.contains("Mode:"), "srvr: {srvr:?}");
    for word in ["stat", "cons", "dump"] {
        let answer = four_letter_word(server.client_addr(), word).await?;
        ensure!(answer == refused(word), "{word} answered {answer:?}");
    }
    Ok(())
}

/// Even with every word allowed, no answer names a connected session: a session id (with the
/// password a log or backup may hold) is what rejoins a live session and can close it. Baton
/// only: ZooKeeper's `stat` leaves them out too, but its `cons`, `dump` and `wchc` print them.
async fn no_word_names_a_session(server: &mut Server) -> Result<()> {
    let client = connect(server).await?;
    let session = client.session_id().0 as u64;
    for word in [
        "stat", "cons", "srvr", "mntr", "dump", "wchc", "wchp", "wchs", "conf", "envi",
    ] {
        let answer = four_letter_word(server.client_addr(), word).await?;
        ensure!(
            !answer.contains(&format!("{session:x}")),
            "{word} names session 0x{session:x}: {answer:?}"
        );
    }
    // The session is listed by address, as ZooKeeper lists it.
    let stat = four_letter_word(server.client_addr(), "stat").await?;
    ensure!(stat.contains("Clients:\n /127.0.0.1:"), "stat: {stat:?}");
    Ok(())
}

/// Cases run with every word allowed.
macro_rules! all_words_tests {
    ($($case:ident),+ $(,)?) => {
        $(
            mod $case {
                #[tokio::test]
                async fn baton() {
                    super::run_case_allowing(super::Target::Baton, "*", super::$case).await;
                }
                #[tokio::test]
                async fn zookeeper() {
                    super::run_case_allowing(super::Target::ZooKeeper, "*", super::$case).await;
                }
            }
        )+
    };
}

all_words_tests!(
    ruok_answers_imok,
    srvr_and_stat_report_the_node_count,
    mntr_reports_znode_count,
);

mod no_word_names_a_session {
    #[tokio::test]
    async fn baton() {
        super::run_case_allowing(super::Target::Baton, "*", super::no_word_names_a_session).await;
    }
}

mod only_srvr_is_answered_by_default {
    #[tokio::test]
    async fn baton() {
        super::run_case(
            super::Target::Baton,
            super::only_srvr_is_answered_by_default,
        )
        .await;
    }
    #[tokio::test]
    async fn zookeeper() {
        // The reference script's own default is `*`; ZooKeeper's is `srvr`.
        super::run_case_allowing(
            super::Target::ZooKeeper,
            "srvr",
            super::only_srvr_is_answered_by_default,
        )
        .await;
    }
}

mod an_allow_list_answers_its_words_and_srvr {
    #[tokio::test]
    async fn baton() {
        super::run_case_allowing(
            super::Target::Baton,
            "ruok,mntr",
            super::an_allow_list_answers_its_words_and_srvr,
        )
        .await;
    }
    #[tokio::test]
    async fn zookeeper() {
        super::run_case_allowing(
            super::Target::ZooKeeper,
            "ruok,mntr",
            super::an_allow_list_answers_its_words_and_srvr,
        )
        .await;
    }
}
