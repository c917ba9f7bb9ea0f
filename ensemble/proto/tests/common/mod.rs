//! Proptest strategies for every request and response shape, shared by the test files.
#![allow(dead_code)]

use baton_proto::*;
use proptest::collection::vec;
use proptest::prelude::*;

pub fn path() -> impl Strategy<Value = String> {
    // Mostly plausible paths, sometimes arbitrary Unicode (the codec does not validate paths).
    prop_oneof![3 => "(/[a-z0-9_-]{1,8}){0,4}", 1 => any::<String>()]
}

pub fn data() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..64)
}

/// Znode data: sometimes null (jute length -1), which must stay apart from empty.
pub fn opt_data() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![1 => Just(None), 1 => Just(Some(Vec::new())), 4 => data().prop_map(Some)]
}

pub fn strings() -> impl Strategy<Value = Vec<String>> {
    vec(path(), 0..5)
}

pub fn acl() -> impl Strategy<Value = Vec<Acl>> {
    vec(
        (any::<i32>(), "[a-z]{0,8}", any::<String>()).prop_map(|(perms, scheme, id)| Acl {
            perms,
            id: Id { scheme, id },
        }),
        0..4,
    )
}

pub fn stat() -> impl Strategy<Value = Stat> {
    (
        (any::<i64>(), any::<i64>(), any::<i64>(), any::<i64>()),
        (any::<i32>(), any::<i32>(), any::<i32>()),
        (any::<i64>(), any::<i32>(), any::<i32>(), any::<i64>()),
    )
        .prop_map(
            |(
                (czxid, mzxid, ctime, mtime),
                (version, cversion, aversion),
                (ephemeral_owner, data_length, num_children, pzxid),
            )| Stat {
                czxid,
                mzxid,
                ctime,
                mtime,
                version,
                cversion,
                aversion,
                ephemeral_owner,
                data_length,
                num_children,
                pzxid,
            },
        )
}

pub fn create_op() -> impl Strategy<Value = OpCode> {
    prop_oneof![
        Just(OpCode::Create),
        Just(OpCode::Create2),
        Just(OpCode::CreateContainer),
        Just(OpCode::CreateTtl),
    ]
}

/// A create body consistent with its opcode: `ttl` is present exactly for createTTL.
pub fn create() -> impl Strategy<Value = (OpCode, CreateRequest)> {
    (
        create_op(),
        path(),
        opt_data(),
        acl(),
        any::<i32>(),
        any::<i64>(),
    )
        .prop_map(|(op, path, data, acl, flags, ttl)| {
            let ttl = (op == OpCode::CreateTtl).then_some(ttl);
            (
                op,
                CreateRequest {
                    path,
                    data,
                    acl,
                    flags,
                    ttl,
                },
            )
        })
}

pub fn path_watch() -> impl Strategy<Value = PathWatchRequest> {
    (path(), any::<bool>()).prop_map(|(path, watch)| PathWatchRequest { path, watch })
}

pub fn delete() -> impl Strategy<Value = DeleteRequest> {
    (path(), any::<i32>()).prop_map(|(path, version)| DeleteRequest { path, version })
}

pub fn set_data() -> impl Strategy<Value = SetDataRequest> {
    (path(), opt_data(), any::<i32>()).prop_map(|(path, data, version)| SetDataRequest {
        path,
        data,
        version,
    })
}

pub fn check() -> impl Strategy<Value = CheckVersionRequest> {
    (path(), any::<i32>()).prop_map(|(path, version)| CheckVersionRequest { path, version })
}

pub fn watches() -> impl Strategy<Value = WatchesRequest> {
    (path(), any::<i32>()).prop_map(|(path, watcher_type)| WatchesRequest { path, watcher_type })
}

pub fn multi_op() -> impl Strategy<Value = MultiOp> {
    prop_oneof![
        create().prop_map(|(op, req)| MultiOp::Create { op, req }),
        delete().prop_map(MultiOp::Delete),
        set_data().prop_map(MultiOp::SetData),
        check().prop_map(MultiOp::Check),
    ]
}

pub fn multi_read_op() -> impl Strategy<Value = MultiReadOp> {
    prop_oneof![
        path_watch().prop_map(MultiReadOp::GetChildren),
        path_watch().prop_map(MultiReadOp::GetData),
    ]
}

