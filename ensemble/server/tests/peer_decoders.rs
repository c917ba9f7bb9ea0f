//! Every decoder that reads what a peer sent (hello, message- and snapshot-lane frames, control
//! payloads, forwarded writes) takes arbitrary bytes without a panic, a hang or an abort. The
//! cargo-fuzz target `peer` (tests/fuzz/) drives the same entry points for longer runs.

use baton_ensemble::fuzzing;
use proptest::prelude::*;

/// Protobuf tags of a group (wire types 3 and 4) for field `field`.
fn group_tags(field: u8, depth: usize) -> Vec<u8> {
    std::iter::repeat_n((field << 3) | 3, depth).collect()
}

#[test]
fn nested_protobuf_groups_are_refused_not_a_stack_overflow() {
    // RUSTSEC-2024-0437's shape, at the top and inside an entry (field 7 of Message): protobuf
    // 2.28 would recurse once per tag. A guard refuses them; the thread's stack stays whole.
    for depth in [10, 10_000, 1_000_000] {
        let mut top = vec![0u8]; // KIND_RAFT
        top.extend(group_tags(15, depth));
        assert!(fuzzing::message_lane(&top).is_err());
        assert!(fuzzing::snapshot_lane(&top[1..]).is_err());

        let inner = group_tags(1, depth);
        let mut entry = vec![0u8, 0x3a];
        let mut len = inner.len();
        while len >= 0x80 {
            entry.push((len as u8 & 0x7f) | 0x80);
            len >>= 7;
        }
        entry.push(len as u8);
        entry.extend(inner);
        assert!(fuzzing::message_lane(&entry).is_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn peer_decoders_take_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = fuzzing::message_lane(&bytes);
        let _ = fuzzing::snapshot_lane(&bytes);
        let _ = fuzzing::hello(&bytes);
        fuzzing::control(&bytes);
        fuzzing::forwarded_write(&bytes);
    }

    #[test]
    fn control_payloads_with_a_known_kind_take_any_body(
        kind in 1i32..=6,
        body in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut payload = kind.to_be_bytes().to_vec();
        payload.extend(body);
        fuzzing::control(&payload);
    }

    #[test]
    fn hellos_with_the_right_magic_take_any_rest(rest in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut hello = b"BTNP\x00\x02".to_vec();
        hello.extend(rest);
        let _ = fuzzing::hello(&hello);
    }
}
