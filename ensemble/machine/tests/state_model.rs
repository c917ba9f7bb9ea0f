//! Random streams of create/delete/setData/check/multi/session commands must give exactly
//! the replies, events and final state of a deliberately naive reference model: a BTreeMap
//! of paths, children found by scanning, a multi run on a clone that is kept or dropped.
//! Both at feature level 1 (null data stored as empty) and 2 (null kept apart).

mod common;

use std::collections::{BTreeMap, BTreeSet};

use baton_machine::{Applied, Command, CommandKind, Setting, StateMachine};
use baton_proto::{
    CreateRequest, ErrorCode, EventType, MultiOp, MultiResult, OpCode, Request, Response, Stat,
};
use common::{START_MS, arb};
use proptest::prelude::*;

#[derive(Debug, Clone, Default)]
struct MNode {
    /// `None` is null data.
    data: Option<Vec<u8>>,
    version: i32,
    creates: i32,
    czxid: i64,
    mzxid: i64,
    pzxid: i64,
    ctime: i64,
    mtime: i64,
    owner: i64,
}

#[derive(Debug, Clone)]
struct Model {
    nodes: BTreeMap<String, MNode>,
    sessions: BTreeSet<i64>,
    /// Feature level 2: null data kept apart; below it, stored as empty.
    keeps_null: bool,
}

type Events = Vec<(String, EventType)>;

fn parent(path: &str) -> String {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/".to_owned(),
        Some((p, _)) => p.to_owned(),
    }
}

fn valid(path: &str) -> bool {
    path == "/" || (path.starts_with('/') && !path[1..].split('/').any(|s| s.is_empty()))
}

fn version_ok(current: i32, expected: i32) -> bool {
    expected == -1 || expected == current
}

impl Model {
    /// What a create or setData stores at the model's level.
    fn stored(&self, data: Option<&[u8]>) -> Option<Vec<u8>> {
        match data {
            None if !self.keeps_null => Some(Vec::new()),
            data => data.map(<[u8]>::to_vec),
        }
    }

    fn new() -> Self {
        let nodes = ["/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"]
            .into_iter()
            .map(|p| {
                let node = MNode {
                    data: Some(Vec::new()),
                    ..MNode::default()
                };
                (p.to_owned(), node)
            })
            .collect();
        Model {
            nodes,
            sessions: BTreeSet::new(),
            keeps_null: false,
        }
    }

    fn children(&self, path: &str) -> Vec<String> {
        self.nodes
            .keys()
            .filter(|k| k.as_str() != "/" && parent(k) == path)
            .map(|k| {
                k.rsplit_once('/')
                    .map(|(_, n)| n.to_owned())
                    .unwrap_or_default()
            })
            .collect()
    }

    fn stat(&self, path: &str) -> Stat {
        let n = &self.nodes[path];
        let kids = self.children(path).len() as i32;
        Stat {
            czxid: n.czxid,
            mzxid: n.mzxid,
            ctime: n.ctime,
            mtime: n.mtime,
            version: n.version,
            cversion: 2 * n.creates - kids,
            aversion: if path == "/zookeeper/config" { -1 } else { 0 },
            ephemeral_owner: n.owner,
            data_length: n.data.as_ref().map_or(0, Vec::len) as i32,
            num_children: kids,
            pzxid: n.pzxid,
        }
    }

    /// Returns the created path.
    fn create(
        &mut self,
        req: &CreateRequest,
        session: i64,
        zxid: i64,
        time: i64,
        ev: &mut Events,
    ) -> Result<String, ErrorCode> {
        let Some((parent_raw, _)) = req.path.rsplit_once('/') else {
            return Err(ErrorCode::BadArguments);
        };
        let parent_path = if parent_raw.is_empty() {
            "/".to_owned()
        } else {
            parent_raw.to_owned()
        };
        let Some(p) = self.nodes.get(&parent_path) else {
            return Err(ErrorCode::NoNode);
        };
        let path = if req.flags & 2 != 0 {
            format!("{}{:010}", req.path, p.creates)
        } else {
            req.path.clone()
        };
        if !valid(&path) {
            return Err(ErrorCode::BadArguments);
        }
        if self.nodes.contains_key(&path) {
            return Err(ErrorCode::NodeExists);
        }
        if p.owner != 0 {
            return Err(ErrorCode::NoChildrenForEphemerals);
        }
        let p = self.nodes.get_mut(&parent_path).expect("parent");
        p.creates += 1;
        p.pzxid = zxid;
        let owner = if req.flags & 1 != 0 { session } else { 0 };
        let node = MNode {
            data: self.stored(req.data.as_deref()),
            czxid: zxid,
            mzxid: zxid,
            pzxid: zxid,
            ctime: time,
            mtime: time,
            owner,
            ..MNode::default()
        };
        self.nodes.insert(path.clone(), node);
        ev.push((path.clone(), EventType::NodeCreated));
        ev.push((parent_path, EventType::NodeChildrenChanged));
        Ok(path)
    }

