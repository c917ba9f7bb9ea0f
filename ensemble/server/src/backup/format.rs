//! The backup file (`*.baton-backup`): a small header, then the state machine's snapshot bytes
//! (`baton_machine`'s own format, with its own CRC) exactly as `GET /v1/snapshot` made them.
//!
//! Layout, integers big-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `BATNBKUP` |
//! | 4 | format version (1) |
//! | 2 | cluster id length `n` (1..=255) |
//! | n | cluster id of the ensemble backed up (ASCII: letters, digits, `._-`) |
//! | 8 | Raft index the state was applied through (its zxid) |
//! | 8 | Raft term of that index |
//! | 8 | body length |
//! | 32 | SHA-256 of the body |
//! | 4 | CRC-32 of every header byte before it |
//! | … | body: the state machine snapshot |
//!
//! Decoding checks everything (a flipped byte anywhere or any truncation is refused) and never
//! panics on input.

use thiserror::Error;

const MAGIC: &[u8; 8] = b"BATNBKUP";
const FORMAT_VERSION: u32 = 1;
/// Header bytes besides the cluster id.
const FIXED_HEADER: usize = 8 + 4 + 2 + 8 + 8 + 8 + 32 + 4;
const MAX_CLUSTER_ID: usize = 255;

/// Why bytes are not a usable backup.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BackupError {
    #[error("not a Baton backup (bad magic): is this a .baton-backup file?")]
    BadMagic,
    #[error("backup truncated: {0} bytes, shorter than its header")]
    Truncated(usize),
    #[error("unsupported backup format version {0} (this Baton reads version 1)")]
    UnsupportedVersion(u32),
    #[error("backup header damaged: checksum mismatch")]
    HeaderChecksum,
    #[error("backup header damaged: {0}")]
    BadHeader(String),
    #[error("backup body is {actual} bytes but the header says {declared}: truncated or padded")]
    LengthMismatch { declared: u64, actual: u64 },
    #[error("backup body damaged: SHA-256 {actual} does not match the header's {expected}")]
    BodyChecksum { expected: String, actual: String },
}

/// A decoded (or to be encoded) backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup<'a> {
    /// The cluster id of the ensemble that was backed up.
    pub cluster_id: &'a str,
    /// The Raft index the state was applied through.
    pub index: u64,
    /// The Raft term of that index.
    pub term: u64,
    /// The state machine snapshot bytes.
    pub body: &'a [u8],
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

impl Backup<'_> {
    /// The whole file.
    pub fn encode(&self) -> Vec<u8> {
        let id = self.cluster_id.as_bytes();
        let id_len = id.len().min(MAX_CLUSTER_ID);
        let mut out = Vec::with_capacity(FIXED_HEADER + id_len + self.body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_be_bytes());
        out.extend_from_slice(&(id_len as u16).to_be_bytes());
        out.extend_from_slice(&id[..id_len]);
        out.extend_from_slice(&self.index.to_be_bytes());
        out.extend_from_slice(&self.term.to_be_bytes());
        out.extend_from_slice(&(self.body.len() as u64).to_be_bytes());
        out.extend_from_slice(&sha256(self.body));
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out.extend_from_slice(self.body);
        out
    }
}

/// Reads big-endian fields off the front of a slice.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, total: usize) -> Result<&'a [u8], BackupError> {
        let (head, rest) = self
            .0
            .split_at_checked(n)
            .ok_or(BackupError::Truncated(total))?;
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, total: usize) -> Result<[u8; N], BackupError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, total)?);
        Ok(out)
    }
}

