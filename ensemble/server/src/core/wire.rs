//! Turning replies and notifications into complete frames (length prefix included).

use baton_proto::{
    ConnectResponse, Notification, ReplyHeader, Response, WatcherEvent, Writer, codec, frame,
};
use bytes::Bytes;

fn framed(capacity: usize, body: impl FnOnce(&mut Writer)) -> Bytes {
    let mut w = Writer::with_capacity(capacity);
    frame::write_frame(&mut w, body);
    Bytes::from(w.into_inner())
}

/// A reply frame; `body` only when `err == 0` (or a failed multi, which carries results).
pub fn reply(xid: i32, zxid: i64, err: i32, body: Option<&Response>) -> Bytes {
    framed(64, |w| {
        codec::encode_reply(&ReplyHeader { xid, zxid, err }, body, w)
    })
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
