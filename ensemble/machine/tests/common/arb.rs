//! proptest strategies for random command streams over a small path alphabet, so that
//! conflicts (NodeExists, NoNode, NotEmpty, BadVersion) are frequent.

use baton_machine::{AlarmKind, CommandKind, Setting};
use baton_proto::{CreateRequest, Id, MultiOp, OpCode, Request, open_acl_unsafe};
use proptest::prelude::*;

use super::{acl, create_full};

/// Sessions the streams use.
pub const SESSIONS: [i64; 3] = [1, 2, 3];

/// "/a", "/a/b", ... up to depth 3 over {a, b, c}.
pub fn path() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!["a", "b", "c"]), 1..=3)
        .prop_map(|segs| format!("/{}", segs.join("/")))
}

/// A path, sometimes with a trailing '/' (valid only for sequential creates).
fn create_path() -> impl Strategy<Value = String> {
    prop_oneof![4 => path(), 1 => path().prop_map(|p| format!("{p}/"))]
}

fn version() -> impl Strategy<Value = i32> {
    prop::sample::select(vec![-1, -1, 0, 1, 2])
}

/// Data, sometimes null (`None`), which must stay apart from empty data.
fn data() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![1 => Just(None), 5 => prop::collection::vec(any::<u8>(), 0..3).prop_map(Some)]
}

/// A multi op; `extended` adds containers and TTL nodes.
fn multi_op(extended: bool) -> impl Strategy<Value = MultiOp> {
    let max_flags = if extended { 5 } else { 4 };
    prop_oneof![
        (create_path(), 0..max_flags, data()).prop_map(|(p, flags, d)| {
            // flags 4 is a container; 5 needs createTTL with a ttl.
            let (op, ttl) = if flags == 5 {
                (OpCode::CreateTtl, Some(50))
            } else {
                (OpCode::Create, None)
            };
            MultiOp::Create {
                op,
                req: CreateRequest {
                    data: d,
                    ..create_full(&p, b"", open_acl_unsafe(), flags, ttl)
                },
            }
        }),
        (path(), version()).prop_map(|(path, version)| MultiOp::Delete(
            baton_proto::DeleteRequest { path, version }
        )),
        (path(), data(), version()).prop_map(|(path, data, version)| MultiOp::SetData(
            baton_proto::SetDataRequest {
                path,
                data,
                version
            }
        )),
        (path(), version()).prop_map(|(path, version)| MultiOp::Check(
            baton_proto::CheckVersionRequest { path, version }
        )),
    ]
}

/// A write request; `extended` adds containers, TTL nodes and setACL.
fn write(extended: bool) -> BoxedStrategy<Request> {
    let max_flags = if extended { 6 } else { 4 };
    let basic = prop_oneof![
        4 => (create_path(), 0..max_flags, data(), any::<bool>()).prop_map(|(p, flags, d, two)| {
            let (op, ttl) = match flags {
                4 => (OpCode::CreateContainer, None),
                5 => (OpCode::CreateTtl, Some(40)),
                _ if two => (OpCode::Create2, None),
                _ => (OpCode::Create, None),
            };
            let req = CreateRequest { data: d, ..create_full(&p, b"", open_acl_unsafe(), flags, ttl) };
            Request::Create { op, req }
        }),
        3 => (path(), version()).prop_map(|(path, version)| Request::Delete(baton_proto::DeleteRequest { path, version })),
        2 => (path(), data(), version())
            .prop_map(|(path, data, version)| Request::SetData(baton_proto::SetDataRequest { path, data, version })),
        1 => (path(), version()).prop_map(|(path, version)| Request::Check(baton_proto::CheckVersionRequest { path, version })),
        2 => prop::collection::vec(multi_op(extended), 0..4).prop_map(Request::Multi),
    ];
    if !extended {
        return basic.boxed();
    }
    prop_oneof![
        8 => basic,
        1 => (path(), version(), any::<bool>()).prop_map(|(path, version, open)| {
            let acl = if open { open_acl_unsafe() } else { vec![acl(31, "auth", "")] };
            Request::SetAcl(baton_proto::SetAclRequest { path, acl, version })
        }),
    ]
    .boxed()
}

/// One entry of a random stream: (session, command). `extended` adds containers, TTLs,
/// ACLs with digest identities and housekeeping entries.
pub fn command(extended: bool) -> BoxedStrategy<(i64, CommandKind)> {
    let session = prop::sample::select(SESSIONS.to_vec());
    let auth = if extended {
        prop::sample::select(vec![vec![], vec![Id::new("digest", "u:h")]]).boxed()
    } else {
        Just(vec![]).boxed()
    };
    let mut choices: Vec<(u32, BoxedStrategy<(i64, CommandKind)>)> = vec![
        (
            20,
            (session.clone(), auth, write(extended))
                .prop_map(|(s, auth, request)| (s, CommandKind::Write { auth, request }))
                .boxed(),
        ),
        (
            1,
            (session.clone(), any::<bool>())
                .prop_map(|(s, expired)| (s, CommandKind::CloseSession { expired }))
                .boxed(),
        ),
        (
            2,
            session
                .prop_map(|s| {
                    (
                        s,
                        CommandKind::CreateSession {
                            timeout_ms: 5000,
                            passwd: vec![s as u8; 16],
                        },
                    )
                })
                .boxed(),
        ),
    ];
    if extended {
        choices.push((
            1,
            path()
                .prop_map(|path| (0, CommandKind::ReapContainer { path }))
                .boxed(),
        ));
        choices.push((
            1,
            path()
                .prop_map(|path| (0, CommandKind::ExpireTtl { path }))
                .boxed(),
        ));
        choices.push((1, Just((0, CommandKind::Noop)).boxed()));
        // Small quotas and alarms, so that refusals happen and must survive snapshots alike.
        choices.push((
            1,
            (any::<bool>(), 3u64..12, 10u64..200, 0u64..3)
                .prop_map(|(initial, znodes, bytes, ephemerals)| {
                    let changes = vec![
                        Setting::SharedZnodes(znodes),
                        Setting::SharedBytes(bytes),
                        Setting::EphemeralsPerSession(ephemerals),
                    ];
                    (0, CommandKind::SetSettings { initial, changes })
                })
                .boxed(),
        ));
        choices.push((
            1,
            (1u64..3, any::<bool>())
                .prop_map(|(member, raised)| {
                    let kind = AlarmKind::NoSpace;
                    (
                        0,
                        CommandKind::Alarm {
                            member,
                            kind,
                            raised,
                        },
                    )
                })
                .boxed(),
        ));
    }
    proptest::strategy::Union::new_weighted(choices).boxed()
}
