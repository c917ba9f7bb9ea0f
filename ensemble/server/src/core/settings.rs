//! The replicated settings and the disk-space alarm, as the core drives them (DESIGN.md §4
//! "What one tenant can take"). What they decide happens at apply, in `baton_machine`
//! (`settings.rs`, `quota.rs`); this part gets the entries into the log:
//!
//! - **initial settings**: a leader that finds the settings never set proposes this member's
//!   flags once per term, as an `initial` change that apply ignores if anything set them first;
//! - **admin changes** (`PUT /v1/settings`, at the leader): proposed, answered once applied;
//! - **the disk alarm**: the runtime reports this member's free space (`CoreMsg::DiskSpace`);
//!   below the watermark the member wants its NOSPACE alarm raised, and once free space is back
//!   above the watermark plus the hysteresis it wants it cleared. Each tick it compares what it
//!   wants with the replicated alarm set and, while they differ, asks the leader (at most once
//!   per `ALARM_RETRY`): the alarm is an entry, so every member refuses the same writes at the
//!   same index, and a lost request is simply asked again.

use std::time::{Duration, Instant};

use baton_machine::{AlarmKind, Command, CommandKind, QuotaRefusal, Setting};
use serde_json::json;
use tokio::sync::oneshot;

use super::control::Control;
use super::membership::AdminError;
use super::throttled_log::ThrottledLog;
use super::{Core, clock};

/// How often a member repeats its request to raise or clear its alarm while the replicated
/// state does not show it yet (a lost forward, a leader change).
const ALARM_RETRY: Duration = Duration::from_secs(1);

/// One line per interval about writes refused by quotas or the alarm.
static QUOTA_LOG: ThrottledLog = ThrottledLog::every_10s();

/// Free space watermark of this member's data volume (`--min-free-disk-bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskWatermark {
    /// Below this many free bytes the member raises its NOSPACE alarm; 0 turns the alarm off.
    pub min_free_bytes: u64,
    /// The alarm clears once free space is at least `min_free_bytes` plus this, so that a
    /// volume hovering at the watermark does not raise and clear it on every check.
    pub hysteresis_bytes: u64,
}

type SettingsReply = oneshot::Sender<Result<serde_json::Value, AdminError>>;

/// The core's part of the settings and the alarm.
#[derive(Default)]
pub(super) struct SettingsState {
    /// This member's flags: what it proposes when it leads an ensemble whose settings were
    /// never set.
    initial: Vec<Setting>,
    /// The term in which this member last proposed them (once per term is enough: apply
    /// ignores them after the first, and a lost one is proposed again next term).
    initial_proposed_in: Option<u64>,
    /// Admin changes proposed and the index their entry got, answered once it applies.
    waiters: Vec<(u64, u64, SettingsReply)>,
    watermark: Option<DiskWatermark>,
    /// Whether this member wants its NOSPACE alarm up (None until the first report).
    wants_alarm: Option<bool>,
    last_free_bytes: Option<u64>,
    last_alarm_request: Option<Instant>,
}

impl Core {
    /// The settings this member proposes if it leads an ensemble whose settings were never set
    /// (its flags: `--check-identities`, `--quota-*`, `--max-ephemerals-per-session`).
    pub fn set_initial_settings(&mut self, initial: Vec<Setting>) {
        self.settings.initial = initial;
    }

    /// Turns the disk alarm on with this watermark (off until set, as in the simulation unless
    /// it models a disk).
    pub fn set_disk_watermark(&mut self, watermark: DiskWatermark) {
        self.settings.watermark = Some(watermark);
    }

    /// At the leader: proposes this member's flags if nothing has set the settings yet.
    pub(super) fn propose_initial_settings(&mut self) {
        let term = self.term();
        if !self.is_leader()
            || self.sm.settings().set
            || self.settings.initial_proposed_in == Some(term)
        {
            return;
        }
        self.settings.initial_proposed_in = Some(term);
        let cmd = Command {
            session_id: 0,
            xid: 0,
            time_ms: self.wall_ms(),
            kind: CommandKind::SetSettings {
                initial: true,
                changes: self.settings.initial.clone(),
            },
        };
        match self.node.propose(vec![], cmd.encode()) {
            Ok(()) => tracing::info!(
                settings = ?self.settings.initial,
                "the ensemble's settings were never set: proposing this member's flags"
            ),
            Err(e) => tracing::warn!(error = %e, "could not propose the initial settings"),
        }
    }

