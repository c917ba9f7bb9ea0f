//! Arbitrary and mutated bytes never make a decoder panic (they may only return errors), and
//! hostile lengths are refused before anything is allocated for them.

mod common;

use baton_proto::codec::*;
use baton_proto::*;
use proptest::collection::vec;
use proptest::prelude::*;

/// Known opcodes most of the time, any `i32` otherwise.
fn opcode() -> impl Strategy<Value = i32> {
    prop_oneof![4 => -12..=110i32, 1 => any::<i32>()]
}

fn all_opcodes() -> impl Strategy<Value = OpCode> {
    (-12..=110i32).prop_filter_map("known opcode", OpCode::from_code)
}

/// A valid encoding with a few bytes overwritten: reaches far deeper than random bytes.
fn mutated(valid: Vec<u8>, edits: Vec<(prop::sample::Index, u8)>, cut: usize) -> Vec<u8> {
    let mut out = valid;
    for (at, byte) in edits {
        if !out.is_empty() {
            let i = at.index(out.len());
            out[i] = byte;
        }
    }
    out.truncate(out.len().saturating_sub(cut));
    out
}

fn edits() -> impl Strategy<Value = Vec<(prop::sample::Index, u8)>> {
    vec((any::<prop::sample::Index>(), any::<u8>()), 0..6)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn request_decoding_never_panics(op in opcode(), body in vec(any::<u8>(), 0..256)) {
        let _ = decode_request(op, &body);
        let _ = decode_request_header(&body);
    }

    #[test]
    fn mutated_requests_never_panic(
        req in common::request(),
        edits in edits(),
        cut in 0usize..8,
        other_op in opcode(),
    ) {
        let mut w = Writer::new();
        encode_request_body(&req, &mut w);
        let body = mutated(w.into_inner(), edits, cut);
        for op in [req.opcode().code(), other_op] {
            // Whatever decodes is stable: re-encoding it decodes to the same value.
            if let Ok(decoded) = decode_request(op, &body) {
                let mut again = Writer::new();
                encode_request_body(&decoded, &mut again);
                prop_assert_eq!(decode_request(op, again.as_slice()), Ok(decoded));
            }
        }
    }

    #[test]
    fn connect_decoding_never_panics(buf in vec(any::<u8>(), 0..128)) {
        let _ = decode_connect_request(&buf);
        let _ = decode_connect_response(&buf);
    }

    #[test]
    fn mutated_connects_never_panic(
        req in common::connect_request(),
        edits in edits(),
        cut in 0usize..8,
    ) {
        let mut w = Writer::new();
        encode_connect_request(&req, &mut w);
        let _ = decode_connect_request(&mutated(w.into_inner(), edits, cut));
    }

    #[test]
    fn reply_decoding_never_panics(op in all_opcodes(), frame in vec(any::<u8>(), 0..256)) {
        let _ = decode_reply(op, &frame);
        let _ = decode_notification(&frame);
    }

    #[test]
    fn mutated_replies_never_panic(
        (op, resp) in common::op_and_response(),
        edits in edits(),
        cut in 0usize..8,
    ) {
        let mut w = Writer::new();
        encode_reply(&ReplyHeader { xid: 1, zxid: 1, err: 0 }, Some(&resp), &mut w);
        let frame = mutated(w.into_inner(), edits, cut);
        if let Ok((hdr, body)) = decode_reply(op, &frame) {
            let mut again = Writer::new();
            encode_reply(&hdr, body.as_ref(), &mut again);
            prop_assert_eq!(decode_reply(op, again.as_slice()), Ok((hdr, body)));
        }
        let _ = decode_notification(&frame);
    }
}

/// A vector count of 2^31-1 followed by a handful of bytes must fail on the count, not try to
/// reserve room for two billion strings.
#[test]
fn hostile_vector_count_is_refused_up_front() {
    let mut w = Writer::new();
    encode_reply(
        &ReplyHeader {
            xid: 1,
            zxid: 1,
            err: 0,
        },
        None,
        &mut w,
    );
    w.write_i32(i32::MAX);
    w.write_i32(0);
    assert!(matches!(
        decode_reply(OpCode::GetChildren, w.as_slice()),
        Err(DecodeError::BadLength { len: i32::MAX, .. })
    ));

    // The same inside a request: a setWatches whose first list claims i32::MAX paths.
    let mut body = Writer::new();
    body.write_i64(0);
    body.write_i32(i32::MAX);
    assert!(matches!(
        decode_request(OpCode::SetWatches.code(), body.as_slice()),
        Err(DecodeError::BadLength { .. })
    ));
}

/// Jute reads -1 as a null string and any other negative length as an error.
#[test]
fn string_lengths_follow_jute() {
    let mut body = Writer::new();
    body.write_i32(-1);
    assert_eq!(
        decode_request(OpCode::Sync.code(), body.as_slice()),
        Ok(Request::Sync {
            path: String::new()
        })
    );
    let mut body = Writer::new();
    body.write_i32(-2);
    assert!(matches!(
        decode_request(OpCode::Sync.code(), body.as_slice()),
        Err(DecodeError::BadLength { len: -2, .. })
    ));
}

/// A negative ACL count reads as an empty list, as ZooKeeper's `BinaryIndex` does (the server
/// then answers InvalidACL rather than closing the connection).
#[test]
fn negative_vector_count_is_empty() {
    let mut body = Writer::new();
    body.write_string("/n");
    body.write_buffer(b"");
    body.write_i32(-5);
    body.write_i32(0);
    let Ok(Request::Create { req, .. }) = decode_request(OpCode::Create.code(), body.as_slice())
    else {
        panic!("create expected");
    };
    assert!(req.acl.is_empty());
}

/// Multi ops of the wrong kind are refused, like ZooKeeper's "Invalid type of op".
#[test]
fn multi_refuses_foreign_ops() {
    let mut read_in_write = Writer::new();
    read_in_write.write_i32(OpCode::GetData.code());
    read_in_write.write_bool(false);
    read_in_write.write_i32(-1);
    read_in_write.write_string("/a");
    read_in_write.write_bool(false);
    read_in_write.write_i32(-1);
    read_in_write.write_bool(true);
    read_in_write.write_i32(-1);
    assert_eq!(
        decode_request(OpCode::Multi.code(), read_in_write.as_slice()),
        Err(DecodeError::BadValue {
            field: "multi op type",
            value: OpCode::GetData.code()
        })
    );
    // The same bytes are a valid multiRead.
    assert!(decode_request(OpCode::MultiRead.code(), read_in_write.as_slice()).is_ok());

    let mut write_in_read = Writer::new();
    encode_request_body(
        &Request::Multi(vec![MultiOp::Check(CheckVersionRequest {
            path: "/a".into(),
            version: 1,
        })]),
        &mut write_in_read,
    );
    assert!(decode_request(OpCode::MultiRead.code(), write_in_read.as_slice()).is_err());
}

/// Opcodes ZooKeeper defines but Baton does not serve are reported as unknown, so the server
/// can answer Unimplemented.
#[test]
fn unserved_opcodes_are_unknown() {
    for op in [0, 16, 20, 102, -10, -1, 10, 55, i32::MIN] {
        assert_eq!(decode_request(op, &[]), Err(DecodeError::UnknownOpCode(op)));
    }
}
