//! Raft message framing after the handshake: a 4-byte big-endian length, then that many
//! bytes of protobuf-encoded `eraftpb::Message`. Lengths are checked against a limit before
//! anything is allocated, and the buffer grows only as bytes actually arrive, so a peer
//! cannot make us reserve a huge buffer by announcing one.

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::Message;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Bytes of the length prefix.
pub(crate) const LEN_BYTES: usize = 4;

/// How much of a frame is read before the buffer grows again.
const READ_CHUNK: usize = 1 << 20;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: u64, max: usize },
    #[error("connection closed in the middle of a frame ({got} of {len} bytes)")]
    Truncated { got: usize, len: usize },
    #[error("undecodable Raft message: {0}")]
    Decode(#[source] protobuf::ProtobufError),
    #[error("cannot encode Raft message: {0}")]
    Encode(#[source] protobuf::ProtobufError),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// Appends `msg` as one frame to `buf`; on error `buf` is left as it was.
pub(crate) fn encode_into(
    msg: &Message,
    max: usize,
    buf: &mut Vec<u8>,
) -> Result<usize, FrameError> {
    let len = msg.compute_size() as usize;
    if len > max {
        return Err(FrameError::TooLarge {
            len: len as u64,
            max,
        });
    }
    let start = buf.len();
    buf.reserve(LEN_BYTES + len);
    buf.extend_from_slice(&(len as u32).to_be_bytes());
    if let Err(e) = msg.write_to_vec(buf) {
        buf.truncate(start);
        return Err(FrameError::Encode(e));
    }
    Ok(buf.len() - start)
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

/// Decodes a frame's payload; snapshot data shares the frame's buffer rather than being copied.
pub(crate) fn decode(payload: &Bytes) -> Result<Message, FrameError> {
    Message::parse_from_carllerche_bytes(payload).map_err(FrameError::Decode)
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
        assert!(matches!(decode(&payload), Err(FrameError::Decode(_))));
    }
}
