//! Every object the reconciler would apply for one `CoordinationEnsemble`, as YAML documents,
//! without a cluster (`baton-operator render`): so the generated objects can be checked
//! against the Kubernetes schemas (tests/scripts/validate-chart.sh) and read by people.

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::build::{self, OperatorPods, StoredMembership};
use crate::crd::CoordinationEnsemble;
use crate::names::EnsembleNames;
use crate::pki;
use crate::validate::validate;

/// Why the objects could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("not a CoordinationEnsemble: {0}")]
    Parse(String),
    #[error(transparent)]
    Invalid(#[from] crate::validate::InvalidSpec),
    #[error(transparent)]
    Pki(#[from] pki::PkiError),
    #[error(transparent)]
    Build(#[from] build::BuildError),
    #[error("cannot write {what} as YAML: {reason}")]
    Yaml { what: String, reason: String },
}

/// The objects for the ensemble in `yaml` (namespace `namespace` unless it names one), as a
/// fresh ensemble gets them: certificates newly issued, every member bootstrapping. Returns
/// `(file name, YAML)` pairs in the order they are applied.
pub fn render(
    yaml: &str,
    namespace: &str,
    default_image: &str,
    operator: &OperatorPods,
) -> Result<Vec<(String, String)>, RenderError> {
    let mut ce: CoordinationEnsemble =
        serde_saphyr::from_str(yaml).map_err(|e| RenderError::Parse(e.to_string()))?;
    ce.metadata
        .namespace
        .get_or_insert_with(|| namespace.to_string());
    // Owner references need a uid; the API server assigns the real one.
    ce.metadata
        .uid
        .get_or_insert_with(|| "00000000-0000-0000-0000-000000000000".to_string());
    let spec = validate(&ce, default_image)?;
    let names = EnsembleNames::new(&spec.name, &spec.namespace);
    let ids: Vec<u64> = (1..=spec.replicas.max(0) as u64).collect();
    let now = Timestamp::now();
    let stored = pki::StoredPki::default();
    let pki = pki::issue(&stored, &pki::plan(&stored, &ids, now), &names, now)?;
    let membership = StoredMembership {
        replicas: spec.replicas,
        bootstrap: spec.replicas,
    };
    // A placeholder password: the operator generates a random one; rendering shows the shape.
    let credentials = build::SuperCredentials {
        username: build::identity::SUPER_USER.into(),
        password: "rendered-not-secret".into(),
    };
    let built = build::build(&ce, &spec, membership, &pki, operator, Some(&credentials))?;
    let mut out = Vec::new();
    let mut push = |kind: &str, name: Option<&String>, object: &dyn ErasedSerialize| {
        let value = object.to_value();
        let file = format!(
            "{:02}-{}-{}.yaml",
            out.len() + 1,
            kind.to_lowercase(),
            // Binding names hold colons, which not every file system takes.
            name.map_or("unnamed", String::as_str).replace(':', "_")
        );
        let text = serde_saphyr::to_string(&value).map_err(|e| RenderError::Yaml {
            what: file.clone(),
            reason: e.to_string(),
        })?;
        out.push((file, text));
        Ok::<(), RenderError>(())
    };
    for secret in built.secrets.in_order() {
        push("Secret", secret.metadata.name.as_ref(), secret)?;
    }
    let b = &built;
    if let Some(secret) = &b.super_secret {
        push("Secret", secret.metadata.name.as_ref(), secret)?;
    }
    push(
        "ServiceAccount",
        b.service_account.metadata.name.as_ref(),
        &b.service_account,
    )?;
    push(
        "ClusterRoleBinding",
        b.token_review_binding.metadata.name.as_ref(),
        &b.token_review_binding,
    )?;
    push(
        "ConfigMap",
        b.ca_config_map.metadata.name.as_ref(),
        &b.ca_config_map,
    )?;
    for cm in &b.published_ca_config_maps {
        push("ConfigMap", cm.metadata.name.as_ref(), cm)?;
    }
    push(
        "ConfigMap",
        b.config_map.metadata.name.as_ref(),
        &b.config_map,
    )?;
    push(
        "Service",
        b.peer_service.metadata.name.as_ref(),
        &b.peer_service,
    )?;
    push(
        "Service",
        b.client_service.metadata.name.as_ref(),
        &b.client_service,
    )?;
    if let Some(pdb) = &b.pdb {
        push("PodDisruptionBudget", pdb.metadata.name.as_ref(), pdb)?;
    }
    push(
        "NetworkPolicy",
        b.network_policy.metadata.name.as_ref(),
        &b.network_policy,
    )?;
    push(
        "StatefulSet",
        b.statefulset.metadata.name.as_ref(),
        &b.statefulset,
    )?;
    if let Some(cron_job) = &b.backup {
        push("CronJob", cron_job.metadata.name.as_ref(), cron_job)?;
    }
    Ok(out)
}

/// Serializing differently-typed objects through one closure.
trait ErasedSerialize {
    fn to_value(&self) -> serde_json::Value;
}

impl<T: Serialize> ErasedSerialize for T {
    fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_renders_every_object_with_kind_and_version() {
        let example = include_str!("../examples/coordinationensemble.yaml")
            .replace("# allowedNamespaces: [web]", "allowedNamespaces: [web]");
        let files =
            render(&example, "prod", "baton:test", &OperatorPods::default()).expect("rendered");
        let names: Vec<&str> = files.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            names,
            [
                "01-secret-demo-ca-key.yaml",
                "02-secret-demo-tls.yaml",
                "03-secret-demo-admin.yaml",
                "04-secret-demo-super.yaml",
                "05-serviceaccount-demo.yaml",
                "06-clusterrolebinding-baton.dev_ensemble_prod_demo.yaml",
                "07-configmap-demo-ca.yaml",
                "08-configmap-prod.demo-ca.yaml",
                "09-configmap-demo-config.yaml",
                "10-service-demo-peers.yaml",
                "11-service-demo-client.yaml",
                "12-poddisruptionbudget-demo.yaml",
                "13-networkpolicy-demo-members.yaml",
                "14-statefulset-demo.yaml",
            ]
        );
        for (file, text) in &files {
            let value: serde_json::Value = serde_saphyr::from_str(text).expect("YAML parses");
            assert!(value["apiVersion"].is_string(), "{file}");
            assert!(value["kind"].is_string(), "{file}");
            if value["kind"] != "ClusterRoleBinding" {
                assert!(value["metadata"]["namespace"].is_string(), "{file}");
            }
        }
        assert!(matches!(
            render("kind: Pod", "prod", "i", &OperatorPods::default()),
            Err(RenderError::Parse(_) | RenderError::Invalid(_))
        ));
        // The example's limits: the quotas in the ConfigMap, the watermark on the command line.
        let text = |name: &str| {
            files
                .iter()
                .find(|(f, _)| f == name)
                .map(|(_, t)| t.as_str())
                .unwrap_or_default()
        };
        assert!(
            text("09-configmap-demo-config.yaml")
                .contains("BATON_QUOTA_NAMESPACE_BYTES: '67108864'")
                || text("09-configmap-demo-config.yaml")
                    .contains("BATON_QUOTA_NAMESPACE_BYTES: \"67108864\""),
            "{}",
            text("09-configmap-demo-config.yaml")
        );
        assert!(text("14-statefulset-demo.yaml").contains("--min-free-disk-bytes=67108864"));
        // A watermark the volume could never clear is refused before anything is rendered.
        let unclearable =
            example.replace("minFreeDiskBytes: 67108864", "minFreeDiskBytes: 536870912");
        assert!(matches!(
            render(&unclearable, "prod", "i", &OperatorPods::default()),
            Err(RenderError::Invalid(_))
        ));
    }

    #[test]
    fn backups_and_restores_render_a_cron_job_and_an_init_container() {
        let example = include_str!("../examples/coordinationensemble.yaml")
            .replace(
                "# backup: {schedule: \"@daily\"",
                "backup: {schedule: \"@daily\"",
            )
            .replace("# restoreFrom:", "restoreFrom:");
        let files =
            render(&example, "prod", "baton:test", &OperatorPods::default()).expect("rendered");
        let (last, text) = files.last().expect("files");
        assert_eq!(last, "14-cronjob-demo-backup.yaml");
        let cron_job: serde_json::Value = serde_saphyr::from_str(text).expect("YAML parses");
        assert_eq!(cron_job["kind"], "CronJob");
        assert_eq!(cron_job["spec"]["schedule"], "@daily");
        let (_, sts) = files
            .iter()
            .find(|(f, _)| f.contains("statefulset"))
            .expect("the StatefulSet");
        let sts: serde_json::Value = serde_saphyr::from_str(sts).expect("YAML parses");
        assert_eq!(
            sts["spec"]["template"]["spec"]["initContainers"][0]["name"], "restore",
            "a new ensemble restores"
        );
    }
}
