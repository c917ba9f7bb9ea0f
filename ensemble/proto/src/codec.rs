//! Encoding and decoding of every request and reply record.
//!
//! Server side: `decode_connect_request`, `decode_request_header`, `decode_request`,
//! `encode_connect_response`, `encode_reply`, `encode_notification`.
//! Client side (tests, simulation, benchmarks): the mirror images.
//! Encoders write a frame's payload only; `frame` adds the length prefix.
//!
//! Decoders accept what ZooKeeper accepts: bytes after a complete record are ignored (neither
//! the server nor the Java client checks that a frame was consumed), a -1 string or buffer
//! length is read as empty, a negative vector count as an empty vector. They fail, without
//! panicking or allocating more than the input's size, on everything ZooKeeper would fail on.

mod records;
mod replies;
mod requests;
mod session;

use crate::jute::{DecodeError, Reader, Writer};
use crate::opcode::OpCode;
use crate::request::*;
use crate::response::*;

/// Decodes the first frame of a connection; a missing trailing `readOnly` reads as `None`.
pub fn decode_connect_request(buf: &[u8]) -> Result<ConnectRequest, DecodeError> {
    session::decode_connect_request(buf)
}

/// Splits a request frame into its header and body.
pub fn decode_request_header(frame: &[u8]) -> Result<(RequestHeader, &[u8]), DecodeError> {
    let mut r = Reader::new(frame);
    let xid = r.read_i32()?;
    let opcode = r.read_i32()?;
    Ok((RequestHeader { xid, opcode }, &frame[r.position()..]))
}

/// Decodes a request body for `opcode`. Unknown opcodes give `DecodeError::UnknownOpCode`.
///
/// Lenient like ZooKeeper: bytes after a complete body are ignored (the server never checks
/// that a request buffer was consumed), and ping, closeSession and whoAmI ignore their body.
/// Strict like ZooKeeper: a short body, a string or buffer length below -1, invalid UTF-8, or
/// a multi op of the wrong kind is an error. Opcodes ZooKeeper has but Baton does not serve
/// (reconfig, sasl, createSession, deleteContainer) are reported as unknown.
pub fn decode_request(opcode: i32, body: &[u8]) -> Result<Request, DecodeError> {
    requests::decode(opcode, body)
}

/// Writes a request body (no header), exactly as ZooKeeper's Java client would.
pub fn encode_request_body(req: &Request, out: &mut Writer) {
    requests::encode(req, out);
}

/// Writes `RequestHeader` then the body.
pub fn encode_request(xid: i32, req: &Request, out: &mut Writer) {
    out.write_i32(xid);
    out.write_i32(req.opcode().code());
    encode_request_body(req, out);
}

/// Writes a `ConnectRequest` followed by `readOnly` when it is `Some` (as 3.4+ clients do),
/// without it when `None` (as older clients do).
pub fn encode_connect_request(req: &ConnectRequest, out: &mut Writer) {
    session::encode_connect_request(req, out);
}

/// Writes a `ConnectResponse`, followed by `readOnly` only when it is `Some`. A server answers
/// a request that had no flag with `None`, as ZooKeeper 3.8 does (`isOldClient`): several
/// clients check that the answer is exactly 36 bytes (with a 16-byte password) and drop the
/// connection otherwise.
pub fn encode_connect_response(resp: &ConnectResponse, out: &mut Writer) {
    session::encode_connect_response(resp, out);
}

/// Decodes the server's answer to the handshake; a missing `readOnly` reads as `None`.
pub fn decode_connect_response(buf: &[u8]) -> Result<ConnectResponse, DecodeError> {
    session::decode_connect_response(buf)
}

/// Writes `ReplyHeader` and, when present, the body.
pub fn encode_reply(hdr: &ReplyHeader, body: Option<&Response>, out: &mut Writer) {
    session::write_reply_header(out, hdr);
    if let Some(body) = body {
        replies::encode(body, out);
    }
}

/// Writes a watch notification: `ReplyHeader{xid: -1, zxid, err: 0}` then `WatcherEvent`.
pub fn encode_notification(n: &Notification, out: &mut Writer) {
    session::encode_notification(n, out);
}

/// Decodes a reply frame's header, then its body as the answer to `opcode` when `err == 0`.
///
/// Like ZooKeeper's Java client, a reply with a non-zero `err` has its body (if any) ignored,
/// and bytes after a complete body are ignored too. A failed `multi` arrives with `err == 0`
/// and per-op error results in the body.
pub fn decode_reply(
    opcode: OpCode,
    frame: &[u8],
) -> Result<(ReplyHeader, Option<Response>), DecodeError> {
    let mut r = Reader::new(frame);
    let hdr = session::read_reply_header(&mut r)?;
    if hdr.err != 0 {
        return Ok((hdr, None));
    }
    let body = replies::decode(opcode, &mut r)?;
    Ok((hdr, Some(body)))
}

/// Decodes a notification frame (header with xid -1, then `WatcherEvent`); any other xid is
/// an error.
pub fn decode_notification(frame: &[u8]) -> Result<Notification, DecodeError> {
    session::decode_notification(frame)
}
