//! Golden frames: bytes captured between kazoo 2.8 and Apache ZooKeeper 3.8.0 (a socket proxy
//! logged each frame), plus a few from a raw-socket probe of the same server. Each is split by
//! the frame decoder, decoded to the values asserted here, and re-encoded to the same bytes.

use baton_proto::codec::*;
use baton_proto::frame::{FrameDecoder, write_frame};
use baton_proto::*;
use bytes::BytesMut;

// kazoo session: exists, exists+watch, create, create ephemeral-sequential, getChildren,
// getData, setData, a committed and a failed transaction, sync, getACL, addAuth, close.
const CONNECT_REQ: &str = "0000002d000000000000000000000000000027100000000000000000000000100000000000000000000000000000000000";
const CONNECT_RESP: &str =
    "00000025000000000000271001000007c37a000400000010202ace505173465ca7eacfd551f7652100";
const EXISTS_REQ: &str = "000000140000000100000003000000072f676f6c64656e00";
const EXISTS_NONODE: &str = "00000010000000010000000000000019ffffff9b";
const EXISTS_WATCH_REQ: &str = "000000140000000200000003000000072f676f6c64656e01";
const EXISTS_WATCH_NONODE: &str = "00000010000000020000000000000019ffffff9b";
const CREATE_REQ: &str = "000000380000000300000001000000072f676f6c64656e000000026869000000010000001f00000005776f726c6400000006616e796f6e6500000000";
const NOTIFICATION: &str =
    "00000023ffffffffffffffffffffffff000000000000000100000003000000072f676f6c64656e";
const CREATE_RESP: &str = "0000001b00000003000000000000001a00000000000000072f676f6c64656e";
const CREATE_SEQ_REQ: &str = "0000003900000004000000010000000a2f676f6c64656e2f652d00000000000000010000001f00000005776f726c6400000006616e796f6e6500000003";
const CREATE_SEQ_RESP: &str =
    "0000002800000004000000000000001b00000000000000142f676f6c64656e2f652d30303030303030303030";
const GET_CHILDREN_REQ: &str = "000000140000000500000008000000072f676f6c64656e00";
const GET_CHILDREN_RESP: &str =
    "0000002400000005000000000000001b00000000000000010000000c652d30303030303030303030";
const GET_DATA_REQ: &str = "000000140000000600000004000000072f676f6c64656e00";
const GET_DATA_RESP: &str = "0000005a00000006000000000000001b00000000000000026869000000000000001a000000000000001a000001a2039f0a85000001a2039f0a8500000000000000010000000000000000000000000000000200000001000000000000001b";
const SET_DATA_REQ: &str = "0000001d0000000700000005000000072f676f6c64656e00000002686f00000000";
const SET_DATA_RESP: &str = "0000005400000007000000000000001c00000000000000000000001a000000000000001c000001a2039f0a85000001a2039f0abb00000001000000010000000000000000000000000000000200000001000000000000001b";
const MULTI_REQ: &str = "0000009a000000080000000e0000000100ffffffff000000092f676f6c64656e2f740000000178000000010000001f00000005776f726c6400000006616e796f6e65000000000000000d00ffffffff000000072f676f6c64656e000000010000000500ffffffff000000072f676f6c64656e0000000179ffffffff0000000200ffffffff000000092f676f6c64656e2f74ffffffffffffffff01ffffffff";
const MULTI_RESP: &str = "0000008e00000008000000000000001d00000000000000010000000000000000092f676f6c64656e2f740000000d0000000000000000050000000000000000000000001a000000000000001d000001a2039f0a85000001a2039f0abf00000002000000020000000000000000000000000000000100000002000000000000001d000000020000000000ffffffff01ffffffff";
const MULTI_FAIL_REQ: &str = "00000068000000090000000e0000000100ffffffff000000092f676f6c64656e2f750000000178000000010000001f00000005776f726c6400000006616e796f6e65000000000000000200ffffffff0000000c2f6e6f6e6578697374656e74ffffffffffffffff01ffffffff";
const MULTI_FAIL_RESP: &str = "0000003300000009000000000000001e00000000ffffffff000000000000000000ffffffff00ffffff9bffffff9bffffffff01ffffffff";
const SYNC_REQ: &str = "000000130000000a00000009000000072f676f6c64656e";
const SYNC_RESP: &str = "0000001b0000000a000000000000001e00000000000000072f676f6c64656e";
const GET_ACL_REQ: &str = "000000130000000b00000006000000072f676f6c64656e";
const GET_ACL_RESP: &str = "0000006f0000000b000000000000001e00000000000000010000001f00000005776f726c6400000006616e796f6e65000000000000001a000000000000001d000001a2039f0a85000001a2039f0abf00000002000000030000000000000000000000000000000100000001000000000000001d";
const AUTH_REQ: &str =
    "00000023fffffffc00000064000000000000000664696765737400000009757365723a70617373";
