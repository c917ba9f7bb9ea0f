//! Record framing of a segment: `[len u32][kind u8][payload crc32 u32][header crc32 u32][payload]`,
//! little-endian.
//!
//! The header has its own checksum so that a damaged length is detected as damage instead of being
//! trusted (a flipped high bit would otherwise look like a record running past the end of the file,
//! which is what a torn write looks like). Each `persist` call is exactly one record, so a crash
//! mid-write damages at most the final record, and nothing valid can follow the damage. That gives
//! the rule the replay applies: damage with no valid record after it is a torn tail; damage followed
//! by a valid record is corruption of acknowledged data.

/// Bytes in a record header.
pub(crate) const HEADER_LEN: usize = 13;

/// Largest payload we write or accept; a bound on what a corrupt-but-checksummed length can ask for.
pub(crate) const MAX_PAYLOAD: usize = 1 << 30;

/// One decoded record: where it starts in the file, its kind, and its payload.
#[derive(Debug)]
pub(crate) struct Record<'a> {
    pub offset: usize,
    pub kind: u8,
    pub payload: &'a [u8],
}

/// Why decoding stopped before the end of the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damage {
    pub offset: usize,
    pub reason: String,
}

/// Appends one framed record to `out`.
pub(crate) fn encode(kind: u8, payload: &[u8], out: &mut Vec<u8>) {
    debug_assert!(payload.len() <= MAX_PAYLOAD);
    let mut header = [0u8; HEADER_LEN];
    header[0..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    header[4] = kind;
    header[5..9].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
    let header_crc = crc32fast::hash(&header[..9]);
    header[9..13].copy_from_slice(&header_crc.to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(payload);
}

/// Decodes the record at `offset`, or says why there is no valid record there.
pub(crate) fn decode_at(buf: &[u8], offset: usize) -> Result<Record<'_>, Damage> {
    let damage = |reason: String| Damage { offset, reason };
    let rest = buf.get(offset..).unwrap_or_default();
    let Some(header) = rest.get(..HEADER_LEN) else {
        return Err(damage(format!(
            "incomplete record header ({} of {HEADER_LEN} bytes)",
            rest.len()
        )));
    };
    let field = |at: usize| {
        u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    if crc32fast::hash(&header[..9]) != field(9) {
        return Err(damage("record header checksum mismatch".to_string()));
    }
    let len = field(0) as usize;
    if len > MAX_PAYLOAD {
        return Err(damage(format!(
            "record length {len} exceeds the maximum {MAX_PAYLOAD}"
        )));
    }
    let Some(payload) = rest.get(HEADER_LEN..HEADER_LEN + len) else {
        return Err(damage(format!(
            "record of {len} bytes extends past the end of the file ({} bytes remain)",
            rest.len() - HEADER_LEN
        )));
    };
    if crc32fast::hash(payload) != field(5) {
        return Err(damage("record payload checksum mismatch".to_string()));
    }
    Ok(Record {
        offset,
        kind: header[4],
        payload,
    })
}

/// Decodes records from `start` until the end of `buf` or the first damage.
pub(crate) fn decode_all(buf: &[u8], start: usize) -> (Vec<Record<'_>>, Option<Damage>) {
    let mut records = Vec::new();
    let mut offset = start;
    while offset < buf.len() {
        match decode_at(buf, offset) {
            Ok(record) => {
                offset += HEADER_LEN + record.payload.len();
                records.push(record);
            }
            Err(damage) => return (records, Some(damage)),
        }
    }
    (records, None)
}

/// Offset of the first fully valid record starting after `damaged`, if any. Only used on the
/// failure path; the header checksum makes each probe cheap.
pub(crate) fn valid_record_after(buf: &[u8], damaged: usize) -> Option<usize> {
    (damaged + 1..buf.len().saturating_sub(HEADER_LEN - 1)).find(|&p| decode_at(buf, p).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_records() -> Vec<u8> {
        let mut buf = Vec::new();
        encode(1, b"hello", &mut buf);
        encode(1, b"world!", &mut buf);
        buf
    }

    #[test]
    fn round_trip() {
        let buf = two_records();
        let (records, damage) = decode_all(&buf, 0);
        assert_eq!(damage, None);
        let payloads: Vec<&[u8]> = records.iter().map(|r| r.payload).collect();
        assert_eq!(payloads, vec![&b"hello"[..], &b"world!"[..]]);
        assert_eq!(records[1].offset, HEADER_LEN + 5);
    }

    #[test]
    fn every_truncation_of_the_last_record_is_damage_with_nothing_valid_after() {
        let buf = two_records();
        let second = HEADER_LEN + 5;
        for cut in second + 1..buf.len() {
            let (records, damage) = decode_all(&buf[..cut], 0);
            assert_eq!(records.len(), 1, "cut at {cut}");
            let damage = damage.expect("damage");
            assert_eq!(damage.offset, second);
            assert_eq!(valid_record_after(&buf[..cut], damage.offset), None);
        }
    }

    #[test]
    fn every_flipped_byte_of_the_first_record_is_damage_followed_by_a_valid_record() {
        let buf = two_records();
        let second = HEADER_LEN + 5;
        for at in 0..second {
            let mut bad = buf.clone();
            bad[at] ^= 0x40;
            let (records, damage) = decode_all(&bad, 0);
            assert!(records.is_empty(), "flip at {at}");
            let damage = damage.expect("damage");
            assert_eq!(
                valid_record_after(&bad, damage.offset),
                Some(second),
                "flip at {at}"
            );
        }
    }

    #[test]
    fn zeroed_header_is_damage() {
        let buf = vec![0u8; 64];
        assert!(decode_at(&buf, 0).is_err());
        assert_eq!(valid_record_after(&buf, 0), None);
    }
}
