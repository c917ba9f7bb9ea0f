//! The core driven the way the simulation drives it (`Core::step`), as a one-member ensemble
//! on a manual clock: the handshake's paths, replies to writes and syncs, and the refusal of
//! a request whose session the leader has expired.

use std::sync::Arc;
use std::time::Duration;

use baton_proto::codec::{decode_connect_response, decode_reply};
use baton_proto::{
    ConnectRequest, ConnectResponse, CreateRequest, OpCode, PathWatchRequest, ReplyHeader, Request,
    open_acl_unsafe,
};
use baton_raftlog::{LogOptions, RaftLog};
use tokio::sync::{oneshot, watch};

use super::*;

struct OneMember {
    core: Core,
    clock: Arc<ManualClock>,
    next_conn: ConnId,
    _dir: tempfile::TempDir,
}

/// What a connection's writer would have been handed.
struct Client {
    id: ConnId,
    out: OutboundRx,
    done: oneshot::Receiver<ConnectOutcome>,
}

impl Client {
    /// Frames queued since the last look, and whether a Close came after them.
    fn take(&mut self) -> (Vec<bytes::Bytes>, bool) {
        let mut frames = Vec::new();
        let mut closed = false;
        while let Some(msg) = self.out.try_recv() {
            match msg {
                Outbound::Frame(f) => frames.push(f),
                Outbound::Close => closed = true,
            }
        }
        (frames, closed)
    }

    fn outcome(&mut self) -> Option<ConnectOutcome> {
        self.done.try_recv().ok()
    }

    /// The one reply queued since the last look (not closed after it unless `closed`).
    fn reply(&mut self, opcode: OpCode) -> (ReplyHeader, Option<baton_proto::Response>, bool) {
        let (frames, closed) = self.take();
        assert_eq!(frames.len(), 1, "one reply");
        let (hdr, body) = decode_reply(opcode, &frames[0][4..]).expect("a reply");
        (hdr, body, closed)
    }
}

const TIMEOUT_MS: i32 = 4000;

/// The core of a one-member ensemble over `dir` (new or reopened), not yet stepped, on a manual
/// clock; the core tests here and in `settings` and `feature_level` start from it.
pub(super) fn one_member_core(
    dir: &std::path::Path,
    snapshot_entries: u64,
) -> Result<(Core, Arc<ManualClock>), CoreError> {
    let options = LogOptions {
        sync: false,
        ..LogOptions::default()
    };
    let log = RaftLog::open(dir, 1, Some("test"), options).expect("log");
    let cfg = CoreConfig {
        id: 1,
        min_session_timeout_ms: 400,
        max_session_timeout_ms: 60_000,
        snapshot_entries,
        tick: Duration::from_millis(100),
        reap_interval: Duration::from_secs(1),
        join: false,
        fixed_election_ticks: Some(10),
        handshake_timeout: super::connect::HANDSHAKE_TIMEOUT,
        bugs: DeliberateBugs::NONE,
    };
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let (status, _) = watch::channel(Status::default());
    let members = [(1, "127.0.0.1:1".to_string())];
    let metrics = Arc::new(Metrics::new());
    let core = Core::new(cfg, log, &members, metrics, status, None, clock.clone())?;
    Ok((core, clock))
}

impl OneMember {
    fn new() -> OneMember {
        OneMember::open(tempfile::tempdir().expect("temp dir"), 100_000, false)
    }

    /// A member over `dir` (new or reopened) snapshotting every `snapshot_entries`.
    fn open(dir: tempfile::TempDir, snapshot_entries: u64, off_thread: bool) -> OneMember {
        let (mut core, clock) = one_member_core(dir.path(), snapshot_entries).expect("core");
        core.snapshot_off_thread(off_thread);
        let mut member = OneMember {
            core,
            clock,
            next_conn: 1,
            _dir: dir,
        };
        member.step(vec![]);
        assert!(member.core.raft_view().is_leader, "alone, it leads at once");
        member
    }

    fn step(&mut self, msgs: Vec<CoreMsg>) {
        assert!(self.core.step(msgs).expect("no storage failure"));
    }

    fn advance(&self, by: Duration) {
        self.clock.set(self.clock.elapsed() + by);
    }

