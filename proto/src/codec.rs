//! Encoding and decoding of every request and reply record.
//!
//! Server side: `decode_connect_request`, `decode_request_header`, `decode_request`,
//! `encode_connect_response`, `encode_reply`, `encode_notification`.
//! Client side (tests, simulation, benchmarks): the mirror images.
//! Encoders write a frame's payload only; `frame` adds the length prefix.

use crate::jute::{DecodeError, Reader, Writer};
use crate::opcode::OpCode;
use crate::request::*;
use crate::response::*;

/// Decodes the first frame of a connection (the optional trailing `readOnly` may be absent).
pub fn decode_connect_request(buf: &[u8]) -> Result<ConnectRequest, DecodeError> {
    let _ = Reader::new(buf);
    Err(DecodeError::TrailingBytes(buf.len()))
}

/// Splits a request frame into its header and body.
pub fn decode_request_header(frame: &[u8]) -> Result<(RequestHeader, &[u8]), DecodeError> {
    let mut r = Reader::new(frame);
    let xid = r.read_i32()?;
    let opcode = r.read_i32()?;
    Ok((RequestHeader { xid, opcode }, &frame[r.position()..]))
}

/// Decodes a request body for `opcode`. Unknown opcodes give `DecodeError::UnknownOpCode`.
pub fn decode_request(opcode: i32, body: &[u8]) -> Result<Request, DecodeError> {
    let _ = body;
    Err(DecodeError::UnknownOpCode(opcode))
}

/// Writes a request body (no header).
pub fn encode_request_body(req: &Request, out: &mut Writer) {
    let _ = (req, out);
}

/// Writes `RequestHeader` then the body.
pub fn encode_request(xid: i32, req: &Request, out: &mut Writer) {
    out.write_i32(xid);
    out.write_i32(req.opcode().code());
    encode_request_body(req, out);
}

pub fn encode_connect_request(req: &ConnectRequest, out: &mut Writer) {
    let _ = (req, out);
}

pub fn encode_connect_response(resp: &ConnectResponse, out: &mut Writer) {
    let _ = (resp, out);
}

pub fn decode_connect_response(buf: &[u8]) -> Result<ConnectResponse, DecodeError> {
    Err(DecodeError::TrailingBytes(buf.len()))
}

/// Writes `ReplyHeader` and, when present, the body.
pub fn encode_reply(hdr: &ReplyHeader, body: Option<&Response>, out: &mut Writer) {
    let _ = (hdr, body, out);
}

/// Writes a watch notification (xid -1).
pub fn encode_notification(n: &Notification, out: &mut Writer) {
    let _ = (n, out);
}

/// Decodes a reply frame's header, then its body as the answer to `opcode` when `err == 0`.
pub fn decode_reply(
    opcode: OpCode,
    frame: &[u8],
) -> Result<(ReplyHeader, Option<Response>), DecodeError> {
    let _ = (opcode, frame);
    Err(DecodeError::TrailingBytes(0))
}

/// Decodes a notification frame (header with xid -1, then `WatcherEvent`).
pub fn decode_notification(frame: &[u8]) -> Result<Notification, DecodeError> {
    Err(DecodeError::TrailingBytes(frame.len()))
}
