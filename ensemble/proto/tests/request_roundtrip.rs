//! Client encode → server decode gives back every request unchanged.

mod common;

use baton_proto::codec::{decode_request, decode_request_header, encode_request};
use baton_proto::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn request_round_trips(req in common::request(), xid in any::<i32>()) {
        let mut w = Writer::new();
        encode_request(xid, &req, &mut w);
        let (hdr, body) = decode_request_header(w.as_slice()).expect("header");
        prop_assert_eq!(hdr.xid, xid);
        prop_assert_eq!(hdr.opcode, req.opcode().code());
        prop_assert_eq!(decode_request(hdr.opcode, body).expect("body"), req);
    }

    /// ZooKeeper ignores bytes after a complete request body; so do we.
    #[test]
    fn trailing_bytes_are_ignored(req in common::request(), junk in proptest::collection::vec(any::<u8>(), 1..16)) {
        let mut w = Writer::new();
        encode_request(7, &req, &mut w);
        let mut frame = w.into_inner();
        frame.extend_from_slice(&junk);
        let (hdr, body) = decode_request_header(&frame).expect("header");
        prop_assert_eq!(decode_request(hdr.opcode, body).expect("body"), req);
    }

    /// Every strict prefix of a body that has fields fails to decode instead of inventing values.
    #[test]
    fn truncated_bodies_are_errors(req in common::request(), cut in any::<prop::sample::Index>()) {
        let mut w = Writer::new();
        codec::encode_request_body(&req, &mut w);
        let body = w.as_slice();
        prop_assume!(!body.is_empty());
        let cut = cut.index(body.len());
        prop_assert!(decode_request(req.opcode().code(), &body[..cut]).is_err());
    }
}
