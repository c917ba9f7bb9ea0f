//! Names of elections and locks, and where their znodes live under `/baton`.

use std::fmt;

/// Root of every znode the recipes create.
pub const ROOT: &str = "/baton";
/// Parent of every election folder.
pub const ELECTIONS: &str = "/baton/elections";
/// Parent of every lock folder.
pub const LOCKS: &str = "/baton/locks";

/// Longest accepted election or lock name, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// Why a string is not a usable election or lock name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("name is empty")]
    Empty,
    #[error("name is {0} bytes long; the limit is {MAX_NAME_LEN}")]
    TooLong(usize),
    #[error("name {0:?} must start with a letter or a digit")]
    BadStart(String),
    #[error("name {name:?} contains {bad:?}; use only letters, digits, '-', '_' and '.'")]
    BadCharacter { name: String, bad: char },
}

/// An election or lock name that is safe as one znode path segment (and in a URL path).
///
/// Letters, digits, `-`, `_` and `.`, starting with a letter or digit, at most
/// [`MAX_NAME_LEN`] bytes: no `/`, no `.`/`..`, nothing that needs escaping anywhere.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct ResourceName(String);

impl ResourceName {
    /// Validates `name`; the error says what is wrong with it.
    pub fn new(name: &str) -> Result<Self, NameError> {
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
        Ok(Self(name.to_owned()))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The folder holding this election's candidates.
    pub fn election_dir(&self) -> String {
        format!("{ELECTIONS}/{}", self.0)
    }

    /// The folder holding this lock's queue.
    pub fn lock_dir(&self) -> String {
        format!("{LOCKS}/{}", self.0)
    }
}

impl fmt::Display for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for ResourceName {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_kubernetes_style_names() {
        for ok in [
            "orders",
            "orders-db",
            "a",
            "v1.2_x",
            "0",
            &"x".repeat(MAX_NAME_LEN),
        ] {
            assert_eq!(
                ResourceName::new(ok).map(|n| n.to_string()),
                Ok(ok.to_owned())
            );
        }
    }

    #[test]
    fn rejects_anything_that_is_not_one_safe_segment() {
        assert_eq!(ResourceName::new(""), Err(NameError::Empty));
        assert!(matches!(
            ResourceName::new("."),
            Err(NameError::BadStart(_))
        ));
        assert!(matches!(
            ResourceName::new(".."),
            Err(NameError::BadStart(_))
        ));
        assert!(matches!(
            ResourceName::new("-x"),
            Err(NameError::BadStart(_))
        ));
        assert!(matches!(
            ResourceName::new("a/b"),
            Err(NameError::BadCharacter { bad: '/', .. })
        ));
        assert!(matches!(
            ResourceName::new("a%2Fb"),
            Err(NameError::BadCharacter { bad: '%', .. })
        ));
        assert!(matches!(
            ResourceName::new("caf\u{e9}"),
            Err(NameError::BadCharacter { .. })
        ));
        assert!(matches!(
            ResourceName::new("a\0"),
            Err(NameError::BadCharacter { bad: '\0', .. })
        ));
        assert_eq!(
            ResourceName::new(&"x".repeat(MAX_NAME_LEN + 1)),
            Err(NameError::TooLong(MAX_NAME_LEN + 1))
        );
    }

    #[test]
    fn folders_sit_under_baton() {
        let name = ResourceName::new("orders").expect("valid");
        assert_eq!(name.election_dir(), "/baton/elections/orders");
        assert_eq!(name.lock_dir(), "/baton/locks/orders");
    }
}
