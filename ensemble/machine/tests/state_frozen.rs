//! A frozen copy (`StateMachine::freeze`, what a snapshot taken off the core thread
//! serializes) is exactly the state at its index, however the live state changes after it,
//! and the live state is unharmed by the sharing.

mod common;

use baton_machine::{Command, CommandKind, FrozenState, StateMachine};
use baton_proto::{Id, Request};
use common::*;
use proptest::prelude::*;

fn feed(sm: &mut StateMachine, first_zxid: i64, cmds: &[(i64, CommandKind)]) {
    for (i, (session_id, kind)) in cmds.iter().enumerate() {
        let zxid = first_zxid + i as i64;
        let cmd = Command {
            session_id: *session_id,
            xid: zxid as i32,
            time_ms: START_MS + zxid * 7,
            kind: kind.clone(),
        };
        sm.apply(zxid, &cmd);
    }
}

fn stream(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<(i64, CommandKind)>> {
    prop::collection::vec(arb::command(true), len)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_frozen_copy_is_the_state_at_its_index(
        prefix in stream(0..80),
        suffix in stream(0..60),
        more in stream(0..30),
    ) {
        let mut live = StateMachine::new();
        feed(&mut live, 1, &prefix);
        let frozen = live.freeze();
        // Writes go on while the copy waits to be serialized, and a second copy is taken
        // in between, as a backup may be while a periodic snapshot is still being written.
        feed(&mut live, prefix.len() as i64 + 1, &suffix);
        let second = live.freeze();
        feed(&mut live, (prefix.len() + suffix.len()) as i64 + 1, &more);

        let mut only_prefix = StateMachine::new();
        feed(&mut only_prefix, 1, &prefix);
        prop_assert_eq!(frozen.last_applied(), only_prefix.last_applied());
        prop_assert_eq!(frozen.to_bytes(), only_prefix.snapshot());
        let mut through_suffix = StateMachine::new();
        feed(&mut through_suffix, 1, &prefix);
        feed(&mut through_suffix, prefix.len() as i64 + 1, &suffix);
        prop_assert_eq!(second.to_bytes(), through_suffix.snapshot());

        // The live state is what an unshared machine fed the same entries has.
        let mut unshared = StateMachine::new();
        feed(&mut unshared, 1, &prefix);
        feed(&mut unshared, prefix.len() as i64 + 1, &suffix);
        feed(&mut unshared, (prefix.len() + suffix.len()) as i64 + 1, &more);
        prop_assert_eq!(live.snapshot(), unshared.snapshot());
        prop_assert_eq!(live.tree().distinct_acls(), unshared.tree().distinct_acls());
        prop_assert_eq!(live.approximate_data_size(), unshared.approximate_data_size());

        // And the copy restores to a machine that goes on exactly as the live one did.
        let mut restored = StateMachine::restore(&frozen.to_bytes()).expect("restore");
        feed(&mut restored, prefix.len() as i64 + 1, &suffix);
        feed(&mut restored, (prefix.len() + suffix.len()) as i64 + 1, &more);
        prop_assert_eq!(restored.snapshot(), live.snapshot());
    }
}

/// A directory large enough for its child set to be persistent, changed in every way after
/// the copy: creates, deletes, data, ACLs, ephemerals of a session that closes.
#[test]
fn a_big_directory_changed_after_the_copy() {
    let mut h = Harness::with_sessions();
    h.mk("/big");
    for i in 0..300 {
        h.mk(&format!("/big/n{i:03}"));
    }
    h.write_as(2, &[], create("/big/e", 1));
    let frozen = h.sm.freeze();
    let expected = h.sm.snapshot();
    let children_then = h.children("/big");

    for i in (0..300).step_by(2) {
        h.write(delete(&format!("/big/n{i:03}"), -1));
    }
    for i in 300..400 {
        h.mk(&format!("/big/n{i:03}"));
    }
    h.write(set_data("/big/n001", b"changed", -1));
    let digest = vec![acl(31, "digest", "u:h")];
    h.write(set_acl("/big/n003", digest, -1));
    h.close(2);

    assert_eq!(frozen.to_bytes(), expected);
    assert_eq!(frozen.node_count(), 1 + 4 + 301);
    let restored = StateMachine::restore(&frozen.to_bytes()).expect("restore");
    let listed = restored.read(1, &[], &Request::GetChildren(pw("/big")));
    assert_eq!(
        listed,
        Ok(baton_proto::Response::GetChildren {
            children: children_then
        })
    );
    assert_eq!(h.children("/big").len(), 150 + 100);
    assert!(h.sm.stat("/big/e").is_none());
    assert_eq!(h.sm.tree().distinct_acls(), 3);
    drop(frozen);
    // The ACL the copy still held is counted by the tree's nodes only.
    let owner = [Id::new("digest", "u:h")];
    assert_eq!(
        err(&h.write_as(1, &owner, set_acl("/big/n003", open_acl(), -1))),
        None
    );
    assert_eq!(h.sm.tree().distinct_acls(), 2);
}

fn open_acl() -> Vec<baton_proto::Acl> {
    baton_proto::open_acl_unsafe()
}

#[test]
fn a_frozen_copy_can_go_to_another_thread() {
    fn send_and_share<T: Send + Sync + 'static>() {}
    send_and_share::<FrozenState>();
    let mut h = Harness::with_sessions();
    h.mk("/t");
    let frozen = h.sm.freeze();
    let expected = h.sm.snapshot();
    h.write(delete("/t", -1));
    let bytes = std::thread::spawn(move || frozen.to_bytes())
        .join()
        .expect("serialize");
    assert_eq!(bytes, expected);
}
