//! The ensemble's settings that change what an entry does at apply (DESIGN.md §4 "What one
//! tenant can take"): the tenancy policy, the quotas and the active alarms.
//!
//! They are replicated state, never a member's flag: every member must decide the same write
//! the same way at the same index, also during the minutes a rolling change of flags takes.
//! So they change only through log entries (`CommandKind::SetSettings`, `CommandKind::Alarm`)
//! and travel in snapshots and backups. A flag only gives the value a new ensemble starts
//! with: the state starts "never set" (apply uses [`ClusterSettings::default`] meanwhile) and
//! a leader that finds them never set proposes its flags once, as an `initial` change that is
//! ignored if anything set them first.
//!
//! Each setting is a numbered (tag, i64) pair on the wire and in snapshots, so a new one (the
//! feature level) is one more tag; a tag a member does not know makes the entry
//! undecodable, which is why a new tag may only be proposed once every member knows it.

use std::collections::BTreeSet;

use baton_proto::{DecodeError, Reader, Writer};

use crate::feature::FeatureLevel;
use crate::tenancy::TenancyPolicy;

/// Znodes one namespace (`/baton/<ns>` and below) may hold unless set otherwise. A pod's
/// sidecar holds one node per election, lock or semaphore it takes part in plus the folders:
/// even 1,000 pods in one namespace, each in 20 recipes, stay at a fifth of it.
pub const DEFAULT_NAMESPACE_ZNODES: u64 = 100_000;
/// Bytes (paths plus data, ZooKeeper's `approximate_data_size` measure) one namespace may
/// hold unless set otherwise. Recipe nodes carry a pod name or a few hundred bytes; 100,000
/// of them with 200-byte paths are 30 MiB. 64 MiB keeps one tenant to a sixteenth of the
/// chart's 1 GiB volume, which holds two snapshots and the log.
pub const DEFAULT_NAMESPACE_BYTES: u64 = 64 << 20;
/// Znodes of the shared pool (everything outside `/baton/<ns>`: plain ZooKeeper users,
/// `/baton` itself) unless set otherwise; above the 1,000,000-znode benchmark row.
pub const DEFAULT_SHARED_ZNODES: u64 = 2_000_000;
/// Bytes of the shared pool unless set otherwise.
pub const DEFAULT_SHARED_BYTES: u64 = 256 << 20;
/// Ephemeral nodes one session may own unless set otherwise. A sidecar's session owns one per
/// recipe its pod takes part in; ZooKeeper sets no limit.
pub const DEFAULT_EPHEMERALS_PER_SESSION: u64 = 10_000;

/// Limits on what the tree may hold, decided at apply (`ErrorCode::REFUSED` past them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    pub namespace_znodes: u64,
    pub namespace_bytes: u64,
    pub shared_znodes: u64,
    pub shared_bytes: u64,
    pub ephemerals_per_session: u64,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            namespace_znodes: DEFAULT_NAMESPACE_ZNODES,
            namespace_bytes: DEFAULT_NAMESPACE_BYTES,
            shared_znodes: DEFAULT_SHARED_ZNODES,
            shared_bytes: DEFAULT_SHARED_BYTES,
            ephemerals_per_session: DEFAULT_EPHEMERALS_PER_SESSION,
        }
    }
}

/// What an alarm says about the member that raised it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AlarmKind {
    /// The member's data volume is below its free-space watermark (etcd's NOSPACE).
    NoSpace,
}

impl AlarmKind {
    /// Every kind, for metrics that show each from the start.
    pub const ALL: [AlarmKind; 1] = [AlarmKind::NoSpace];

    /// The `kind` label of `baton_alarm` and the name in `GET /v1/settings`.
    pub fn label(self) -> &'static str {
        match self {
            AlarmKind::NoSpace => "nospace",
        }
    }

    pub(crate) fn code(self) -> i32 {
        match self {
            AlarmKind::NoSpace => 1,
        }
    }

    pub(crate) fn from_code(code: i32) -> Result<AlarmKind, DecodeError> {
        match code {
            1 => Ok(AlarmKind::NoSpace),
            value => Err(DecodeError::BadValue {
                field: "alarm kind",
                value,
            }),
        }
    }
}

/// An alarm raised by one member: `(member, kind)`.
pub type Alarm = (u64, AlarmKind);

/// One setting and its new value, as a `SetSettings` entry carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    CheckIdentities(bool),
    NamespaceZnodes(u64),
    NamespaceBytes(u64),
    SharedZnodes(u64),
    SharedBytes(u64),
    EphemeralsPerSession(u64),
    /// Raises the ensemble's feature level (`feature.rs`); proposed by the leader only once
    /// every member supports it, never lowers it.
    FeatureLevel(u32),
}

const TAG_CHECK_IDENTITIES: i32 = 1;
const TAG_NAMESPACE_ZNODES: i32 = 2;
const TAG_NAMESPACE_BYTES: i32 = 3;
const TAG_SHARED_ZNODES: i32 = 4;
const TAG_SHARED_BYTES: i32 = 5;
const TAG_EPHEMERALS_PER_SESSION: i32 = 6;
const TAG_FEATURE_LEVEL: i32 = 7;

