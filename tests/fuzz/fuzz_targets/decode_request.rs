//! A request frame (header + body): decoding never panics, and whatever decodes re-encodes to
//! bytes that decode to the same value.
#![no_main]

use baton_proto::Writer;
use baton_proto::codec::{decode_request, decode_request_header, encode_request_body};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|frame: &[u8]| {
    let Ok((hdr, body)) = decode_request_header(frame) else {
        return;
    };
    if let Ok(req) = decode_request(hdr.opcode, body) {
        let mut w = Writer::new();
        encode_request_body(&req, &mut w);
        assert_eq!(decode_request(hdr.opcode, w.as_slice()), Ok(req));
    }
});
