//! Request bodies (everything after `RequestHeader`), both directions.
//!
//! Leniency follows ZooKeeper's server: it deserializes a body from the frame's buffer and never
//! checks that the buffer was consumed, so trailing bytes after a complete body are ignored here
//! too. Anything short, a negative string/buffer length other than -1, or invalid UTF-8 is an
//! error, as jute's `BinaryInputArchive` makes it one. A null (-1) string reads as empty; null
//! znode data stays `None`, since ZooKeeper stores and answers it as null.

use super::records::{MultiHeader, read_acl_vec, read_string_vec, write_acl_vec, write_string_vec};
use crate::jute::{DecodeError, Reader, Writer};
use crate::opcode::OpCode;
use crate::request::*;

/// Decodes the body of a request with wire opcode `opcode`.
pub(crate) fn decode(opcode: i32, body: &[u8]) -> Result<Request, DecodeError> {
    let op = OpCode::from_code(opcode).ok_or(DecodeError::UnknownOpCode(opcode))?;
    let r = &mut Reader::new(body);
    Ok(match op {
        OpCode::Create | OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl => {
            Request::Create {
                op,
                req: read_create(r, op)?,
            }
        }
        OpCode::Delete => Request::Delete(read_delete(r)?),
        OpCode::Exists => Request::Exists(read_path_watch(r)?),
        OpCode::GetData => Request::GetData(read_path_watch(r)?),
        OpCode::SetData => Request::SetData(read_set_data(r)?),
        OpCode::GetAcl => Request::GetAcl {
            path: r.read_string()?,
        },
        OpCode::SetAcl => Request::SetAcl(SetAclRequest {
            path: r.read_string()?,
            acl: read_acl_vec(r)?,
            version: r.read_i32()?,
        }),
        OpCode::GetChildren => Request::GetChildren(read_path_watch(r)?),
        OpCode::GetChildren2 => Request::GetChildren2(read_path_watch(r)?),
        OpCode::Sync => Request::Sync {
            path: r.read_string()?,
        },
        OpCode::Ping => Request::Ping,
        OpCode::Check => Request::Check(read_check(r)?),
        OpCode::Multi => Request::Multi(read_multi(r)?),
        OpCode::MultiRead => Request::MultiRead(read_multi_read(r)?),
        OpCode::CloseSession => Request::CloseSession,
        OpCode::Auth => Request::Auth(AuthPacket {
            auth_type: r.read_i32()?,
            scheme: r.read_string()?,
            auth: r.read_buffer()?,
        }),
        OpCode::SetWatches | OpCode::SetWatches2 => Request::SetWatches {
            op,
            req: read_set_watches(r, op == OpCode::SetWatches2)?,
        },
        OpCode::AddWatch => Request::AddWatch(AddWatchRequest {
            path: r.read_string()?,
            mode: r.read_i32()?,
        }),
        OpCode::CheckWatches => Request::CheckWatches(read_watches(r)?),
        OpCode::RemoveWatches => Request::RemoveWatches(read_watches(r)?),
        OpCode::GetEphemerals => Request::GetEphemerals {
            prefix_path: r.read_string()?,
        },
        OpCode::GetAllChildrenNumber => Request::GetAllChildrenNumber {
            path: r.read_string()?,
        },
        OpCode::WhoAmI => Request::WhoAmI,
        // Opcodes ZooKeeper knows but Baton does not serve as client requests (reconfig, sasl,
        // deleteContainer is server-internal, createSession is the connect frame, ...).
        OpCode::Notification
        | OpCode::Reconfig
        | OpCode::DeleteContainer
        | OpCode::Sasl
        | OpCode::CreateSession
        | OpCode::Error => return Err(DecodeError::UnknownOpCode(opcode)),
    })
}

