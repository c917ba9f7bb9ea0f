//! Framing after the handshake: a 4-byte big-endian length, then that many bytes. On the
//! message lane the bytes are a kind tag (`KIND_RAFT`, `KIND_CONTROL`) followed by a
//! protobuf-encoded `eraftpb::Message` or an opaque control payload; on the snapshot lane
//! they are the protobuf `MsgSnapshot` alone. The length (tag included) is checked against a
//! limit before anything is allocated, and the buffer grows only as bytes actually arrive,
//! so a peer cannot make us reserve a huge buffer by announcing one.

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::Message;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Bytes of the length prefix.
pub(crate) const LEN_BYTES: usize = 4;
/// Bytes of the kind tag that starts every message-lane frame.
pub(crate) const TAG_BYTES: usize = 1;

/// How much of a frame is read before the buffer grows again.
const READ_CHUNK: usize = 1 << 20;
/// Kind tag of a message-lane frame carrying a Raft message.
pub(crate) const KIND_RAFT: u8 = 0;
/// Kind tag of a message-lane frame carrying a control payload.
pub(crate) const KIND_CONTROL: u8 = 1;

/// What one frame on the message lane carries.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Envelope {
    Raft(Message),
    /// The ensemble's own member-to-member messages, opaque to the transport.
    Control(Bytes),
}

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: u64, max: usize },
    #[error("connection closed in the middle of a frame ({got} of {len} bytes)")]
    Truncated { got: usize, len: usize },
    #[error("empty frame on the message lane (no kind tag)")]
    Untagged,
    #[error("unknown frame kind {0} on the message lane")]
    UnknownKind(u8),
    #[error("Raft message refused before parsing: {0}")]
    Unsafe(#[source] super::protobuf_guard::GuardError),
    #[error("undecodable Raft message: {0}")]
    Decode(#[source] protobuf::ProtobufError),
    #[error("cannot encode Raft message: {0}")]
    Encode(#[source] protobuf::ProtobufError),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// Appends `msg` as one untagged frame (the snapshot lane's format) to `buf`; on error
/// `buf` is left as it was.
pub(crate) fn encode_into(
    msg: &Message,
    max: usize,
    buf: &mut Vec<u8>,
) -> Result<usize, FrameError> {
    encode_raft(None, msg, max, buf)
}

/// Appends `envelope` as one message-lane frame to `buf`; `max` bounds the frame's length,
/// kind tag included. On error `buf` is left as it was.
pub(crate) fn encode_envelope(
    envelope: &Envelope,
    max: usize,
    buf: &mut Vec<u8>,
) -> Result<usize, FrameError> {
    let payload = match envelope {
        Envelope::Raft(msg) => return encode_raft(Some(KIND_RAFT), msg, max, buf),
        Envelope::Control(payload) => payload,
    };
    let len = TAG_BYTES + payload.len();
    check_len(len, max)?;
    let start = buf.len();
    buf.reserve(LEN_BYTES + len);
    buf.extend_from_slice(&(len as u32).to_be_bytes());
    buf.push(KIND_CONTROL);
    buf.extend_from_slice(payload);
    Ok(buf.len() - start)
}

fn encode_raft(
    tag: Option<u8>,
    msg: &Message,
    max: usize,
    buf: &mut Vec<u8>,
) -> Result<usize, FrameError> {
    let tag_bytes = if tag.is_some() { TAG_BYTES } else { 0 };
    let len = tag_bytes + msg.compute_size() as usize;
    check_len(len, max)?;
    let start = buf.len();
    buf.reserve(LEN_BYTES + len);
    buf.extend_from_slice(&(len as u32).to_be_bytes());
    buf.extend(tag);
    if let Err(e) = msg.write_to_vec(buf) {
        buf.truncate(start);
        return Err(FrameError::Encode(e));
    }
    Ok(buf.len() - start)
}

/// `max` never exceeds `u32::MAX` (checked at start), so a length that passes fits the prefix.
fn check_len(len: usize, max: usize) -> Result<(), FrameError> {
    if len > max {
        return Err(FrameError::TooLarge {
            len: len as u64,
            max,
        });
    }
    Ok(())
}

/// Reads one frame. `Ok(None)` is a clean end of stream between frames.
pub(crate) async fn read_frame<R>(rd: &mut R, max: usize) -> Result<Option<Bytes>, FrameError>
where
    R: AsyncRead + Unpin,
{
    let mut len_buf = [0u8; LEN_BYTES];
    let mut got = 0;
    while got < LEN_BYTES {
        match rd.read(&mut len_buf[got..]).await? {
            0 if got == 0 => return Ok(None),
            0 => {
                return Err(FrameError::Truncated {
                    got,
                    len: LEN_BYTES,
                });
            }
            n => got += n,
        }
    }
    let len = u32::from_be_bytes(len_buf) as usize;
    if len > max {
        return Err(FrameError::TooLarge {
            len: len as u64,
            max,
        });
    }
    let mut payload = Vec::with_capacity(len.min(READ_CHUNK));
    while payload.len() < len {
        let want = (len - payload.len()).min(READ_CHUNK);
        payload.reserve(want);
        let n = (&mut *rd).take(want as u64).read_buf(&mut payload).await?;
        if n == 0 {
            return Err(FrameError::Truncated {
                got: payload.len(),
                len,
            });
        }
    }
    Ok(Some(Bytes::from(payload)))
}

/// Decodes an untagged frame's payload; snapshot data shares the frame's buffer rather than
/// being copied.
pub(crate) fn decode(payload: &Bytes) -> Result<Message, FrameError> {
    super::protobuf_guard::check_raft_message(payload).map_err(FrameError::Unsafe)?;
    Message::parse_from_carllerche_bytes(payload).map_err(FrameError::Decode)
}

/// Decodes a message-lane frame's payload; a control payload shares the frame's buffer.
pub(crate) fn decode_envelope(payload: &Bytes) -> Result<Envelope, FrameError> {
    let Some(&kind) = payload.first() else {
        return Err(FrameError::Untagged);
    };
    let body = payload.slice(TAG_BYTES..);
    match kind {
        KIND_RAFT => decode(&body).map(Envelope::Raft),
        KIND_CONTROL => Ok(Envelope::Control(body)),
        other => Err(FrameError::UnknownKind(other)),
    }
}

#[cfg(test)]
mod tests {
    use raft::eraftpb::MessageType;

    use super::*;

    fn heartbeat(from: u64, to: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.from = from;
        m.to = to;
        m.term = 7;
        m
    }

    #[tokio::test]
    async fn peer_frames_round_trip_and_end_cleanly() {
        let mut buf = Vec::new();
        encode_into(&heartbeat(1, 2), 1024, &mut buf).unwrap();
        encode_into(&heartbeat(2, 1), 1024, &mut buf).unwrap();
        let mut rd = &buf[..];
        let a = decode(&read_frame(&mut rd, 1024).await.unwrap().unwrap()).unwrap();
        let b = decode(&read_frame(&mut rd, 1024).await.unwrap().unwrap()).unwrap();
        assert_eq!((a.from, a.to, a.term), (1, 2, 7));
        assert_eq!((b.from, b.to), (2, 1));
        assert!(read_frame(&mut rd, 1024).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn peer_frame_limits_apply_on_both_ends() {
        let mut m = heartbeat(1, 2);
        m.context = Bytes::from(vec![0u8; 100]);
        let mut buf = vec![9];
        assert!(matches!(
            encode_into(&m, 50, &mut buf),
            Err(FrameError::TooLarge { .. })
        ));
        assert_eq!(buf, vec![9], "a refused frame leaves the buffer untouched");

        let huge = (u32::MAX).to_be_bytes();
        let mut rd = &huge[..];
        assert!(matches!(
            read_frame(&mut rd, 1 << 20).await,
            Err(FrameError::TooLarge { .. })
        ));

        let mut short = 10u32.to_be_bytes().to_vec();
        short.extend_from_slice(&[1, 2, 3]);
        let mut rd = &short[..];
        assert!(matches!(
            read_frame(&mut rd, 1024).await,
            Err(FrameError::Truncated { got: 3, len: 10 })
        ));

        let mut garbage = 3u32.to_be_bytes().to_vec();
        garbage.extend_from_slice(&[0xff, 0xff, 0xff]);
        let mut rd = &garbage[..];
        let payload = read_frame(&mut rd, 1024).await.unwrap().unwrap();
        assert!(matches!(
            decode(&payload),
            Err(FrameError::Decode(_) | FrameError::Unsafe(_))
        ));
    }

    #[tokio::test]
    async fn peer_envelopes_round_trip_with_their_kind_tag() {
        let sent = [
            Envelope::Raft(heartbeat(1, 2)),
            Envelope::Control(Bytes::from_static(b"forwarded write")),
            Envelope::Control(Bytes::new()),
        ];
        let mut buf = Vec::new();
        for envelope in &sent {
            encode_envelope(envelope, 1024, &mut buf).unwrap();
        }
        assert_eq!(&buf[LEN_BYTES..LEN_BYTES + 1], &[KIND_RAFT]);
        let mut rd = &buf[..];
        for envelope in &sent {
            let payload = read_frame(&mut rd, 1024).await.unwrap().unwrap();
            assert_eq!(&decode_envelope(&payload).unwrap(), envelope);
        }
        assert!(read_frame(&mut rd, 1024).await.unwrap().is_none());
    }

    #[test]
    fn peer_envelope_limit_counts_the_tag_and_unknown_kinds_are_refused() {
        let mut buf = Vec::new();
        let fits = Envelope::Control(Bytes::from(vec![1u8; 99]));
        assert_eq!(
            encode_envelope(&fits, 100, &mut buf).unwrap(),
            LEN_BYTES + 100
        );
        let over = Envelope::Control(Bytes::from(vec![1u8; 100]));
        assert!(matches!(
            encode_envelope(&over, 100, &mut buf),
            Err(FrameError::TooLarge { len: 101, max: 100 })
        ));
        assert_eq!(
            buf.len(),
            LEN_BYTES + 100,
            "a refused frame leaves the buffer untouched"
        );

        assert!(matches!(
            decode_envelope(&Bytes::new()),
            Err(FrameError::Untagged)
        ));
        assert!(matches!(
            decode_envelope(&Bytes::from_static(&[7, 1, 2])),
            Err(FrameError::UnknownKind(7))
        ));
        assert!(matches!(
            decode_envelope(&Bytes::from_static(&[KIND_RAFT, 0xff, 0xff])),
            Err(FrameError::Decode(_) | FrameError::Unsafe(_))
        ));
    }
}
