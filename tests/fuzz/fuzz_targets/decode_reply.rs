//! A reply frame, read as the answer to the opcode in its first 4 bytes, and as a
//! notification: decoding never panics, and whatever decodes re-encodes stably.
#![no_main]

use baton_proto::codec::{decode_notification, decode_reply, encode_reply};
use baton_proto::{OpCode, Writer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((op, frame)) = data.split_first_chunk::<4>() else {
        return;
    };
    let _ = decode_notification(frame);
    let Some(op) = OpCode::from_code(i32::from_be_bytes(*op)) else {
        return;
    };
    if let Ok((hdr, body)) = decode_reply(op, frame) {
        let mut w = Writer::new();
        encode_reply(&hdr, body.as_ref(), &mut w);
        assert_eq!(decode_reply(op, w.as_slice()), Ok((hdr, body)));
    }
});
