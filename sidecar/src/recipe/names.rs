//! Names of namespaces, elections and locks, and where their znodes live under `/baton`:
//! `/baton/<namespace>/elections/<name>` and `/baton/<namespace>/locks/<name>` (DESIGN.md §4).
//! The namespace is a tenancy boundary: the ensemble (checking identities) lets only sessions
//! of that Kubernetes namespace read or write below `/baton/<namespace>`.

use std::fmt;

/// Root of every znode the recipes create.
pub const ROOT: &str = "/baton";
/// The namespace outside Kubernetes (playground, local use).
pub const DEFAULT_NAMESPACE: &str = "default";
/// Longest Kubernetes namespace name (an RFC 1123 label).
pub const MAX_NAMESPACE_LEN: usize = 63;

/// The name rules, shared with the operator's injection webhook (`sidecar/names`).
pub use baton_names::{MAX_NAME_LEN, NameError};

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
        baton_names::check_name(name)?;
        Ok(Self(name.to_owned()))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The folder holding this election's candidates in `namespace`.
    pub fn election_dir(&self, namespace: &Namespace) -> String {
        format!("{}/{}", namespace.elections(), self.0)
    }

    /// The folder holding this semaphore's permits in `namespace`.
    pub fn semaphore_dir(&self, namespace: &Namespace) -> String {
        format!("{}/{}", namespace.semaphores(), self.0)
    }

    /// The folder holding this barrier's parties in `namespace`.
    pub fn barrier_dir(&self, namespace: &Namespace) -> String {
        format!("{}/{}", namespace.barriers(), self.0)
    }

    /// The folder holding this lock's queue in `namespace`.
    pub fn lock_dir(&self, namespace: &Namespace) -> String {
        format!("{}/{}", namespace.locks(), self.0)
    }
}

/// Why a string is not a usable namespace.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "namespace {0:?} is not a Kubernetes namespace name (1 to 63 of a-z, 0-9 and '-', starting and ending with a letter or digit)"
)]
pub struct NamespaceError(pub String);

/// A Kubernetes namespace name (an RFC 1123 label): the first segment under `/baton`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct Namespace(String);

impl Namespace {
    /// Validates `name` as Kubernetes validates a namespace name.
    pub fn new(name: &str) -> Result<Self, NamespaceError> {
        let bytes = name.as_bytes();
        let edge_ok =
            |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let ok = !name.is_empty()
            && name.len() <= MAX_NAMESPACE_LEN
            && edge_ok(bytes.first())
            && edge_ok(bytes.last())
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
        if ok {
            Ok(Self(name.to_owned()))
        } else {
            Err(NamespaceError(name.to_owned()))
        }
    }

    /// `default`: the namespace outside Kubernetes.
    pub fn default_namespace() -> Self {
        Self(DEFAULT_NAMESPACE.to_owned())
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `/baton/<namespace>`: everything of this namespace lives below it.
    pub fn root(&self) -> String {
        format!("{ROOT}/{}", self.0)
    }

    /// `/baton/<namespace>/elections`: the parent of every election folder.
    pub fn elections(&self) -> String {
        format!("{ROOT}/{}/elections", self.0)
    }

    /// `/baton/<namespace>/locks`: the parent of every lock folder.
    pub fn locks(&self) -> String {
        format!("{ROOT}/{}/locks", self.0)
    }

    /// `/baton/<namespace>/barriers`: the parent of every barrier folder.
    pub fn barriers(&self) -> String {
        format!("{ROOT}/{}/barriers", self.0)
    }

    /// `/baton/<namespace>/semaphores`: the parent of every semaphore folder.
    pub fn semaphores(&self) -> String {
        format!("{ROOT}/{}/semaphores", self.0)
    }
}

impl Default for Namespace {
    fn default() -> Self {
        Self::default_namespace()
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for Namespace {
    type Err = NamespaceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
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
    fn folders_sit_under_the_namespace() {
        let name = ResourceName::new("orders").expect("valid");
        let shop = Namespace::new("shop").expect("valid");
        assert_eq!(name.election_dir(&shop), "/baton/shop/elections/orders");
        assert_eq!(name.lock_dir(&shop), "/baton/shop/locks/orders");
        assert_eq!(
            name.lock_dir(&Namespace::default()),
            "/baton/default/locks/orders"
        );
    }

    #[test]
    fn namespaces_are_kubernetes_names() {
        for ok in ["default", "a", "kube-system", "team-7", &"n".repeat(63)] {
            assert_eq!(Namespace::new(ok).map(|n| n.to_string()), Ok(ok.to_owned()));
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a_b",
            "a.b",
            "a/b",
            "..",
            &"n".repeat(64),
        ] {
            assert!(Namespace::new(bad).is_err(), "{bad:?}");
        }
    }
}
