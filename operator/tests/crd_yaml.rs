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
