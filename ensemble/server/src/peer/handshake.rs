//! The handshake that opens every peer connection, before any Raft message is decoded.
//!
//! The connecting member sends a hello (all integers big-endian):
//! `"BTNP"`, version u16, lane u8, sender id u64, receiver id u64, cluster id (u16 length +
//! UTF-8), and from version 3 an extension block (u16 length + bytes) whose first field is the
//! highest feature level the sender supports (u32). Magic and version come first and never
//! move. The accepting member answers `"BTNP"`, version u16, then 0 (accepted) or 1
//! (refused) followed by a refusal code u8 and a reason (u16 length + UTF-8) meant for the
//! other side's logs. A refusal is how a stale volume, a member of another ensemble or a
//! misrouted address is kept out: the id and cluster id on disk must match what peers expect.
//!
//! **One version step either way** (a rolling upgrade must never split an
//! ensemble). A member accepts hellos of versions `VERSION - 1 ..= VERSION + 1` and answers
//! in the hello's version when it is older than its own. Versions 2 and 3 frame messages
//! alike; a version may only add fields at the end of the extension block (which an older
//! reader skips by its length), never change the fixed fields or the frames without a
//! version that the step rule keeps apart. A connecting member whose hello a member of the
//! previous version refuses as `UnsupportedVersion` (which answers in its own version)
//! connects again speaking that version: an older peer is never refused, it simply
//! advertises no feature level beyond the base one.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// First bytes of every hello and reply: "Baton peer".
pub(crate) const MAGIC: [u8; 4] = *b"BTNP";
/// The protocol version this build speaks first. Version 1 framed bare Raft messages; version
/// 2 tags every message-lane frame with its kind (Raft or control); version 3 adds the hello's
/// extension block (the sender's highest feature level), frames unchanged.
pub(crate) const VERSION: u16 = 3;
/// The oldest version this build still speaks: one step back (version 1's frames differ).
pub(crate) const OLDEST_VERSION: u16 = VERSION - 1;
/// The newest version whose hello this build reads: one step ahead, by the rule above.
const NEWEST_READABLE_VERSION: u16 = VERSION + 1;
/// Longest extension block a hello may carry.
const MAX_EXTENSION_BYTES: usize = 1024;
/// Longest cluster id a hello may carry.
pub const MAX_CLUSTER_ID_BYTES: usize = 255;
/// Longest refusal reason a reply may carry.
const MAX_REASON_BYTES: usize = 1024;
/// On the snapshot lane, sent back once a message has been handed to the Raft core.
pub(crate) const SNAPSHOT_ACK: u8 = 0x06;

/// Which of a peer's two connections this is. Snapshots travel apart so a transfer of
/// hundreds of megabytes never sits in front of heartbeats and appends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Raft messages but snapshots, and control payloads, in one order; small frames,
    /// batched writes.
    Raft,
    /// `MsgSnapshot` only: large frames, one at a time, each acknowledged by the receiver.
    Snapshot,
}

impl Lane {
    fn code(self) -> u8 {
        match self {
            Lane::Raft => 0,
            Lane::Snapshot => 1,
        }
    }

    /// A short name for logs and spans.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Raft => "raft",
            Lane::Snapshot => "snapshot",
        }
    }
}

/// What a connecting member says about itself and whom it expects to reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hello {
    /// The protocol version the hello is written in (`OLDEST_VERSION..=VERSION` when sent).
    pub version: u16,
    pub lane: Lane,
    pub from: u64,
    pub to: u64,
    pub cluster_id: String,
    /// The highest feature level the sender supports; a version-2 hello advertises the base
    /// level (that release knew no other).
    pub max_feature_level: u32,
}

/// Why a receiver turned a connection away; sent on the wire as one byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalCode {
    /// The hello named another ensemble.
    WrongCluster,
    /// The hello expected another member at this address (or claimed to be the receiver).
    WrongMember,
    /// The hello's protocol version is not one the receiver speaks.
    UnsupportedVersion,
    /// The hello named a lane the receiver does not know.
    UnknownLane,
    /// A code from a newer version.
    Other(u8),
}

impl RefusalCode {
    fn to_byte(self) -> u8 {
        match self {
            RefusalCode::WrongCluster => 1,
            RefusalCode::WrongMember => 2,
            RefusalCode::UnsupportedVersion => 3,
            RefusalCode::UnknownLane => 4,
            RefusalCode::Other(b) => b,
        }
    }

    fn from_byte(b: u8) -> Self {
        match b {
            1 => RefusalCode::WrongCluster,
            2 => RefusalCode::WrongMember,
            3 => RefusalCode::UnsupportedVersion,
            4 => RefusalCode::UnknownLane,
            b => RefusalCode::Other(b),
        }
    }
}

/// A receiver's decision on a hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Accepted,
    Refused { code: RefusalCode, reason: String },
}

