//! The `auth` packet: which identities a connection gains from it, checked here (`digest`) or
//! by the connection task (`k8s`, whose verdict takes effect in its turn).

use baton_machine::acl::digest_auth_id;
use baton_machine::tenancy::{K8S_SCHEME, SUPER_SCHEME};
use baton_proto::{AuthPacket, ErrorCode, Id};

use super::local_conn::Pending;
use super::messages::{ConnId, IdentityVerdict};
use super::{Core, wire};

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

impl Core {
    /// The connection task's verdict on a `k8s` auth packet, taking effect in its turn.
    pub(super) fn on_identity(&mut self, conn_id: ConnId, xid: i32, verdict: IdentityVerdict) {
        let Some(conn) = self.clients.get_mut(conn_id) else {
            return;
        };
        conn.received += 1;
        if conn.pipeline.is_empty() {
            self.take_identity(conn_id, xid, verdict);
        } else {
            conn.pipeline.push_back(Pending::Identity { xid, verdict });
        }
    }

    /// Applies a verdict: the identity replaces any earlier `k8s` one (a session is one pod; a
    /// rotated token names the same pod, and a session never holds two namespaces at once).
    pub(super) fn take_identity(&mut self, conn_id: ConnId, xid: i32, verdict: IdentityVerdict) {
        let Some(conn) = self.clients.get_mut(conn_id) else {
            return;
        };
        let session = format!("0x{:x}", conn.session_id.unwrap_or(0));
        match verdict {
            IdentityVerdict::Accepted(id) => {
                let before: Vec<_> = conn
                    .auth
                    .iter()
                    .filter(|a| a.scheme == K8S_SCHEME)
                    .cloned()
                    .collect();
                if before != [id.clone()] {
                    conn.auth.retain(|a| a.scheme != K8S_SCHEME);
                    tracing::info!(
                        peer = %conn.peer, %session, identity = %format_args!("k8s:{}", id.id),
                        replaced = ?before.iter().map(|a| &a.id).collect::<Vec<_>>(),
                        "session authenticated with a Kubernetes service account token"
                    );
                    conn.auth.push(id);
                }
                conn.send(wire::ok(xid, 0, None));
            }
            IdentityVerdict::Rejected(_) => {
                // Logged (rate-limited) by the connection task, which knows why.
                conn.send(wire::error(xid, 0, ErrorCode::AuthFailed));
                conn.close();
            }
            IdentityVerdict::Expired => {
                tracing::debug!(peer = %conn.peer, %session, "an expired k8s token (a client re-sending a rotated-out one); ignored");
                conn.send(wire::ok(xid, 0, None));
            }
            IdentityVerdict::Unavailable(_) => conn.close(),
        }
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
