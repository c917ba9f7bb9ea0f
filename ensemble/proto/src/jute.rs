//! Jute's binary encoding: big-endian integers, length-prefixed buffers, strings and vectors
//! (a length of -1 means null). A null string or buffer reads as empty, except where ZooKeeper
//! keeps null apart and clients can see it: znode data, read with `read_opt_buffer`.

use thiserror::Error;

/// Why a record could not be decoded. Decoding never panics on any input.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("record truncated: needed {needed} more bytes at offset {offset}")]
    Truncated { offset: usize, needed: usize },
    #[error("negative or oversized length {len} at offset {offset}")]
    BadLength { offset: usize, len: i32 },
    #[error("string at offset {offset} is not valid UTF-8")]
    BadUtf8 { offset: usize },
    #[error("unknown opcode {0}")]
    UnknownOpCode(i32),
    #[error("invalid value {value} for {field}")]
    BadValue { field: &'static str, value: i32 },
    #[error("{0} trailing bytes after the record")]
    TrailingBytes(usize),
}

/// Reads jute primitives from a byte slice, tracking the offset for error messages.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(DecodeError::TrailingBytes(n)),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Truncated {
                offset: self.pos,
                needed: n - self.remaining(),
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    pub fn read_i32(&mut self) -> Result<i32, DecodeError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn read_i64(&mut self) -> Result<i64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    pub fn read_bool(&mut self) -> Result<bool, DecodeError> {
        Ok(self.take(1)?[0] != 0)
    }

    /// A string or buffer length: -1 (null) reads as 0; any other negative value is an error,
    /// as in jute's `checkLength`, and so is one larger than the bytes left (so a hostile
    /// length never drives an allocation).
    fn read_len(&mut self) -> Result<usize, DecodeError> {
        let offset = self.pos;
        let len = self.read_i32()?;
        if len == -1 {
            return Ok(0);
        }
        match usize::try_from(len) {
            Ok(n) if n <= self.remaining() => Ok(n),
            _ => Err(DecodeError::BadLength { offset, len }),
        }
    }

    pub fn read_buffer(&mut self) -> Result<Vec<u8>, DecodeError> {
        let len = self.read_len()?;
        Ok(self.take(len)?.to_vec())
    }

    /// A buffer that may be null (length -1, `None`), kept apart from an empty one.
    pub fn read_opt_buffer(&mut self) -> Result<Option<Vec<u8>>, DecodeError> {
        let at = self.pos;
        if self.read_i32()? == -1 {
            return Ok(None);
        }
        self.pos = at;
        self.read_buffer().map(Some)
    }

    pub fn read_string(&mut self) -> Result<String, DecodeError> {
        let len = self.read_len()?;
        let offset = self.pos;
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| DecodeError::BadUtf8 { offset })
    }

    /// A vector whose elements are each at least `min_elem_size` bytes on the wire.
    ///
    /// Any negative count reads as empty: jute's `BinaryIndex` loops while `nelems > 0`, so
    /// ZooKeeper accepts such vectors too. A count larger than the bytes left is an error before
    /// anything is allocated.
    pub fn read_vec<T>(
        &mut self,
        min_elem_size: usize,
        mut elem: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let offset = self.pos;
        let count = self.read_i32()?;
        let Ok(n) = usize::try_from(count) else {
            return Ok(Vec::new());
        };
        if n.saturating_mul(min_elem_size.max(1)) > self.remaining() {
            return Err(DecodeError::BadLength { offset, len: count });
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(elem(self)?);
        }
        Ok(out)
    }
}

/// Writes jute primitives into a growable buffer.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer::default()
    }

    pub fn with_capacity(n: usize) -> Self {
        Writer {
            buf: Vec::with_capacity(n),
        }
    }

    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn write_i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn write_i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn write_bool(&mut self, v: bool) {
        self.buf.push(v as u8);
    }

    pub fn write_buffer(&mut self, v: &[u8]) {
        self.write_i32(v.len() as i32);
        self.buf.extend_from_slice(v);
    }

    /// A buffer that may be null: `None` is written as length -1.
    pub fn write_opt_buffer(&mut self, v: Option<&[u8]>) {
        match v {
            Some(v) => self.write_buffer(v),
            None => self.write_i32(-1),
        }
    }

    pub fn write_string(&mut self, v: &str) {
        self.write_buffer(v.as_bytes());
    }

    pub fn write_vec<T>(&mut self, items: &[T], mut elem: impl FnMut(&mut Self, &T)) {
        self.write_i32(items.len() as i32);
        for item in items {
            elem(self, item);
        }
    }

    /// Overwrites 4 bytes at `at` (used to back-fill a frame length).
    pub fn patch_i32(&mut self, at: usize, v: i32) {
        self.buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_buffers_stay_apart_from_empty_ones() {
        let mut w = Writer::new();
        w.write_opt_buffer(None);
        w.write_opt_buffer(Some(b""));
        w.write_opt_buffer(Some(b"ab"));
        w.write_i32(-1);
        let bytes = w.into_inner();
        assert_eq!(&bytes[..8], &[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        let mut r = Reader::new(&bytes);
        assert_eq!(r.read_opt_buffer(), Ok(None));
        assert_eq!(r.read_opt_buffer(), Ok(Some(Vec::new())));
        assert_eq!(r.read_opt_buffer(), Ok(Some(b"ab".to_vec())));
        // Where null does not matter, it reads as empty, as before.
        assert_eq!(r.read_buffer(), Ok(Vec::new()));
        r.finish().expect("all read");
    }

    #[test]
    fn other_negative_lengths_are_refused() {
        let bytes = (-2i32).to_be_bytes();
        assert_eq!(
            Reader::new(&bytes).read_opt_buffer(),
            Err(DecodeError::BadLength { offset: 0, len: -2 })
        );
        assert!(matches!(
            Reader::new(&[0xff, 0xff]).read_opt_buffer(),
            Err(DecodeError::Truncated { .. })
        ));
    }
}
