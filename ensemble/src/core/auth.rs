//! The `auth` packet: which identity a connection gains from it.

use baton_machine::acl::digest_auth_id;
use baton_proto::{AuthPacket, Id};

/// The identity an auth packet proves, or why it proves none. Only `digest` is supported, and
/// like ZooKeeper's digest provider it accepts any credentials (they are checked when an ACL
/// is evaluated, not here); schemes without a provider are refused.
pub fn authenticate(packet: &AuthPacket) -> Result<Id, &'static str> {
    match packet.scheme.as_str() {
        "digest" => Ok(digest_auth_id(&packet.auth)),
        _ => Err("no authentication provider for this scheme"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_matches_zookeeper() {
        // DigestAuthenticationProvider.generateDigest("super:test"), as ZooKeeper's docs give it.
        let p = AuthPacket {
            auth_type: 0,
            scheme: "digest".into(),
            auth: b"super:test".to_vec(),
        };
        assert_eq!(
            authenticate(&p).unwrap(),
            Id::new("digest", "super:D/InIHSb7yEEbrWz8b9l71RjZJU=")
        );
    }

    #[test]
    fn unknown_scheme_refused() {
        let p = AuthPacket {
            auth_type: 0,
            scheme: "kerberos".into(),
            auth: b"x".to_vec(),
        };
        assert!(authenticate(&p).is_err());
    }
}
