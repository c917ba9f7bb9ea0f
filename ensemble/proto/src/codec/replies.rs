//! Reply bodies (everything after `ReplyHeader`), both directions.
//!
//! The client side is lenient where ZooKeeper's Java client is: it reads a body from its own
//! frame and ignores whatever follows the record.

use super::records::{
    MultiHeader, read_acl_vec, read_client_info_vec, read_stat, read_string_vec, write_acl_vec,
    write_client_info_vec, write_stat, write_string_vec,
};
use crate::error::ErrorCode;
use crate::jute::{DecodeError, Reader, Writer};
use crate::opcode::OpCode;
use crate::response::*;

/// Writes the body of `resp`; the shape depends only on the variant.
pub(crate) fn encode(resp: &Response, w: &mut Writer) {
    match resp {
        Response::Empty => {}
        Response::AddWatch => w.write_i32(0),
        Response::Create { path } | Response::Sync { path } => w.write_string(path),
        Response::Create2 { path, stat } => {
            w.write_string(path);
            write_stat(w, stat);
        }
        Response::Stat(stat) => write_stat(w, stat),
        Response::GetData { data, stat } => {
            w.write_opt_buffer(data.as_deref());
            write_stat(w, stat);
        }
        Response::GetAcl { acl, stat } => {
            write_acl_vec(w, acl);
            write_stat(w, stat);
        }
        Response::GetChildren { children } => write_string_vec(w, children),
        Response::GetChildren2 { children, stat } => {
            write_string_vec(w, children);
            write_stat(w, stat);
        }
        Response::Multi(results) => write_multi(w, results),
        Response::MultiRead(results) => write_multi_read(w, results),
        Response::GetEphemerals { ephemerals } => write_string_vec(w, ephemerals),
        Response::GetAllChildrenNumber { total } => w.write_i32(*total),
        Response::WhoAmI { client_info } => write_client_info_vec(w, client_info),
    }
}

/// Decodes the body of a successful reply to a request of type `op`.
pub(crate) fn decode(op: OpCode, r: &mut Reader<'_>) -> Result<Response, DecodeError> {
    use OpCode::*;
    Ok(match op {
        Create => Response::Create {
            path: r.read_string()?,
        },
        Create2 | CreateContainer | CreateTtl => Response::Create2 {
            path: r.read_string()?,
            stat: read_stat(r)?,
        },
        Exists | SetData | SetAcl => Response::Stat(read_stat(r)?),
        GetData => Response::GetData {
            data: r.read_opt_buffer()?,
            stat: read_stat(r)?,
        },
        GetAcl => Response::GetAcl {
            acl: read_acl_vec(r)?,
            stat: read_stat(r)?,
        },
        GetChildren => Response::GetChildren {
            children: read_string_vec(r)?,
        },
        GetChildren2 => Response::GetChildren2 {
            children: read_string_vec(r)?,
            stat: read_stat(r)?,
        },
        Sync => Response::Sync {
            path: r.read_string()?,
        },
        Multi => Response::Multi(read_multi(r)?),
        MultiRead => Response::MultiRead(read_multi_read(r)?),
        GetEphemerals => Response::GetEphemerals {
            ephemerals: read_string_vec(r)?,
        },
        GetAllChildrenNumber => Response::GetAllChildrenNumber {
            total: r.read_i32()?,
        },
        WhoAmI => Response::WhoAmI {
            client_info: read_client_info_vec(r)?,
        },
        // ZooKeeper's client reads the `ErrorResponse` and ignores its value.
        AddWatch => {
            r.read_i32()?;
            Response::AddWatch
        }
        Delete | Check | Ping | CloseSession | Auth | SetWatches | SetWatches2 | CheckWatches
        | RemoveWatches => Response::Empty,
        Notification | Reconfig | DeleteContainer | Sasl | CreateSession | Error => {
            return Err(DecodeError::UnknownOpCode(op.code()));
        }
    })
}