    /// `PUT /v1/settings` at the leader: proposes `changes`, answered once the entry applies.
    pub(super) fn on_change_settings(&mut self, changes: Vec<Setting>, reply: SettingsReply) {
        if !self.is_leader() {
            let leader_id = self.node.raft.leader_id;
            let _ = reply.send(Err(AdminError::NotLeader { leader_id }));
            return;
        }
        if changes.is_empty() {
            let _ = reply.send(Ok(self.settings_json()));
            return;
        }
        let cmd = Command {
            session_id: 0,
            xid: 0,
            time_ms: self.wall_ms(),
            kind: CommandKind::SetSettings {
                initial: false,
                changes: changes.clone(),
            },
        };
        if let Err(e) = self.node.propose(vec![], cmd.encode()) {
            let _ = reply.send(Err(AdminError::Conflict(format!(
                "the leader could not append the change: {e}"
            ))));
            return;
        }
        let index = self.node.raft.raft_log.last_index();
        tracing::info!(?changes, index, "settings change proposed");
        self.settings.waiters.push((self.term(), index, reply));
    }

    /// Answers the admin changes whose entries have applied.
    pub(super) fn answer_settings_waiters(&mut self) {
        if self.settings.waiters.is_empty() {
            return;
        }
        let applied = self.sm.last_applied() as u64;
        let term = self.term();
        let waiters = std::mem::take(&mut self.settings.waiters);
        for (proposed_in, index, reply) in waiters {
            if proposed_in != term {
                // The entry may have been replaced by a new leader's log.
                let _ = reply.send(Err(AdminError::Conflict(
                    "leadership changed before the change was applied; read GET /v1/settings \
                     and repeat it if it is not there"
                        .into(),
                )));
            } else if index <= applied {
                let _ = reply.send(Ok(self.settings_json()));
            } else {
                self.settings.waiters.push((proposed_in, index, reply));
            }
        }
    }

    /// The settings as `GET/PUT /v1/settings` and `GET /v1/status` show them.
    pub(super) fn settings_json(&self) -> serde_json::Value {
        let s = self.sm.settings();
        let q = s.quotas;
        let alarms: Vec<_> = s
            .alarms
            .iter()
            .map(|(member, kind)| json!({ "member": member, "kind": kind.label() }))
            .collect();
        json!({
            "set": s.set,
            "appliedIndex": self.sm.last_applied(),
            "checkIdentities": s.tenancy.check_identities,
            "namespaceZnodes": q.namespace_znodes,
            "namespaceBytes": q.namespace_bytes,
            "sharedZnodes": q.shared_znodes,
            "sharedBytes": q.shared_bytes,
            "ephemeralsPerSession": q.ephemerals_per_session,
            "alarms": alarms,
        })
    }

    /// The runtime measured this member's free space: decide whether the alarm is wanted.
    pub(super) fn on_disk_space(&mut self, free_bytes: u64) {
        let Some(mark) = self.settings.watermark else {
            return;
        };
        self.settings.last_free_bytes = Some(free_bytes);
        self.metrics.disk_free_bytes.set(free_bytes as i64);
        if mark.min_free_bytes == 0 {
            self.settings.wants_alarm = Some(false);
            return;
        }
        let was = self.settings.wants_alarm.unwrap_or(false);
        let wants = if was {
            free_bytes < mark.min_free_bytes.saturating_add(mark.hysteresis_bytes)
        } else {
            free_bytes < mark.min_free_bytes
        };
        self.settings.wants_alarm = Some(wants);
        self.reclaim_if_shrunk(
            free_bytes,
            mark.min_free_bytes.saturating_add(mark.hysteresis_bytes),
        );
        if wants != was {
            tracing::warn!(
                free_bytes,
                min_free_bytes = mark.min_free_bytes,
                clears_at = mark.min_free_bytes.saturating_add(mark.hysteresis_bytes),
                "{}",
                if wants {
                    "the data volume is below its free-space watermark: asking for the NOSPACE alarm, which stops writes that add data on every member"
                } else {
                    "the data volume has room again: asking to clear this member's NOSPACE alarm"
                }
            );
        }
        self.reconcile_alarm();
    }

    /// Asks the leader to make the replicated alarm match what this member wants, if it does
    /// not yet (at most once per `ALARM_RETRY`).
    pub(super) fn reconcile_alarm(&mut self) {
        let Some(wants) = self.settings.wants_alarm else {
            return;
        };
        if self
            .sm
            .settings()
            .alarms
            .contains(&(self.cfg.id, AlarmKind::NoSpace))
            == wants
        {
            return;
        }
        let now = self.now();
        if self
            .settings
            .last_alarm_request
            .is_some_and(|at| clock::since(now, at) < ALARM_RETRY)
        {
            return;
        }
        if self.node.raft.leader_id == 0 {
            return;
        }
        self.settings.last_alarm_request = Some(now);
        self.propose_own_alarm(wants);
    }

