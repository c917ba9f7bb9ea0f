//! Snapshots of the whole state machine: tree, sessions, last applied zxid, and each node's
//! persisted cversion (the sequential-name counter).
//!
//! Layout: magic `BATNSNAP`, format version (u32), body length (u64), CRC-32 of the body
//! (u32), then the body in jute encoding. The body is canonical: sessions by id, nodes by
//! path, ACL lists numbered by first use in that order, so equal states give equal bytes
//! whatever their history or hash seeds. `restore` checks everything and never panics.
//!
//! Null znode data is written as jute's null buffer (length -1). Format version 1 is kept: no
//! snapshot written before null data was kept apart has a -1 length there (the writer always
//! wrote a length >= 0), so old snapshots load unchanged, and an older Baton reads a null as
//! empty data, as it always did, so it still loads new snapshots during a rolling upgrade.
//!
//! Format version 2 appends the replicated settings (`settings.rs`: whether set, each setting
//! as a (tag, value) pair, the alarms) after the address book. A version 1 snapshot, written
//! before settings were replicated, loads with settings "never set", so the leader proposes
//! its flags once, as for a new ensemble.
//!
//! From version 2 on, the format version is the state's feature level plus one (`feature.rs`):
//! level 1 writes version 2, level 2 (null data kept, the level in the settings) version 3, and
//! a future level's format change comes with its level. So a snapshot is written in the format
//! the cluster's level allows, which every member that supports that level reads, and a
//! release that does not know a version still knows which level it needs: it refuses the
//! snapshot with the same error as a data dir at that level ([`SnapshotError::FeatureLevel`]),
//! never a bare "unsupported version". Equal states have equal levels, so replicas' snapshots
//! stay byte-identical.
//!
//! Taking a snapshot is two steps so that the core thread never serializes: `freeze` copies
//! the state in O(1) (the tree and the session table are persistent maps sharing structure
//! with the live state), and `FrozenState::to_bytes` serializes that copy, on any thread,
//! while the live state goes on applying entries.

use std::collections::BTreeMap;
use std::sync::Arc;

use baton_proto::{Acl, DecodeError, Id, Reader, Writer};
use thiserror::Error;

use crate::feature::{FeatureLevel, LevelTooHigh, SUPPORTED};
use crate::settings::ClusterSettings;
use crate::state::{SessionInfo, StateMachine};
use crate::tree::{DataTree, Node, NodeKind, NodeMap};

const MAGIC: &[u8; 8] = b"BATNSNAP";
/// Before the settings were replicated: no settings section.
const FORMAT_VERSION_NO_SETTINGS: u32 = 1;

/// The format version a snapshot of a state at `level` is written in: the level plus one.
pub fn format_version(level: FeatureLevel) -> u32 {
    level.get().saturating_add(1)
}

/// The feature level a snapshot of format `version` needs (1 for the versions before levels).
fn level_of_format(version: u32) -> u32 {
    version.saturating_sub(1).max(1)
}
const HEADER_LEN: usize = 8 + 4 + 8 + 4;

const KIND_PERSISTENT: i32 = 0;
const KIND_EPHEMERAL: i32 = 1;
const KIND_CONTAINER: i32 = 2;
const KIND_TTL: i32 = 3;