/// Why a handshake did not complete.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("not a Baton peer (bad magic {0:02x?})")]
    BadMagic([u8; 4]),
    #[error("peer speaks protocol version {0}, this member speaks {OLDEST_VERSION} to {VERSION}")]
    UnsupportedVersion(u16),
    #[error("unknown lane {0}")]
    UnknownLane(u8),
    #[error("{what} of {len} bytes exceeds {max}")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{what} is not UTF-8")]
    NotUtf8 { what: &'static str },
    #[error("bad reply status {0}")]
    BadStatus(u8),
    #[error("i/o error during the handshake: {0}")]
    Io(#[from] std::io::Error),
}

/// Writes a hello; the caller has checked the cluster id's length when it was configured.
pub(crate) async fn write_hello<W: AsyncWrite + Unpin>(
    wr: &mut W,
    hello: &Hello,
) -> Result<(), HandshakeError> {
    let id = hello.cluster_id.as_bytes();
    if id.len() > MAX_CLUSTER_ID_BYTES {
        return Err(HandshakeError::TooLong {
            what: "cluster id",
            len: id.len(),
            max: MAX_CLUSTER_ID_BYTES,
        });
    }
    let mut buf = Vec::with_capacity(33 + id.len());
    buf.extend_from_slice(&MAGIC);
    buf.extend_from_slice(&hello.version.to_be_bytes());
    buf.push(hello.lane.code());
    buf.extend_from_slice(&hello.from.to_be_bytes());
    buf.extend_from_slice(&hello.to.to_be_bytes());
    buf.extend_from_slice(&(id.len() as u16).to_be_bytes());
    buf.extend_from_slice(id);
    if hello.version >= 3 {
        buf.extend_from_slice(&4u16.to_be_bytes());
        buf.extend_from_slice(&hello.max_feature_level.to_be_bytes());
    }
    wr.write_all(&buf).await?;
    wr.flush().await?;
    Ok(())
}

/// Reads a hello. Magic and version are checked before anything else is read, so a stray
/// client is dropped after 6 bytes and a newer member learns which version we speak.
pub(crate) async fn read_hello<R: AsyncRead + Unpin>(rd: &mut R) -> Result<Hello, HandshakeError> {
    let version = read_preamble(rd).await?;
    let lane = match rd.read_u8().await? {
        0 => Lane::Raft,
        1 => Lane::Snapshot,
        other => return Err(HandshakeError::UnknownLane(other)),
    };
    let from = rd.read_u64().await?;
    let to = rd.read_u64().await?;
    let cluster_id = read_string(rd, "cluster id", MAX_CLUSTER_ID_BYTES).await?;
    let mut max_feature_level = baton_machine::feature::BASE;
    if version >= 3 {
        let len = rd.read_u16().await? as usize;
        if len > MAX_EXTENSION_BYTES {
            return Err(HandshakeError::TooLong {
                what: "hello extension",
                len,
                max: MAX_EXTENSION_BYTES,
            });
        }
        let mut extension = vec![0u8; len];
        rd.read_exact(&mut extension).await?;
        // Fields a newer version appends after the level are skipped.
        if let Some(level) = extension.first_chunk::<4>() {
            max_feature_level = u32::from_be_bytes(*level);
        }
    }
    Ok(Hello {
        version,
        lane,
        from,
        to,
        cluster_id,
        max_feature_level,
    })
}

/// Writes the receiver's decision in `version`: the hello's when it is older than ours, so
/// an older peer can read it.
pub(crate) async fn write_reply<W: AsyncWrite + Unpin>(
    wr: &mut W,
    version: u16,
    reply: &Reply,
) -> Result<(), HandshakeError> {
    let mut buf = Vec::with_capacity(16);
    buf.extend_from_slice(&MAGIC);
    buf.extend_from_slice(&version.min(VERSION).to_be_bytes());
    match reply {
        Reply::Accepted => buf.push(0),
        Reply::Refused { code, reason } => {
            buf.push(1);
            buf.push(code.to_byte());
            let reason = truncate_utf8(reason, MAX_REASON_BYTES);
            buf.extend_from_slice(&(reason.len() as u16).to_be_bytes());
            buf.extend_from_slice(reason.as_bytes());
        }
    }
    wr.write_all(&buf).await?;
    wr.flush().await?;
    Ok(())
}

/// Reads the receiver's decision and the version it answered in.
pub(crate) async fn read_reply<R: AsyncRead + Unpin>(
    rd: &mut R,
) -> Result<(u16, Reply), HandshakeError> {
    let version = read_preamble(rd).await?;
    let reply = match rd.read_u8().await? {
        0 => Reply::Accepted,
        1 => {
            let code = RefusalCode::from_byte(rd.read_u8().await?);
            let reason = read_string(rd, "refusal reason", MAX_REASON_BYTES).await?;
            Reply::Refused { code, reason }
        }
        other => return Err(HandshakeError::BadStatus(other)),
    };
    Ok((version, reply))
}

/// Checks the magic and returns the version, if within one step of ours.
async fn read_preamble<R: AsyncRead + Unpin>(rd: &mut R) -> Result<u16, HandshakeError> {
    let mut magic = [0u8; 4];
    rd.read_exact(&mut magic).await?;
    if magic != MAGIC {
        return Err(HandshakeError::BadMagic(magic));
    }
    match rd.read_u16().await? {
        v @ OLDEST_VERSION..=NEWEST_READABLE_VERSION => Ok(v),
        other => Err(HandshakeError::UnsupportedVersion(other)),
    }
}

async fn read_string<R: AsyncRead + Unpin>(
    rd: &mut R,
    what: &'static str,
    max: usize,
) -> Result<String, HandshakeError> {
    let len = rd.read_u16().await? as usize;
    if len > max {
        return Err(HandshakeError::TooLong { what, len, max });
    }
    let mut bytes = vec![0u8; len];
    rd.read_exact(&mut bytes).await?;
    String::from_utf8(bytes).map_err(|_| HandshakeError::NotUtf8 { what })
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn peer_hello_and_replies_round_trip() {
        let hello = Hello {
            version: VERSION,
            lane: Lane::Snapshot,
            from: 3,
            to: u64::MAX,
            cluster_id: "prod-é".into(),
            max_feature_level: 7,
        };
        let mut buf = Vec::new();
        write_hello(&mut buf, &hello).await.unwrap();
        assert_eq!(read_hello(&mut &buf[..]).await.unwrap(), hello);

        for reply in [
            Reply::Accepted,
            Reply::Refused {
                code: RefusalCode::WrongCluster,
                reason: "not ours".into(),
            },
            Reply::Refused {
                code: RefusalCode::Other(200),
                reason: String::new(),
            },
        ] {
            for version in [OLDEST_VERSION, VERSION] {
                let mut buf = Vec::new();
                write_reply(&mut buf, version, &reply).await.unwrap();
                assert_eq!(
                    read_reply(&mut &buf[..]).await.unwrap(),
                    (version, reply.clone())
                );
            }
        }
    }

    #[tokio::test]
    async fn peer_hello_rejects_strangers_and_other_versions_early() {
        // A ZooKeeper connect request landing on the peer port.
        let zk = [0u8, 0, 0, 44, 0, 0, 0, 0, 0, 0];
        assert!(matches!(
            read_hello(&mut &zk[..]).await,
            Err(HandshakeError::BadMagic(_))
        ));

        for other in [OLDEST_VERSION - 1, VERSION + 2] {
            let mut hello = MAGIC.to_vec();
            hello.extend_from_slice(&other.to_be_bytes());
            assert!(matches!(
                read_hello(&mut &hello[..]).await,
                Err(HandshakeError::UnsupportedVersion(v)) if v == other
            ));
        }

        let mut long = MAGIC.to_vec();
        long.extend_from_slice(&VERSION.to_be_bytes());
        long.push(0);
        long.extend_from_slice(&[0u8; 16]);
        long.extend_from_slice(&u16::MAX.to_be_bytes());
        assert!(matches!(
            read_hello(&mut &long[..]).await,
            Err(HandshakeError::TooLong { .. })
        ));

        let mut lane = MAGIC.to_vec();
        lane.extend_from_slice(&VERSION.to_be_bytes());
        lane.push(9);
        assert!(matches!(
            read_hello(&mut &lane[..]).await,
            Err(HandshakeError::UnknownLane(9))
        ));
    }

    /// A member one release older (version 2: no extension) and one newer (version 4: more
    /// fields after the level) are both read; the older advertises the base level.
    #[tokio::test]
    async fn peer_hellos_one_version_step_either_way_are_read() {
        let mut older = Hello {
            version: OLDEST_VERSION,
            lane: Lane::Raft,
            from: 2,
            to: 1,
            cluster_id: "c".into(),
            max_feature_level: 9,
        };
        let mut buf = Vec::new();
        write_hello(&mut buf, &older).await.unwrap();
        older.max_feature_level = baton_machine::feature::BASE;
        assert_eq!(read_hello(&mut &buf[..]).await.unwrap(), older);

        let mut newer = MAGIC.to_vec();
        newer.extend_from_slice(&(VERSION + 1).to_be_bytes());
        newer.push(0);
        newer.extend_from_slice(&2u64.to_be_bytes());
        newer.extend_from_slice(&1u64.to_be_bytes());
        newer.extend_from_slice(&1u16.to_be_bytes());
        newer.push(b'c');
        newer.extend_from_slice(&8u16.to_be_bytes());
        newer.extend_from_slice(&5u32.to_be_bytes());
        newer.extend_from_slice(&[0xee; 4]);
        let read = read_hello(&mut &newer[..]).await.unwrap();
        assert_eq!(
            (read.version, read.from, read.max_feature_level),
            (VERSION + 1, 2, 5)
        );
    }

    #[test]
    fn peer_refusal_reasons_are_cut_on_char_boundaries() {
        let s = "é".repeat(MAX_REASON_BYTES);
        // 'é' is two bytes: an odd limit falls inside one.
        let t = truncate_utf8(&s, 101);
        assert_eq!(t.len(), 100);
        assert!(t.chars().all(|c| c == 'é'));
    }
}