    fn delete(
        &mut self,
        path: &str,
        version: i32,
        zxid: i64,
        ev: &mut Events,
    ) -> Result<(), ErrorCode> {
        if ["/", "/zookeeper"].contains(&path) {
            return Err(ErrorCode::BadArguments);
        }
        let parent_path = parent(path);
        let node = self.nodes.get(path).ok_or(ErrorCode::NoNode)?;
        if !version_ok(node.version, version) {
            return Err(ErrorCode::BadVersion);
        }
        if !self.children(path).is_empty() {
            return Err(ErrorCode::NotEmpty);
        }
        self.nodes.remove(path);
        self.nodes.get_mut(&parent_path).expect("parent").pzxid = zxid;
        ev.push((path.to_owned(), EventType::NodeDeleted));
        ev.push((parent_path, EventType::NodeChildrenChanged));
        Ok(())
    }

    fn set(
        &mut self,
        path: &str,
        data: Option<&[u8]>,
        version: i32,
        zxid: i64,
        time: i64,
        ev: &mut Events,
    ) -> Result<Stat, ErrorCode> {
        let stored = self.stored(data);
        let node = self.nodes.get_mut(path).ok_or(ErrorCode::NoNode)?;
        if !version_ok(node.version, version) {
            return Err(ErrorCode::BadVersion);
        }
        node.version += 1;
        node.data = stored;
        node.mzxid = zxid;
        node.mtime = time;
        ev.push((path.to_owned(), EventType::NodeDataChanged));
        Ok(self.stat(path))
    }

    fn check(&self, path: &str, version: i32) -> Result<(), ErrorCode> {
        let node = self.nodes.get(path).ok_or(ErrorCode::NoNode)?;
        if version_ok(node.version, version) {
            Ok(())
        } else {
            Err(ErrorCode::BadVersion)
        }
    }