impl Setting {
    /// Its name in `GET/PUT /v1/settings`.
    pub fn name(self) -> &'static str {
        match self {
            Setting::CheckIdentities(_) => "checkIdentities",
            Setting::NamespaceZnodes(_) => "namespaceZnodes",
            Setting::NamespaceBytes(_) => "namespaceBytes",
            Setting::SharedZnodes(_) => "sharedZnodes",
            Setting::SharedBytes(_) => "sharedBytes",
            Setting::EphemeralsPerSession(_) => "ephemeralsPerSession",
            Setting::FeatureLevel(_) => "featureLevel",
        }
    }

    fn tag_value(self) -> (i32, i64) {
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        match self {
            Setting::CheckIdentities(on) => (TAG_CHECK_IDENTITIES, i64::from(on)),
            Setting::NamespaceZnodes(v) => (TAG_NAMESPACE_ZNODES, clamp(v)),
            Setting::NamespaceBytes(v) => (TAG_NAMESPACE_BYTES, clamp(v)),
            Setting::SharedZnodes(v) => (TAG_SHARED_ZNODES, clamp(v)),
            Setting::SharedBytes(v) => (TAG_SHARED_BYTES, clamp(v)),
            Setting::EphemeralsPerSession(v) => (TAG_EPHEMERALS_PER_SESSION, clamp(v)),
            Setting::FeatureLevel(v) => (TAG_FEATURE_LEVEL, i64::from(v)),
        }
    }

    fn from_tag_value(tag: i32, value: i64) -> Result<Setting, DecodeError> {
        let count = || {
            u64::try_from(value).map_err(|_| DecodeError::BadValue {
                field: "setting value",
                value: tag,
            })
        };
        Ok(match tag {
            TAG_CHECK_IDENTITIES => Setting::CheckIdentities(value != 0),
            TAG_NAMESPACE_ZNODES => Setting::NamespaceZnodes(count()?),
            TAG_NAMESPACE_BYTES => Setting::NamespaceBytes(count()?),
            TAG_SHARED_ZNODES => Setting::SharedZnodes(count()?),
            TAG_SHARED_BYTES => Setting::SharedBytes(count()?),
            TAG_EPHEMERALS_PER_SESSION => Setting::EphemeralsPerSession(count()?),
            TAG_FEATURE_LEVEL => {
                Setting::FeatureLevel(u32::try_from(value).map_err(|_| DecodeError::BadValue {
                    field: "feature level",
                    value: tag,
                })?)
            }
            other => {
                return Err(DecodeError::BadValue {
                    field: "setting tag",
                    value: other,
                });
            }
        })
    }

    /// Writes a list of settings (a `SetSettings` entry, a snapshot).
    pub(crate) fn write_all(w: &mut Writer, settings: &[Setting]) {
        w.write_vec(settings, |w, s| {
            let (tag, value) = s.tag_value();
            w.write_i32(tag);
            w.write_i64(value);
        });
    }

    /// Reads what `write_all` wrote; an unknown tag is an error.
    pub(crate) fn read_all(r: &mut Reader<'_>) -> Result<Vec<Setting>, DecodeError> {
        r.read_vec(12, |r| {
            let tag = r.read_i32()?;
            let value = r.read_i64()?;
            Setting::from_tag_value(tag, value)
        })
    }
}

/// The replicated settings and alarms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterSettings {
    /// Whether any entry set them (false until the first leader proposes its flags).
    pub set: bool,
    pub tenancy: TenancyPolicy,
    pub quotas: Quotas,
    /// Active alarms, by member.
    pub alarms: BTreeSet<Alarm>,
    /// Which behaviour changes are in force (`feature.rs`); only rises.
    pub feature_level: FeatureLevel,
}

impl ClusterSettings {
    /// Applies `changes`; an `initial` change (a leader's flags) only if nothing set them yet.
    /// Returns whether anything was applied. A feature level change alone does not count as
    /// setting the settings (the leader's flags may still follow it).
    pub fn apply(&mut self, initial: bool, changes: &[Setting]) -> bool {
        if initial && self.set {
            return false;
        }
        if changes
            .iter()
            .any(|c| !matches!(c, Setting::FeatureLevel(_)))
        {
            self.set = true;
        }
        for change in changes {
            match *change {
                Setting::CheckIdentities(on) => self.tenancy.check_identities = on,
                Setting::NamespaceZnodes(v) => self.quotas.namespace_znodes = v,
                Setting::NamespaceBytes(v) => self.quotas.namespace_bytes = v,
                Setting::SharedZnodes(v) => self.quotas.shared_znodes = v,
                Setting::SharedBytes(v) => self.quotas.shared_bytes = v,
                Setting::EphemeralsPerSession(v) => self.quotas.ephemerals_per_session = v,
                Setting::FeatureLevel(v) => {
                    self.feature_level = self.feature_level.max(FeatureLevel(v));
                }
            }
        }
        true
    }

