//! The committed CRD YAML in crds/ must be what the Rust types generate.

#[test]
fn committed_crd_matches_the_types() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crds/coordinationensembles.baton.dev.yaml"
    );
    let committed = std::fs::read_to_string(path).expect("read the committed CRD");
    let generated = baton_operator::crd::crd_yaml().expect("generate the CRD");
    assert!(
        committed == generated,
        "crds/coordinationensembles.baton.dev.yaml is stale: regenerate it with \
         `cargo run -p baton-operator -- crd > crds/coordinationensembles.baton.dev.yaml`"
    );
}

#[test]
fn chart_crd_matches_the_types() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../charts/baton/crds/coordinationensembles.baton.dev.yaml"
    );
    let committed = std::fs::read_to_string(path).expect("read the chart's CRD");
    let generated = baton_operator::crd::crd_yaml().expect("generate the CRD");
    assert!(
        committed == generated,
        "charts/baton/crds/coordinationensembles.baton.dev.yaml is stale: copy it from crds/"
    );
}

#[test]
fn the_sample_ensemble_is_valid() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/coordinationensemble.yaml"
    );
    let yaml = std::fs::read_to_string(path).expect("read the sample");
    let mut ce: baton_operator::crd::CoordinationEnsemble =
        serde_saphyr::from_str(&yaml).expect("the sample parses as a CoordinationEnsemble");
    // What the API server adds on create.
    ce.metadata.namespace = Some("default".into());
    ce.metadata.uid = Some("u".into());
    let valid = baton_operator::validate::validate(&ce, "baton:test").expect("valid");
    assert_eq!(valid.replicas, 3);
    assert_eq!(ce.spec.storage.size, "1Gi");
}