/// Why a snapshot could not be restored.
#[derive(Debug, Error)]
pub enum SnapshotError {
    #[error("snapshot truncated: {0} bytes is shorter than the header")]
    TooShort(usize),
    #[error("not a Baton snapshot (bad magic)")]
    BadMagic,
    #[error("unsupported snapshot format version {0}")]
    UnsupportedVersion(u32),
    /// Written at a feature level above what the reader supports (a newer release's format).
    #[error(transparent)]
    FeatureLevel(#[from] LevelTooHigh),
    #[error("snapshot body is {actual} bytes but the header says {declared}")]
    LengthMismatch { declared: u64, actual: usize },
    #[error("snapshot checksum mismatch: header {expected:#010x}, body {actual:#010x}")]
    Checksum { expected: u32, actual: u32 },
    #[error("snapshot body undecodable: {0}")]
    Decode(#[from] DecodeError),
    #[error("snapshot inconsistent: {0}")]
    Corrupt(String),
}

/// The state machine exactly as applied through `last_applied`, unaffected by what is applied
/// after: what a snapshot at that index holds. Cheap to take and to clone; `Send`, so it can be
/// serialized on another thread.
#[derive(Debug, Clone)]
pub struct FrozenState {
    last_applied: i64,
    nodes: NodeMap,
    sessions: imbl::OrdMap<i64, SessionInfo>,
    members: BTreeMap<u64, String>,
    settings: ClusterSettings,
}

impl StateMachine {
    /// Copies the replicated state in O(1) (the address book, a few entries, is copied).
    pub fn freeze(&self) -> FrozenState {
        FrozenState {
            last_applied: self.last_applied,
            nodes: self.tree.shared_nodes(),
            sessions: self.sessions.clone(),
            members: self.members.clone(),
            settings: self.settings.clone(),
        }
    }

    /// Serializes the whole state; equal states give byte-identical snapshots.
    pub fn snapshot(&self) -> Vec<u8> {
        self.freeze().to_bytes()
    }
}

impl FrozenState {
    /// The index the state reflects.
    pub fn last_applied(&self) -> i64 {
        self.last_applied
    }

    /// Number of znodes, the root included.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Serializes the state; equal states give byte-identical snapshots. Takes time in
    /// proportion to the tree (about a second for a million znodes): keep it off the core.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut nodes: Vec<(&str, &Node)> = self.nodes.iter().map(|(p, n)| (&**p, &**n)).collect();
        nodes.sort_unstable_by(|a, b| a.0.cmp(b.0));

        // Number ACL lists by first use so the numbering depends only on the state.
        let mut acl_lists: Vec<&Arc<[Acl]>> = Vec::new();
        let mut acl_index: std::collections::HashMap<&[Acl], i32> = Default::default();
        let mut node_acl = Vec::with_capacity(nodes.len());
        for (_, node) in &nodes {
            let next = i32::try_from(acl_lists.len()).unwrap_or(i32::MAX);
            let index = *acl_index.entry(&node.acl[..]).or_insert_with(|| {
                acl_lists.push(&node.acl);
                next
            });
            node_acl.push(index);
        }

        let mut w = Writer::with_capacity(HEADER_LEN + 64 + nodes.len() * 96);
        // Room for the header, filled in below: the body is never copied (140 MiB at a
        // million znodes).
        for _ in 0..HEADER_LEN / 8 {
            w.write_i64(0);
        }
        w.write_i64(self.last_applied);
        let sessions: Vec<&SessionInfo> = self.sessions.values().collect();
        w.write_vec(&sessions, |w, s| {
            w.write_i64(s.id);
            w.write_i32(s.timeout_ms);
            w.write_buffer(&s.passwd);
        });
        w.write_vec(&acl_lists, |w, list| {
            w.write_vec(list, |w, a| {
                w.write_i32(a.perms);
                w.write_string(&a.id.scheme);
                w.write_string(&a.id.id);
            });
        });
        let indexed: Vec<((&str, &Node), i32)> = nodes.into_iter().zip(node_acl).collect();
        w.write_vec(&indexed, |w, ((path, node), acl)| {
            w.write_string(path);
            w.write_opt_buffer(node.data.as_deref());
            w.write_i32(*acl);
            for v in [node.czxid, node.mzxid, node.pzxid, node.ctime, node.mtime] {
                w.write_i64(v);
            }
            for v in [node.version, node.cversion, node.aversion] {
                w.write_i32(v);
            }
            let (tag, value) = match node.kind {
                NodeKind::Persistent => (KIND_PERSISTENT, 0),
                NodeKind::Ephemeral { owner } => (KIND_EPHEMERAL, owner),
                NodeKind::Container => (KIND_CONTAINER, 0),
                NodeKind::Ttl { ttl_ms } => (KIND_TTL, ttl_ms),
            };
            w.write_i32(tag);
            w.write_i64(value);
        });
        let members: Vec<(&u64, &String)> = self.members.iter().collect();
        w.write_vec(&members, |w, (id, addr)| {
            w.write_i64(**id as i64);
            w.write_string(addr);
        });
        self.settings.write(&mut w);
        let mut out = w.into_inner();
        let (header, body) = out.split_at_mut(HEADER_LEN);
        let body_len = body.len() as u64;
        let crc = crc32fast::hash(body);
        header[..8].copy_from_slice(MAGIC);
        let version = format_version(self.settings.feature_level);
        header[8..12].copy_from_slice(&version.to_be_bytes());
        header[12..20].copy_from_slice(&body_len.to_be_bytes());
        header[20..24].copy_from_slice(&crc.to_be_bytes());
        out
    }
}

impl StateMachine {
    /// Rebuilds a state machine from `snapshot`'s bytes, refusing anything corrupt or written
    /// at a feature level this build does not support.
    pub fn restore(buf: &[u8]) -> Result<StateMachine, SnapshotError> {
        StateMachine::restore_up_to(buf, *SUPPORTED.end())
    }