    /// Every setting with its current value (what a snapshot records). The feature level is
    /// left out while it is the base level, so a snapshot of an ensemble that never raised it
    /// holds no tag that a build without levels would not decode.
    pub fn all(&self) -> Vec<Setting> {
        let q = self.quotas;
        let mut all = vec![
            Setting::CheckIdentities(self.tenancy.check_identities),
            Setting::NamespaceZnodes(q.namespace_znodes),
            Setting::NamespaceBytes(q.namespace_bytes),
            Setting::SharedZnodes(q.shared_znodes),
            Setting::SharedBytes(q.shared_bytes),
            Setting::EphemeralsPerSession(q.ephemerals_per_session),
        ];
        if self.feature_level != FeatureLevel::default() {
            all.push(Setting::FeatureLevel(self.feature_level.get()));
        }
        all
    }

    /// Whether any member has an alarm up: writes that add data are refused meanwhile.
    pub fn alarmed(&self) -> bool {
        !self.alarms.is_empty()
    }

    /// Raises or clears `member`'s alarm; returns whether that changed anything.
    pub fn set_alarm(&mut self, member: u64, kind: AlarmKind, raised: bool) -> bool {
        if raised {
            self.alarms.insert((member, kind))
        } else {
            self.alarms.remove(&(member, kind))
        }
    }

    /// Forgets every alarm of a member that left the ensemble.
    pub fn forget_member(&mut self, member: u64) {
        self.alarms.retain(|(m, _)| *m != member);
    }

    /// Encodes for a snapshot: whether set, every setting, the alarms.
    pub(crate) fn write(&self, w: &mut Writer) {
        w.write_bool(self.set);
        Setting::write_all(w, &self.all());
        let alarms: Vec<&Alarm> = self.alarms.iter().collect();
        w.write_vec(&alarms, |w, (member, kind)| {
            w.write_i64(*member as i64);
            w.write_i32(kind.code());
        });
    }

    /// Decodes what `write` wrote.
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<ClusterSettings, DecodeError> {
        let set = r.read_bool()?;
        let mut settings = ClusterSettings::default();
        settings.apply(false, &Setting::read_all(r)?);
        settings.set = set;
        let alarms = r.read_vec(12, |r| {
            let member = r.read_i64()? as u64;
            Ok((member, AlarmKind::from_code(r.read_i32()?)?))
        })?;
        settings.alarms = alarms.into_iter().collect();
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_initial_change_never_overrides_a_setting_made_first() {
        let mut s = ClusterSettings::default();
        assert!(s.apply(false, &[Setting::NamespaceZnodes(5)]));
        assert!(!s.apply(true, &[Setting::NamespaceZnodes(7)]));
        assert_eq!(s.quotas.namespace_znodes, 5);
        let mut fresh = ClusterSettings::default();
        assert!(fresh.apply(true, &[Setting::CheckIdentities(true)]));
        assert!(fresh.set && fresh.tenancy.check_identities);
    }

    #[test]
    fn round_trip() {
        let mut s = ClusterSettings::default();
        s.apply(
            false,
            &[Setting::CheckIdentities(true), Setting::SharedBytes(9)],
        );
        s.set_alarm(3, AlarmKind::NoSpace, true);
        let mut w = Writer::new();
        s.write(&mut w);
        let bytes = w.into_inner();
        let mut r = Reader::new(&bytes);
        assert_eq!(ClusterSettings::read(&mut r), Ok(s));
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn the_feature_level_only_rises_survives_a_snapshot_and_leaves_the_flags_pending() {
        let mut s = ClusterSettings::default();
        assert_eq!(s.feature_level, FeatureLevel(1));
        assert!(
            !s.all().contains(&Setting::FeatureLevel(1)),
            "base level not written"
        );
        s.apply(false, &[Setting::FeatureLevel(2)]);
        assert!(!s.set, "the leader's flags still apply after a level entry");
        s.apply(false, &[Setting::FeatureLevel(1)]);
        assert_eq!(
            s.feature_level,
            FeatureLevel(2),
            "never lowered by an entry"
        );
        let mut w = Writer::new();
        s.write(&mut w);
        let bytes = w.into_inner();
        let read = ClusterSettings::read(&mut Reader::new(&bytes)).expect("decodes");
        assert_eq!(read.feature_level, FeatureLevel(2));
        assert!(s.apply(true, &[Setting::CheckIdentities(true)]));
    }

    #[test]
    fn alarms_clear_and_leave_with_their_member() {
        let mut s = ClusterSettings::default();
        assert!(s.set_alarm(2, AlarmKind::NoSpace, true));
        assert!(!s.set_alarm(2, AlarmKind::NoSpace, true));
        assert!(s.alarmed());
        s.forget_member(2);
        assert!(!s.alarmed());
        assert!(!s.set_alarm(2, AlarmKind::NoSpace, false));
    }

    #[test]
    fn unknown_tags_and_negative_counts_do_not_decode() {
        for (tag, value) in [(99, 1), (TAG_SHARED_BYTES, -1), (TAG_FEATURE_LEVEL, -1)] {
            let mut w = Writer::new();
            w.write_i32(1);
            w.write_i32(tag);
            w.write_i64(value);
            let bytes = w.into_inner();
            assert!(Setting::read_all(&mut Reader::new(&bytes)).is_err());
        }
    }
}
