//! kazoo (Python) recipes and operations: each script in `tests/e2e/python/` exits 0 when every
//! check in it held. `BATON_TEST_VERBOSE=1` makes the scripts log kazoo's connection handling.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Result, ensure};
use baton_tests::command::run;
use baton_tests::{Server, target_tests};

/// Debian's Python, which has kazoo installed (a python3 earlier in PATH may not).
const PYTHON: &str = "/usr/bin/python3";
const SCRIPT_DEADLINE: Duration = Duration::from_secs(90);

async fn kazoo_script(server: &Server, script: &str) -> Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join(format!("{script}.py"));
    let mut command = Command::new(PYTHON);
    command.arg(&path).arg(server.connect_string());
    let finished = run(command, SCRIPT_DEADLINE).await?;
    ensure!(finished.success(), "{script}.py failed\n{finished}");
    Ok(())
}

async fn lock_hands_over_on_release(server: &mut Server) -> Result<()> {
    kazoo_script(server, "lock").await
}

async fn election_fails_over_on_session_close(server: &mut Server) -> Result<()> {
    kazoo_script(server, "election").await
}

async fn data_and_children_watches_see_every_change(server: &mut Server) -> Result<()> {
    kazoo_script(server, "watches").await
}

async fn transaction_is_atomic(server: &mut Server) -> Result<()> {
    kazoo_script(server, "transaction").await
}

async fn ephemeral_sequential_nodes(server: &mut Server) -> Result<()> {
    kazoo_script(server, "ephemeral_sequential").await
}

async fn digest_acl(server: &mut Server) -> Result<()> {
    kazoo_script(server, "acl_digest").await
}

async fn null_data_stays_apart_from_empty_data(server: &mut Server) -> Result<()> {
    kazoo_script(server, "null_data").await
}

target_tests!(
    lock_hands_over_on_release,
    election_fails_over_on_session_close,
    data_and_children_watches_see_every_change,
    transaction_is_atomic,
    ephemeral_sequential_nodes,
    digest_acl,
    null_data_stays_apart_from_empty_data,
);
