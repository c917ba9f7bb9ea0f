//! One AdmissionReview v1 in, one out. The response is written here rather than with kube's
//! `AdmissionResponse`, whose `patch` serializes as an array of numbers (kube-rs #1781): the API
//! server reads a `[]byte` field only as a base64 string.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation};
use serde::Serialize;

use super::inject::{self, EnsembleView, InjectSettings, Wanted};
use super::lookup::{EnsembleLookup, resolve};

/// Answers AdmissionReviews for pods.
pub struct Injector<L> {
    lookup: L,
    settings: InjectSettings,
    metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
}

/// The HTTP status and JSON body to send back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// 200 for every review the webhook could read, 400 for one it could not.
    pub status: u16,
    /// An AdmissionReview with only `response` set.
    pub body: Vec<u8>,
    /// What the webhook decided, for metrics.
    pub outcome: Outcome,
}

/// What the webhook did with one review.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The sidecar was added.
    Injected,
    /// Allowed unchanged: not a create, not annotated, or already injected.
    Skipped,
    /// Refused with a message (no such ensemble, a namespace it does not serve, a bad name).
    Denied,
    /// The body was not an AdmissionReview v1.
    Unreadable,
}

impl Outcome {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Injected => "injected",
            Outcome::Skipped => "skipped",
            Outcome::Denied => "denied",
            Outcome::Unreadable => "unreadable",
        }
    }
}

impl<L: EnsembleLookup> Injector<L> {
    /// An injector finding ensembles through `lookup`.
    pub fn new(lookup: L, settings: InjectSettings) -> Self {
        Injector {
            lookup,
            settings,
            metrics: None,
        }
    }

    /// Counts every answer in `metrics` (`baton_operator_webhook_reviews_total`).
    pub fn with_metrics(mut self, metrics: std::sync::Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Answers the AdmissionReview in `body`.
    pub async fn review(&self, body: &[u8]) -> Answer {
        let answer = self.decide(body).await;
        if let Some(metrics) = &self.metrics {
            metrics.record_review(answer.outcome.as_str());
        }
        answer
    }

    async fn decide(&self, body: &[u8]) -> Answer {
        let request: AdmissionRequest<Pod> =
            match serde_json::from_slice::<AdmissionReview<Pod>>(body)
                .map_err(|e| e.to_string())
                .and_then(|r| r.try_into().map_err(|_| "no request in the review".into()))
            {
                Ok(request) => request,
                Err(e) => {
                    tracing::warn!(error = %e, "unreadable AdmissionReview");
                    return answer(
                        400,
                        Outcome::Unreadable,
                        Response::denied(
                            String::new(),
                            400,
                            format!("not an AdmissionReview v1: {e}"),
                        ),
                    );
                }
            };
        let uid = request.uid.clone();
        let namespace = request.namespace.clone().unwrap_or_default();
        let Some(pod) = request
            .object
            .as_ref()
            .filter(|_| request.operation == Operation::Create)
        else {
            return answer(200, Outcome::Skipped, Response::allowed(uid));
        };
        let name = pod_name(pod, &request.name);
        let choice = match inject::wanted(pod, &namespace) {
            Wanted::Skip(why) => {
                tracing::debug!(pod = %name, %namespace, why, "not injecting");
                return answer(200, Outcome::Skipped, Response::allowed(uid));
            }
            Wanted::Inject(choice) => choice,
        };
        let ensemble = match resolve(&self.lookup, &choice).await {
            Ok(ce) => EnsembleView::of(&ce, &namespace),
            Err(e) => {
                let message = e.to_string();
                tracing::info!(pod = %name, %namespace, %message, "injection denied");
                return answer(200, Outcome::Denied, Response::denied(uid, 403, message));
            }
        };
        match inject::patch(pod, &namespace, &ensemble, &self.settings) {
            Ok(patch) => {
                tracing::info!(pod = %name, %namespace, ensemble = %ensemble.endpoint, "injecting the sidecar");
                let bytes = serde_json::to_vec(&patch).unwrap_or_default();
                answer(200, Outcome::Injected, Response::patched(uid, &bytes))
            }
            Err(e) => {
                tracing::info!(pod = %name, %namespace, error = %e, "injection denied");
                let code = match e {
                    inject::InjectError::NotServed { .. } => 403,
                    _ => 400,
                };
                answer(
                    200,
                    Outcome::Denied,
                    Response::denied(uid, code, e.to_string()),
                )
            }
        }
    }
}

fn pod_name(pod: &Pod, request_name: &str) -> String {
    pod.metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| pod.metadata.generate_name.clone())
        .unwrap_or_else(|| request_name.to_string())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    api_version: &'static str,
    kind: &'static str,
    response: Response,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    uid: String,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
}

#[derive(Serialize)]
struct Status {
    code: u16,
    message: String,
}

impl Response {
    fn allowed(uid: String) -> Self {
        Response {
            uid,
            allowed: true,
            status: None,
            patch: None,
            patch_type: None,
        }
    }

    fn patched(uid: String, patch: &[u8]) -> Self {
        Response {
            patch: Some(STANDARD.encode(patch)),
            patch_type: Some("JSONPatch"),
            ..Response::allowed(uid)
        }
    }

    fn denied(uid: String, code: u16, message: String) -> Self {
        Response {
            uid,
            allowed: false,
            status: Some(Status { code, message }),
            patch: None,
            patch_type: None,
        }
    }
}

fn answer(status: u16, outcome: Outcome, response: Response) -> Answer {
    let review = Review {
        api_version: "admission.k8s.io/v1",
        kind: "AdmissionReview",
        response,
    };
    Answer {
        status,
        body: serde_json::to_vec(&review).unwrap_or_default(),
        outcome,
    }
}