/// SetWatches carries only the first three lists; SetWatches2 all five.
pub fn set_watches() -> impl Strategy<Value = Request> {
    (
        any::<bool>(),
        any::<i64>(),
        (strings(), strings(), strings(), strings(), strings()),
    )
        .prop_map(|(v2, relative_zxid, (d, e, c, p, pr))| {
            let (op, persistent_watches, persistent_recursive_watches) = if v2 {
                (OpCode::SetWatches2, p, pr)
            } else {
                (OpCode::SetWatches, Vec::new(), Vec::new())
            };
            Request::SetWatches {
                op,
                req: SetWatchesRequest {
                    relative_zxid,
                    data_watches: d,
                    exist_watches: e,
                    child_watches: c,
                    persistent_watches,
                    persistent_recursive_watches,
                },
            }
        })
}

pub fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        create().prop_map(|(op, req)| Request::Create { op, req }),
        delete().prop_map(Request::Delete),
        path_watch().prop_map(Request::Exists),
        path_watch().prop_map(Request::GetData),
        set_data().prop_map(Request::SetData),
        path().prop_map(|path| Request::GetAcl { path }),
        (path(), acl(), any::<i32>())
            .prop_map(|(path, acl, version)| Request::SetAcl(SetAclRequest { path, acl, version })),
        path_watch().prop_map(Request::GetChildren),
        path_watch().prop_map(Request::GetChildren2),
        path().prop_map(|path| Request::Sync { path }),
        Just(Request::Ping),
        check().prop_map(Request::Check),
        vec(multi_op(), 0..5).prop_map(Request::Multi),
        vec(multi_read_op(), 0..5).prop_map(Request::MultiRead),
        Just(Request::CloseSession),
        (any::<i32>(), "[a-z]{0,8}", data()).prop_map(|(auth_type, scheme, auth)| {
            Request::Auth(AuthPacket {
                auth_type,
                scheme,
                auth,
            })
        }),
        set_watches(),
        (path(), any::<i32>())
            .prop_map(|(path, mode)| Request::AddWatch(AddWatchRequest { path, mode })),
        watches().prop_map(Request::CheckWatches),
        watches().prop_map(Request::RemoveWatches),
        path().prop_map(|prefix_path| Request::GetEphemerals { prefix_path }),
        path().prop_map(|path| Request::GetAllChildrenNumber { path }),
        Just(Request::WhoAmI),
    ]
}

const ERROR_CODES: [ErrorCode; 31] = [
    ErrorCode::SystemError,
    ErrorCode::RuntimeInconsistency,
    ErrorCode::DataInconsistency,
    ErrorCode::ConnectionLoss,
    ErrorCode::MarshallingError,
    ErrorCode::Unimplemented,
    ErrorCode::OperationTimeout,
    ErrorCode::BadArguments,
    ErrorCode::UnknownSession,
    ErrorCode::NewConfigNoQuorum,
    ErrorCode::ReconfigInProgress,
    ErrorCode::ApiError,
    ErrorCode::NoNode,
    ErrorCode::NoAuth,
    ErrorCode::BadVersion,
    ErrorCode::NoChildrenForEphemerals,
    ErrorCode::NodeExists,
    ErrorCode::NotEmpty,
    ErrorCode::SessionExpired,
    ErrorCode::InvalidCallback,
    ErrorCode::InvalidAcl,
    ErrorCode::AuthFailed,
    ErrorCode::SessionMoved,
    ErrorCode::NotReadOnly,
    ErrorCode::EphemeralOnLocalSession,
    ErrorCode::NoWatcher,
    ErrorCode::RequestTimeout,
    ErrorCode::ReconfigDisabled,
    ErrorCode::SessionClosedRequireSaslAuth,
    ErrorCode::QuotaExceeded,
    ErrorCode::Throttled,
];

pub fn error_code() -> impl Strategy<Value = ErrorCode> {
    proptest::sample::select(&ERROR_CODES[..])
}

pub fn multi_result() -> impl Strategy<Value = MultiResult> {
    prop_oneof![
        path().prop_map(|path| MultiResult::Create { path }),
        (path(), stat()).prop_map(|(path, stat)| MultiResult::Create2 { path, stat }),
        Just(MultiResult::Delete),
        stat().prop_map(|stat| MultiResult::SetData { stat }),
        Just(MultiResult::Check),
        // 0 (Ok) and RuntimeInconsistency appear in failed multis next to the real error.
        prop_oneof![Just(0), error_code().prop_map(ErrorCode::code)]
            .prop_map(|err| MultiResult::Error { err }),
    ]
}

