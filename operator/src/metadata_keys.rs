//! Every `baton.dev/*` label, annotation and finalizer the operator and its webhook read or
//! write, in one table: what it is on, who sets it, its values and what it means. The
//! documentation's "Annotations and labels" page is made from it (with the sidecar's own, in
//! `baton_sidecar::pod::POD_KEYS`) by `cargo run -p baton-docs`, whose test also fails when a
//! `"baton.dev/..."` literal in the code is in neither table.

use crate::names::{ENSEMBLE_NAME_LABEL, ENSEMBLE_NAMESPACE_LABEL, FINALIZER, RESEED_ANNOTATION};
use crate::pki::secrets::{CA_NOT_AFTER_ANNOTATION, CA_SINCE_ANNOTATION, CERTIFICATES_ANNOTATION};
use crate::sidecar_audit::INJECTION_LABEL;
use crate::webhook::cert_store::{CERT_DNS_NAMES, CERT_NOT_AFTER};
use crate::webhook::inject::{
    APP_HEALTH_ANNOTATION, CANDIDACY_ANNOTATION, ELECTION_ANNOTATION, ENSEMBLE_ANNOTATION,
    INJECT_ANNOTATION, MIRROR_LEASE_ANNOTATION, NATIVE_SIDECAR_ANNOTATION, READY_WHEN_ANNOTATION,
};

/// What kind of metadata a key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Annotation,
    Label,
    Finalizer,
}

impl KeyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::Annotation => "annotation",
            KeyKind::Label => "label",
            KeyKind::Finalizer => "finalizer",
        }
    }
}

/// One use of a `baton.dev/*` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetadataKey {
    pub key: &'static str,
    pub kind: KeyKind,
    /// The object it is on.
    pub on: &'static str,
    /// Who writes it (`you`: the user).
    pub set_by: &'static str,
    /// Who reads it.
    pub read_by: &'static str,
    /// Its values.
    pub values: &'static str,
    pub meaning: &'static str,
}

const fn pod_annotation(
    key: &'static str,
    values: &'static str,
    meaning: &'static str,
) -> MetadataKey {
    MetadataKey {
        key,
        kind: KeyKind::Annotation,
        on: "Pod (template)",
        set_by: "you",
        read_by: "the injection webhook",
        values,
        meaning,
    }
}

