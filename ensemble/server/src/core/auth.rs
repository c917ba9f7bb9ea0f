//! The `auth` packet: which identities a connection gains from it.

use baton_machine::acl::digest_auth_id;
use baton_machine::tenancy::{K8S_SCHEME, SUPER_SCHEME};
use baton_proto::{AuthPacket, Id};

/// The identities an auth packet proves, or why it proves none. Like ZooKeeper's digest
/// provider, `digest` accepts any credentials (they are checked when an ACL is evaluated), and
/// adds `super:` when they match `super_digest` (`USER:BASE64(SHA1(USER:PASSWORD))`). `k8s`
/// reaches here only on a member without `--k8s-auth` (the connection task checks it
/// otherwise): refused, like every scheme without a provider.
pub fn authenticate(
    packet: &AuthPacket,
    super_digest: Option<&str>,
) -> Result<Vec<Id>, &'static str> {
    match packet.scheme.as_str() {
        "digest" => {
            let id = digest_auth_id(&packet.auth);
            let is_super = super_digest.is_some_and(|s| s == id.id);
            let mut ids = vec![id];
            if is_super {
                ids.push(Id::new(SUPER_SCHEME, ""));
            }
            Ok(ids)
        }
        K8S_SCHEME => Err(
            "this member does not check Kubernetes tokens: start it with --k8s-auth (BATON_K8S_AUTH)",
        ),
        _ => Err("no authentication provider for this scheme"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(scheme: &str, auth: &[u8]) -> AuthPacket {
        AuthPacket {
            auth_type: 0,
            scheme: scheme.into(),
            auth: auth.to_vec(),
        }
    }

    #[test]
    fn digest_matches_zookeeper() {
        // DigestAuthenticationProvider.generateDigest("super:test"), as ZooKeeper's docs give it.
        assert_eq!(
            authenticate(&packet("digest", b"super:test"), None).unwrap(),
            vec![Id::new("digest", "super:D/InIHSb7yEEbrWz8b9l71RjZJU=")]
        );
    }

    #[test]
    fn the_super_digest_makes_a_super_session() {
        let digest = Some("super:D/InIHSb7yEEbrWz8b9l71RjZJU=");
        assert_eq!(
            authenticate(&packet("digest", b"super:test"), digest).unwrap(),
            vec![
                Id::new("digest", "super:D/InIHSb7yEEbrWz8b9l71RjZJU="),
                Id::new("super", "")
            ]
        );
        // A wrong password is a plain digest identity, as in ZooKeeper.
        assert_eq!(
            authenticate(&packet("digest", b"super:wrong"), digest)
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn unknown_scheme_refused() {
        assert!(authenticate(&packet("kerberos", b"x"), None).is_err());
        assert!(authenticate(&packet("super", b"x"), None).is_err());
        // Never a k8s identity from the client's own say-so.
        assert!(authenticate(&packet("k8s", b"tok"), None).is_err());
    }
}