/// Writes the body of `req`; `decode(req.opcode().code(), ..)` gives `req` back.
pub(crate) fn encode(req: &Request, w: &mut Writer) {
    match req {
        Request::Create { op, req } => write_create(w, *op, req),
        Request::Delete(d) => write_delete(w, d),
        Request::Exists(p)
        | Request::GetData(p)
        | Request::GetChildren(p)
        | Request::GetChildren2(p) => write_path_watch(w, p),
        Request::SetData(s) => write_set_data(w, s),
        Request::GetAcl { path }
        | Request::Sync { path }
        | Request::GetAllChildrenNumber { path } => w.write_string(path),
        Request::GetEphemerals { prefix_path } => w.write_string(prefix_path),
        Request::SetAcl(s) => {
            w.write_string(&s.path);
            write_acl_vec(w, &s.acl);
            w.write_i32(s.version);
        }
        Request::Ping | Request::CloseSession | Request::WhoAmI => {}
        Request::Check(c) => write_check(w, c),
        Request::Multi(ops) => write_multi(w, ops),
        Request::MultiRead(ops) => write_multi_read(w, ops),
        Request::Auth(a) => {
            w.write_i32(a.auth_type);
            w.write_string(&a.scheme);
            w.write_buffer(&a.auth);
        }
        Request::SetWatches { op, req } => write_set_watches(w, *op == OpCode::SetWatches2, req),
        Request::AddWatch(a) => {
            w.write_string(&a.path);
            w.write_i32(a.mode);
        }
        Request::CheckWatches(c) | Request::RemoveWatches(c) => {
            w.write_string(&c.path);
            w.write_i32(c.watcher_type);
        }
    }
}

/// `CreateRequest`, or `CreateTTLRequest` (the same with a trailing `long ttl`) for createTTL.
fn read_create(r: &mut Reader<'_>, op: OpCode) -> Result<CreateRequest, DecodeError> {
    Ok(CreateRequest {
        path: r.read_string()?,
        data: r.read_opt_buffer()?,
        acl: read_acl_vec(r)?,
        flags: r.read_i32()?,
        ttl: if op == OpCode::CreateTtl {
            Some(r.read_i64()?)
        } else {
            None
        },
    })
}

/// Writes `CreateRequest`/`CreateTTLRequest`: the ttl is written exactly when `op` is createTTL
/// (0 if the caller left it out), so the body always matches what the opcode promises.
fn write_create(w: &mut Writer, op: OpCode, c: &CreateRequest) {
    w.write_string(&c.path);
    w.write_opt_buffer(c.data.as_deref());
    write_acl_vec(w, &c.acl);
    w.write_i32(c.flags);
    if op == OpCode::CreateTtl {
        w.write_i64(c.ttl.unwrap_or(0));
    }
}

fn read_delete(r: &mut Reader<'_>) -> Result<DeleteRequest, DecodeError> {
    Ok(DeleteRequest {
        path: r.read_string()?,
        version: r.read_i32()?,
    })
}

fn write_delete(w: &mut Writer, d: &DeleteRequest) {
    w.write_string(&d.path);
    w.write_i32(d.version);
}

fn read_path_watch(r: &mut Reader<'_>) -> Result<PathWatchRequest, DecodeError> {
    Ok(PathWatchRequest {
        path: r.read_string()?,
        watch: r.read_bool()?,
    })
}

fn write_path_watch(w: &mut Writer, p: &PathWatchRequest) {
    w.write_string(&p.path);
    w.write_bool(p.watch);
}

fn read_set_data(r: &mut Reader<'_>) -> Result<SetDataRequest, DecodeError> {
    Ok(SetDataRequest {
        path: r.read_string()?,
        data: r.read_opt_buffer()?,
        version: r.read_i32()?,
    })
}

fn write_set_data(w: &mut Writer, s: &SetDataRequest) {
    w.write_string(&s.path);
    w.write_opt_buffer(s.data.as_deref());
    w.write_i32(s.version);
}

fn read_check(r: &mut Reader<'_>) -> Result<CheckVersionRequest, DecodeError> {
    Ok(CheckVersionRequest {
        path: r.read_string()?,
        version: r.read_i32()?,
    })
}

fn write_check(w: &mut Writer, c: &CheckVersionRequest) {
    w.write_string(&c.path);
    w.write_i32(c.version);
}

fn read_watches(r: &mut Reader<'_>) -> Result<WatchesRequest, DecodeError> {
    Ok(WatchesRequest {
        path: r.read_string()?,
        watcher_type: r.read_i32()?,
    })
}