const AUTH_RESP: &str = "00000010fffffffc000000000000000000000000";
const CLOSE_REQ: &str = "000000080000000cfffffff5";
const CLOSE_RESP: &str = "000000100000000c000000000000001f00000000";

// Raw-socket probe of the same server: addWatch answers with a 4-byte `ErrorResponse{0}`.
const ADD_WATCH_REQ: &str = "00000017000000060000006a000000072f72353638373600000000";
const ADD_WATCH_RESP: &str = "0000001400000006000000000000000e0000000000000000";

// Raw-socket probe of the same server: null data (length -1) in create, setData, getData and
// multiRead; ZooKeeper answers null back and reports dataLength 0.
const CREATE_NULL_REQ: &str = "000000340000000100000001000000052f6e756c6cffffffff000000010000001f00000005776f726c6400000006616e796f6e6500000000";
const GET_DATA_NULL_RESP: &str = "0000005800000002000000000000001500000000ffffffff00000000000000150000000000000015000001a20f324119000001a20f324119000000000000000000000000000000000000000000000000000000000000000000000015";
const SET_DATA_NULL_REQ: &str = "000000190000000300000005000000052f6e756c6cffffffffffffffff";
const MULTI_READ_NULL_REQ: &str =
    "0000002400000004000000160000000400ffffffff000000052f6e756c6c00ffffffff01ffffffff";
const MULTI_READ_NULL_RESP: &str = "0000006a00000004000000000000001600000000000000040000000000ffffffff00000000000000150000000000000016000001a20f324119000001a20f32411b000000010000000000000000000000000000000000000000000000000000000000000015ffffffff01ffffffff";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("test hex"))
        .collect()
}

/// Splits one whole frame off `hex` and checks nothing is left over.
fn payload(hex: &str) -> Vec<u8> {
    let mut buf = BytesMut::from(&unhex(hex)[..]);
    let frame = FrameDecoder::default()
        .decode(&mut buf)
        .expect("valid frame")
        .expect("complete frame");
    assert!(buf.is_empty(), "one frame per golden string");
    frame.to_vec()
}

fn framed(f: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::new();
    write_frame(&mut w, f);
    w.into_inner()
}

/// Decodes a request frame, compares it with `want`, and checks it re-encodes byte for byte.
fn check_request(hex: &str, want_xid: i32, want: Request) {
    let p = payload(hex);
    let (hdr, body) = decode_request_header(&p).expect("header");
    assert_eq!(hdr.xid, want_xid);
    let got = decode_request(hdr.opcode, body).expect("body");
    assert_eq!(got, want);
    assert_eq!(framed(|w| encode_request(want_xid, &want, w)), unhex(hex));
}

/// Decodes a reply frame as the answer to `op` and checks it re-encodes byte for byte.
fn check_reply(hex: &str, op: OpCode) -> (ReplyHeader, Option<Response>) {
    let (hdr, body) = decode_reply(op, &payload(hex)).expect("reply");
    assert_eq!(framed(|w| encode_reply(&hdr, body.as_ref(), w)), unhex(hex));
    (hdr, body)
}

