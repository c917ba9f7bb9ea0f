//! `operator/examples/injected-deployment.yaml` is a valid Deployment whose pods the webhook injects.

use baton_operator::webhook::inject::{self, EnsembleView, InjectSettings, Wanted};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;

#[test]
fn the_example_deployment_gets_the_sidecar() {
    let text = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/injected-deployment.yaml"
    ));
    let first = text.split("\n---\n").next().unwrap_or_default();
    let deployment: Deployment = serde_saphyr::from_str(first).expect("a Deployment");
    let template = deployment.spec.expect("spec").template;
    let mut pod = Pod {
        metadata: template.metadata.unwrap_or_default(),
        spec: template.spec,
        status: None,
    };
    pod.metadata.owner_references = Some(vec![serde_json::from_value(serde_json::json!(
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f7c", "uid": "u", "controller": true}
    )).expect("owner")]);
    assert!(matches!(inject::wanted(&pod, "prod"), Wanted::Inject(_)));
    let view = EnsembleView {
        ensemble: "prod/demo".into(),
        endpoint: "demo-client.prod.svc:2281".into(),
        ca_config_map: Some("demo-ca".into()),
        served: vec!["prod".into()],
        sidecar: Default::default(),
    };
    let settings = InjectSettings {
        image: "baton:dev".into(),
        native_sidecar: true,
    };
    let patch = inject::patch(&pod, "prod", &view, &settings).expect("patch");
    let mut doc = serde_json::to_value(&pod).expect("pod");
    json_patch::patch(&mut doc, &patch).expect("applies");
    let injected: Pod = serde_json::from_value(doc).expect("a valid Pod");
    let init = injected
        .spec
        .and_then(|s| s.init_containers)
        .expect("init containers");
    assert_eq!(init.len(), 1);
    let election = init[0]
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "BATON_ELECTION")
        .and_then(|e| e.value.clone());
    assert_eq!(election.as_deref(), Some("web"));
}