    fn connect(&mut self, req: ConnectRequest) -> Client {
        let id = self.next_conn;
        self.next_conn += 1;
        let (tx, out) = unlimited_outbound_queue();
        let (done_tx, done) = oneshot::channel();
        self.step(vec![CoreMsg::Connect {
            conn: id,
            peer: "127.0.0.1:9999".parse().expect("address"),
            out: tx,
            req,
            done: done_tx,
        }]);
        Client { id, out, done }
    }

    /// A new session, established.
    fn session(&mut self) -> (Client, ConnectResponse) {
        let mut client = self.connect(connect_request(0, vec![0; 16]));
        assert!(matches!(
            client.outcome(),
            Some(ConnectOutcome::Established { .. })
        ));
        let (frames, closed) = client.take();
        assert!(!closed);
        let resp = decode_connect_response(&frames[0][4..]).expect("a connect response");
        (client, resp)
    }

    fn request(&mut self, client: &Client, xid: i32, request: Request) {
        self.step(vec![CoreMsg::Request {
            conn: client.id,
            xid,
            request,
        }]);
    }
}

fn connect_request(session_id: i64, passwd: Vec<u8>) -> ConnectRequest {
    ConnectRequest {
        protocol_version: 0,
        last_zxid_seen: 0,
        timeout_ms: TIMEOUT_MS,
        session_id,
        passwd,
        read_only: Some(false),
    }
}

fn create(path: &str) -> Request {
    Request::Create {
        op: OpCode::Create,
        req: CreateRequest {
            path: path.into(),
            data: Some(vec![]),
            acl: open_acl_unsafe(),
            flags: 0,
            ttl: None,
        },
    }
}

#[test]
fn a_new_session_is_answered_once_its_create_session_applies() {
    let mut m = OneMember::new();
    let (_client, resp) = m.session();
    assert_eq!((resp.session_id as u64) >> 56, 1, "this member's id range");
    assert_eq!(resp.timeout_ms, TIMEOUT_MS);
    assert_eq!(resp.passwd.len(), 16);
}

#[test]
fn a_requested_timeout_is_brought_within_the_bounds() {
    let mut m = OneMember::new();
    let mut req = connect_request(0, vec![0; 16]);
    req.timeout_ms = 1;
    let mut client = m.connect(req);
    let (frames, _) = client.take();
    let resp = decode_connect_response(&frames[0][4..]).expect("a connect response");
    assert_eq!(resp.timeout_ms, 400);
}

#[test]
fn a_reconnect_resumes_the_session_and_closes_its_previous_connection() {
    let mut m = OneMember::new();
    let (mut old, resp) = m.session();
    let mut new = m.connect(connect_request(resp.session_id, resp.passwd.clone()));
    assert!(matches!(
        new.outcome(),
        Some(ConnectOutcome::Established { session_id }) if session_id == resp.session_id
    ));
    let (frames, closed) = new.take();
    assert!(!closed);
    let resumed = decode_connect_response(&frames[0][4..]).expect("a connect response");
    assert_eq!(
        (resumed.session_id, resumed.timeout_ms),
        (resp.session_id, TIMEOUT_MS)
    );
    assert!(old.take().1, "the previous connection is closed");

    // Requests now go to the new connection.
    m.request(&new, 1, create("/a"));
    let (hdr, _, closed) = new.reply(OpCode::Create);
    assert_eq!((hdr.xid, hdr.err, closed), (1, 0, false));
}

#[test]
fn a_reconnect_with_a_wrong_password_is_told_its_session_expired() {
    let mut m = OneMember::new();
    let (_client, resp) = m.session();
    let mut again = m.connect(connect_request(resp.session_id, vec![1; 16]));
    assert!(matches!(again.outcome(), Some(ConnectOutcome::Refused)));
    let (frames, closed) = again.take();
    let answer = decode_connect_response(&frames[0][4..]).expect("a connect response");
    assert_eq!(answer.timeout_ms, 0, "timeout 0: the session has expired");
    assert!(closed);
}

#[test]
fn a_client_that_has_seen_a_newer_state_is_refused_without_an_answer() {
    let mut m = OneMember::new();
    let mut req = connect_request(0, vec![0; 16]);
    req.last_zxid_seen = 1 << 40;
    let mut client = m.connect(req);
    assert!(matches!(client.outcome(), Some(ConnectOutcome::Refused)));
    let (frames, closed) = client.take();
    assert!(frames.is_empty());
    assert!(closed);
}

