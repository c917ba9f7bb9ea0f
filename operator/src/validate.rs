//! Stage 2 of the reconcile pipeline: checks what the CRD schema already enforces (a client may
//! bypass it, e.g. an older CRD) and what it cannot express, and fills in operator defaults.

use crate::crd::CoordinationEnsemble;

/// Member counts a Raft ensemble may have here: odd, so that a majority survives a minority.
pub const ALLOWED_REPLICAS: [i32; 4] = [1, 3, 5, 7];

/// Why a `CoordinationEnsemble`'s spec cannot be reconciled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSpec {
    #[error("spec.replicas is {0}; it must be 1, 3, 5 or 7")]
    Replicas(i32),
    #[error("spec.storage.size {0:?} is not a Kubernetes quantity like 1Gi or 500Mi")]
    StorageSize(String),
    #[error("{field} {value:?} is not a duration like 250ms, 10s or 2m")]
    Duration { field: &'static str, value: String },
    #[error("spec.sessionTimeout.min ({min}) is larger than spec.sessionTimeout.max ({max})")]
    SessionTimeoutBounds { min: String, max: String },
    #[error("the object has no {0}")]
    Metadata(&'static str),
    #[error("no image: set spec.image or the operator's --default-image")]
    NoImage,
    #[error(
        "spec.allowedNamespaces: {0:?} is not a namespace name (lower-case letters, digits and \
         '-'; no wildcards: list every namespace the ensemble serves)"
    )]
    AllowedNamespace(String),
    #[error(
        "metadata.name {0:?} contains a dot: the ensemble's Services and published ConfigMaps \
         need a DNS label"
    )]
    Name(String),
}

/// A spec that passed validation, with defaults resolved: what `build` works from.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidSpec {
    pub name: String,
    pub namespace: String,
    pub replicas: i32,
    pub image: String,
    pub min_session_timeout: String,
    pub max_session_timeout: String,
    /// Serve plain ZooKeeper clients on 2181 beside TLS on 2281.
    pub plain_client_port: bool,
    /// Namespaces served besides the ensemble's own: sorted, each once, never its own.
    pub allowed_namespaces: Vec<String>,
}

impl ValidSpec {
    /// Every namespace whose pods may use the ensemble: its own first, then the allowed ones.
    pub fn served_namespaces(&self) -> Vec<String> {
        std::iter::once(self.namespace.clone())
            .chain(self.allowed_namespaces.iter().cloned())
            .collect()
    }
}

/// Validates `ce` and resolves the image (`spec.image`, else `default_image`).
pub fn validate(ce: &CoordinationEnsemble, default_image: &str) -> Result<ValidSpec, InvalidSpec> {
    let spec = &ce.spec;
    let name = ce
        .metadata
        .name
        .clone()
        .ok_or(InvalidSpec::Metadata("metadata.name"))?;
    let namespace = ce
        .metadata
        .namespace
        .clone()
        .ok_or(InvalidSpec::Metadata("metadata.namespace"))?;
    if name.contains('.') {
        return Err(InvalidSpec::Name(name));
    }
    if ce.metadata.uid.is_none() {
        // Owner references need it; only a hand-made object lacks one.
        return Err(InvalidSpec::Metadata("metadata.uid"));
    }
    if !ALLOWED_REPLICAS.contains(&spec.replicas) {
        return Err(InvalidSpec::Replicas(spec.replicas));
    }
    if !is_quantity(&spec.storage.size) {
        return Err(InvalidSpec::StorageSize(spec.storage.size.clone()));
    }
    let min = duration_ms("spec.sessionTimeout.min", &spec.session_timeout.min)?;
    let max = duration_ms("spec.sessionTimeout.max", &spec.session_timeout.max)?;
    if min > max {
        return Err(InvalidSpec::SessionTimeoutBounds {
            min: spec.session_timeout.min.clone(),
            max: spec.session_timeout.max.clone(),
        });
    }
    if let Some(timeout) = spec
        .sidecar
        .as_ref()
        .and_then(|s| s.session_timeout.as_ref())
    {
        duration_ms("spec.sidecar.sessionTimeout", timeout)?;
    }
    let image = spec
        .image
        .clone()
        .filter(|i| !i.trim().is_empty())
        .unwrap_or_else(|| default_image.to_string());
    if image.trim().is_empty() {
        return Err(InvalidSpec::NoImage);
    }
    let mut allowed_namespaces = Vec::new();
    for ns in &spec.allowed_namespaces {
        if !is_namespace_name(ns) {
            return Err(InvalidSpec::AllowedNamespace(ns.clone()));
        }
        if *ns != namespace {
            allowed_namespaces.push(ns.clone());
        }
    }
    allowed_namespaces.sort();
    allowed_namespaces.dedup();
    Ok(ValidSpec {
        allowed_namespaces,
        name,
        namespace,
        replicas: spec.replicas,
        image,
        min_session_timeout: spec.session_timeout.min.clone(),
        max_session_timeout: spec.session_timeout.max.clone(),
        plain_client_port: spec.plain_client_port,
    })
}