    /// Asks the leader for an entry that changes nothing: this member's alarm as it stands.
    pub(super) fn restate_own_alarm(&mut self) {
        let raised = self
            .sm
            .settings()
            .alarms
            .contains(&(self.cfg.id, AlarmKind::NoSpace));
        self.propose_own_alarm(raised);
    }

    /// Proposes (at the leader) or forwards this member's NOSPACE alarm as `raised`.
    fn propose_own_alarm(&mut self, raised: bool) {
        let me = self.cfg.id;
        let leader = self.node.raft.leader_id;
        if leader == 0 {
            return;
        }
        let cmd = Command {
            session_id: 0,
            xid: 0,
            time_ms: self.wall_ms(),
            kind: CommandKind::Alarm {
                member: me,
                kind: AlarmKind::NoSpace,
                raised,
            },
        };
        if leader == me {
            if let Err(e) = self.node.propose(vec![], cmd.encode()) {
                tracing::warn!(error = %e, "could not propose this member's alarm");
            }
        } else {
            let msg = Control::Propose {
                term: self.term(),
                session_id: 0,
                xid: 0,
                prev_xid: None,
                command: cmd.encode(),
            };
            self.send_control(leader, &msg);
        }
    }

    /// An applied entry changed the settings or an alarm: log it and refresh the gauges.
    pub(super) fn on_settings_applied(&mut self, cmd: &Command) {
        match &cmd.kind {
            CommandKind::Alarm {
                member,
                kind,
                raised,
            } => {
                tracing::warn!(
                    member,
                    kind = kind.label(),
                    raised,
                    "{}",
                    if *raised {
                        "alarm raised: writes that add data are refused with BadArguments (-8) on every member until it clears; reads, deletes and sessions go on"
                    } else {
                        "alarm cleared"
                    }
                );
            }
            CommandKind::SetSettings { initial, changes } => {
                tracing::info!(initial, ?changes, "the ensemble's settings changed");
            }
            _ => {}
        }
        self.publish_alarms();
        self.publish_feature_level();
    }

    /// `baton_alarm{kind}`: 1 while any member has an alarm of that kind up.
    pub(super) fn publish_alarms(&self) {
        let alarms = &self.sm.settings().alarms;
        for kind in AlarmKind::ALL {
            let up = alarms.iter().any(|(_, k)| *k == kind);
            self.metrics
                .alarm
                .get_or_create(&[("kind", kind.label())])
                .set(i64::from(up));
        }
    }

