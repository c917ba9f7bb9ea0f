//! The sequential specification of one znode: what each call does to it and must answer.

use std::fmt;

use crate::history::show;

/// One znode as a reader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Znode {
    Absent,
    Present { data: Vec<u8>, version: i32 },
}

impl fmt::Display for Znode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Znode::Absent => write!(f, "absent"),
            Znode::Present { data, version } => write!(f, "{} v{version}", show(data)),
        }
    }
}

/// The search's znode state, with data interned so states hash and compare cheaply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum State {
    Absent,
    Present { data: u32, version: i32 },
}

/// One operation reduced to what the model needs; `None` answers are unknown outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Create {
        data: u32,
    },
    SetData {
        data: u32,
        expected_version: i32,
        new_version: Option<i32>,
    },
    Delete {
        expected_version: i32,
    },
    Read {
        seen: State,
    },
    /// An answered error: `attempt` must fail with `error` here, and changes nothing.
    Refused {
        attempt: Attempt,
        error: &'static str,
    },
}

/// The write a refused operation attempted (its answer is the error, so no new version).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    Create,
    SetData { expected_version: i32 },
    Delete { expected_version: i32 },
}

/// Why the model refuses an operation in a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The write would have failed here although it was acknowledged.
    WouldFail(&'static str),
    /// An acknowledged setData reported a version other than the model's next one.
    WrongVersion { expected: i32, reported: i32 },
    /// A read saw something other than the model's state.
    StaleRead,
    /// An unknown-outcome write would change nothing here, so placing it adds nothing.
    NoEffect,
    /// A write answered with an error would have succeeded, or failed otherwise, here.
    NotRefused {
        answered: &'static str,
        here: Option<&'static str>,
    },
}

fn version_matches(expected: i32, version: i32) -> bool {
    expected == -1 || expected == version
}

/// The state after `step` in `state`, or why `step` cannot happen there.
pub(crate) fn apply(state: State, step: Step) -> Result<State, Refusal> {
    match (step, state) {
        (Step::Create { data }, State::Absent) => Ok(State::Present { data, version: 0 }),
        (Step::Create { .. }, State::Present { .. }) => Err(Refusal::WouldFail("NodeExists")),
        (Step::SetData { .. }, State::Absent) => Err(Refusal::WouldFail("NoNode")),
        (
            Step::SetData {
                data,
                expected_version,
                new_version,
            },
            State::Present { version, .. },
        ) => {
            if !version_matches(expected_version, version) {
                return Err(Refusal::WouldFail("BadVersion"));
            }
            let next = version.wrapping_add(1);
            match new_version {
                Some(reported) if reported != next => Err(Refusal::WrongVersion {
                    expected: next,
                    reported,
                }),
                _ => Ok(State::Present {
                    data,
                    version: next,
                }),
            }
        }
        (Step::Delete { .. }, State::Absent) => Err(Refusal::WouldFail("NoNode")),
        (Step::Delete { expected_version }, State::Present { version, .. }) => {
            if version_matches(expected_version, version) {
                Ok(State::Absent)
            } else {
                Err(Refusal::WouldFail("BadVersion"))
            }
        }
        (Step::Refused { attempt, error }, state) => {
            let tried = match attempt {
                Attempt::Create => Step::Create { data: u32::MAX },
                Attempt::SetData { expected_version } => Step::SetData {
                    data: u32::MAX,
                    expected_version,
                    new_version: None,
                },
                Attempt::Delete { expected_version } => Step::Delete { expected_version },
            };
            match apply(state, tried) {
                Err(Refusal::WouldFail(here)) if here == error => Ok(state),
                Err(Refusal::WouldFail(here)) => Err(Refusal::NotRefused {
                    answered: error,
                    here: Some(here),
                }),
                _ => Err(Refusal::NotRefused {
                    answered: error,
                    here: None,
                }),
            }
        }
        (Step::Read { seen }, state) => {
            if seen == state {
                Ok(state)
            } else {
                Err(Refusal::StaleRead)
            }
        }
    }
}

/// Interned znode data of one key, to print states back.
#[derive(Debug, Default)]
pub(crate) struct DataTable {
    values: Vec<Vec<u8>>,
}

impl DataTable {
    /// The id of `data`, adding it if new.
    pub(crate) fn intern(&mut self, data: &[u8]) -> u32 {
        if let Some(index) = self.values.iter().position(|value| value == data) {
            return index as u32;
        }
        self.values.push(data.to_vec());
        (self.values.len() - 1) as u32
    }

    /// `state` as a reader would see it.
    pub(crate) fn znode(&self, state: State) -> Znode {
        match state {
            State::Absent => Znode::Absent,
            State::Present { data, version } => Znode::Present {
                data: self.values.get(data as usize).cloned().unwrap_or_default(),
                version,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_data_bumps_the_version_and_checks_the_expected_one() {
        let present = State::Present {
            data: 0,
            version: 3,
        };
        let set = |expected_version, new_version| Step::SetData {
            data: 1,
            expected_version,
            new_version,
        };
        assert_eq!(
            apply(present, set(3, Some(4))),
            Ok(State::Present {
                data: 1,
                version: 4
            })
        );
        assert_eq!(
            apply(present, set(-1, None)),
            Ok(State::Present {
                data: 1,
                version: 4
            })
        );
        assert_eq!(
            apply(present, set(2, Some(3))),
            Err(Refusal::WouldFail("BadVersion"))
        );
        assert_eq!(
            apply(present, set(-1, Some(9))),
            Err(Refusal::WrongVersion {
                expected: 4,
                reported: 9
            })
        );
    }

    #[test]
    fn a_refused_write_must_fail_the_same_way() {
        let present = State::Present {
            data: 0,
            version: 3,
        };
        let refused = |attempt, error| Step::Refused { attempt, error };
        assert_eq!(
            apply(present, refused(Attempt::Create, "NodeExists")),
            Ok(present)
        );
        assert_eq!(
            apply(State::Absent, refused(Attempt::Create, "NodeExists")),
            Err(Refusal::NotRefused {
                answered: "NodeExists",
                here: None
            })
        );
        assert_eq!(
            apply(
                State::Absent,
                refused(
                    Attempt::SetData {
                        expected_version: 3
                    },
                    "BadVersion"
                )
            ),
            Err(Refusal::NotRefused {
                answered: "BadVersion",
                here: Some("NoNode")
            })
        );
    }

    #[test]
    fn create_restarts_versions_at_zero() {
        assert_eq!(
            apply(State::Absent, Step::Create { data: 2 }),
            Ok(State::Present {
                data: 2,
                version: 0
            })
        );
    }
}