/// A result header; only error results carry a non-zero `err`.
fn result_header(op: OpCode, err: i32) -> MultiHeader {
    MultiHeader {
        op_type: op.code(),
        done: false,
        err,
    }
}

/// `MultiResponse` as ZooKeeper's `MultiResponse.serialize` writes it: per result a header,
/// then the body (`ErrorResponse` for errors, nothing for delete and check), then the
/// terminator `{-1, true, -1}`.
fn write_multi(w: &mut Writer, results: &[MultiResult]) {
    for result in results {
        match result {
            MultiResult::Create { path } => {
                result_header(OpCode::Create, 0).write(w);
                w.write_string(path);
            }
            MultiResult::Create2 { path, stat } => {
                result_header(OpCode::Create2, 0).write(w);
                w.write_string(path);
                write_stat(w, stat);
            }
            MultiResult::Delete => result_header(OpCode::Delete, 0).write(w),
            MultiResult::SetData { stat } => {
                result_header(OpCode::SetData, 0).write(w);
                write_stat(w, stat);
            }
            MultiResult::Check => result_header(OpCode::Check, 0).write(w),
            MultiResult::Error { err } => write_error_result(w, *err),
        }
    }
    MultiHeader::END.write(w);
}

fn write_multi_read(w: &mut Writer, results: &[MultiReadResult]) {
    for result in results {
        match result {
            MultiReadResult::GetChildren { children } => {
                result_header(OpCode::GetChildren, 0).write(w);
                write_string_vec(w, children);
            }
            MultiReadResult::GetData { data, stat } => {
                result_header(OpCode::GetData, 0).write(w);
                w.write_opt_buffer(data.as_deref());
                write_stat(w, stat);
            }
            MultiReadResult::Error { err } => write_error_result(w, err.code()),
        }
    }
    MultiHeader::END.write(w);
}

fn write_error_result(w: &mut Writer, err: i32) {
    result_header(OpCode::Error, err).write(w);
    w.write_i32(err);
}

fn bad_result(op_type: i32) -> DecodeError {
    DecodeError::BadValue {
        field: "multi result type",
        value: op_type,
    }
}

/// The results of a `multi`. As in ZooKeeper's `MultiResponse.deserialize`, an error result's
/// code is taken from its `ErrorResponse` body, not from the header.
fn read_multi(r: &mut Reader<'_>) -> Result<Vec<MultiResult>, DecodeError> {
    MultiHeader::read_items(r, |r, op_type| {
        Ok(match OpCode::from_code(op_type) {
            Some(OpCode::Create) => MultiResult::Create {
                path: r.read_string()?,
            },
            Some(OpCode::Create2) => MultiResult::Create2 {
                path: r.read_string()?,
                stat: read_stat(r)?,
            },
            Some(OpCode::Delete) => MultiResult::Delete,
            Some(OpCode::SetData) => MultiResult::SetData {
                stat: read_stat(r)?,
            },
            Some(OpCode::Check) => MultiResult::Check,
            Some(OpCode::Error) => MultiResult::Error { err: r.read_i32()? },
            _ => return Err(bad_result(op_type)),
        })
    })
}

fn read_multi_read(r: &mut Reader<'_>) -> Result<Vec<MultiReadResult>, DecodeError> {
    MultiHeader::read_items(r, |r, op_type| {
        Ok(match OpCode::from_code(op_type) {
            Some(OpCode::GetChildren) => MultiReadResult::GetChildren {
                children: read_string_vec(r)?,
            },
            Some(OpCode::GetData) => {
                let data = r.read_opt_buffer()?;
                let stat = read_stat(r)?;
                MultiReadResult::GetData { data, stat }
            }
            Some(OpCode::Error) => {
                let code = r.read_i32()?;
                let err = ErrorCode::from_code(code).ok_or(DecodeError::BadValue {
                    field: "multiRead error code",
                    value: code,
                })?;
                MultiReadResult::Error { err }
            }
            _ => return Err(bad_result(op_type)),
        })
    })
}