    /// Counts and logs a write of a session connected here that a quota or the alarm refused.
    pub(super) fn count_quota_refusal(&self, session_id: i64, why: QuotaRefusal, early: bool) {
        let Some(conn) = self.clients.of_session(session_id) else {
            return;
        };
        self.metrics
            .quota_refusals
            .get_or_create(&[("reason", why.label())])
            .inc();
        if let Some(suppressed) = QUOTA_LOG.admit() {
            tracing::info!(
                peer = %conn.peer, session = %format_args!("0x{session_id:x}"), reason = %why,
                early, similar_lines_suppressed = suppressed,
                "write refused with BadArguments (-8)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use baton_proto::codec::decode_reply;
    use baton_proto::{ConnectRequest, CreateRequest, ErrorCode, OpCode, Request, open_acl_unsafe};
    use tokio::sync::oneshot;

    use super::super::*;
    use super::*;

    const MIN_FREE: u64 = 1000;

    /// A one-member ensemble with `initial` as its flags and the disk alarm on.
    fn member(dir: &tempfile::TempDir, initial: Vec<Setting>) -> (Core, Arc<ManualClock>) {
        let (mut core, clock) =
            super::super::tests::one_member_core(dir.path(), 100_000).expect("core");
        core.set_initial_settings(initial);
        core.set_disk_watermark(DiskWatermark {
            min_free_bytes: MIN_FREE,
            hysteresis_bytes: MIN_FREE,
        });
        step(&mut core, vec![]);
        assert!(core.raft_view().is_leader, "alone, it leads at once");
        (core, clock)
    }

    fn step(core: &mut Core, msgs: Vec<CoreMsg>) {
        assert!(core.step(msgs).expect("no storage failure"));
        assert!(core.step(vec![]).expect("no storage failure"));
    }

    fn alarmed(core: &Core) -> bool {
        core.state()
            .settings()
            .alarms
            .contains(&(1, AlarmKind::NoSpace))
    }

    #[test]
    fn a_new_ensembles_leader_proposes_its_flags_once() {
        let dir = tempfile::tempdir().expect("dir");
        let (mut core, _) = member(&dir, vec![Setting::CheckIdentities(true)]);
        let settings = core.state().settings().clone();
        assert!(settings.set && settings.tenancy.check_identities);
        // An admin change is not undone by the flags on the next ticks or a restart.
        let (reply, mut answer) = oneshot::channel();
        core.on_change_settings(vec![Setting::CheckIdentities(false)], reply);
        step(&mut core, vec![CoreMsg::Tick]);
        let body = answer.try_recv().expect("answered").expect("applied");
        assert_eq!(body["checkIdentities"], false);
        drop(core);
        let (core, _) = member(&dir, vec![Setting::CheckIdentities(true)]);
        assert!(!core.state().tenancy().check_identities);
    }

    #[test]
    fn short_of_space_a_shrunk_tree_is_snapshotted_twice_without_new_writes_then_left_alone() {
        let dir = tempfile::tempdir().expect("dir");
        let (mut core, clock) = member(&dir, vec![]);
        // As if both kept snapshots held a tree of 100 MiB that was then deleted.
        core.reclaim.reset(100 << 20);
        let short = || CoreMsg::DiskSpace {
            free_bytes: 2 * MIN_FREE - 1,
        };
        let applied = core.state().last_applied() as u64;
        assert!(applied > core.last_snapshot_index);
        step(&mut core, vec![short()]);
        assert_eq!(core.last_snapshot_index, applied, "a snapshot at once");

        // Nothing applied since: the member asks for an entry, and snapshots past it.
        step(&mut core, vec![short()]);
        let entry = core.state().last_applied() as u64;
        assert!(entry > applied, "an entry was appended and applied");
        assert!(!alarmed(&core), "the entry restated the alarm as it was");
        clock.set(clock.elapsed() + Duration::from_secs(6));
        step(&mut core, vec![short()]);
        assert_eq!(core.last_snapshot_index, entry, "the second snapshot");

        // Both kept snapshots hold the small tree now: no more snapshots, no more entries.
        clock.set(clock.elapsed() + Duration::from_secs(6));
        step(&mut core, vec![short()]);
        assert_eq!(core.state().last_applied() as u64, entry);
        assert_eq!(core.last_snapshot_index, entry);
    }

    #[test]
    fn the_alarm_goes_up_below_the_watermark_and_clears_past_the_hysteresis() {
        let dir = tempfile::tempdir().expect("dir");
        let (mut core, clock) = member(&dir, vec![]);
        step(
            &mut core,
            vec![CoreMsg::DiskSpace {
                free_bytes: MIN_FREE,
            }],
        );
        assert!(!alarmed(&core), "at the watermark is not below it");
        step(
            &mut core,
            vec![CoreMsg::DiskSpace {
                free_bytes: MIN_FREE - 1,
            }],
        );
        assert!(alarmed(&core));

        // A write that adds data is answered at once, without a log entry.
        let (tx, mut out) = unlimited_outbound_queue();
        let (done, _outcome) = oneshot::channel();
        let req = ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: 0,
            timeout_ms: 4000,
            session_id: 0,
            passwd: vec![0; 16],
            read_only: Some(false),
        };
        let peer = "127.0.0.1:9999".parse().expect("address");
        step(
            &mut core,
            vec![CoreMsg::Connect {
                conn: 1,
                peer,
                out: tx,
                req,
                done,
            }],
        );
        while out.try_recv().is_some() {}
        let last = core.node.raft.raft_log.last_index();
        let request = Request::Create {
            op: OpCode::Create,
            req: CreateRequest {
                path: "/x".into(),
                data: Some(vec![1]),
                acl: open_acl_unsafe(),
                flags: 0,
                ttl: None,
            },
        };
        step(
            &mut core,
            vec![CoreMsg::Request {
                conn: 1,
                xid: 7,
                request,
            }],
        );
        assert_eq!(core.node.raft.raft_log.last_index(), last, "no entry");
        let Some(Outbound::Frame(frame)) = out.try_recv() else {
            panic!("no reply");
        };
        let (hdr, _) = decode_reply(OpCode::Create, &frame[4..]).expect("a reply");
        assert_eq!((hdr.xid, hdr.err), (7, ErrorCode::REFUSED.code()));

        // Back above the watermark but not past the hysteresis: still up.
        clock.set(clock.elapsed() + ALARM_RETRY);
        step(
            &mut core,
            vec![CoreMsg::DiskSpace {
                free_bytes: 2 * MIN_FREE - 1,
            }],
        );
        assert!(alarmed(&core));
        step(
            &mut core,
            vec![CoreMsg::DiskSpace {
                free_bytes: 2 * MIN_FREE,
            }],
        );
        assert!(!alarmed(&core));
    }
}
