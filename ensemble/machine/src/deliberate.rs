//! The simulation's deliberate bugs that act at apply: a member applying level-2 behaviour
//! before the level entry (`early-feature`) and a member deciding writes by its own
//! `--check-identities` flag (`local-policy`), which the simulation's check of the replicas'
//! trees must catch. Thread-locals, so no production type carries a switch; and only with the
//! `testing` feature: elsewhere both questions answer `false` and the switches do not exist.

#[cfg(feature = "testing")]
mod switches {
    use std::cell::Cell;

    thread_local! {
        pub(super) static NULL_DATA_EARLY: Cell<bool> = const { Cell::new(false) };
        pub(super) static POLICY_IGNORED: Cell<bool> = const { Cell::new(false) };
    }

    /// Sets `switch` while `apply` runs, when `on`.
    pub(super) fn with<R>(
        switch: &'static std::thread::LocalKey<Cell<bool>>,
        on: bool,
        apply: impl FnOnce() -> R,
    ) -> R {
        if !on {
            return apply();
        }
        switch.set(true);
        let out = apply();
        switch.set(false);
        out
    }
}

/// Runs `apply` with null data kept whatever the level, when `on` (`early-feature`).
#[cfg(feature = "testing")]
pub fn with_null_data_early<R>(on: bool, apply: impl FnOnce() -> R) -> R {
    switches::with(&switches::NULL_DATA_EARLY, on, apply)
}

/// Runs `apply` with the namespace policy off whatever the replicated setting says, when `on`
/// (`local-policy`).
#[cfg(feature = "testing")]
pub fn with_policy_ignored<R>(on: bool, apply: impl FnOnce() -> R) -> R {
    switches::with(&switches::POLICY_IGNORED, on, apply)
}

pub(crate) fn null_data_early() -> bool {
    #[cfg(feature = "testing")]
    return switches::NULL_DATA_EARLY.get();
    #[cfg(not(feature = "testing"))]
    false
}

pub(crate) fn policy_ignored() -> bool {
    #[cfg(feature = "testing")]
    return switches::POLICY_IGNORED.get();
    #[cfg(not(feature = "testing"))]
    false
}