fn golden_path_watch(path: &str, watch: bool) -> PathWatchRequest {
    PathWatchRequest {
        path: path.into(),
        watch,
    }
}

fn create(path: &str, data: &[u8], flags: i32) -> CreateRequest {
    CreateRequest {
        path: path.into(),
        data: Some(data.to_vec()),
        acl: open_acl_unsafe(),
        flags,
        ttl: None,
    }
}

#[test]
fn handshake() {
    let req = decode_connect_request(&payload(CONNECT_REQ)).expect("connect");
    assert_eq!(
        req,
        ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: 0,
            timeout_ms: 10_000,
            session_id: 0,
            passwd: vec![0; 16],
            read_only: Some(false),
        }
    );
    assert_eq!(
        framed(|w| encode_connect_request(&req, w)),
        unhex(CONNECT_REQ)
    );

    let resp = decode_connect_response(&payload(CONNECT_RESP)).expect("connect response");
    assert_eq!(resp.timeout_ms, 10_000);
    assert_eq!(resp.session_id, 0x0100_0007_c37a_0004);
    assert_eq!(resp.passwd.len(), 16);
    assert_eq!(resp.read_only, Some(false));
    assert_eq!(
        framed(|w| encode_connect_response(&resp, w)),
        unhex(CONNECT_RESP)
    );
}

/// A client older than 3.4 ends its ConnectRequest at the password; ZooKeeper (`isOldClient`)
/// answers it with no `readOnly` either: 36 bytes, where a 3.4+ client gets 37.
#[test]
fn handshake_of_a_client_without_read_only() {
    let full = payload(CONNECT_REQ);
    let old = decode_connect_request(&full[..full.len() - 1]).expect("old connect");
    assert_eq!(old.read_only, None);
    assert_eq!(framed(|w| encode_connect_request(&old, w)).len(), 4 + 44);

    let resp = decode_connect_response(&payload(CONNECT_RESP)).expect("connect response");
    let old_resp = ConnectResponse {
        read_only: None,
        ..resp.clone()
    };
    let mut w = Writer::new();
    encode_connect_response(&old_resp, &mut w);
    assert_eq!(w.len(), 36);
    assert_eq!(w.as_slice(), &payload(CONNECT_RESP)[..36]);
    let mut w = Writer::new();
    encode_connect_response(&resp, &mut w);
    assert_eq!(w.len(), 37);
    assert_eq!(
        decode_connect_response(&payload(CONNECT_RESP)[..36]).expect("old answer"),
        old_resp
    );
}

#[test]
fn exists_watch_and_notification() {
    check_request(
        EXISTS_REQ,
        1,
        Request::Exists(golden_path_watch("/golden", false)),
    );
    check_request(
        EXISTS_WATCH_REQ,
        2,
        Request::Exists(golden_path_watch("/golden", true)),
    );
    let (hdr, body) = check_reply(EXISTS_WATCH_NONODE, OpCode::Exists);
    assert_eq!(
        (hdr.xid, hdr.err, body),
        (2, ErrorCode::NoNode.code(), None)
    );
    check_reply(EXISTS_NONODE, OpCode::Exists);

    let n = decode_notification(&payload(NOTIFICATION)).expect("notification");
    // ZooKeeper 3.8 puts -1, not the event's zxid, in a notification's header.
    assert_eq!(
        n,
        Notification {
            zxid: -1,
            event: WatcherEvent {
                event_type: EventType::NodeCreated as i32,
                state: KeeperState::SyncConnected as i32,
                path: "/golden".into(),
            },
        }
    );
    assert_eq!(framed(|w| encode_notification(&n, w)), unhex(NOTIFICATION));
}