    /// [`StateMachine::restore`] by a member that supports feature levels up to `max_level`
    /// (`--max-feature-level`): a snapshot in a newer level's format is refused with
    /// [`SnapshotError::FeatureLevel`].
    pub fn restore_up_to(buf: &[u8], max_level: u32) -> Result<StateMachine, SnapshotError> {
        if buf.len() < HEADER_LEN {
            return Err(SnapshotError::TooShort(buf.len()));
        }
        let (header, body) = buf.split_at(HEADER_LEN);
        if &header[..8] != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        let version = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
        if version < FORMAT_VERSION_NO_SETTINGS {
            return Err(SnapshotError::UnsupportedVersion(version));
        }
        let level = level_of_format(version);
        if level > max_level {
            return Err(SnapshotError::FeatureLevel(LevelTooHigh {
                what: "this snapshot",
                level,
                max: max_level,
                index: None,
            }));
        }
        let mut len = [0u8; 8];
        len.copy_from_slice(&header[12..20]);
        let declared = u64::from_be_bytes(len);
        if declared != body.len() as u64 {
            return Err(SnapshotError::LengthMismatch {
                declared,
                actual: body.len(),
            });
        }
        let expected = u32::from_be_bytes([header[20], header[21], header[22], header[23]]);
        let actual = crc32fast::hash(body);
        if expected != actual {
            return Err(SnapshotError::Checksum { expected, actual });
        }
        decode_body(body, version)
    }
}

fn decode_body(body: &[u8], version: u32) -> Result<StateMachine, SnapshotError> {
    let mut r = Reader::new(body);
    let last_applied = r.read_i64()?;
    let sessions = r.read_vec(16, |r| {
        Ok(SessionInfo {
            id: r.read_i64()?,
            timeout_ms: r.read_i32()?,
            passwd: r.read_buffer()?,
        })
    })?;
    let acl_lists: Vec<Arc<[Acl]>> = r.read_vec(4, |r| {
        let list = r.read_vec(12, |r| {
            Ok(Acl {
                perms: r.read_i32()?,
                id: Id {
                    scheme: r.read_string()?,
                    id: r.read_string()?,
                },
            })
        })?;
        Ok(Arc::from(list))
    })?;
    let mut acl_error = None;
    let nodes = r.read_vec(76, |r| {
        let path: Box<str> = r.read_string()?.into();
        let data = r.read_opt_buffer()?.map(Vec::into_boxed_slice);
        let acl_at = r.read_i32()?;
        let [czxid, mzxid, pzxid, ctime, mtime] = [
            r.read_i64()?,
            r.read_i64()?,
            r.read_i64()?,
            r.read_i64()?,
            r.read_i64()?,
        ];
        let [version, cversion, aversion] = [r.read_i32()?, r.read_i32()?, r.read_i32()?];
        let tag = r.read_i32()?;
        let value = r.read_i64()?;
        let kind = match tag {
            KIND_PERSISTENT => NodeKind::Persistent,
            KIND_EPHEMERAL => NodeKind::Ephemeral { owner: value },
            KIND_CONTAINER => NodeKind::Container,
            KIND_TTL => NodeKind::Ttl { ttl_ms: value },
            other => {
                return Err(DecodeError::BadValue {
                    field: "node kind",
                    value: other,
                });
            }
        };
        let acl = match usize::try_from(acl_at).ok().and_then(|i| acl_lists.get(i)) {
            Some(acl) => Arc::clone(acl),
            None => {
                acl_error.get_or_insert_with(|| format!("node {path} has ACL index {acl_at}"));
                Arc::from(Vec::new())
            }
        };
        let node = Node {
            data,
            acl,
            children: Default::default(),
            czxid,
            mzxid,
            pzxid,
            ctime,
            mtime,
            version,
            cversion,
            aversion,
            kind,
        };
        Ok((path, node))
    })?;
    let members = r.read_vec(12, |r| Ok((r.read_i64()? as u64, r.read_string()?)))?;
    let settings = if version == FORMAT_VERSION_NO_SETTINGS {
        ClusterSettings::default()
    } else {
        ClusterSettings::read(&mut r)?
    };
    r.finish()?;
    if let Some(message) = acl_error {
        return Err(SnapshotError::Corrupt(message));
    }
    // The header's level is what an older release goes by: it must not understate the state's.
    // Format 2 is let through at any level: development builds before 0.1.0 wrote it for
    // every level, and a build that reads format 2 reads those (the core then checks the level).
    if version > 2 && settings.feature_level.get() > level_of_format(version) {
        return Err(SnapshotError::Corrupt(format!(
            "format version {version} holds a state at feature level {}",
            settings.feature_level.get()
        )));
    }

    let mut machine = StateMachine {
        tree: DataTree::default(),
        sessions: Default::default(),
        last_applied,
        members: members.into_iter().collect(),
        settings,
    };
    for s in sessions {
        if machine.sessions.insert(s.id, s).is_some() {
            return Err(SnapshotError::Corrupt("duplicate session".into()));
        }
    }
    drop(acl_lists);
    for (path, node) in &nodes {
        if let NodeKind::Ephemeral { owner } = node.kind
            && !machine.sessions.contains_key(&owner)
        {
            return Err(SnapshotError::Corrupt(format!(
                "ephemeral {path} owned by unknown session {owner:#x}"
            )));
        }
    }
    machine.tree =
        DataTree::from_nodes(nodes).map_err(|e| SnapshotError::Corrupt(e.to_string()))?;
    Ok(machine)
}
