//! Issuance and rotation decisions, and the Secrets read back.

use super::secrets::{self, PkiSecrets};
use super::*;
use baton_tls::{Identity, Role};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

fn now() -> Timestamp {
    "2026-11-23T12:00:00Z".parse().expect("timestamp")
}

fn names() -> EnsembleNames {
    EnsembleNames::new("zk", "prod")
}

fn stored_of(pki: &Pki) -> StoredPki {
    StoredPki {
        ca: Some(pki.ca.clone()),
        members: pki.members.clone(),
        admin: Some(pki.admin.clone()),
    }
}

/// A fresh PKI for `members` at `now()`.
fn fresh(members: &[u64]) -> Pki {
    let empty = StoredPki::default();
    let plan = plan(&empty, members, now());
    issue(&empty, &plan, &names(), now()).expect("issued")
}

fn identity(cert_pem: &str) -> Identity {
    let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).expect("PEM");
    Identity::of_certificate(&der).expect("identity")
}

fn meta(name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some("prod".into()),
        ..ObjectMeta::default()
    }
}

#[test]
fn nothing_stored_issues_a_ca_every_member_and_the_admin() {
    let decided = plan(&StoredPki::default(), &[1, 2, 3], now());
    assert_eq!(
        decided,
        PkiPlan {
            ca: CaStep::New {
                keep_previous: false
            },
            issue: vec![
                Holder::Member(1),
                Holder::Member(2),
                Holder::Member(3),
                Holder::Admin
            ],
            drop: vec![],
        }
    );
    let pki = issue(&StoredPki::default(), &decided, &names(), now()).expect("issued");
    assert_eq!(pem::certificates(&pki.ca.bundle_pem).len(), 1);
    for (id, leaf) in &pki.members {
        assert_eq!(identity(&leaf.cert_pem), Identity::member("prod.zk", *id));
        assert_eq!(Some(&leaf.issuer), pki.ca.signing_fingerprint().as_ref());
    }
    assert_eq!(identity(&pki.admin.cert_pem).role, Role::Admin);
    assert_eq!(identity(&pki.admin.cert_pem).cluster, "prod.zk");
    // What was issued is then kept as it is.
    assert!(plan(&stored_of(&pki), &[1, 2, 3], now()).is_empty());
}

#[test]
fn a_member_certificate_is_renewed_a_month_before_it_expires() {
    let mut pki = fresh(&[1, 2, 3]);
    let soon = now() + SignedDuration::from_hours(20 * 24);
    if let Some(leaf) = pki.members.get_mut(&2) {
        leaf.not_after = soon;
    }
    let stored = stored_of(&pki);
    assert!(
        plan(
            &stored,
            &[1, 2, 3],
            now() - SignedDuration::from_hours(24 * 11)
        )
        .is_empty()
    );
    let decided = plan(&stored, &[1, 2, 3], now());
    assert_eq!(decided.ca, CaStep::Keep);
    assert_eq!(decided.issue, vec![Holder::Member(2)]);
    let renewed = issue(&stored, &decided, &names(), now()).expect("renewed");
    assert_ne!(renewed.members[&2], pki.members[&2]);
    assert_eq!(renewed.members[&1], pki.members[&1]);
    assert_eq!(renewed.ca, pki.ca);
    assert_eq!(renewed.admin, pki.admin);
}

