//! ACL validation (`PrepRequestProcessor.fixupACL`), permission checks
//! (`ZooKeeperServer.checkACL`), digest identities, and the interning cache that lets
//! thousands of znodes share one ACL list.
//!
//! Schemes, as verified against Apache ZooKeeper 3.8.0 with its default providers:
//! - `world:anyone` only (any other `world` id, or `World`, is InvalidAcl);
//! - `auth`: replaced by every authenticated `digest` identity of the caller (the given id is
//!   ignored); InvalidAcl when the caller has none. `ip` identities do not count;
//! - `digest:user:hash`: valid when the id splits on ':' into exactly two parts the way Java's
//!   `String.split` does (so "alice" and "alice:" are invalid, ":x" is valid);
//! - `ip:a.b.c.d[/bits]`: IPv4 only (3.8.0 refuses "::1"), bits 0..=32. It matches a caller
//!   identity `ip:<address>`, which the runtime must add for every connection, as ZooKeeper does;
//! - anything else (`sasl`, `x509`, `super`, unknown) is InvalidAcl.
//!
//! Permission bits are not validated (0 and -1 are accepted). Exact duplicate entries are
//! removed, keeping the first. An empty ACL on a node allows everything.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use base64::Engine as _;
use baton_proto::{Acl, ErrorCode, Id, perms};
use sha1::{Digest, Sha1};

/// The identity a `digest` auth packet with data "user:password" proves:
/// `digest:user:base64(sha1("user:password"))`.
pub fn digest_auth_id(auth: &[u8]) -> Id {
    let user_end = auth.iter().position(|&b| b == b':').unwrap_or(auth.len());
    let user = String::from_utf8_lossy(&auth[..user_end]);
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha1::digest(auth));
    Id::new("digest", format!("{user}:{hash}"))
}

/// Validates and expands the ACL of a create or setACL, or fails with `InvalidAcl`.
pub fn fixup_acl(acl: &[Acl], auth: &[Id]) -> Result<Vec<Acl>, ErrorCode> {
    let mut unique: Vec<&Acl> = Vec::with_capacity(acl.len());
    for entry in acl {
        if !unique.contains(&entry) {
            unique.push(entry);
        }
    }
    if unique.is_empty() {
        return Err(ErrorCode::InvalidAcl);
    }
    let mut out = Vec::with_capacity(unique.len());
    for entry in unique {
        let id = &entry.id;
        match id.scheme.as_str() {
            "world" if id.id == "anyone" => out.push(entry.clone()),
            "auth" => {
                let before = out.len();
                out.extend(
                    auth.iter()
                        .filter(|a| is_authenticated_scheme(&a.scheme))
                        .map(|a| Acl {
                            perms: entry.perms,
                            id: a.clone(),
                        }),
                );
                if out.len() == before {
                    return Err(ErrorCode::InvalidAcl);
                }
            }
            "digest" if java_split_count(&id.id, ':') == 2 => out.push(entry.clone()),
            "ip" if parse_ip_acl(&id.id).is_some() => out.push(entry.clone()),
            _ => return Err(ErrorCode::InvalidAcl),
        }
    }
    Ok(out)
}

/// Schemes whose identities an `auth` ACL expands to (`isAuthenticated()` providers).
fn is_authenticated_scheme(scheme: &str) -> bool {
    scheme == "digest"
}

/// How many parts Java's `s.split(sep)` returns: trailing empty parts are dropped.
fn java_split_count(s: &str, sep: char) -> usize {
    let parts: Vec<&str> = s.split(sep).collect();
    let trailing_empty = parts.iter().rev().take_while(|p| p.is_empty()).count();
    parts.len() - trailing_empty
}

/// Whether a caller with identities `auth` holds any of the bits of `perm` on a node with `acl`.
/// The super identity holds every permission everywhere (ZooKeeper's `checkACL`).
pub fn is_allowed(acl: &[Acl], perm: i32, auth: &[Id]) -> bool {
    if acl.is_empty() || crate::tenancy::is_super(auth) {
        return true;
    }
    acl.iter().filter(|a| a.perms & perm != 0).any(|a| {
        let id = &a.id;
        match id.scheme.as_str() {
            "world" => id.id == "anyone",
            "digest" => auth.iter().any(|c| c.scheme == "digest" && c.id == id.id),
            "ip" => auth
                .iter()
                .any(|c| c.scheme == "ip" && ip_matches(&id.id, &c.id)),
            _ => false,
        }
    })
}

/// `Ok(())` when allowed, else `NoAuth`.
pub fn check(acl: &[Acl], perm: i32, auth: &[Id]) -> Result<(), ErrorCode> {
    if is_allowed(acl, perm, auth) {
        Ok(())
    } else {
        Err(ErrorCode::NoAuth)
    }
}

