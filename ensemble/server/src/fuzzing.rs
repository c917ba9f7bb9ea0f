//! What the fuzz targets (`tests/fuzz/`) and the decoder property tests call: every decoder that
//! reads bytes a peer sent, without a socket. Not an API.

pub use crate::peer::decoders::{hello, message_lane, snapshot_lane};

/// A control payload from a member: decodes or is refused, and what decodes re-encodes to the
/// same bytes.
pub fn control(payload: &[u8]) -> bool {
    match crate::core::Control::decode(payload) {
        Ok(msg) => {
            assert_eq!(
                crate::core::Control::decode(&msg.encode()).as_ref(),
                Ok(&msg),
                "a decoded control message must survive a round trip"
            );
            true
        }
        Err(_) => false,
    }
}

/// A forwarded write as the leader checks it before it may enter the log: `from` and the
/// envelope's session and xid come from the first 16 bytes, the command is the rest.
pub fn forwarded_write(input: &[u8]) -> bool {
    let Some((head, command)) = input.split_first_chunk::<16>() else {
        return false;
    };
    let from = u64::from(head[0]);
    let session_id = i64::from_be_bytes(head[1..9].try_into().expect("8 bytes"));
    let xid = i32::from_be_bytes(head[9..13].try_into().expect("4 bytes"));
    crate::core::check_forwarded(from, session_id, xid, command).is_ok()
}