/// Every key the operator and its webhook use.
pub const OPERATOR_KEYS: &[MetadataKey] = &[
    MetadataKey {
        key: INJECTION_LABEL,
        kind: KeyKind::Label,
        on: "Namespace",
        set_by: "you",
        read_by: "the webhook's namespaceSelector (chart value `webhook.namespaceSelector`) and \
                  the operator's audit of pods without a sidecar",
        values: "`enabled`",
        meaning: "Pods created in this namespace go through the injection webhook.",
    },
    pod_annotation(
        INJECT_ANNOTATION,
        "`\"true\"`",
        "Inject the sidecar into this pod.",
    ),
    pod_annotation(
        ELECTION_ANNOTATION,
        "comma-separated election names",
        "The elections the pod stands in (`--election`); the owning workload's name when absent.",
    ),
    pod_annotation(
        ENSEMBLE_ANNOTATION,
        "`NAME` or `NAMESPACE/NAME`",
        "The CoordinationEnsemble to use (`NAME`: in the pod's namespace); the namespace's only \
         one when absent.",
    ),
    pod_annotation(
        NATIVE_SIDECAR_ANNOTATION,
        "`\"false\"`",
        "Inject a plain container instead of a native sidecar (an init container with \
         `restartPolicy: Always`).",
    ),
    pod_annotation(
        READY_WHEN_ANNOTATION,
        "`session` (default), `leader`",
        "`leader`: the sidecar's readiness (and so the pod's) follows leadership of the first \
         election, without a probe on the app; `session`: it follows the session.",
    ),
    pod_annotation(
        MIRROR_LEASE_ANNOTATION,
        "`\"true\"`",
        "The sidecar mirrors each election it leads into the Lease `baton-<election>` \
         (`--mirror-lease`); only with the pod's API token mounted.",
    ),
    pod_annotation(
        APP_HEALTH_ANNOTATION,
        "`PORT/PATH`: PORT 1 to 65535, PATH visible ASCII, e.g. `8080/healthz`",
        "The app's health endpoint in the pod: the sidecar checks \
         `http://127.0.0.1:PORT/PATH` (`--app-health`) and stands aside while it fails.",
    ),
    pod_annotation(
        CANDIDACY_ANNOTATION,
        "`always` (default), `app`",
        "`app`: the pod stands in its elections only while the app holds `GET \
         /leader/NAME/campaign` open (`--candidacy app`); `always`: from start to shutdown.",
    ),
    MetadataKey {
        key: RESEED_ANNOTATION,
        kind: KeyKind::Annotation,
        on: "CoordinationEnsemble",
        set_by: "you",
        read_by: "the operator, which removes it when done",
        values: "a member id, e.g. `\"2\"`",
        meaning: "Rebuild that member from the ensemble: removed from Raft, its data volume \
                  replaced, added back as a learner.",
    },
    MetadataKey {
        key: FINALIZER,
        kind: KeyKind::Finalizer,
        on: "CoordinationEnsemble",
        set_by: "the operator",
        read_by: "the operator",
        values: "",
        meaning: "Removes, when the ensemble is deleted, what owner references cannot reach \
                  (objects labelled with the two keys below).",
    },
    MetadataKey {
        key: ENSEMBLE_NAMESPACE_LABEL,
        kind: KeyKind::Label,
        on: "objects outside the ensemble's namespace (cluster-scoped, or published into other \
             namespaces)",
        set_by: "the operator",
        read_by: "the operator",
        values: "a namespace",
        meaning: "The namespace of the ensemble the object belongs to.",
    },
    MetadataKey {
        key: ENSEMBLE_NAME_LABEL,
        kind: KeyKind::Label,
        on: "the same objects",
        set_by: "the operator",
        read_by: "the operator",
        values: "an ensemble's name",
        meaning: "The name of the ensemble the object belongs to.",
    },
    MetadataKey {
        key: CERTIFICATES_ANNOTATION,
        kind: KeyKind::Annotation,
        on: "Secrets `NAME-tls` and `NAME-admin`",
        set_by: "the operator",
        read_by: "the operator",
        values: "JSON: per certificate, its end (`notAfter`) and issuer",
        meaning: "When to renew, without parsing X.509.",
    },
    MetadataKey {
        key: CA_NOT_AFTER_ANNOTATION,
        kind: KeyKind::Annotation,
        on: "Secret `NAME-ca-key`",
        set_by: "the operator",
        read_by: "the operator",
        values: "RFC 3339 time",
        meaning: "End of the ensemble's signing CA's validity.",
    },
    MetadataKey {
        key: CA_SINCE_ANNOTATION,
        kind: KeyKind::Annotation,
        on: "Secret `NAME-ca-key`",
        set_by: "the operator",
        read_by: "the operator",
        values: "RFC 3339 time",
        meaning: "When the ensemble's signing CA was made.",
    },
    MetadataKey {
        key: crate::webhook::cert_store::CA_NOT_AFTER,
        kind: KeyKind::Annotation,
        on: "the webhook's certificate Secret",
        set_by: "the operator",
        read_by: "the operator",
        values: "RFC 3339 time",
        meaning: "End of the webhook CA's validity.",
    },
    MetadataKey {
        key: CERT_NOT_AFTER,
        kind: KeyKind::Annotation,
        on: "the webhook's certificate Secret",
        set_by: "the operator",
        read_by: "the operator",
        values: "RFC 3339 time",
        meaning: "End of the webhook's serving certificate's validity.",
    },
    MetadataKey {
        key: CERT_DNS_NAMES,
        kind: KeyKind::Annotation,
        on: "the webhook's certificate Secret",
        set_by: "the operator",
        read_by: "the operator",
        values: "comma-separated DNS names",
        meaning: "The serving certificate's names (a changed Service name issues a new one).",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_a_baton_key_and_the_selector_names_the_label() {
        for k in OPERATOR_KEYS {
            assert!(k.key.starts_with("baton.dev/"), "{}", k.key);
        }
        assert_eq!(
            crate::sidecar_audit::NAMESPACE_SELECTOR,
            format!(
                "{INJECTION_LABEL}={}",
                crate::sidecar_audit::INJECTION_ENABLED
            )
        );
    }
}