/// What getACL shows a caller without ADMIN: digest hashes replaced by "x" ("alice:x").
pub fn redact_digests(acl: &[Acl]) -> Vec<Acl> {
    acl.iter()
        .map(|a| {
            if a.id.scheme != "digest" {
                return a.clone();
            }
            let user = a.id.id.split(':').next().unwrap_or_default();
            Acl {
                perms: a.perms,
                id: Id::new("digest", format!("{user}:x")),
            }
        })
        .collect()
}

/// Parses "a.b.c.d[/bits]" as `IPAuthenticationProvider.isValid` does.
fn parse_ip_acl(expr: &str) -> Option<(u32, u32)> {
    let (addr, bits) = match expr.split_once('/') {
        Some((addr, bits)) => (addr, Some(bits)),
        None => (expr, None),
    };
    let addr = parse_v4(addr)?;
    let bits = match bits {
        None => 32,
        Some(b) => {
            let b: i32 = b.parse().ok()?;
            u32::try_from(b).ok().filter(|&b| b <= 32)?
        }
    };
    Some((addr, bits))
}

/// Java's `v4addr2Bytes`: four `Integer.parseInt` parts, each 0..=255 (so "+1" and "010" pass).
fn parse_v4(addr: &str) -> Option<u32> {
    let mut out = 0u32;
    let mut count = 0;
    for part in addr.split('.') {
        count += 1;
        if count > 4 {
            return None;
        }
        let v: i32 = part.parse().ok()?;
        let v = u8::try_from(v).ok()?;
        out = (out << 8) | u32::from(v);
    }
    (count == 4).then_some(out)
}

fn ip_matches(acl_expr: &str, caller: &str) -> bool {
    let Some((acl_addr, bits)) = parse_ip_acl(acl_expr) else {
        return false;
    };
    // The runtime may hand us a canonical address; accept anything std can parse as IPv4.
    let Some(caller) = parse_v4(caller).or_else(|| caller.parse::<Ipv4Addr>().ok().map(u32::from))
    else {
        return false;
    };
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    acl_addr & mask == caller & mask
}

/// Interns ACL lists so that nodes with equal ACLs share one allocation (ZooKeeper's
/// `ReferenceCountedACLCache`). Entries no node uses any more are dropped by `release`.
///
/// Counts the tree's own references rather than reading `Arc::strong_count`: a snapshot in
/// progress holds copies of nodes too, and must not keep a list in the cache for good.
#[derive(Debug, Default)]
pub(crate) struct AclCache {
    lists: HashMap<Arc<[Acl]>, usize>,
}

impl AclCache {
    /// The shared copy of `acl`, counted as one more node's.
    pub(crate) fn intern(&mut self, acl: &[Acl]) -> Arc<[Acl]> {
        if let Some(count) = self.lists.get_mut(acl) {
            *count += 1;
        }
        if let Some((shared, _)) = self.lists.get_key_value(acl) {
            return Arc::clone(shared);
        }
        let shared: Arc<[Acl]> = Arc::from(acl);
        self.lists.insert(Arc::clone(&shared), 1);
        shared
    }

    /// One node no longer uses `acl`; the list is forgotten when none does.
    pub(crate) fn release(&mut self, acl: &[Acl]) {
        if let Some(count) = self.lists.get_mut(acl) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.lists.remove(acl);
            }
        }
    }

    /// Distinct ACL lists in use.
    pub(crate) fn len(&self) -> usize {
        self.lists.len()
    }
}

/// `ZooDefs.Ids.OPEN_ACL_UNSAFE`, the ACL of the built-in nodes.
pub(crate) fn open() -> Vec<Acl> {
    vec![Acl {
        perms: perms::ALL,
        id: Id::new("world", "anyone"),
    }]
}

