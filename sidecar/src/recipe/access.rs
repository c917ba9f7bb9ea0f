//! Who a session is and who else may touch its nodes (DESIGN.md §4).
//!
//! - On Baton in Kubernetes, the session proves its pod with the projected ServiceAccount token
//!   (auth scheme `k8s`, audience `baton`); the ensemble checks it with TokenReview and keeps
//!   other namespaces out of `/baton/<namespace>`. Nodes are created with open ACLs: the
//!   ensemble's namespace policy is the guard, not ZooKeeper ACLs.
//! - On Apache ZooKeeper (or Baton without identities), `--zk-digest USER:PASSWORD` sends
//!   digest auth and creates the namespace's nodes with an ACL that grants everything to that
//!   digest user and nothing to anyone else; `/baton` itself lets anyone read and create (so
//!   each namespace can make its own folder) but not delete or change it.

use std::path::{Path, PathBuf};

use base64::Engine;
use sha1::{Digest as _, Sha1};
use zookeeper_client as zk;

use super::names::Namespace;

/// The auth scheme of a Kubernetes ServiceAccount token.
pub const K8S_SCHEME: &str = "k8s";

/// How a session authenticates, and where its nodes live.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// `/baton/<namespace>` holds every node of this session's recipes.
    pub namespace: Namespace,
    /// Send the token in this file as `k8s` auth on every connection (re-read each time: the
    /// kubelet rotates it).
    pub token_file: Option<PathBuf>,
    /// Send digest auth and protect the namespace's nodes with a digest ACL.
    pub digest: Option<DigestCredentials>,
}

/// A ZooKeeper digest user and password (`USER:PASSWORD`).
#[derive(Clone, PartialEq, Eq)]
pub struct DigestCredentials {
    user: String,
    password: String,
}

impl std::fmt::Debug for DigestCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DigestCredentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl DigestCredentials {
    /// Parses `USER:PASSWORD` (the password may contain ':'; the user may not, as in ZooKeeper).
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.split_once(':') {
            Some((user, password)) if !user.is_empty() && !password.is_empty() => Ok(Self {
                user: user.to_owned(),
                password: password.to_owned(),
            }),
            _ => Err("expected USER:PASSWORD with neither empty".into()),
        }
    }

    /// The user name.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The auth packet's bytes: `USER:PASSWORD`.
    pub fn auth_bytes(&self) -> Vec<u8> {
        format!("{}:{}", self.user, self.password).into_bytes()
    }

    /// The ACL id ZooKeeper derives from these credentials:
    /// `USER:base64(sha1("USER:PASSWORD"))`.
    pub fn acl_id(&self) -> String {
        let hash = Sha1::digest(self.auth_bytes());
        format!(
            "{}:{}",
            self.user,
            base64::engine::general_purpose::STANDARD.encode(hash)
        )
    }
}

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error(
        "cannot read the ServiceAccount token {path}: {source} (is the projected volume with audience 'baton' mounted?)"
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the ServiceAccount token {path} is empty")]
    Empty { path: PathBuf },
}

/// The token in `path` as it is now, without surrounding whitespace.
pub fn read_token(path: &Path) -> Result<Vec<u8>, TokenFileError> {
    let raw = std::fs::read(path).map_err(|source| TokenFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    let token = raw.trim_ascii();
    if token.is_empty() {
        return Err(TokenFileError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(token.to_vec())
}

/// The ACLs the recipes create their nodes with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAcls {
    /// `/baton`, shared by every namespace.
    root: Vec<zk::Acl>,
    /// `/baton/<namespace>` and everything below it.
    tenant: Vec<zk::Acl>,
}

impl NodeAcls {
    /// Open ACLs (anyone, everything): on Baton the namespace policy guards `/baton/<ns>`.
    pub fn open() -> Self {
        let all = zk::Acls::anyone_all().to_vec();
        Self {
            root: all.clone(),
            tenant: all,
        }
    }

    /// The ACLs for `access`: digest-protected with `--zk-digest`, open otherwise.
    pub fn for_access(access: &Access) -> Self {
        match &access.digest {
            None => Self::open(),
            Some(digest) => Self {
                root: vec![zk::Acl::new(
                    zk::Permission::READ | zk::Permission::CREATE,
                    zk::AuthId::anyone(),
                )],
                tenant: vec![zk::Acl::new(
                    zk::Permission::ALL,
                    zk::AuthId::new("digest", &digest.acl_id()),
                )],
            },
        }
    }

    /// For `/baton`.
    pub fn root(&self) -> zk::Acls<'_> {
        zk::Acls::new(&self.root)
    }

    /// For `/baton/<namespace>` and below.
    pub fn tenant(&self) -> zk::Acls<'_> {
        zk::Acls::new(&self.tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_ids_match_zookeeper() {
        // ZooKeeper's DigestAuthenticationProvider.generateDigest("super:test"), as in its docs.
        let d = DigestCredentials::parse("super:test").expect("parses");
        assert_eq!(d.acl_id(), "super:D/InIHSb7yEEbrWz8b9l71RjZJU=");
        assert_eq!(d.auth_bytes(), b"super:test");
        let colon = DigestCredentials::parse("u:p:q").expect("parses");
        assert_eq!(colon.auth_bytes(), b"u:p:q");
        assert!(
            !format!("{colon:?}").contains("p:q"),
            "the password is never printed"
        );
        for bad in ["", "u", "u:", ":p"] {
            assert!(DigestCredentials::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn digest_acls_keep_everyone_else_out_of_the_namespace() {
        let access = Access {
            digest: Some(DigestCredentials::parse("shop:secret").expect("parses")),
            ..Access::default()
        };
        let acls = NodeAcls::for_access(&access);
        let tenant = acls.tenant();
        assert_eq!(tenant.len(), 1);
        assert_eq!(tenant[0].scheme(), "digest");
        assert!(tenant[0].id().starts_with("shop:"));
        let root = acls.root();
        assert_eq!(root[0].scheme(), "world");
        assert!(!root[0].permission().has(zk::Permission::DELETE));
        assert!(!root[0].permission().has(zk::Permission::ADMIN));
        assert_eq!(NodeAcls::for_access(&Access::default()), NodeAcls::open());
    }

    #[test]
    fn tokens_are_read_fresh_and_trimmed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("token");
        assert!(matches!(
            read_token(&path),
            Err(TokenFileError::Read { .. })
        ));
        std::fs::write(&path, "  \n").expect("write");
        assert!(matches!(
            read_token(&path),
            Err(TokenFileError::Empty { .. })
        ));
        std::fs::write(&path, "eyJ.one\n").expect("write");
        assert_eq!(read_token(&path).expect("reads"), b"eyJ.one");
        std::fs::write(&path, "eyJ.two").expect("write");
        assert_eq!(read_token(&path).expect("reads"), b"eyJ.two");
    }
}