/// Checks and splits a backup file; refuses anything damaged, truncated or padded.
pub fn decode(bytes: &[u8]) -> Result<Backup<'_>, BackupError> {
    let total = bytes.len();
    let mut c = Cursor(bytes);
    // The magic first, so a file of another kind is named as such even when it is short.
    let magic = c.take(MAGIC.len().min(total), total)?;
    if magic != MAGIC {
        return Err(if MAGIC.starts_with(magic) {
            BackupError::Truncated(total)
        } else {
            BackupError::BadMagic
        });
    }
    let version = u32::from_be_bytes(c.array(total)?);
    let id_len = usize::from(u16::from_be_bytes(c.array(total)?));
    let id = c.take(id_len, total)?;
    let index = u64::from_be_bytes(c.array(total)?);
    let term = u64::from_be_bytes(c.array(total)?);
    let declared = u64::from_be_bytes(c.array(total)?);
    let digest: [u8; 32] = c.array(total)?;
    let header_len = total - c.0.len();
    let crc = u32::from_be_bytes(c.array(total)?);
    // The checksum before any field is believed, so a flipped bit reads as damage.
    if crc != crc32fast::hash(&bytes[..header_len]) {
        return Err(BackupError::HeaderChecksum);
    }
    if version != FORMAT_VERSION {
        return Err(BackupError::UnsupportedVersion(version));
    }
    let cluster_id = std::str::from_utf8(id)
        .ok()
        .filter(|id| baton_tls::valid_cluster_id(id))
        .ok_or_else(|| BackupError::BadHeader("the cluster id is not valid".into()))?;
    if index == 0 {
        return Err(BackupError::BadHeader("index 0".into()));
    }
    let body = c.0;
    if declared != body.len() as u64 {
        return Err(BackupError::LengthMismatch {
            declared,
            actual: body.len() as u64,
        });
    }
    let actual = sha256(body);
    if actual != digest {
        return Err(BackupError::BodyChecksum {
            expected: hex(&digest),
            actual: hex(&actual),
        });
    }
    Ok(Backup {
        cluster_id,
        index,
        term,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        Backup {
            cluster_id: "prod.east-1",
            index: 12_345,
            term: 7,
            body: b"BATNSNAP and the rest of a state machine snapshot",
        }
        .encode()
    }

    #[test]
    fn round_trip() {
        let bytes = sample();
        let backup = decode(&bytes).expect("decodes");
        assert_eq!(backup.cluster_id, "prod.east-1");
        assert_eq!((backup.index, backup.term), (12_345, 7));
        assert_eq!(
            backup.body,
            b"BATNSNAP and the rest of a state machine snapshot"
        );
        assert_eq!(backup.encode(), bytes);
    }

    #[test]
    fn an_empty_body_round_trips() {
        let bytes = Backup {
            cluster_id: "c",
            index: 1,
            term: 1,
            body: b"",
        }
        .encode();
        assert_eq!(decode(&bytes).expect("decodes").body, b"");
    }

    #[test]
    fn every_truncation_is_refused() {
        let bytes = sample();
        for len in 0..bytes.len() {
            let err = decode(&bytes[..len]).expect_err("a truncated backup was accepted");
            assert!(
                matches!(
                    err,
                    BackupError::Truncated(_) | BackupError::LengthMismatch { .. }
                ),
                "{len} bytes: {err}"
            );
        }
    }

    #[test]
    fn every_flipped_byte_is_refused() {
        let bytes = sample();
        for at in 0..bytes.len() {
            for bit in [0x01, 0x80] {
                let mut damaged = bytes.clone();
                damaged[at] ^= bit;
                assert!(
                    decode(&damaged).is_err(),
                    "byte {at} flipped with {bit:#x} was accepted"
                );
            }
        }
    }

    #[test]
    fn padding_is_refused() {
        let mut bytes = sample();
        bytes.push(0);
        assert!(matches!(
            decode(&bytes),
            Err(BackupError::LengthMismatch { .. })
        ));
    }

    #[test]
    fn other_files_are_named_as_such() {
        assert_eq!(decode(b"BATNSNAP\0\0\0\x01"), Err(BackupError::BadMagic));
        assert_eq!(decode(b"{\"json\": true}"), Err(BackupError::BadMagic));
        assert_eq!(decode(b"BATN"), Err(BackupError::Truncated(4)));
        assert_eq!(decode(b""), Err(BackupError::Truncated(0)));
    }

    #[test]
    fn a_newer_version_is_named() {
        let mut bytes = sample();
        bytes[8..12].copy_from_slice(&2u32.to_be_bytes());
        let id_len = usize::from(u16::from_be_bytes([bytes[12], bytes[13]]));
        let header_len = FIXED_HEADER + id_len - 4;
        let crc = crc32fast::hash(&bytes[..header_len]);
        bytes[header_len..header_len + 4].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(decode(&bytes), Err(BackupError::UnsupportedVersion(2)));
    }

    #[test]
    fn a_damaged_body_names_both_digests() {
        let mut bytes = sample();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let err = decode(&bytes).expect_err("accepted");
        assert!(err.to_string().contains("SHA-256"), "{err}");
    }
}
