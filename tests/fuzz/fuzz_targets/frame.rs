//! A byte stream fed to the frame decoder in reads of fuzzer-chosen sizes: no panic, no frame
//! above the limit, and the buffer stays within a small multiple of one maximal frame.
#![no_main]

use baton_proto::frame::FrameDecoder;
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

const MAX: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, mut rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk).max(1);
    let mut decoder = FrameDecoder::new(MAX);
    let mut buf = BytesMut::new();
    while !rest.is_empty() {
        let n = chunk.min(rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => assert!(frame.len() <= MAX),
                Ok(None) => break,
                Err(_) => return,
            }
        }
        // BytesMut grows geometrically; what matters is that it stays within a small multiple
        // of one maximal frame whatever lengths the stream claims.
        assert!(buf.capacity() <= 4 * (MAX + 4 + 256));
    }
});
