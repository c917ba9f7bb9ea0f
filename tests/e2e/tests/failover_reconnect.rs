//! Failover as a client sees it: a session whose member was SIGKILLed
//! reconnects to a survivor and is answered as soon as the survivors have a leader, never after
//! a timeout.
//!
//! The survivors are started with `--handshake-timeout 600s`, the backstop that closes a
//! handshake nobody answered. Each reconnect is bounded by the harness's 10 s I/O deadline, so a
//! reconnect that waited on the dead leader (a claim sent to it and never re-sent) fails here
//! instead of being answered when the backstop fires.
//!
//! Run: `cargo nextest run -p baton-tests --test failover_reconnect` (after `cargo build -p
//! baton-ensemble`).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use baton_tests::cluster::{Cluster, run_cluster_case_with_flags};
use baton_tests::raw::{
    Outcome, RawConnection, ReplyHeader, connect_request_body, opcode, path_and_watch,
};

/// Far past every deadline below: a reconnect that waits for it fails the test.
const HANDSHAKE_BACKSTOP: &str = "600s";
/// Sessions on the leader when it is killed; they reconnect at once, together.
const SESSIONS: usize = 6;
/// Bound on a session finding a survivor that takes it back (elections included).
const RECONNECT_DEADLINE: Duration = Duration::from_secs(60);
/// Pause between refused attempts, as a client's backoff: a survivor without a leader may
/// close a handshake at once.
const RETRY_PAUSE: Duration = Duration::from_millis(10);
const SESSION_TIMEOUT_MS: i32 = 30_000;

/// A session as the server granted it, and the newest zxid its client has seen.
#[derive(Debug, Clone)]
struct Granted {
    id: i64,
    passwd: Vec<u8>,
    timeout_ms: i32,
    last_zxid: i64,
}

/// ConnectResponse: protocolVersion, timeOut, sessionId, passwd (length-prefixed).
fn parse_connect_response(payload: &[u8]) -> Result<Granted> {
    ensure!(payload.len() >= 20, "short ConnectResponse {payload:02x?}");
    let timeout_ms = i32::from_be_bytes(payload[4..8].try_into()?);
    let id = i64::from_be_bytes(payload[8..16].try_into()?);
    let len = usize::try_from(i32::from_be_bytes(payload[16..20].try_into()?))?;
    let passwd = payload
        .get(20..20 + len)
        .with_context(|| format!("ConnectResponse password cut short: {payload:02x?}"))?
        .to_vec();
    Ok(Granted {
        id,
        passwd,
        timeout_ms,
        last_zxid: 0,
    })
}

/// One handshake. `Ok(None)`: the member closed the connection without an answer (no leader
/// yet, or it could not confirm the session), which a client answers by trying again.
async fn handshake(
    addr: SocketAddr,
    session: &Granted,
) -> Result<Option<(RawConnection, Granted)>> {
    let session_id = session.id;
    let mut conn = match RawConnection::open(addr).await {
        Ok(conn) => conn,
        // A member may be refusing connections while it starts up an election: try again.
        Err(_) => return Ok(None),
    };
    if conn
        // As real clients do, the newest zxid seen: a member behind it refuses the session.
        .send_frame(&connect_request_body(
            session_id,
            &session.passwd,
            session.last_zxid,
            SESSION_TIMEOUT_MS,
        ))
        .await
        .is_err()
    {
        return Ok(None);
    }
    match conn.receive().await.with_context(|| {
        format!(
            "reconnect of session {session_id:#x} to {addr}: the member held the handshake \
             without answering (waiting on the dead leader?)"
        )
    })? {
        Outcome::Frame(payload) => Ok(Some((conn, parse_connect_response(&payload)?))),
        Outcome::Closed { .. } => Ok(None),
    }
}

/// Reconnects `session` to the survivors in turn until one takes it back.
async fn reconnect(survivors: &[SocketAddr], session: &Granted) -> Result<(RawConnection, u32)> {
    let mut attempts = 0u32;
    loop {
        for addr in survivors {
            attempts += 1;
            if let Some((conn, granted)) = handshake(*addr, session).await? {
                ensure!(
                    granted.timeout_ms > 0,
                    "session {:#x} was declared expired on reconnect",
                    session.id
                );
                ensure!(
                    granted.id == session.id,
                    "reconnect of {:#x} answered for session {:#x}",
                    session.id,
                    granted.id
                );
                return Ok((conn, attempts));
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}

async fn reconnect_after_leader_kill_case(cluster: &mut Cluster) -> Result<()> {
    let leader = cluster.leader().await?;
    let leader_addr = cluster.member(leader)?.client_addr();
    let survivors: Vec<SocketAddr> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != leader)
        .map(|id| cluster.member(id).map(|m| m.client_addr()))
        .collect::<Result<_>>()?;

    let new_session = Granted {
        id: 0,
        passwd: vec![0; 16],
        timeout_ms: SESSION_TIMEOUT_MS,
        last_zxid: 0,
    };
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        let Some((mut conn, mut granted)) = handshake(leader_addr, &new_session).await? else {
            bail!("the leader refused a new session");
        };
        // The session is in use on the leader: one read answered there.
        let (_, reply) = conn
            .call(1, opcode::EXISTS, &path_and_watch("/", false))
            .await?;
        granted.last_zxid = ReplyHeader::parse(&reply)?.zxid;
        sessions.push((conn, granted));
    }

    cluster.kill9(leader)?;

    let mut tasks = tokio::task::JoinSet::new();
    for (i, (_old, session)) in sessions.into_iter().enumerate() {
        // Spread the sessions over the survivors, as clients' shuffled server lists do.
        let mut order = survivors.clone();
        order.rotate_left(i % survivors.len());
        tasks.spawn(async move {
            tokio::time::timeout(RECONNECT_DEADLINE, reconnect(&order, &session))
                .await
                .with_context(|| {
                    format!("session {:#x} found no member to take it back", session.id)
                })?
                .map(|(conn, attempts)| (session, conn, attempts))
        });
    }
    let mut total_attempts = 0;
    while let Some(joined) = tasks.join_next().await {
        let (session, mut conn, attempts) = joined??;
        total_attempts += attempts;
        // The resumed session serves requests on its new member.
        conn.call(2, opcode::EXISTS, &path_and_watch("/", false))
            .await
            .with_context(|| format!("a request on resumed session {:#x}", session.id))?;
    }
    let new_leader = cluster.wait_for_leader().await?;
    ensure!(
        new_leader != leader,
        "the killed member {leader} still leads"
    );
    println!(
        "{SESSIONS} sessions on killed leader {leader} resumed on survivors in {total_attempts} \
         handshakes; member {new_leader} leads"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_on_a_killed_leader_reconnect_without_waiting_for_a_timeout() {
    run_cluster_case_with_flags(
        3,
        &["--handshake-timeout", HANDSHAKE_BACKSTOP],
        reconnect_after_leader_kill_case,
    )
    .await;
}
