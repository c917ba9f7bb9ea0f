//! The pod labeler for Kubernetes: a JSON merge patch of this pod's own labels and
//! annotations, sent with the pod's service account (in-cluster) or as kubectl would
//! (`KUBECONFIG`).
//!
//! A merge patch rather than server-side apply: the sidecar owns a handful of keys on an
//! object whose other fields belong to the kubelet and to whoever created the pod, and a
//! merge patch touches exactly the keys it names (`null` removes one) without claiming field
//! ownership that another manager's apply would then fight over.

use std::pin::Pin;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Map, Value, json};

use super::{PodLabelError, PodLabeler, PodMetadata};

/// The field manager named in every patch, so `kubectl get pod -o yaml --show-managed-fields`
/// says who wrote the keys.
pub const FIELD_MANAGER: &str = "baton-sidecar";

/// Labels one pod through the Kubernetes API.
#[derive(Clone)]
pub struct KubePodLabeler {
    pods: Api<Pod>,
    namespace: String,
    pod: String,
}

impl KubePodLabeler {
    /// A labeler with Kubernetes access as kubectl finds it: the pod's service account in a
    /// cluster, else `KUBECONFIG` or `~/.kube/config`.
    pub async fn from_environment(namespace: &str, pod: &str) -> Result<Self, PodLabelError> {
        let client = kube::Client::try_default()
            .await
            .map_err(|e| PodLabelError {
                namespace: namespace.to_owned(),
                pod: pod.to_owned(),
                message: format!(
                    "no Kubernetes API access (neither in-cluster service account nor kubeconfig): {e}"
                ),
            })?;
        Ok(Self::new(client, namespace, pod))
    }

    /// A labeler over an existing client (tests give it a mocked API server).
    pub fn new(client: kube::Client, namespace: &str, pod: &str) -> Self {
        Self {
            pods: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            pod: pod.to_owned(),
        }
    }

    fn error(&self, message: String) -> PodLabelError {
        PodLabelError {
            namespace: self.namespace.clone(),
            pod: self.pod.clone(),
            message,
        }
    }
}

/// The merge patch that makes the pod's metadata say `metadata`: `Some` keys set, `None`
/// keys removed (`null`), every other key left alone.
pub fn merge_patch(metadata: &PodMetadata) -> Value {
    fn object(keys: &std::collections::BTreeMap<String, Option<String>>) -> Value {
        let map: Map<String, Value> = keys
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().map_or(Value::Null, Value::String)))
            .collect();
        Value::Object(map)
    }
    json!({
        "metadata": {
            "labels": object(&metadata.labels),
            "annotations": object(&metadata.annotations),
        }
    })
}

/// Says what an API error means for whoever reads the log.
fn explain(e: &kube::Error) -> String {
    match e {
        // Admission refuses with 403 too (the chart's pod-label ValidatingAdmissionPolicy says
        // Forbidden): there RBAC allowed the patch, and granting `patch` again would not help.
        kube::Error::Api(status)
            if status.code == 403
                && (status.message.contains("ValidatingAdmissionPolicy")
                    || status.message.contains("admission webhook")) =>
        {
            format!(
                "refused by admission: the chart's pod-label policy lets a pod's service account \
                 change only baton.dev/* labels and annotations, of its own pod, with the token \
                 the kubelet projects for that pod (check --pod/BATON_POD and that the pod \
                 mounts its service account token): {}",
                status.message
            )
        }
        kube::Error::Api(status) if status.code == 403 => format!(
            "forbidden: the pod's service account may not patch pods in this namespace; grant it \
             `patch` on `pods` (the chart's sidecar RBAC does): {}",
            status.message
        ),
        kube::Error::Api(status) if status.code == 404 => format!(
            "the pod does not exist: check --pod/--namespace (BATON_POD/BATON_NAMESPACE from the \
             downward API): {}",
            status.message
        ),
        other => other.to_string(),
    }
}

impl PodLabeler for KubePodLabeler {
    fn apply<'a>(
        &'a self,
        metadata: &'a PodMetadata,
    ) -> Pin<Box<dyn Future<Output = Result<(), PodLabelError>> + Send + 'a>> {
        Box::pin(async move {
            let patch = merge_patch(metadata);
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            };
            self.pods
                .patch_metadata(&self.pod, &params, &Patch::Merge(&patch))
                .await
                .map_err(|e| self.error(explain(&e)))?;
            tracing::debug!(pod = %self.pod, namespace = %self.namespace, %patch, "pod labels updated");
            Ok(())
        })
    }
}