    fn multi(
        &mut self,
        ops: &[MultiOp],
        session: i64,
        zxid: i64,
        time: i64,
        ev: &mut Events,
    ) -> Vec<MultiResult> {
        let mut scratch = self.clone();
        let mut scratch_events = Vec::new();
        let mut results = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let r = match op {
                MultiOp::Create { req, .. } => scratch
                    .create(req, session, zxid, time, &mut scratch_events)
                    .map(|path| MultiResult::Create { path }),
                MultiOp::Delete(d) => scratch
                    .delete(&d.path, d.version, zxid, &mut scratch_events)
                    .map(|_| MultiResult::Delete),
                MultiOp::SetData(s) => scratch
                    .set(
                        &s.path,
                        s.data.as_deref(),
                        s.version,
                        zxid,
                        time,
                        &mut scratch_events,
                    )
                    .map(|stat| MultiResult::SetData { stat }),
                MultiOp::Check(c) => scratch
                    .check(&c.path, c.version)
                    .map(|_| MultiResult::Check),
            };
            match r {
                Ok(r) => results.push(r),
                Err(code) => {
                    let mut out = vec![MultiResult::Error { err: 0 }; i];
                    out.push(MultiResult::Error { err: code.code() });
                    out.resize(
                        ops.len(),
                        MultiResult::Error {
                            err: ErrorCode::RuntimeInconsistency.code(),
                        },
                    );
                    return out;
                }
            }
        }
        *self = scratch;
        ev.extend(scratch_events);
        results
    }

    fn apply(&mut self, zxid: i64, cmd: &Command) -> Applied {
        let mut a = Applied {
            session_id: cmd.session_id,
            xid: cmd.xid,
            zxid,
            err: 0,
            body: None,
            events: vec![],
            closed_session: None,
            refusal: None,
            quota_refusal: None,
            settings_changed: false,
        };
        let s = cmd.session_id;
        let time = cmd.time_ms;
        let result: Result<Option<Response>, ErrorCode> = match &cmd.kind {
            CommandKind::CreateSession { .. } => {
                self.sessions.insert(s);
                Ok(None)
            }
            CommandKind::CloseSession { .. } if !self.sessions.contains(&s) => {
                Err(ErrorCode::SessionExpired)
            }
            CommandKind::CloseSession { .. } => {
                let doomed: Vec<String> = self
                    .nodes
                    .iter()
                    .filter(|(_, n)| n.owner == s)
                    .map(|(p, _)| p.clone())
                    .collect();
                for p in doomed {
                    self.delete(&p, -1, zxid, &mut a.events)
                        .expect("ephemerals have no children");
                }
                self.sessions.remove(&s);
                a.closed_session = Some(s);
                Ok(Some(Response::Empty))
            }
            CommandKind::Write { .. } if !self.sessions.contains(&s) => {
                Err(ErrorCode::SessionExpired)
            }
            CommandKind::Write { request, .. } => match request {
                Request::Create { op, req } => {
                    self.create(req, s, zxid, time, &mut a.events).map(|path| {
                        Some(if *op == OpCode::Create {
                            Response::Create { path }
                        } else {
                            let stat = self.stat(&path);
                            Response::Create2 { path, stat }
                        })
                    })
                }
                Request::Delete(d) => self
                    .delete(&d.path, d.version, zxid, &mut a.events)
                    .map(|_| Some(Response::Empty)),
                Request::SetData(r) => self
                    .set(
                        &r.path,
                        r.data.as_deref(),
                        r.version,
                        zxid,
                        time,
                        &mut a.events,
                    )
                    .map(|st| Some(Response::Stat(st))),
                Request::Check(c) => self
                    .check(&c.path, c.version)
                    .map(|_| Some(Response::Empty)),
                Request::Multi(ops) => Ok(Some(Response::Multi(self.multi(
                    ops,
                    s,
                    zxid,
                    time,
                    &mut a.events,
                )))),
                other => panic!("generator made {other:?}"),
            },
            other => panic!("generator made {other:?}"),
        };
        match result {
            Ok(body) => a.body = body,
            Err(code) => a.err = code.code(),
        }
        a
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn machine_matches_reference_model(
        cmds in prop::collection::vec(arb::command(false), 1..150),
        level_2 in any::<bool>(),
    ) {
        let mut sm = StateMachine::new();
        let mut model = Model::new();
        // The level entry the leader proposes, at index 1; the commands follow it.
        let first = if level_2 {
            let kind = CommandKind::SetSettings { initial: false, changes: vec![Setting::FeatureLevel(2)] };
            sm.apply(1, &Command { session_id: 0, xid: 0, time_ms: START_MS, kind });
            model.keeps_null = true;
            2
        } else {
            1
        };
        for (i, (session_id, kind)) in cmds.into_iter().enumerate() {
            let zxid = i as i64 + first;
            let cmd = Command { session_id, xid: i as i32, time_ms: START_MS + zxid, kind };
            let got = sm.apply(zxid, &cmd);
            let want = model.apply(zxid, &cmd);
            prop_assert_eq!(got, want, "entry {} {:?}", zxid, cmd);
        }
        prop_assert_eq!(sm.node_count(), model.nodes.len());
        let owned: usize = model.nodes.values().filter(|n| n.owner != 0).count();
        prop_assert_eq!(sm.ephemeral_count(), owned);
        for (path, node) in &model.nodes {
            prop_assert_eq!(sm.stat(path), Some(model.stat(path)), "{}", path);
            let data = sm.read(0, &[], &Request::GetData(common::pw(path)));
            prop_assert_eq!(data, Ok(Response::GetData { data: node.data.clone(), stat: model.stat(path) }));
            let kids = sm.read(0, &[], &Request::GetChildren(common::pw(path)));
            prop_assert_eq!(kids, Ok(Response::GetChildren { children: model.children(path) }));
        }
        let sessions: Vec<i64> = sm.sessions().map(|s| s.id).collect();
        prop_assert_eq!(sessions, model.sessions.iter().copied().collect::<Vec<_>>());
    }
}
