//! Baton's admin HTTP API (DESIGN.md §1): health, readiness, status, members, metrics.
//! The operator and Kubernetes probes rely on these shapes.

use anyhow::{Context, Result, ensure};
use baton_tests::{PERSISTENT, Server, baton_only_tests, connect};
use serde_json::Value;

async fn get_json(server: &Server, path: &str) -> Result<Value> {
    let (status, body) = server.admin_get(path).await?;
    ensure!(status == 200, "GET {path} answered {status}: {body}");
    serde_json::from_str(&body).with_context(|| format!("GET {path} is not JSON: {body}"))
}

fn number(status: &Value, key: &str) -> Result<u64> {
    status
        .get(key)
        .and_then(Value::as_u64)
        .with_context(|| format!("no integer {key:?} in {status}"))
}

async fn probes_answer(server: &mut Server) -> Result<()> {
    for path in ["/healthz", "/readyz"] {
        let (status, body) = server.admin_get(path).await?;
        ensure!(status == 200, "GET {path} answered {status}: {body}");
    }
    let (status, body) = server.admin_get("/no-such-endpoint").await?;
    ensure!(status == 404, "an unknown path answered {status}: {body}");
    Ok(())
}

async fn status_describes_a_one_member_ensemble(server: &mut Server) -> Result<()> {
    let client = connect(server).await?;
    client.create("/admin-status", b"", &PERSISTENT).await?;

    let status = get_json(server, "/v1/status").await?;
    ensure!(
        status["id"] == 1 && status["leaderId"] == 1,
        "ids in {status}"
    );
    ensure!(
        status["role"] == "leader",
        "a one-member ensemble's role: {status}"
    );
    ensure!(
        status["members"] == serde_json::json!([1]),
        "members in {status}"
    );
    ensure!(number(&status, "term")? >= 1, "term in {status}");
    let (commit, applied) = (
        number(&status, "commitIndex")?,
        number(&status, "appliedIndex")?,
    );
    ensure!(
        applied <= commit,
        "applied {applied} beyond commit {commit}"
    );
    number(&status, "sessions")?;
    number(&status, "znodes")?;

    let members = get_json(server, "/v1/members").await?;
    let list = members["members"]
        .as_array()
        .with_context(|| format!("members list in {members}"))?;
    ensure!(list.len() == 1 && list[0]["id"] == 1, "members: {members}");
    Ok(())
}

async fn metrics_are_openmetrics_text(server: &mut Server) -> Result<()> {
    let (status, body) = server.admin_get("/metrics").await?;
    ensure!(status == 200, "GET /metrics answered {status}");
    ensure!(
        body.trim_end().ends_with("# EOF"),
        "metrics do not end with # EOF"
    );
    for family in [
        "baton_raft_term",
        "baton_raft_commit_index",
        "baton_znodes",
        "baton_sessions",
    ] {
        ensure!(
            body.contains(&format!("# TYPE {family} ")),
            "no {family} in /metrics"
        );
    }
    Ok(())
}

baton_only_tests!(
    probes_answer,
    status_describes_a_one_member_ensemble,
    metrics_are_openmetrics_text
);
