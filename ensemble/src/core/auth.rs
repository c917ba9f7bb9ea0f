//! The `auth` packet: which identity a connection gains from it.

use base64::Engine;
use baton_proto::{AuthPacket, Id};
use sha1::{Digest, Sha1};

/// ZooKeeper's digest: `user:base64(sha1("user:password"))`, the form digest ACLs name.
pub fn digest(user_password: &str) -> Option<String> {
    let (user, _) = user_password.split_once(':')?;
    let hash = Sha1::digest(user_password.as_bytes());
    Some(format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(hash)
    ))
}

/// The identity an auth packet proves, or why it proves none. Only `digest` is supported;
/// ZooKeeper also refuses schemes it has no provider for.
pub fn authenticate(packet: &AuthPacket) -> Result<Id, &'static str> {
    match packet.scheme.as_str() {
        "digest" => {
            let text =
                std::str::from_utf8(&packet.auth).map_err(|_| "credentials are not UTF-8")?;
            let id = digest(text).ok_or("digest credentials must be user:password")?;
            Ok(Id::new("digest", id))
        }
        _ => Err("no authentication provider for this scheme"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_matches_zookeeper() {
        // DigestAuthenticationProvider.generateDigest("super:test") from ZooKeeper's docs.
        assert_eq!(
            digest("super:test").unwrap(),
            "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
        );
        assert!(digest("nocolon").is_none());
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