#[test]
fn writes_are_answered_with_their_zookeeper_error_code() {
    let mut m = OneMember::new();
    let (mut client, _) = m.session();
    m.request(&client, 1, create("/a"));
    let (hdr, body, _) = client.reply(OpCode::Create);
    assert_eq!((hdr.xid, hdr.err), (1, 0));
    assert!(body.is_some());
    m.request(&client, 2, create("/a"));
    let (hdr, _, closed) = client.reply(OpCode::Create);
    assert_eq!((hdr.xid, hdr.err), (2, -110), "NodeExists");
    assert!(!closed);
}

/// An idle connection costs its member next to nothing (10,000 sessions per member are
/// expected): once its last write is answered, its request pipeline holds no room.
#[test]
fn an_answered_connection_keeps_no_room_for_requests() {
    let mut m = OneMember::new();
    let (mut client, _) = m.session();
    m.request(&client, 1, create("/a"));
    let (hdr, _, _) = client.reply(OpCode::Create);
    assert_eq!((hdr.xid, hdr.err), (1, 0));
    let conn = m.core.clients.get(client.id).expect("connected");
    assert!(conn.pipeline.is_empty());
    assert_eq!(
        conn.pipeline.capacity(),
        0,
        "the drained pipeline was freed"
    );
}

#[test]
fn a_sync_is_answered_through_the_read_index() {
    let mut m = OneMember::new();
    let (mut client, _) = m.session();
    m.request(&client, 1, Request::Sync { path: "/x".into() });
    let (hdr, body, _) = client.reply(OpCode::Sync);
    assert_eq!((hdr.xid, hdr.err), (1, 0));
    assert_eq!(
        body,
        Some(baton_proto::Response::Sync { path: "/x".into() })
    );
}

#[test]
fn a_request_of_a_session_the_leader_expired_is_answered_session_expired() {
    let mut m = OneMember::new();
    let (mut client, _) = m.session();
    m.advance(Duration::from_millis(TIMEOUT_MS as u64 * 3));
    // The tick expires the session and proposes its close; the request in the same batch
    // comes before the close applies.
    let read = Request::GetData(PathWatchRequest {
        path: "/".into(),
        watch: false,
    });
    m.step(vec![
        CoreMsg::Tick,
        CoreMsg::Request {
            conn: client.id,
            xid: 7,
            request: read,
        },
    ]);
    let (hdr, _, closed) = client.reply(OpCode::GetData);
    assert_eq!((hdr.xid, hdr.err), (7, -112), "SessionExpired");
    assert!(closed);
}

#[test]
fn a_backup_holds_every_write_answered_before_it() {
    let mut m = OneMember::new();
    let (mut client, _) = m.session();
    m.request(&client, 1, create("/kept"));
    let (hdr, _, _) = client.reply(OpCode::Create);
    assert_eq!(hdr.err, 0);
    let (tx, mut rx) = oneshot::channel();
    m.step(vec![CoreMsg::Backup(tx)]);
    let snap = rx
        .try_recv()
        .expect("answered within the step")
        .expect("a snapshot");
    assert!(snap.index as i64 >= hdr.zxid);
    let sm = baton_machine::StateMachine::restore(&snap.data).expect("restores");
    assert_eq!(sm.last_applied() as u64, snap.index);
    assert!(sm.stat("/kept").is_some());
    assert_eq!(
        sm.sessions().count(),
        1,
        "sessions are in it; a restore drops them"
    );
    assert!(snap.term >= 1);
}