fn read_set_watches(r: &mut Reader<'_>, v2: bool) -> Result<SetWatchesRequest, DecodeError> {
    let mut req = SetWatchesRequest {
        relative_zxid: r.read_i64()?,
        data_watches: read_string_vec(r)?,
        exist_watches: read_string_vec(r)?,
        child_watches: read_string_vec(r)?,
        ..SetWatchesRequest::default()
    };
    if v2 {
        req.persistent_watches = read_string_vec(r)?;
        req.persistent_recursive_watches = read_string_vec(r)?;
    }
    Ok(req)
}

/// `SetWatches` drops the persistent lists: it has no fields for them.
fn write_set_watches(w: &mut Writer, v2: bool, s: &SetWatchesRequest) {
    w.write_i64(s.relative_zxid);
    write_string_vec(w, &s.data_watches);
    write_string_vec(w, &s.exist_watches);
    write_string_vec(w, &s.child_watches);
    if v2 {
        write_string_vec(w, &s.persistent_watches);
        write_string_vec(w, &s.persistent_recursive_watches);
    }
}

/// An op type that cannot appear in this kind of multi. ZooKeeper's `MultiOperationRecord`
/// refuses unknown types ("Invalid type of op") and mixed read/write ops alike.
fn bad_op(op_type: i32) -> DecodeError {
    DecodeError::BadValue {
        field: "multi op type",
        value: op_type,
    }
}

/// `MultiOperationRecord` for `multi`: write ops until a header with `done` set (whatever its
/// type and err). `op` keeps the header's type; note that ZooKeeper itself re-derives a create's
/// opcode from its flags (`Op.create`), so a create2 op is answered as a plain create.
fn read_multi(r: &mut Reader<'_>) -> Result<Vec<MultiOp>, DecodeError> {
    MultiHeader::read_items(r, |r, op_type| {
        let op = OpCode::from_code(op_type).ok_or_else(|| bad_op(op_type))?;
        Ok(match op {
            OpCode::Create | OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl => {
                MultiOp::Create {
                    op,
                    req: read_create(r, op)?,
                }
            }
            OpCode::Delete => MultiOp::Delete(read_delete(r)?),
            OpCode::SetData => MultiOp::SetData(read_set_data(r)?),
            OpCode::Check => MultiOp::Check(read_check(r)?),
            _ => return Err(bad_op(op_type)),
        })
    })
}

/// The `MultiOperationRecord` of a `multiRead`: getChildren and getData ops only.
fn read_multi_read(r: &mut Reader<'_>) -> Result<Vec<MultiReadOp>, DecodeError> {
    MultiHeader::read_items(r, |r, op_type| {
        Ok(match OpCode::from_code(op_type) {
            Some(OpCode::GetChildren) => MultiReadOp::GetChildren(read_path_watch(r)?),
            Some(OpCode::GetData) => MultiReadOp::GetData(read_path_watch(r)?),
            _ => return Err(bad_op(op_type)),
        })
    })
}

/// Op headers carry err -1, like ZooKeeper's client writes them.
fn op_header(op: OpCode) -> MultiHeader {
    MultiHeader {
        op_type: op.code(),
        done: false,
        err: -1,
    }
}

fn write_multi(w: &mut Writer, ops: &[MultiOp]) {
    for op in ops {
        match op {
            MultiOp::Create { op, req } => {
                op_header(*op).write(w);
                write_create(w, *op, req);
            }
            MultiOp::Delete(d) => {
                op_header(OpCode::Delete).write(w);
                write_delete(w, d);
            }
            MultiOp::SetData(s) => {
                op_header(OpCode::SetData).write(w);
                write_set_data(w, s);
            }
            MultiOp::Check(c) => {
                op_header(OpCode::Check).write(w);
                write_check(w, c);
            }
        }
    }
    MultiHeader::END.write(w);
}

fn write_multi_read(w: &mut Writer, ops: &[MultiReadOp]) {
    for op in ops {
        let (code, p) = match op {
            MultiReadOp::GetChildren(p) => (OpCode::GetChildren, p),
            MultiReadOp::GetData(p) => (OpCode::GetData, p),
        };
        op_header(code).write(w);
        write_path_watch(w, p);
    }
    MultiHeader::END.write(w);
}
