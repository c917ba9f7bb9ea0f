//! A small driver for `StateMachine` tests: numbers entries, advances a fake clock, and
//! builds requests the way clients send them.
#![allow(dead_code)]

pub mod arb;

use baton_machine::{Applied, Command, CommandKind, StateMachine};
use baton_proto::{
    Acl, CheckVersionRequest, CreateRequest, DeleteRequest, ErrorCode, Id, MultiOp, OpCode,
    PathWatchRequest, Request, Response, SetAclRequest, SetDataRequest, Stat, open_acl_unsafe,
};

pub const START_MS: i64 = 1_700_000_000_000;

/// Drives one state machine with increasing zxids and a clock that ticks 1 ms per entry.
pub struct Harness {
    pub sm: StateMachine,
    pub zxid: i64,
    pub now: i64,
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

impl Harness {
    pub fn new() -> Self {
        Harness {
            sm: StateMachine::new(),
            zxid: 0,
            now: START_MS,
        }
    }

    /// A harness with sessions 1 and 2 open.
    pub fn with_sessions() -> Self {
        let mut h = Harness::new();
        h.open(1);
        h.open(2);
        h
    }

    pub fn apply(&mut self, session_id: i64, kind: CommandKind) -> Applied {
        self.zxid += 1;
        self.now += 1;
        let cmd = Command {
            session_id,
            xid: self.zxid as i32,
            time_ms: self.now,
            kind,
        };
        let applied = self.sm.apply(self.zxid, &cmd);
        assert_eq!(applied.zxid, self.zxid);
        assert_eq!(self.sm.last_applied(), self.zxid);
        applied
    }

    /// Turns the namespace policy on or off, as the admin API does: through an entry.
    pub fn set_check_identities(&mut self, on: bool) {
        let changes = vec![baton_machine::Setting::CheckIdentities(on)];
        let applied = self.apply(
            0,
            CommandKind::SetSettings {
                initial: false,
                changes,
            },
        );
        assert_eq!(applied.err, 0);
    }

    pub fn open(&mut self, session_id: i64) -> Applied {
        self.apply(
            session_id,
            CommandKind::CreateSession {
                timeout_ms: 10_000,
                passwd: vec![session_id as u8; 16],
            },
        )
    }

    pub fn close(&mut self, session_id: i64) -> Applied {
        self.apply(session_id, CommandKind::CloseSession { expired: false })
    }

    pub fn write_as(&mut self, session_id: i64, auth: &[Id], request: Request) -> Applied {
        self.apply(
            session_id,
            CommandKind::Write {
                auth: auth.to_vec(),
                request,
            },
        )
    }

    pub fn write(&mut self, request: Request) -> Applied {
        self.write_as(1, &[], request)
    }

    /// create2 of a persistent node with the open ACL; panics unless it succeeds.
    pub fn mk(&mut self, path: &str) -> Stat {
        let a = self.write(create(path, 0));
        match a.body {
            Some(Response::Create2 { stat, .. }) => stat,
            other => panic!("create {path} failed: err {} body {other:?}", a.err),
        }
    }

    pub fn read(&self, request: Request) -> Result<Response, ErrorCode> {
        self.sm.read(1, &[], &request)
    }

    pub fn stat(&self, path: &str) -> Stat {
        self.sm
            .stat(path)
            .unwrap_or_else(|| panic!("{path} does not exist"))
    }

    pub fn children(&self, path: &str) -> Vec<String> {
        match self.read(Request::GetChildren(pw(path))) {
            Ok(Response::GetChildren { children }) => children,
            other => panic!("getChildren {path}: {other:?}"),
        }
    }
}

/// The error an applied entry carries, if any.
pub fn err(a: &Applied) -> Option<ErrorCode> {
    ErrorCode::from_code(a.err)
}

/// The path a successful create answered with.
pub fn created_path(a: &Applied) -> String {
    match &a.body {
        Some(Response::Create { path } | Response::Create2 { path, .. }) => path.clone(),
        other => panic!("not a create answer: err {} body {other:?}", a.err),
    }
}

pub fn create_full(
    path: &str,
    data: &[u8],
    acl: Vec<Acl>,
    flags: i32,
    ttl: Option<i64>,
) -> CreateRequest {
    CreateRequest {
        path: path.to_owned(),
        data: Some(data.to_vec()),
        acl,
        flags,
        ttl,
    }
}

/// create2 with the open ACL.
pub fn create(path: &str, flags: i32) -> Request {
    Request::Create {
        op: OpCode::Create2,
        req: create_full(path, b"", open_acl_unsafe(), flags, None),
    }
}

pub fn create_with(op: OpCode, path: &str, data: &[u8], acl: Vec<Acl>, flags: i32) -> Request {
    let ttl = (op == OpCode::CreateTtl).then_some(-1);
    Request::Create {
        op,
        req: create_full(path, data, acl, flags, ttl),
    }
}

pub fn create_ttl(path: &str, flags: i32, ttl: i64) -> Request {
    Request::Create {
        op: OpCode::CreateTtl,
        req: create_full(path, b"", open_acl_unsafe(), flags, Some(ttl)),
    }
}

pub fn delete(path: &str, version: i32) -> Request {
    Request::Delete(DeleteRequest {
        path: path.to_owned(),
        version,
    })
}

pub fn set_data(path: &str, data: &[u8], version: i32) -> Request {
    Request::SetData(SetDataRequest {
        path: path.to_owned(),
        data: Some(data.to_vec()),
        version,
    })
}

pub fn set_acl(path: &str, acl: Vec<Acl>, version: i32) -> Request {
    Request::SetAcl(SetAclRequest {
        path: path.to_owned(),
        acl,
        version,
    })
}

pub fn check(path: &str, version: i32) -> Request {
    Request::Check(CheckVersionRequest {
        path: path.to_owned(),
        version,
    })
}

pub fn pw(path: &str) -> PathWatchRequest {
    PathWatchRequest {
        path: path.to_owned(),
        watch: false,
    }
}

pub fn m_create(op: OpCode, path: &str, flags: i32) -> MultiOp {
    MultiOp::Create {
        op,
        req: create_full(path, b"", open_acl_unsafe(), flags, None),
    }
}

pub fn m_delete(path: &str, version: i32) -> MultiOp {
    MultiOp::Delete(DeleteRequest {
        path: path.to_owned(),
        version,
    })
}

pub fn m_set(path: &str, data: &[u8], version: i32) -> MultiOp {
    MultiOp::SetData(SetDataRequest {
        path: path.to_owned(),
        data: Some(data.to_vec()),
        version,
    })
}

pub fn m_check(path: &str, version: i32) -> MultiOp {
    MultiOp::Check(CheckVersionRequest {
        path: path.to_owned(),
        version,
    })
}

pub fn acl(perms: i32, scheme: &str, id: &str) -> Acl {
    Acl {
        perms,
        id: Id::new(scheme, id),
    }
}