pub fn multi_read_result() -> impl Strategy<Value = MultiReadResult> {
    prop_oneof![
        strings().prop_map(|children| MultiReadResult::GetChildren { children }),
        (opt_data(), stat()).prop_map(|(data, stat)| MultiReadResult::GetData { data, stat }),
        error_code().prop_map(|err| MultiReadResult::Error { err }),
    ]
}

/// A successful reply body together with an opcode it answers.
pub fn op_and_response() -> impl Strategy<Value = (OpCode, Response)> {
    use OpCode as O;
    let empty = proptest::sample::select(vec![
        O::Delete,
        O::Check,
        O::Ping,
        O::CloseSession,
        O::Auth,
        O::SetWatches,
        O::SetWatches2,
        O::CheckWatches,
        O::RemoveWatches,
    ]);
    prop_oneof![
        empty.prop_map(|op| (op, Response::Empty)),
        Just((O::AddWatch, Response::AddWatch)),
        path().prop_map(|path| (O::Create, Response::Create { path })),
        (
            proptest::sample::select(vec![O::Create2, O::CreateContainer, O::CreateTtl]),
            path(),
            stat()
        )
            .prop_map(|(op, path, stat)| (op, Response::Create2 { path, stat })),
        (
            proptest::sample::select(vec![O::Exists, O::SetData, O::SetAcl]),
            stat()
        )
            .prop_map(|(op, stat)| (op, Response::Stat(stat))),
        (opt_data(), stat())
            .prop_map(|(data, stat)| (O::GetData, Response::GetData { data, stat })),
        (acl(), stat()).prop_map(|(acl, stat)| (O::GetAcl, Response::GetAcl { acl, stat })),
        strings().prop_map(|children| (O::GetChildren, Response::GetChildren { children })),
        (strings(), stat()).prop_map(|(children, stat)| (
            O::GetChildren2,
            Response::GetChildren2 { children, stat }
        )),
        path().prop_map(|path| (O::Sync, Response::Sync { path })),
        vec(multi_result(), 0..6).prop_map(|r| (O::Multi, Response::Multi(r))),
        vec(multi_read_result(), 0..6).prop_map(|r| (O::MultiRead, Response::MultiRead(r))),
        strings().prop_map(|ephemerals| (O::GetEphemerals, Response::GetEphemerals { ephemerals })),
        any::<i32>().prop_map(|total| (
            O::GetAllChildrenNumber,
            Response::GetAllChildrenNumber { total }
        )),
        vec(
            ("[a-z]{0,8}", any::<String>())
                .prop_map(|(auth_scheme, user)| ClientInfo { auth_scheme, user }),
            0..4
        )
        .prop_map(|client_info| (O::WhoAmI, Response::WhoAmI { client_info })),
    ]
}

pub fn connect_request() -> impl Strategy<Value = ConnectRequest> {
    (
        any::<i32>(),
        any::<i64>(),
        any::<i32>(),
        any::<i64>(),
        data(),
        any::<Option<bool>>(),
    )
        .prop_map(
            |(protocol_version, last_zxid_seen, timeout_ms, session_id, passwd, read_only)| {
                ConnectRequest {
                    protocol_version,
                    last_zxid_seen,
                    timeout_ms,
                    session_id,
                    passwd,
                    read_only,
                }
            },
        )
}

pub fn connect_response() -> impl Strategy<Value = ConnectResponse> {
    (
        any::<i32>(),
        any::<i32>(),
        any::<i64>(),
        data(),
        any::<Option<bool>>(),
    )
        .prop_map(
            |(protocol_version, timeout_ms, session_id, passwd, read_only)| ConnectResponse {
                protocol_version,
                timeout_ms,
                session_id,
                passwd,
                read_only,
            },
        )
}

pub fn notification() -> impl Strategy<Value = Notification> {
    (any::<i64>(), any::<i32>(), any::<i32>(), path()).prop_map(
        |(zxid, event_type, state, path)| Notification {
            zxid,
            event: WatcherEvent {
                event_type,
                state,
                path,
            },
        },
    )
}
