//! Turning replies and notifications into complete frames (length prefix included).

use baton_proto::{
    ConnectResponse, ErrorCode, Notification, ReplyHeader, Response, WatcherEvent, Writer, codec,
    frame,
};
use bytes::Bytes;

fn framed(capacity: usize, body: impl FnOnce(&mut Writer)) -> Bytes {
    let mut w = Writer::with_capacity(capacity);
    frame::write_frame(&mut w, body);
    Bytes::from(w.into_inner())
}

/// A reply frame: `err` is `None` for success (a failed multi too: its results are its body).
/// The one place a reply's error code becomes the wire's integer.
pub fn reply(xid: i32, zxid: i64, err: Option<ErrorCode>, body: Option<&Response>) -> Bytes {
    let err = err.map_or(0, ErrorCode::code);
    framed(64, |w| {
        codec::encode_reply(&ReplyHeader { xid, zxid, err }, body, w)
    })
}

/// A successful reply, with a body unless ZooKeeper sends none.
pub fn ok(xid: i32, zxid: i64, body: Option<&Response>) -> Bytes {
    reply(xid, zxid, None, body)
}

/// A failed reply: the header alone.
pub fn error(xid: i32, zxid: i64, err: ErrorCode) -> Bytes {
    reply(xid, zxid, Some(err), None)
}

/// A watch notification frame (xid -1). ZooKeeper 3.8 puts zxid -1 in its header, not the
/// zxid of the change; clients rely on neither, so we match the reference byte for byte.
pub fn notification(event: WatcherEvent) -> Bytes {
    framed(64, |w| {
        codec::encode_notification(&Notification { zxid: -1, event }, w)
    })
}

/// The handshake answer.
pub fn connect_response(resp: &ConnectResponse) -> Bytes {
    framed(48, |w| codec::encode_connect_response(resp, w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(frame: &[u8]) -> (u32, ReplyHeader) {
        let len = u32::from_be_bytes(frame[..4].try_into().expect("length"));
        let mut r = baton_proto::Reader::new(&frame[4..]);
        let hdr = ReplyHeader {
            xid: r.read_i32().expect("xid"),
            zxid: r.read_i64().expect("zxid"),
            err: r.read_i32().expect("err"),
        };
        (len, hdr)
    }

    #[test]
    fn an_error_reply_is_a_header_with_the_zookeeper_code() {
        let (len, hdr) = header(&error(5, 9, ErrorCode::SessionExpired));
        assert_eq!(len, 16);
        assert_eq!((hdr.xid, hdr.zxid, hdr.err), (5, 9, -112));
    }

    #[test]
    fn a_success_carries_err_zero_and_its_body() {
        let body = Response::Sync { path: "/a".into() };
        let frame = ok(5, 9, Some(&body));
        let (len, hdr) = header(&frame);
        assert_eq!(hdr.err, 0);
        assert_eq!(len as usize, frame.len() - 4);
        assert!(frame.len() > 20, "the body follows the header");
        assert_eq!(ok(5, 9, None), reply(5, 9, None, None));
    }
}