/// `ZooDefs.Ids.READ_ACL_UNSAFE`, the ACL of /zookeeper/config.
pub(crate) fn read_only() -> Vec<Acl> {
    vec![Acl {
        perms: perms::READ,
        id: Id::new("world", "anyone"),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(perms: i32, scheme: &str, id: &str) -> Acl {
        Acl {
            perms,
            id: Id::new(scheme, id),
        }
    }

    #[test]
    fn digest_matches_zookeeper() {
        // Values read back from ZooKeeper 3.8.0 with getACL after addauth digest alice:pw.
        assert_eq!(
            digest_auth_id(b"alice:pw").id,
            "alice:V55/p2T0OpjQ+low3NVAH4aLvm0="
        );
        assert_eq!(
            digest_auth_id(b"bob:pw2").id,
            "bob:DzYBVPYoUPHuiOrAcsz6mJwnG9k="
        );
        assert!(digest_auth_id(b"nocolon").id.starts_with("nocolon:"));
    }

    #[test]
    fn fixup_validity_matches_zookeeper() {
        let none: [Id; 0] = [];
        let valid = [
            acl(31, "world", "anyone"),
            acl(31, "digest", ":x"),
            acl(31, "digest", "a:b"),
            acl(31, "ip", "127.0.0.1"),
            acl(31, "ip", "127.0.0.1/8"),
            acl(31, "ip", "10.0.0.0/0"),
            acl(0, "world", "anyone"),
            acl(-1, "world", "anyone"),
        ];
        for a in valid {
            assert!(fixup_acl(std::slice::from_ref(&a), &none).is_ok(), "{a:?}");
        }
        let invalid = [
            acl(31, "world", "nobody"),
            acl(31, "World", "anyone"),
            acl(31, "digest", "alice"),
            acl(31, "digest", "alice:"),
            acl(31, "digest", "a:b:c"),
            acl(31, "ip", "127.0.0.1/33"),
            acl(31, "ip", "::1"),
            acl(31, "ip", "10.0.0"),
            acl(31, "ip", "foo"),
            acl(31, "sasl", "x"),
            acl(31, "x509", "x"),
            acl(31, "super", "x"),
            acl(31, "auth", ""),
        ];
        for a in invalid {
            assert_eq!(
                fixup_acl(std::slice::from_ref(&a), &none),
                Err(ErrorCode::InvalidAcl),
                "{a:?}"
            );
        }
        assert_eq!(fixup_acl(&[], &none), Err(ErrorCode::InvalidAcl));
    }

    #[test]
    fn fixup_dedups_and_expands_auth() {
        let w = acl(31, "world", "anyone");
        assert_eq!(fixup_acl(&[w.clone(), w.clone()], &[]), Ok(vec![w.clone()]));
        let auth = [Id::new("ip", "127.0.0.1"), digest_auth_id(b"alice:pw")];
        let fixed = fixup_acl(&[acl(7, "auth", "ignored")], &auth).expect("valid");
        assert_eq!(
            fixed,
            vec![Acl {
                perms: 7,
                id: auth[1].clone()
            }]
        );
        // Only an ip identity: nothing to expand to.
        assert_eq!(
            fixup_acl(&[acl(7, "auth", "")], &auth[..1]),
            Err(ErrorCode::InvalidAcl)
        );
    }

    #[test]
    fn permission_checks() {
        let alice = digest_auth_id(b"alice:pw");
        let node = [
            acl(perms::READ, "digest", &alice.id),
            acl(perms::WRITE, "world", "anyone"),
        ];
        assert!(is_allowed(&node, perms::READ, std::slice::from_ref(&alice)));
        assert!(!is_allowed(&node, perms::READ, &[]));
        assert!(is_allowed(&node, perms::WRITE, &[]));
        assert!(!is_allowed(
            &node,
            perms::ADMIN,
            std::slice::from_ref(&alice)
        ));
        assert!(is_allowed(
            &node,
            perms::READ | perms::ADMIN,
            std::slice::from_ref(&alice)
        ));
        assert!(is_allowed(&[], perms::ADMIN, &[]));
        let superuser = [Id::new("super", "")];
        assert!(is_allowed(
            &[acl(0, "world", "anyone")],
            perms::ADMIN,
            &superuser
        ));
        assert!(is_allowed(
            &[acl(31, "digest", &alice.id)],
            perms::DELETE,
            &superuser
        ));
        let local = [Id::new("ip", "127.0.0.1")];
        assert!(is_allowed(
            &[acl(31, "ip", "127.0.0.1")],
            perms::READ,
            &local
        ));
        assert!(is_allowed(
            &[acl(31, "ip", "127.0.0.0/8")],
            perms::READ,
            &local
        ));
        assert!(!is_allowed(
            &[acl(31, "ip", "10.0.0.1")],
            perms::READ,
            &local
        ));
    }

    #[test]
    fn redaction_hides_hashes() {
        let a = [
            acl(16, "digest", "alice:V55/p2T0OpjQ+low3NVAH4aLvm0="),
            acl(1, "world", "anyone"),
        ];
        assert_eq!(
            redact_digests(&a),
            vec![acl(16, "digest", "alice:x"), acl(1, "world", "anyone")]
        );
    }

    #[test]
    fn cache_shares_and_forgets() {
        let mut cache = AclCache::default();
        let a = cache.intern(&open());
        let b = cache.intern(&open());
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(cache.len(), 1);
        let held_elsewhere = Arc::clone(&a);
        cache.release(&a);
        assert_eq!(cache.len(), 1);
        cache.release(&b);
        assert_eq!(cache.len(), 0, "copies held outside the tree do not count");
        drop(held_elsewhere);
    }
}
