//! A schema-aware walk over a Raft message's protobuf bytes before protobuf 2.28 parses them.
//! That parser recurses without limit when it skips unknown *group* fields (RUSTSEC-2024-0437):
//! a few kilobytes of nested group tags overflow the stack, an abort rather than a panic. No
//! field of `eraftpb` is a group, so any group tag is refused here, at every level the parser
//! will descend into, and nesting deeper than the schema allows is refused too. Only members
//! can reach this (mutual TLS comes first), so this is defence in depth against a member
//! whose software is broken or taken over.

/// Why bytes were refused before parsing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    #[error("protobuf group field {field} (wire type {wire_type}): eraftpb has none")]
    Group { field: u32, wire_type: u8 },
    #[error("malformed protobuf: {0}")]
    Malformed(&'static str),
}

/// The messages of `eraftpb` that contain other messages, by which field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Schema {
    Message,
    Entry,
    Snapshot,
    SnapshotMetadata,
    ConfState,
}

impl Schema {
    /// The message type of field `field`, if it is an embedded message.
    fn child(self, field: u32) -> Option<Schema> {
        match (self, field) {
            (Schema::Message, 7) => Some(Schema::Entry),
            (Schema::Message, 9) => Some(Schema::Snapshot),
            (Schema::Snapshot, 2) => Some(Schema::SnapshotMetadata),
            (Schema::SnapshotMetadata, 1) => Some(Schema::ConfState),
            _ => None,
        }
    }
}

/// Checks that `bytes` can be handed to protobuf's `eraftpb::Message` parser without meeting
/// a group field; says nothing else about whether they parse.
pub fn check_raft_message(bytes: &[u8]) -> Result<(), GuardError> {
    walk(bytes, Schema::Message)
}

fn walk(mut bytes: &[u8], schema: Schema) -> Result<(), GuardError> {
    while !bytes.is_empty() {
        let tag = varint(&mut bytes)?;
        let field = u32::try_from(tag >> 3).map_err(|_| GuardError::Malformed("field number"))?;
        let wire_type = (tag & 7) as u8;
        match wire_type {
            0 => {
                varint(&mut bytes)?;
            }
            1 => bytes = skip(bytes, 8)?,
            5 => bytes = skip(bytes, 4)?,
            2 => {
                let len = usize::try_from(varint(&mut bytes)?)
                    .map_err(|_| GuardError::Malformed("length"))?;
                if len > bytes.len() {
                    return Err(GuardError::Malformed("length past the end"));
                }
                let (inner, rest) = bytes.split_at(len);
                if let Some(child) = schema.child(field) {
                    walk(inner, child)?;
                }
                bytes = rest;
            }
            3 | 4 => return Err(GuardError::Group { field, wire_type }),
            _ => return Err(GuardError::Malformed("wire type")),
        }
    }
    Ok(())
}

fn skip(bytes: &[u8], n: usize) -> Result<&[u8], GuardError> {
    bytes
        .get(n..)
        .ok_or(GuardError::Malformed("truncated fixed-width field"))
}

fn varint(bytes: &mut &[u8]) -> Result<u64, GuardError> {
    let mut value = 0u64;
    for i in 0..10 {
        let (&b, rest) = bytes
            .split_first()
            .ok_or(GuardError::Malformed("truncated varint"))?;
        *bytes = rest;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(GuardError::Malformed("varint longer than 10 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use protobuf::Message as _;
    use raft::eraftpb::{ConfState, Entry, Message, MessageType, Snapshot};

    fn full_message() -> Message {
        let mut msg = Message::default();
        msg.set_msg_type(MessageType::MsgSnapshot);
        msg.to = 2;
        msg.from = 1;
        msg.term = 7;
        let entry = Entry {
            data: vec![1, 2, 3].into(),
            context: vec![4].into(),
            ..Default::default()
        };
        msg.entries = vec![entry.clone(), entry].into();
        let mut snap = Snapshot {
            data: vec![9; 100].into(),
            ..Default::default()
        };
        let cs = ConfState {
            voters: vec![1, 2, 3],
            learners: vec![4],
            ..Default::default()
        };
        snap.mut_metadata().set_conf_state(cs);
        snap.mut_metadata().index = 10;
        msg.set_snapshot(snap);
        msg.context = vec![5; 10].into();
        msg.priority = -3;
        msg
    }

    #[test]
    fn every_real_message_passes() {
        let bytes = full_message().write_to_bytes().unwrap();
        assert_eq!(check_raft_message(&bytes), Ok(()));
        assert_eq!(check_raft_message(&[]), Ok(()));
    }

    #[test]
    fn nested_groups_are_refused_at_any_level() {
        // The advisory's shape: start-group tags nested thousands deep.
        let bomb: Vec<u8> = std::iter::repeat_n(0x0b, 100_000).collect(); // field 1, wire type 3
        assert!(matches!(
            check_raft_message(&bomb),
            Err(GuardError::Group { .. })
        ));
        // The same inside an entry (field 7 of Message), where the parser descends.
        let mut inside = vec![0x3a, 3];
        inside.extend_from_slice(&[0x0b, 0x0b, 0x0b]);
        assert!(matches!(
            check_raft_message(&inside),
            Err(GuardError::Group { .. })
        ));
        // Inside a bytes field it is just data, as it is to the parser.
        let mut data = vec![0x62, 3];
        data.extend_from_slice(&[0x0b, 0x0b, 0x0b]);
        assert_eq!(check_raft_message(&data), Ok(()));
    }

    #[test]
    fn malformed_framing_is_refused() {
        assert!(check_raft_message(&[0x3a, 5, 1]).is_err()); // length past the end
        assert!(check_raft_message(&[0x08]).is_err()); // truncated varint
        assert!(
            check_raft_message(&[
                0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
            ])
            .is_err()
        );
        assert!(check_raft_message(&[0x0e]).is_err()); // wire type 6
    }
}