#[test]
fn creates() {
    check_request(
        CREATE_REQ,
        3,
        Request::Create {
            op: OpCode::Create,
            req: create("/golden", b"hi", 0),
        },
    );
    let (_, body) = check_reply(CREATE_RESP, OpCode::Create);
    assert_eq!(
        body,
        Some(Response::Create {
            path: "/golden".into()
        })
    );
    check_request(
        CREATE_SEQ_REQ,
        4,
        Request::Create {
            op: OpCode::Create,
            req: create("/golden/e-", b"", CreateMode::EphemeralSequential.flags()),
        },
    );
    let (_, body) = check_reply(CREATE_SEQ_RESP, OpCode::Create);
    assert_eq!(
        body,
        Some(Response::Create {
            path: "/golden/e-0000000000".into()
        })
    );
}

#[test]
fn reads_and_writes() {
    check_request(
        GET_CHILDREN_REQ,
        5,
        Request::GetChildren(golden_path_watch("/golden", false)),
    );
    let (_, body) = check_reply(GET_CHILDREN_RESP, OpCode::GetChildren);
    assert_eq!(
        body,
        Some(Response::GetChildren {
            children: vec!["e-0000000000".into()]
        })
    );

    check_request(
        GET_DATA_REQ,
        6,
        Request::GetData(golden_path_watch("/golden", false)),
    );
    let (hdr, body) = check_reply(GET_DATA_RESP, OpCode::GetData);
    let Some(Response::GetData { data, stat }) = body else {
        panic!("getData answer expected, got {body:?}");
    };
    assert_eq!(data.as_deref(), Some(&b"hi"[..]));
    assert_eq!((stat.czxid, stat.version, stat.data_length), (0x1a, 0, 2));
    assert_eq!((stat.num_children, stat.cversion, stat.pzxid), (1, 1, 0x1b));
    assert_eq!(hdr.zxid, 0x1b);

    check_request(
        SET_DATA_REQ,
        7,
        Request::SetData(SetDataRequest {
            path: "/golden".into(),
            data: Some(b"ho".to_vec()),
            version: 0,
        }),
    );
    let (_, body) = check_reply(SET_DATA_RESP, OpCode::SetData);
    let Some(Response::Stat(stat)) = body else {
        panic!("setData answer expected, got {body:?}");
    };
    assert_eq!((stat.version, stat.mzxid), (1, 0x1c));

    check_request(
        SYNC_REQ,
        10,
        Request::Sync {
            path: "/golden".into(),
        },
    );
    check_reply(SYNC_RESP, OpCode::Sync);

    check_request(
        GET_ACL_REQ,
        11,
        Request::GetAcl {
            path: "/golden".into(),
        },
    );
    let (_, body) = check_reply(GET_ACL_RESP, OpCode::GetAcl);
    let Some(Response::GetAcl { acl, stat }) = body else {
        panic!("getACL answer expected, got {body:?}");
    };
    assert_eq!(acl, open_acl_unsafe());
    assert_eq!(stat.version, 2);
}

#[test]
fn committed_transaction() {
    check_request(
        MULTI_REQ,
        8,
        Request::Multi(vec![
            MultiOp::Create {
                op: OpCode::Create,
                req: create("/golden/t", b"x", 0),
            },
            MultiOp::Check(CheckVersionRequest {
                path: "/golden".into(),
                version: 1,
            }),
            MultiOp::SetData(SetDataRequest {
                path: "/golden".into(),
                data: Some(b"y".to_vec()),
                version: -1,
            }),
            MultiOp::Delete(DeleteRequest {
                path: "/golden/t".into(),
                version: -1,
            }),
        ]),
    );
    let (hdr, body) = check_reply(MULTI_RESP, OpCode::Multi);
    assert_eq!(hdr.err, 0);
    let Some(Response::Multi(results)) = body else {
        panic!("multi answer expected, got {body:?}");
    };
    assert_eq!(results.len(), 4);
    assert_eq!(
        results[0],
        MultiResult::Create {
            path: "/golden/t".into()
        }
    );
    assert_eq!(results[1], MultiResult::Check);
    assert!(matches!(results[2], MultiResult::SetData { stat } if stat.version == 2));
    assert_eq!(results[3], MultiResult::Delete);
}