/// A namespace name (RFC 1123 label, as `NAMESPACE_PATTERN` in the CRD says).
pub fn is_namespace_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(inner)
        && bytes.last().is_some_and(inner)
        && bytes.iter().all(|b| inner(b) || *b == b'-')
}

/// A Kubernetes quantity of the forms the CRD admits (`SIZE_PATTERN`), greater than zero.
fn is_quantity(s: &str) -> bool {
    const SUFFIXES: [&str; 12] = [
        "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E",
    ];
    let number = SUFFIXES
        .iter()
        .find_map(|suffix| s.strip_suffix(suffix))
        .unwrap_or(s);
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (number, None),
    };
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    digits(whole)
        && fraction.is_none_or(digits)
        && number.bytes().any(|b| b.is_ascii_digit() && b != b'0')
}

/// Milliseconds of a duration in `baton-ensemble`'s syntax (`250ms`, `10s`, `2m`).
fn duration_ms(field: &'static str, value: &str) -> Result<u64, InvalidSpec> {
    let bad = || InvalidSpec::Duration {
        field,
        value: value.to_string(),
    };
    let split = value.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = value.split_at(split);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let factor = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        _ => return Err(bad()),
    };
    n.checked_mul(factor).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> CoordinationEnsemble {
        serde_saphyr::from_str(yaml).expect("test YAML parses")
    }

    const BASE: &str = "
apiVersion: baton.dev/v1alpha1
kind: CoordinationEnsemble
metadata: {name: demo, namespace: default, uid: u-1}
spec: {}
";

    #[test]
    fn defaults_fill_an_empty_spec() {
        let valid = validate(&parse(BASE), "baton:1").expect("valid");
        assert_eq!(valid.replicas, 3);
        assert_eq!(valid.image, "baton:1");
        assert_eq!(valid.min_session_timeout, "4s");
        assert_eq!(valid.max_session_timeout, "40s");
    }

    #[test]
    fn replicas_must_be_odd_and_at_most_seven() {
        for (n, ok) in [
            (1, true),
            (2, false),
            (3, true),
            (7, true),
            (9, false),
            (0, false),
        ] {
            let ce = parse(&BASE.replace("spec: {}", &format!("spec: {{replicas: {n}}}")));
            assert_eq!(validate(&ce, "i").is_ok(), ok, "replicas {n}");
        }
    }

    #[test]
    fn sizes_and_durations_are_checked() {
        assert!(is_quantity("1Gi") && is_quantity("500M") && is_quantity("1.5Gi"));
        assert!(!is_quantity("0") && !is_quantity("Gi") && !is_quantity("1GB") && !is_quantity(""));
        let ce = parse(&BASE.replace("spec: {}", "spec: {storage: {size: lots}}"));
        assert_eq!(
            validate(&ce, "i"),
            Err(InvalidSpec::StorageSize("lots".into()))
        );
        let ce = parse(&BASE.replace("spec: {}", "spec: {sessionTimeout: {min: 10s, max: 2s}}"));
        assert!(matches!(
            validate(&ce, "i"),
            Err(InvalidSpec::SessionTimeoutBounds { .. })
        ));
        let ce = parse(&BASE.replace("spec: {}", "spec: {sessionTimeout: {min: 1h}}"));
        assert!(matches!(
            validate(&ce, "i"),
            Err(InvalidSpec::Duration { .. })
        ));
        assert_eq!(duration_ms("f", "2m"), Ok(120_000));
    }

    #[test]
    fn allowed_namespaces_are_names_never_wildcards() {
        let ce = parse(&BASE.replace(
            "spec: {}",
            "spec: {allowedNamespaces: [web, default, batch, web]}",
        ));
        let valid = validate(&ce, "i").expect("valid");
        assert_eq!(
            valid.allowed_namespaces,
            ["batch", "web"],
            "sorted, once, not its own"
        );
        assert_eq!(valid.served_namespaces(), ["default", "batch", "web"]);
        for bad in ["*", "", "Web", "a.b", "-a", "prod/*"] {
            let ce = parse(&BASE.replace(
                "spec: {}",
                &format!("spec: {{allowedNamespaces: [{bad:?}]}}"),
            ));
            assert_eq!(
                validate(&ce, "i"),
                Err(InvalidSpec::AllowedNamespace(bad.into())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn an_image_is_required_somewhere() {
        assert_eq!(validate(&parse(BASE), ""), Err(InvalidSpec::NoImage));
        let ce = parse(&BASE.replace("spec: {}", "spec: {image: 'own:2'}"));
        assert_eq!(validate(&ce, "").map(|v| v.image), Ok("own:2".into()));
    }
}
