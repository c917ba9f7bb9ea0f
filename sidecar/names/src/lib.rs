//! What an election or lock name may be. One copy for the two places that check it: the sidecar
//! (`--election`, `/leader/NAME`, `/lock/NAME`) and the operator's injection webhook, which
//! refuses a pod whose election the sidecar would refuse rather than let it crash-loop. A crate
//! of its own, without dependencies, so the operator does not build the sidecar's ZooKeeper
//! client and HTTP server to share a list of four words.

use std::fmt;

/// Longest accepted election or lock name, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// Election names that are sub-resources of `/leader` (`/leader/ready`, `/leader/resign`,
/// `/leader/campaign`, `/leader/release`), so `/leader/NAME` could not name such an election.
pub const RESERVED_ELECTIONS: &[&str] = &["ready", "resign", "campaign", "release"];

/// Why a string is not a usable election or lock name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameError {
    Empty,
    TooLong(usize),
    BadStart(String),
    BadCharacter {
        name: String,
        bad: char,
    },
    /// Only for elections: one of [`RESERVED_ELECTIONS`].
    Reserved(String),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => write!(f, "name is empty"),
            NameError::TooLong(len) => {
                write!(f, "name is {len} bytes long; the limit is {MAX_NAME_LEN}")
            }
            NameError::BadStart(name) => {
                write!(f, "name {name:?} must start with a letter or a digit")
            }
            NameError::BadCharacter { name, bad } => write!(
                f,
                "name {name:?} contains {bad:?}; use only letters, digits, '-', '_' and '.'"
            ),
            NameError::Reserved(name) => write!(
                f,
                "election name {name:?} is reserved (it is a sub-resource of /leader: {})",
                RESERVED_ELECTIONS.join(", ")
            ),
        }
    }
}

impl std::error::Error for NameError {}

/// Checks a lock (or any resource) name: letters, digits, `-`, `_` and `.`, starting with a
/// letter or digit, at most [`MAX_NAME_LEN`] bytes (so one znode path segment and one URL path
/// segment: no `/`, no `.`/`..`, nothing that needs escaping).
pub fn check_name(name: &str) -> Result<(), NameError> {
    let Some(first) = name.chars().next() else {
        return Err(NameError::Empty);
    };
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong(name.len()));
    }
    if !first.is_ascii_alphanumeric() {
        return Err(NameError::BadStart(name.to_owned()));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(NameError::BadCharacter {
            name: name.to_owned(),
            bad,
        });
    }
    Ok(())
}

/// Checks an election name: [`check_name`], and none of [`RESERVED_ELECTIONS`].
pub fn check_election(name: &str) -> Result<(), NameError> {
    if RESERVED_ELECTIONS.contains(&name) {
        return Err(NameError::Reserved(name.to_owned()));
    }
    check_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reserved_word_is_refused_as_an_election_but_not_as_a_lock() {
        for word in RESERVED_ELECTIONS {
            assert_eq!(
                check_election(word),
                Err(NameError::Reserved(word.to_string()))
            );
            assert_eq!(check_name(word), Ok(()));
        }
        assert_eq!(check_election("web"), Ok(()));
        assert_eq!(check_election("campaigns"), Ok(()));
    }

    #[test]
    fn the_grammar() {
        assert_eq!(check_name(""), Err(NameError::Empty));
        assert_eq!(check_name(&"a".repeat(MAX_NAME_LEN)), Ok(()));
        assert_eq!(
            check_name(&"a".repeat(MAX_NAME_LEN + 1)),
            Err(NameError::TooLong(MAX_NAME_LEN + 1))
        );
        assert_eq!(check_name(".."), Err(NameError::BadStart("..".into())));
        assert_eq!(check_name("-a"), Err(NameError::BadStart("-a".into())));
        assert_eq!(
            check_name("a/b"),
            Err(NameError::BadCharacter {
                name: "a/b".into(),
                bad: '/'
            })
        );
        assert_eq!(check_name("a.b_c-9"), Ok(()));
    }
}