/// A failed multi is answered with `err == 0` in the header and one error result per op:
/// Ok for the ops before the failure, then the failure's code.
#[test]
fn failed_transaction() {
    let p = payload(MULTI_FAIL_REQ);
    let (_, body) = decode_request_header(&p).expect("header");
    let Request::Multi(ops) = decode_request(OpCode::Multi.code(), body).expect("multi") else {
        panic!("multi expected");
    };
    assert_eq!(ops.len(), 2);
    let (hdr, body) = check_reply(MULTI_FAIL_RESP, OpCode::Multi);
    assert_eq!(hdr.err, 0);
    assert_eq!(
        body,
        Some(Response::Multi(vec![
            MultiResult::Error { err: 0 },
            MultiResult::Error {
                err: ErrorCode::NoNode.code()
            },
        ]))
    );
}

#[test]
fn auth_and_close() {
    check_request(
        AUTH_REQ,
        xid::AUTH,
        Request::Auth(AuthPacket {
            auth_type: 0,
            scheme: "digest".into(),
            auth: b"user:pass".to_vec(),
        }),
    );
    let (hdr, body) = check_reply(AUTH_RESP, OpCode::Auth);
    assert_eq!(
        (hdr.xid, hdr.zxid, body),
        (xid::AUTH, 0, Some(Response::Empty))
    );

    check_request(CLOSE_REQ, 12, Request::CloseSession);
    let (_, body) = check_reply(CLOSE_RESP, OpCode::CloseSession);
    assert_eq!(body, Some(Response::Empty));
}

#[test]
fn add_watch() {
    check_request(
        ADD_WATCH_REQ,
        6,
        Request::AddWatch(AddWatchRequest {
            path: "/r56876".into(),
            mode: 0,
        }),
    );
    let (_, body) = check_reply(ADD_WATCH_RESP, OpCode::AddWatch);
    assert_eq!(body, Some(Response::AddWatch));
}

#[test]
fn null_data_stays_null() {
    check_request(
        CREATE_NULL_REQ,
        1,
        Request::Create {
            op: OpCode::Create,
            req: CreateRequest {
                data: None,
                ..create("/null", b"", 0)
            },
        },
    );
    let (_, body) = check_reply(GET_DATA_NULL_RESP, OpCode::GetData);
    let Some(Response::GetData { data, stat }) = body else {
        panic!("getData answer expected, got {body:?}");
    };
    assert_eq!((data, stat.data_length), (None, 0));
    check_request(
        SET_DATA_NULL_REQ,
        3,
        Request::SetData(SetDataRequest {
            path: "/null".into(),
            data: None,
            version: -1,
        }),
    );
    check_request(
        MULTI_READ_NULL_REQ,
        4,
        Request::MultiRead(vec![MultiReadOp::GetData(golden_path_watch(
            "/null", false,
        ))]),
    );
    let (_, body) = check_reply(MULTI_READ_NULL_RESP, OpCode::MultiRead);
    let Some(Response::MultiRead(results)) = body else {
        panic!("multiRead answer expected, got {body:?}");
    };
    assert!(
        matches!(&results[..], [MultiReadResult::GetData { data: None, stat }] if stat.version == 1),
        "{results:?}"
    );
}

/// `ruok` sent as a connection's first bytes, read as a frame length, is far above any limit.
#[test]
fn four_letter_words_are_not_frames() {
    for word in [
        "ruok", "srvr", "stat", "mntr", "conf", "envi", "cons", "wchs", "dump", "isro",
    ] {
        let first4: [u8; 4] = word.as_bytes().try_into().expect("four letters");
        assert_eq!(frame::four_letter_word(&first4), Some(word));
        let mut buf = BytesMut::from(word.as_bytes());
        assert!(FrameDecoder::default().decode(&mut buf).is_err());
    }
    assert_eq!(frame::four_letter_word(&[0, 0, 0, 45]), None);
    assert_eq!(frame::four_letter_word(b"RUOK"), None);
}
