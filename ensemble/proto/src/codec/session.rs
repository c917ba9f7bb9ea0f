//! The connect handshake (`ConnectRequest` / `ConnectResponse`) and watch notifications.
//!
//! In ZooKeeper 3.8 `readOnly` is not part of either jute record: each side writes it as a lone
//! boolean after the record. A client from before read-only mode sends none, and ZooKeeper
//! answers it without one too (`isOldClient`); so the flag is an `Option` both ways, `None`
//! when the frame ends before it. Bytes after it are ignored.

use crate::jute::{DecodeError, Reader, Writer};
use crate::opcode::xid;
use crate::records::WatcherEvent;
use crate::request::ConnectRequest;
use crate::response::{ConnectResponse, Notification, ReplyHeader};

/// The trailing `readOnly` flag; `None` when the frame ends before it (an old peer).
fn read_optional_read_only(r: &mut Reader<'_>) -> Result<Option<bool>, DecodeError> {
    if r.remaining() == 0 {
        Ok(None)
    } else {
        r.read_bool().map(Some)
    }
}

fn write_optional_read_only(w: &mut Writer, read_only: Option<bool>) {
    if let Some(flag) = read_only {
        w.write_bool(flag);
    }
}

pub(crate) fn decode_connect_request(buf: &[u8]) -> Result<ConnectRequest, DecodeError> {
    let r = &mut Reader::new(buf);
    Ok(ConnectRequest {
        protocol_version: r.read_i32()?,
        last_zxid_seen: r.read_i64()?,
        timeout_ms: r.read_i32()?,
        session_id: r.read_i64()?,
        passwd: r.read_buffer()?,
        read_only: read_optional_read_only(r)?,
    })
}

pub(crate) fn encode_connect_request(req: &ConnectRequest, w: &mut Writer) {
    w.write_i32(req.protocol_version);
    w.write_i64(req.last_zxid_seen);
    w.write_i32(req.timeout_ms);
    w.write_i64(req.session_id);
    w.write_buffer(&req.passwd);
    write_optional_read_only(w, req.read_only);
}

pub(crate) fn encode_connect_response(resp: &ConnectResponse, w: &mut Writer) {
    w.write_i32(resp.protocol_version);
    w.write_i32(resp.timeout_ms);
    w.write_i64(resp.session_id);
    w.write_buffer(&resp.passwd);
    write_optional_read_only(w, resp.read_only);
}

pub(crate) fn decode_connect_response(buf: &[u8]) -> Result<ConnectResponse, DecodeError> {
    let r = &mut Reader::new(buf);
    Ok(ConnectResponse {
        protocol_version: r.read_i32()?,
        timeout_ms: r.read_i32()?,
        session_id: r.read_i64()?,
        passwd: r.read_buffer()?,
        read_only: read_optional_read_only(r)?,
    })
}

pub(crate) fn read_reply_header(r: &mut Reader<'_>) -> Result<ReplyHeader, DecodeError> {
    Ok(ReplyHeader {
        xid: r.read_i32()?,
        zxid: r.read_i64()?,
        err: r.read_i32()?,
    })
}

pub(crate) fn write_reply_header(w: &mut Writer, h: &ReplyHeader) {
    w.write_i32(h.xid);
    w.write_i64(h.zxid);
    w.write_i32(h.err);
}

pub(crate) fn encode_notification(n: &Notification, w: &mut Writer) {
    write_reply_header(
        w,
        &ReplyHeader {
            xid: xid::NOTIFICATION,
            zxid: n.zxid,
            err: 0,
        },
    );
    w.write_i32(n.event.event_type);
    w.write_i32(n.event.state);
    w.write_string(&n.event.path);
}

pub(crate) fn decode_notification(frame: &[u8]) -> Result<Notification, DecodeError> {
    let r = &mut Reader::new(frame);
    let hdr = read_reply_header(r)?;
    if hdr.xid != xid::NOTIFICATION {
        return Err(DecodeError::BadValue {
            field: "notification xid",
            value: hdr.xid,
        });
    }
    Ok(Notification {
        zxid: hdr.zxid,
        event: WatcherEvent {
            event_type: r.read_i32()?,
            state: r.read_i32()?,
            path: r.read_string()?,
        },
    })
}
