//! A connection's first frame (and the server's answer): decoding never panics, and whatever
//! decodes re-encodes to bytes that decode to the same value.
#![no_main]

use baton_proto::Writer;
use baton_proto::codec::{
    decode_connect_request, decode_connect_response, encode_connect_request,
    encode_connect_response,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|frame: &[u8]| {
    if let Ok(req) = decode_connect_request(frame) {
        let mut w = Writer::new();
        encode_connect_request(&req, &mut w);
        assert_eq!(decode_connect_request(w.as_slice()), Ok(req));
    }
    if let Ok(resp) = decode_connect_response(frame) {
        let mut w = Writer::new();
        encode_connect_response(&resp, &mut w);
        assert_eq!(decode_connect_response(w.as_slice()), Ok(resp));
    }
});
