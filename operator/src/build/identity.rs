//! The members' Kubernetes identity and the ensemble's super identity (DESIGN.md §4):
//!
//! - a ServiceAccount `NAME` the member pods run as, bound to `system:auth-delegator` by a
//!   ClusterRoleBinding, so a member can ask the TokenReview API whether a sidecar's projected
//!   token is valid (and whose it is);
//! - a Secret `NAME-super` with a ZooKeeper super digest (`user:BASE64(SHA1(user:password))`),
//!   made once with a random password and never rewritten: whoever holds it can repair ACLs
//!   and remove any node.
//!
//! The ClusterRoleBinding is cluster-scoped, so it cannot be owned by the namespaced ensemble:
//! it carries the ensemble's namespace and name as labels and the ensemble's finalizer deletes
//! it (`crate::finalizer`). The chart cannot bind it in advance: RBAC subjects are exact names,
//! and ensembles may live in any namespace under any name.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::names::{AUTH_DELEGATOR_ROLE, EnsembleNames};
use crate::pki::secrets::bytes;

/// User name of the super identity the operator makes.
pub const SUPER_USER: &str = "super";
/// Keys of the `NAME-super` Secret.
pub const SUPER_USERNAME_KEY: &str = "username";
pub const SUPER_PASSWORD_KEY: &str = "password";
/// `user:BASE64(SHA1(user:password))`, what the members get as `BATON_SUPER_DIGEST`.
pub const SUPER_DIGEST_KEY: &str = "digest";

/// The super identity's credentials, when the operator makes them.
#[derive(Clone, PartialEq, Eq)]
pub struct SuperCredentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SuperCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SuperCredentials")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl SuperCredentials {
    /// `super` with a password of 32 random bytes (URL-safe base64), from the system's CSPRNG.
    pub fn generate() -> Result<SuperCredentials, ring::error::Unspecified> {
        use ring::rand::SecureRandom as _;
        let mut raw = [0u8; 32];
        ring::rand::SystemRandom::new().fill(&mut raw)?;
        Ok(SuperCredentials {
            username: SUPER_USER.into(),
            password: URL_SAFE_NO_PAD.encode(raw),
        })
    }

    /// ZooKeeper's digest form, `user:BASE64(SHA1(user:password))` (what
    /// `DigestAuthenticationProvider.generateDigest` prints and `superDigest` takes).
    pub fn digest(&self) -> String {
        let hash = ring::digest::digest(
            &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
            format!("{}:{}", self.username, self.password).as_bytes(),
        );
        format!("{}:{}", self.username, STANDARD.encode(hash.as_ref()))
    }
}

/// The `NAME-super` Secret holding `credentials`.
pub fn super_secret(meta: ObjectMeta, credentials: &SuperCredentials) -> Secret {
    Secret {
        metadata: meta,
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([
            (SUPER_USERNAME_KEY.into(), bytes(&credentials.username)),
            (SUPER_PASSWORD_KEY.into(), bytes(&credentials.password)),
            (SUPER_DIGEST_KEY.into(), bytes(&credentials.digest())),
        ])),
        ..Secret::default()
    }
}

/// The members' ServiceAccount; its token is mounted (the member calls TokenReview with it).
pub fn service_account(meta: ObjectMeta) -> ServiceAccount {
    ServiceAccount {
        metadata: meta,
        automount_service_account_token: Some(true),
        ..ServiceAccount::default()
    }
}

/// `system:auth-delegator` (TokenReview and SubjectAccessReview create, nothing else) for the
/// members' ServiceAccount; labelled with the ensemble (`EnsembleNames::foreign_labels`).
pub fn token_review_binding(names: &EnsembleNames) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(names.token_review_binding()),
            labels: Some(names.foreign_labels()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: AUTH_DELEGATOR_ROLE.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: names.service_account(),
            namespace: Some(names.namespace.clone()),
            api_group: None,
        }]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_zookeepers() {
        // As Apache ZooKeeper's DigestAuthenticationProvider.generateDigest("super:secret")
        // computes it (and `printf super:secret | openssl sha1 -binary | base64`).
        let c = SuperCredentials {
            username: "super".into(),
            password: "secret".into(),
        };
        assert_eq!(c.digest(), "super:lK75jTNcA+U9vtVEw5vB51mj/w4=");
        let a = SuperCredentials::generate().expect("random");
        let b = SuperCredentials::generate().expect("random");
        assert_ne!(a.password, b.password);
        assert_eq!(a.password.len(), 43);
        assert!(format!("{a:?}").contains("super") && !format!("{a:?}").contains(&a.password));
    }
}
