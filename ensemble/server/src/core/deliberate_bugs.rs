//! Known-wrong behaviours the simulation switches on to prove its checkers find them.
//!
//! They exist only in builds with the `testing` feature (the simulation's and the workspace's
//! test build); elsewhere `DeliberateBugs` has no fields and every question answers `false`,
//! so the wrong branches are compiled out of the product.

use baton_machine::{Applied, Command, StateMachine};

/// Which deliberate bugs are on.
#[cfg(feature = "testing")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliberateBugs {
    /// Answer `sync` at once from this member's state, skipping the leader's ReadIndex, so a
    /// read after `sync` can be stale.
    pub sync_without_read_index: bool,
    /// Members with an even id apply alarm entries as no-ops, as if each member decided the
    /// alarm from its own view: the members' settings then differ at the same index.
    pub alarms_on_odd_members_only: bool,
    /// Members with an even id store null znode data as null below feature level 2, as if
    /// they switched the level-2 behaviour on by their build rather than by the level entry:
    /// their trees then differ from the others' at the same index.
    pub null_data_before_level: bool,
    /// Members with an even id apply writes with the namespace policy off whatever the
    /// replicated setting says, as a member going by its own `--check-identities` flag did:
    /// their trees then differ from the others' at the same index.
    pub policy_off_on_even_members: bool,
}

/// Which deliberate bugs are on: none, in a build without the `testing` feature.
#[cfg(not(feature = "testing"))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliberateBugs;

#[cfg(feature = "testing")]
impl DeliberateBugs {
    /// None of them: the only setting production uses.
    pub const NONE: DeliberateBugs = DeliberateBugs {
        sync_without_read_index: false,
        alarms_on_odd_members_only: false,
        null_data_before_level: false,
        policy_off_on_even_members: false,
    };

    pub(super) fn sync_without_read_index(&self) -> bool {
        self.sync_without_read_index
    }

    pub(super) fn alarms_on_odd_members_only(&self) -> bool {
        self.alarms_on_odd_members_only
    }

    /// Applies `cmd` at `index` as member `id` does with these bugs on.
    pub(super) fn apply(
        &self,
        id: u64,
        sm: &mut StateMachine,
        index: i64,
        cmd: &Command,
    ) -> Applied {
        use baton_machine::deliberate::{with_null_data_early, with_policy_ignored};
        let even = id.is_multiple_of(2);
        let early = self.null_data_before_level && even;
        let no_policy = self.policy_off_on_even_members && even;
        with_null_data_early(early, || {
            with_policy_ignored(no_policy, || sm.apply(index, cmd))
        })
    }
}

#[cfg(not(feature = "testing"))]
impl DeliberateBugs {
    /// None of them: the only setting there is.
    pub const NONE: DeliberateBugs = DeliberateBugs;

    pub(super) const fn sync_without_read_index(&self) -> bool {
        false
    }

    pub(super) const fn alarms_on_odd_members_only(&self) -> bool {
        false
    }

    /// Applies `cmd` at `index`.
    pub(super) fn apply(
        &self,
        _id: u64,
        sm: &mut StateMachine,
        index: i64,
        cmd: &Command,
    ) -> Applied {
        sm.apply(index, cmd)
    }
}