#[test]
fn scaling_issues_for_new_ids_and_drops_the_ones_that_went() {
    let pki = fresh(&[1, 2, 3]);
    let up = plan(&stored_of(&pki), &[1, 2, 3, 4, 5], now());
    assert_eq!(up.issue, vec![Holder::Member(4), Holder::Member(5)]);
    let five = issue(&stored_of(&pki), &up, &names(), now()).expect("issued");
    assert_eq!(
        five.members.keys().copied().collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    let down = plan(&stored_of(&five), &[1, 2, 3], now());
    assert_eq!(down.drop, vec![4, 5]);
    assert!(down.issue.is_empty());
    let three = issue(&stored_of(&five), &down, &names(), now()).expect("issued");
    assert_eq!(three.members, pki.members);
}

#[test]
fn a_new_ca_is_trusted_first_and_signs_only_after_it_propagated() {
    let pki = fresh(&[1, 2, 3]);
    let old_fp = pki.ca.signing_fingerprint().expect("fingerprint");
    // A year and a bit before the CA expires.
    let late = pki.ca.not_after - CA_RENEW_BEFORE + SignedDuration::from_secs(60);
    // Keep the leaves valid at `late`, so only the CA is due.
    let mut stored = stored_of(&pki);
    for leaf in stored.members.values_mut().chain(stored.admin.as_mut()) {
        leaf.not_after = late + SignedDuration::from_hours(300 * 24);
    }
    let decided = plan(&stored, &[1, 2, 3], late);
    assert_eq!(
        decided.ca,
        CaStep::New {
            keep_previous: true
        }
    );
    assert!(
        decided.issue.is_empty(),
        "old leaves stay until both CAs are trusted"
    );
    let phase1 = issue(&stored, &decided, &names(), late).expect("issued");
    assert_eq!(phase1.ca.trusted_fingerprints().len(), 2);
    assert_eq!(phase1.ca.trusted_fingerprints()[1], old_fp);
    assert_eq!(phase1.ca.since, late);
    assert_eq!(phase1.members, stored.members);

    let stored = stored_of(&phase1);
    let early = late + TRUST_PROPAGATION - SignedDuration::from_secs(1);
    assert!(plan(&stored, &[1, 2, 3], early).is_empty());
    let settled = late + TRUST_PROPAGATION;
    let decided = plan(&stored, &[1, 2, 3], settled);
    assert_eq!(decided.ca, CaStep::Keep);
    assert_eq!(
        decided.issue,
        vec![
            Holder::Member(1),
            Holder::Member(2),
            Holder::Member(3),
            Holder::Admin
        ]
    );
    let phase2 = issue(&stored, &decided, &names(), settled).expect("issued");
    let new_fp = phase2.ca.signing_fingerprint();
    assert!(
        phase2
            .members
            .values()
            .all(|l| Some(&l.issuer) == new_fp.as_ref())
    );
    assert!(plan(&stored_of(&phase2), &[1, 2, 3], settled).is_empty());
}

#[test]
fn a_lost_ca_reissues_everything_at_once() {
    let pki = fresh(&[1, 2, 3]);
    let mut stored = stored_of(&pki);
    stored.ca = None;
    let decided = plan(&stored, &[1, 2, 3], now());
    assert_eq!(
        decided.ca,
        CaStep::New {
            keep_previous: false
        }
    );
    assert_eq!(decided.issue.len(), 4, "no leaf of an untrusted CA is kept");
    let again = issue(&stored, &decided, &names(), now()).expect("issued");
    assert_eq!(pem::certificates(&again.ca.bundle_pem).len(), 1);
    assert_ne!(again.ca.bundle_pem, pki.ca.bundle_pem);
}

#[test]
fn secrets_keep_the_ca_key_and_the_admin_out_of_what_members_mount() {
    let pki = fresh(&[1, 2]);
    let PkiSecrets {
        members,
        admin,
        ca_key,
    } = secrets::secrets(&pki, &names(), meta);
    let keys = |s: &k8s_openapi::api::core::v1::Secret| -> Vec<String> {
        s.data.iter().flatten().map(|(k, _)| k.clone()).collect()
    };
    assert_eq!(members.metadata.name.as_deref(), Some("zk-tls"));
    assert_eq!(
        keys(&members),
        [
            "ca.crt",
            "member-1.crt",
            "member-1.key",
            "member-2.crt",
            "member-2.key"
        ]
    );
    assert_eq!(admin.metadata.name.as_deref(), Some("zk-admin"));
    assert_eq!(keys(&admin), ["admin.crt", "admin.key", "ca.crt"]);
    assert_eq!(ca_key.metadata.name.as_deref(), Some("zk-ca-key"));
    assert_eq!(keys(&ca_key), ["ca.crt", "ca.key"]);

    // Read back whole, and recognised as unchanged.
    let back = secrets::stored(Some(&ca_key), Some(&members), Some(&admin));
    assert_eq!(back, stored_of(&pki));
    assert!(secrets::holds(Some(&members), &members));
    assert!(!secrets::holds(None, &members));
    let grown = secrets::secrets(&fresh(&[1, 2, 3]), &names(), meta);
    assert!(!secrets::holds(Some(&members), &grown.members));
}

#[test]
fn unreadable_secrets_count_as_missing() {
    let pki = fresh(&[1]);
    let s = secrets::secrets(&pki, &names(), meta);
    let mut no_annotation = s.members.clone();
    no_annotation.metadata.annotations = None;
    let mut bad_key = s.ca_key.clone();
    if let Some(data) = bad_key.data.as_mut() {
        data.insert("ca.key".into(), k8s_openapi::ByteString(vec![0xff, 0xfe]));
    }
    let back = secrets::stored(Some(&bad_key), Some(&no_annotation), Some(&s.admin));
    assert_eq!(back.ca, None);
    assert!(back.members.is_empty());
    assert!(back.admin.is_some());
    let decided = plan(&back, &[1], now());
    assert_eq!(
        decided.ca,
        CaStep::New {
            keep_previous: false
        }
    );
    assert_eq!(decided.issue, vec![Holder::Member(1), Holder::Admin]);
}