/// Steps an idle member until the snapshotter has handed back `count` snapshots in all.
fn await_snapshots(m: &mut OneMember, count: u64) {
    for _ in 0..60_000 {
        if m.core.metrics.snapshots.get() >= count {
            return;
        }
        m.step(vec![]);
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("no snapshot came back from the snapshot thread");
}

/// Steps an idle member until no snapshot is being written or waits to be collected. The
/// snapshot thread stores a snapshot in the log before the core counts it, so the log's newest
/// snapshot and `last_snapshot_index` agree only once the thread is idle.
fn await_snapshotter_idle(m: &mut OneMember) {
    for _ in 0..60_000 {
        if !m.core.snapshots.busy() {
            return;
        }
        m.step(vec![]);
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the snapshot thread never went idle");
}

#[test]
fn a_snapshot_written_off_the_core_is_the_state_at_its_index_and_survives_a_restart() {
    let mut m = OneMember::open(tempfile::tempdir().expect("temp dir"), 40, true);
    let (mut client, _) = m.session();
    // Writes go on while the first snapshot is written; each step may start the next.
    for xid in 1..=300 {
        m.request(&client, xid, create(&format!("/n{xid:03}")));
        let (hdr, _, _) = client.reply(OpCode::Create);
        assert_eq!(hdr.err, 0);
    }
    await_snapshots(&mut m, 2);
    await_snapshotter_idle(&mut m);
    let snap = m.core.log.latest_snapshot().expect("a snapshot");
    let index = snap.get_metadata().index;
    let frozen = baton_machine::StateMachine::restore(snap.get_data()).expect("restores");
    assert_eq!(frozen.last_applied() as u64, index);
    // Exactly the nodes created at or before its index, with the stats they had then.
    let live = m.core.state();
    let mut then = 0;
    for (path, node) in live.tree().iter() {
        let stat = node.stat();
        if stat.czxid as u64 <= index && path.starts_with("/n") {
            then += 1;
            assert_eq!(frozen.stat(path), Some(stat), "{path}");
        }
    }
    assert!(then > 0 && then < 300, "{then} nodes at index {index}");
    assert_eq!(frozen.node_count(), then + 4, "and the four built-in nodes");
    assert_eq!(m.core.last_snapshot_index, index);

    // A restart reads the newest snapshot and the log after it: the whole state (the new
    // term's first entry aside, which moves only the applied index).
    let expected: Vec<(String, baton_proto::Stat)> = live
        .tree()
        .iter()
        .map(|(path, node)| (path.to_owned(), node.stat()))
        .collect();
    let OneMember {
        core, _dir: dir, ..
    } = m;
    drop(core);
    let reopened = OneMember::open(dir, 40, true);
    let state = reopened.core.state();
    assert_eq!(state.node_count(), expected.len());
    for (path, stat) in expected {
        assert_eq!(state.stat(&path), Some(stat), "{path} after the restart");
    }
}

/// The notifications among `frames`, as (event type, path).
fn notifications(frames: &[bytes::Bytes]) -> Vec<(i32, String)> {
    frames
        .iter()
        .filter_map(|f| baton_proto::codec::decode_notification(&f[4..]).ok())
        .map(|n| (n.event.event_type, n.event.path))
        .collect()
}

/// A lock waiter whose session loses access to its namespace while it waits (the tenancy
/// policy turned on; it has no Kubernetes identity) still hears its one-shot watch fire, as
/// ZooKeeper fires a watch whatever the ACL says by then, and learns of the lost access from
/// its next read (NoAuth). Withheld, it would wait forever, pinging, while its own node held
/// the queue (the simulation's stuck lock client, seeds 1003, 3001 and 3004 of an earlier
/// attempt). A recursive watch, which would go on streaming the namespace, stays silent.
#[test]
fn a_one_shot_watch_fires_after_its_session_lost_access_and_a_recursive_one_does_not() {
    use baton_machine::Setting;
    use baton_proto::{AddWatchRequest, ErrorCode, EventType, Id};

    let mut m = OneMember::new();
    let (mut owner, _) = m.session();
    let identity = Id::new("k8s", "default/app/pod-0");
    m.step(vec![CoreMsg::Identity {
        conn: owner.id,
        xid: baton_proto::xid::AUTH,
        verdict: IdentityVerdict::Accepted(identity),
    }]);
    let (hdr, _, _) = owner.reply(OpCode::Auth);
    assert_eq!(hdr.err, 0);
    for (xid, path) in [
        (1, "/baton"),
        (2, "/baton/default"),
        (3, "/baton/default/x"),
    ] {
        m.request(&owner, xid, create(path));
        let (hdr, _, _) = owner.reply(OpCode::Create);
        assert_eq!(hdr.err, 0, "{path}");
    }

    let (mut waiter, _) = m.session();
    let x = "/baton/default/x".to_string();
    let watch = PathWatchRequest {
        path: x.clone(),
        watch: true,
    };
    m.request(&waiter, 1, Request::Exists(watch));
    let (hdr, _, _) = waiter.reply(OpCode::Exists);
    assert_eq!(hdr.err, 0, "allowed while the policy is off");
    let recursive = AddWatchRequest {
        path: "/".into(),
        mode: 1,
    };
    m.request(&waiter, 2, Request::AddWatch(recursive));
    let (hdr, _, _) = waiter.reply(OpCode::AddWatch);
    assert_eq!(hdr.err, 0);

    let (reply, mut answer) = oneshot::channel();
    m.core
        .on_change_settings(vec![Setting::CheckIdentities(true)], reply);
    m.step(vec![CoreMsg::Tick]);
    m.step(vec![]);
    assert_eq!(
        answer.try_recv().expect("answered").expect("applied")["checkIdentities"],
        true
    );

    // A node the waiter never watched on its own: the recursive watch must not tell of it.
    m.request(&owner, 4, create("/baton/default/y"));
    let (hdr, _, _) = owner.reply(OpCode::Create);
    assert_eq!(hdr.err, 0);
    let (frames, _) = waiter.take();
    assert_eq!(
        notifications(&frames),
        vec![],
        "nothing about /baton/default/y"
    );

    m.request(
        &owner,
        5,
        Request::Delete(baton_proto::DeleteRequest {
            path: x.clone(),
            version: -1,
        }),
    );
    let (hdr, _, _) = owner.reply(OpCode::Delete);
    assert_eq!(hdr.err, 0);
    let (frames, closed) = waiter.take();
    assert!(!closed);
    assert_eq!(
        notifications(&frames),
        vec![(EventType::NodeDeleted as i32, x.clone())],
        "the one-shot watch fired, once"
    );

    // What it does next is refused: that is how it learns.
    let children = PathWatchRequest {
        path: "/baton/default".into(),
        watch: true,
    };
    m.request(&waiter, 3, Request::GetChildren(children));
    let (hdr, _, _) = waiter.reply(OpCode::GetChildren);
    assert_eq!(hdr.err, ErrorCode::NoAuth.code());
}

/// The same waiter reconnecting with its session after it lost access: `setWatches` re-sends
/// its one-shot watches, which it may no longer read. Each gets an event at once (the same
/// whatever the node did), so the client reads again and is refused, instead of the watch
/// being dropped without a word and the waiter left waiting for good.
#[test]
fn set_watches_answers_a_one_shot_watch_the_session_may_no_longer_read_with_an_event() {
    use baton_machine::Setting;
    use baton_proto::{EventType, Id, SetWatchesRequest};

    let mut m = OneMember::new();
    let (mut owner, _) = m.session();
    m.step(vec![CoreMsg::Identity {
        conn: owner.id,
        xid: baton_proto::xid::AUTH,
        verdict: IdentityVerdict::Accepted(Id::new("k8s", "default/app/pod-0")),
    }]);
    owner.take();
    for (xid, path) in [
        (1, "/baton"),
        (2, "/baton/default"),
        (3, "/baton/default/x"),
    ] {
        m.request(&owner, xid, create(path));
        let (hdr, _, _) = owner.reply(OpCode::Create);
        assert_eq!(hdr.err, 0, "{path}");
    }
    let (_waiter, resp) = m.session();
    let (reply, _answer) = oneshot::channel();
    m.core
        .on_change_settings(vec![Setting::CheckIdentities(true)], reply);
    m.step(vec![CoreMsg::Tick]);
    m.step(vec![]);
    assert!(m.core.state().tenancy().check_identities);

    let mut again = m.connect(connect_request(resp.session_id, resp.passwd.clone()));
    again.take();
    let req = SetWatchesRequest {
        relative_zxid: m.core.state().last_applied(),
        data_watches: vec!["/baton/default/x".into()],
        exist_watches: vec!["/baton/default/gone".into()],
        child_watches: vec!["/baton/default".into()],
        persistent_watches: vec![],
        persistent_recursive_watches: vec!["/baton/default".into()],
    };
    m.request(
        &again,
        baton_proto::xid::SET_WATCHES,
        Request::SetWatches {
            op: OpCode::SetWatches2,
            req,
        },
    );
    let (frames, closed) = again.take();
    assert!(!closed);
    assert_eq!(
        notifications(&frames),
        vec![
            (
                EventType::NodeDataChanged as i32,
                "/baton/default/x".to_string()
            ),
            (
                EventType::NodeCreated as i32,
                "/baton/default/gone".to_string()
            ),
            (
                EventType::NodeChildrenChanged as i32,
                "/baton/default".to_string()
            ),
        ],
        "one event per one-shot watch, none for the recursive one"
    );
    assert_eq!(frames.len(), 4, "and the setWatches reply");
}
