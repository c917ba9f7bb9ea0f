//! Keeping the ensemble's replicated settings (DESIGN.md §1, `/v1/settings`) at what the spec
//! asks: the leader reports them in its status; when they differ, the differing ones are sent
//! with `PUT /v1/settings` to the leader, following `NotLeader` to whoever leads now.

use super::{AdminError, EnsembleAdmin, EnsembleSettings, EnsembleView, Roster, SettingsValues};

/// How many members a change is sent to before giving up for this reconcile: the leader the
/// view names, and the ones `NotLeader` points at while leadership moves.
const ATTEMPTS: usize = 3;

/// What `keep` found and did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SettingsOutcome {
    /// The settings as the ensemble applies them now (after the change, if one was made);
    /// `None` when no leader answered, or it predates the settings.
    pub applied: Option<EnsembleSettings>,
    /// The change sent and applied (`PUT /v1/settings` body), if one was needed.
    pub changed: Option<serde_json::Value>,
}

/// Makes the ensemble's settings `desired`, if its leader reports others. Nothing is sent
/// without a quorum (the change could not apply) or when the leader predates the settings
/// (mid-upgrade: DESIGN.md §4 says to finish the roll first).
pub async fn keep<A: EnsembleAdmin>(
    admin: &A,
    roster: &Roster,
    view: &EnsembleView,
    desired: &SettingsValues,
) -> Result<SettingsOutcome, AdminError> {
    let Some(leader) = view.leader() else {
        return Ok(SettingsOutcome::default());
    };
    let Some(current) = view.statuses.get(&leader).and_then(|s| s.settings.clone()) else {
        return Ok(SettingsOutcome::default());
    };
    let Some(changes) = desired.changes_from(&current.values) else {
        return Ok(SettingsOutcome {
            applied: Some(current),
            changed: None,
        });
    };
    if !view.has_quorum() {
        return Ok(SettingsOutcome {
            applied: Some(current),
            changed: None,
        });
    }
    let mut target = leader;
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let Some(addr) = roster.admin_addr(target) else {
            break;
        };
        match admin.put_settings(addr, &changes).await {
            Ok(applied) => {
                return Ok(SettingsOutcome {
                    applied: Some(applied),
                    changed: Some(changes),
                });
            }
            // Leadership moved since the view was taken: the member names the new leader.
            Err(AdminError::NotLeader { leader_id, .. })
                if leader_id != 0 && leader_id != target =>
            {
                tracing::info!(
                    from = target,
                    to = leader_id,
                    "settings: following the leader"
                );
                target = leader_id;
            }
            Err(e) => return Err(e),
        }
        last = Some(target);
    }
    Err(AdminError::NotLeader {
        addr: last
            .and_then(|id| roster.admin_addr(id))
            .unwrap_or_default()
            .to_string(),
        leader_id: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_differing_settings_are_sent() {
        let have = SettingsValues {
            check_identities: false,
            namespace_znodes: 100_000,
            namespace_bytes: 64 << 20,
            shared_znodes: 2_000_000,
            shared_bytes: 256 << 20,
            ephemerals_per_session: 10_000,
        };
        assert_eq!(have.changes_from(&have), None);
        let want = SettingsValues {
            check_identities: true,
            namespace_bytes: 32 << 20,
            ..have
        };
        assert_eq!(
            want.changes_from(&have),
            Some(serde_json::json!({"checkIdentities": true, "namespaceBytes": 33554432}))
        );
    }
}
