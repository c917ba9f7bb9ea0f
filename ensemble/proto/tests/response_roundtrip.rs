//! Server encode → client decode gives back every reply, handshake and notification unchanged.

mod common;

use baton_proto::codec::*;
use baton_proto::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn reply_round_trips(
        (op, resp) in common::op_and_response(),
        xid in any::<i32>(),
        zxid in any::<i64>(),
    ) {
        let hdr = ReplyHeader { xid, zxid, err: 0 };
        let mut w = Writer::new();
        encode_reply(&hdr, Some(&resp), &mut w);
        let (got_hdr, got) = decode_reply(op, w.as_slice()).expect("decodes");
        prop_assert_eq!(got_hdr, hdr);
        prop_assert_eq!(got, Some(resp));
    }

    /// An error reply is a lone header; the client never looks for a body.
    #[test]
    fn error_reply_has_no_body((op, _) in common::op_and_response(), err in common::error_code()) {
        let hdr = ReplyHeader { xid: 3, zxid: 9, err: err.code() };
        let mut w = Writer::new();
        encode_reply(&hdr, None, &mut w);
        prop_assert_eq!(w.len(), 16);
        prop_assert_eq!(decode_reply(op, w.as_slice()).expect("decodes"), (hdr, None));
    }

    #[test]
    fn connect_request_round_trips(req in common::connect_request()) {
        let mut w = Writer::new();
        encode_connect_request(&req, &mut w);
        prop_assert_eq!(decode_connect_request(w.as_slice()).expect("decodes"), req);
    }

    /// Clients older than 3.4 stop after `passwd`; the flag is then `None`, one byte shorter.
    #[test]
    fn connect_request_without_read_only(req in common::connect_request()) {
        let with = ConnectRequest { read_only: Some(false), ..req.clone() };
        let without = ConnectRequest { read_only: None, ..req };
        let (mut a, mut b) = (Writer::new(), Writer::new());
        encode_connect_request(&with, &mut a);
        encode_connect_request(&without, &mut b);
        prop_assert_eq!(a.len(), b.len() + 1);
        prop_assert_eq!(&a.as_slice()[..b.len()], b.as_slice());
        prop_assert_eq!(decode_connect_request(b.as_slice()).expect("decodes"), without);
    }

    #[test]
    fn connect_response_round_trips(resp in common::connect_response()) {
        let mut w = Writer::new();
        encode_connect_response(&resp, &mut w);
        prop_assert_eq!(decode_connect_response(w.as_slice()).expect("decodes"), resp.clone());
        let old = ConnectResponse { read_only: None, ..resp };
        let mut w_old = Writer::new();
        encode_connect_response(&old, &mut w_old);
        prop_assert_eq!(w_old.len(), 20 + old.passwd.len());
        prop_assert_eq!(decode_connect_response(w_old.as_slice()).expect("decodes"), old);
    }

    #[test]
    fn notification_round_trips(n in common::notification()) {
        let mut w = Writer::new();
        encode_notification(&n, &mut w);
        prop_assert_eq!(&w.as_slice()[..4], &[0xff; 4]);
        prop_assert_eq!(decode_notification(w.as_slice()).expect("decodes"), n);
    }

    /// Every strict prefix of a reply with a body fails instead of inventing values.
    #[test]
    fn truncated_replies_are_errors(
        (op, resp) in common::op_and_response(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut w = Writer::new();
        encode_reply(&ReplyHeader { xid: 1, zxid: 2, err: 0 }, Some(&resp), &mut w);
        let bytes = w.as_slice();
        prop_assume!(bytes.len() > 16);
        let cut = cut.index(bytes.len());
        prop_assert!(decode_reply(op, &bytes[..cut]).is_err());
    }
}

#[test]
fn notification_with_another_xid_is_refused() {
    let mut w = Writer::new();
    encode_reply(
        &ReplyHeader {
            xid: 5,
            zxid: 1,
            err: 0,
        },
        Some(&Response::Sync { path: "/".into() }),
        &mut w,
    );
    assert_eq!(
        decode_notification(w.as_slice()),
        Err(DecodeError::BadValue {
            field: "notification xid",
            value: 5
        })
    );
}

/// A multiRead error result always carries a real error code; 0 cannot be represented.
#[test]
fn multi_read_error_result_with_ok_code_is_refused() {
    let mut w = Writer::new();
    encode_reply(
        &ReplyHeader {
            xid: 1,
            zxid: 1,
            err: 0,
        },
        Some(&Response::Multi(vec![MultiResult::Error { err: 0 }])),
        &mut w,
    );
    assert!(decode_reply(OpCode::MultiRead, w.as_slice()).is_err());
}
