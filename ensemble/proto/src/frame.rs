//! Length-prefixed framing with a size limit (`jute.maxbuffer`), and the four-letter-word
//! sniffing ZooKeeper does on a connection's first four bytes.
//!
//! Every frame is a big-endian `i32` payload length followed by the payload. ZooKeeper's server
//! (`NIOServerCnxn.readLength`) closes the connection when that length is negative or above
//! `jute.maxbuffer`; [`FrameDecoder`] reports both as errors before buffering anything.

use bytes::{Buf, Bytes, BytesMut};
use thiserror::Error;

use crate::jute::Writer;

/// Default largest frame payload accepted: ZooKeeper's `jute.maxbuffer` default, `0xfffff`
/// (1 MiB - 1). ZooKeeper 3.8 accepts a 1,048,575-byte length and closes on 1,048,576.
pub const DEFAULT_MAX_FRAME: usize = 0xfffff;

/// The size of a frame's length prefix.
pub const LENGTH_PREFIX: usize = 4;

/// Why a byte stream cannot be split into frames; the connection must be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FrameError {
    #[error("frame length {len} exceeds the maximum of {max} bytes (jute.maxbuffer)")]
    TooLarge { len: usize, max: usize },
    #[error("negative frame length {len}")]
    Negative { len: i32 },
}

/// Splits a byte stream into frame payloads; never buffers more than `max` bytes per frame.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    max: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        FrameDecoder::new(DEFAULT_MAX_FRAME)
    }
}

impl FrameDecoder {
    /// A decoder that refuses payloads longer than `max` bytes.
    pub fn new(max: usize) -> Self {
        FrameDecoder { max }
    }

    /// The largest payload this decoder accepts.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Takes the next complete frame's payload off the front of `buf`, or returns `None` (and
    /// reserves room for the rest of the frame) when more bytes are needed.
    ///
    /// The length is checked as soon as its four bytes arrive, so a hostile length fails fast
    /// and never drives an allocation. After an error `buf` is left as it was.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let Some(prefix) = buf.first_chunk::<LENGTH_PREFIX>() else {
            return Ok(None);
        };
        let len = i32::from_be_bytes(*prefix);
        let payload = usize::try_from(len).map_err(|_| FrameError::Negative { len })?;
        if payload > self.max {
            return Err(FrameError::TooLarge {
                len: payload,
                max: self.max,
            });
        }
        let total = LENGTH_PREFIX + payload;
        if buf.len() < total {
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        buf.advance(LENGTH_PREFIX);
        Ok(Some(buf.split_to(payload).freeze()))
    }
}

/// Where a frame's length prefix was reserved in a [`Writer`], to be back-filled by
/// [`end_frame`].
#[derive(Debug)]
#[must_use = "a begun frame must be finished with end_frame"]
pub struct FrameStart(usize);

/// Reserves a frame's length prefix at the end of `w`; write the payload, then [`end_frame`].
pub fn begin_frame(w: &mut Writer) -> FrameStart {
    let at = w.len();
    w.write_i32(0);
    FrameStart(at)
}

/// Back-fills the length prefix reserved by [`begin_frame`] with the payload written since.
pub fn end_frame(w: &mut Writer, start: FrameStart) {
    let payload = w.len() - start.0 - LENGTH_PREFIX;
    // Payloads are bounded far below 2 GiB by the caller's records; saturate rather than wrap.
    w.patch_i32(start.0, i32::try_from(payload).unwrap_or(i32::MAX));
}

/// Appends one whole frame to `w` (several frames may share one writer), with no extra copy.
pub fn write_frame(w: &mut Writer, payload: impl FnOnce(&mut Writer)) {
    let start = begin_frame(w);
    payload(w);
    end_frame(w, start);
}

/// ZooKeeper's four-letter words (`FourLetterCommands` in 3.8). Sent raw, without a length
/// prefix, as a connection's first bytes; read as a length each is far above any sane maximum
/// (`ruok` is 1,920,298,859), so sniffing them is unambiguous.
pub const FOUR_LETTER_WORDS: [&str; 18] = [
    "conf", "cons", "crst", "dirs", "dump", "envi", "gtmk", "hash", "isro", "mntr", "ruok", "srst",
    "srvr", "stat", "stmk", "wchc", "wchp", "wchs",
];

/// Recognises a four-letter word in a connection's first four bytes, as ZooKeeper does before
/// reading the first frame. `stmk` is followed by an 8-byte trace mask, the others by nothing.
pub fn four_letter_word(first4: &[u8; 4]) -> Option<&'static str> {
    FOUR_LETTER_WORDS
        .iter()
        .copied()
        .find(|word| word.as_bytes() == first4)
}
