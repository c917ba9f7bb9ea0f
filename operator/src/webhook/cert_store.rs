//! The webhook's certificates in the API server: kept in a Secret (shared by every operator
//! replica), their CA written into the `caBundle` of every webhook of the
//! MutatingWebhookConfiguration, renewed before they expire.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::certs::{self, CertBundle, CertError, Renewal};
use super::server::{ReloadableCert, TlsError, certified_key};
use crate::names::FIELD_MANAGER;

/// Annotation of the webhook's certificate Secret: end of its CA's validity.
pub const CA_NOT_AFTER: &str = "baton.dev/ca-not-after";
/// Annotation of the webhook's certificate Secret: end of the serving certificate's validity.
pub const CERT_NOT_AFTER: &str = "baton.dev/cert-not-after";
/// Annotation of the webhook's certificate Secret: the serving certificate's DNS names.
pub const CERT_DNS_NAMES: &str = "baton.dev/cert-dns-names";
/// After a failed round, the next one comes this soon.
const RETRY: Duration = Duration::from_secs(30);

/// Keeping the certificates failed; the next round tries again.
#[derive(Debug, thiserror::Error)]
pub enum CertStoreError {
    /// Generating a certificate failed.
    #[error(transparent)]
    Generate(#[from] CertError),
    /// The new certificate could not be loaded for serving.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The API server refused or failed a request.
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// The MutatingWebhookConfiguration does not exist (yet).
    #[error("MutatingWebhookConfiguration {0} does not exist")]
    NoWebhookConfiguration(String),
}

/// Where the certificates live and what they are for.
#[derive(Clone)]
pub struct CertStore {
    /// Client of the operator's own namespace.
    pub client: kube::Client,
    /// The operator's namespace (the Secret's).
    pub namespace: String,
    /// The Secret holding `tls.crt`, `tls.key`, `ca.crt`, `ca.key`.
    pub secret_name: String,
    /// The MutatingWebhookConfiguration whose caBundles to keep.
    pub webhook_config: String,
    /// DNS names of the webhook's Service.
    pub dns_names: Vec<String>,
}

impl CertStore {
    /// Makes sure the Secret holds a bundle good at `now` and every webhook trusts its CA;
    /// returns the bundle to serve.
    pub async fn ensure(&self, now: Timestamp) -> Result<CertBundle, CertStoreError> {
        let bundle = self.ensure_secret(now).await?;
        self.publish_ca(&bundle.ca_bundle_pem).await?;
        Ok(bundle)
    }

    /// Makes sure the Secret holds a bundle good at `now`; returns it.
    pub async fn ensure_secret(&self, now: Timestamp) -> Result<CertBundle, CertStoreError> {
        let secrets = Api::<Secret>::namespaced(self.client.clone(), &self.namespace);
        let existing = secrets
            .get_opt(&self.secret_name)
            .await
            .map_err(|source| self.api_error("read the webhook Secret", source))?;
        let stored = existing.as_ref().and_then(bundle_of);
        let renewal = certs::renewal(stored.as_ref(), &self.dns_names, now);
        let bundle = match (renewal, stored) {
            (Renewal::Keep, Some(stored)) => stored,
            (Renewal::Serving, Some(stored)) => {
                tracing::info!(secret = %self.secret_name, "renewing the webhook serving certificate");
                let bundle = certs::renew_serving(&stored, &self.dns_names, now)?;
                self.write(&secrets, existing.as_ref(), &bundle, now)
                    .await?
            }
            (_, stored) => {
                tracing::info!(secret = %self.secret_name, "making a new webhook CA and serving certificate");
                let previous = stored.as_ref().map(|s| s.ca_bundle_pem.as_str());
                let bundle = certs::new_bundle(&self.dns_names, previous, now)?;
                self.write(&secrets, existing.as_ref(), &bundle, now)
                    .await?
            }
        };
        Ok(bundle)
    }

    /// Runs `ensure` every `every` (sooner after a failure), giving `cert` each new serving
    /// certificate; the first good bundle is served through `cert` too.
    pub async fn keep_rotated(self, cert: Arc<ReloadableCert>, every: Duration) {
        let mut serving = String::new();
        loop {
            let wait = match self.rotate_once(&cert, &mut serving).await {
                Ok(()) => every,
                Err(e) => {
                    tracing::warn!(secret = %self.secret_name, config = %self.webhook_config, error = %e, "cannot keep the webhook certificate");
                    RETRY
                }
            };
            // A periodic check, not a synchronisation: nothing signals an approaching expiry.
            tokio::time::sleep(wait).await;
        }
    }

    /// One round of `keep_rotated`. The stored certificate is served before the caBundle is
    /// published, so a missing or unpatchable configuration does not keep it from serving.
    async fn rotate_once(
        &self,
        cert: &ReloadableCert,
        serving: &mut String,
    ) -> Result<(), CertStoreError> {
        let bundle = self.ensure_secret(Timestamp::now()).await?;
        if bundle.cert_pem != *serving {
            let key = certified_key(
                bundle.cert_pem.as_bytes(),
                bundle.key_pem.as_bytes(),
                &self.secret_name,
            )?;
            cert.replace(key);
            serving.clone_from(&bundle.cert_pem);
            tracing::info!(secret = %self.secret_name, not_after = %bundle.cert_not_after, "serving the webhook certificate");
        }
        self.publish_ca(&bundle.ca_bundle_pem).await
    }

    /// Stores `bundle`; when another replica wrote first, takes theirs if it is good.
    async fn write(
        &self,
        secrets: &Api<Secret>,
        existing: Option<&Secret>,
        bundle: &CertBundle,
        now: Timestamp,
    ) -> Result<CertBundle, CertStoreError> {
        let mut secret = secret_of(bundle, &self.secret_name);
        let written = match existing {
            Some(old) => {
                secret.metadata.resource_version = old.metadata.resource_version.clone();
                secrets
                    .replace(&self.secret_name, &PostParams::default(), &secret)
                    .await
            }
            None => secrets.create(&PostParams::default(), &secret).await,
        };
        match written {
            Ok(_) => Ok(bundle.clone()),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let theirs = secrets
                    .get_opt(&self.secret_name)
                    .await
                    .map_err(|source| self.api_error("re-read the webhook Secret", source))?;
                match theirs.as_ref().and_then(bundle_of) {
                    Some(theirs)
                        if certs::renewal(Some(&theirs), &self.dns_names, now) == Renewal::Keep =>
                    {
                        tracing::info!(secret = %self.secret_name, "another replica wrote the webhook certificate first");
                        Ok(theirs)
                    }
                    _ => Err(self.api_error("write the webhook Secret", kube::Error::Api(status))),
                }
            }
            Err(source) => Err(self.api_error("write the webhook Secret", source)),
        }
    }

    /// Writes `ca_pem` into the caBundle of every webhook of the configuration that lacks it.
    async fn publish_ca(&self, ca_pem: &str) -> Result<(), CertStoreError> {
        let configs = Api::<MutatingWebhookConfiguration>::all(self.client.clone());
        let config = configs
            .get_opt(&self.webhook_config)
            .await
            .map_err(|source| self.api_error("read the MutatingWebhookConfiguration", source))?
            .ok_or_else(|| CertStoreError::NoWebhookConfiguration(self.webhook_config.clone()))?;
        let ops = ca_bundle_ops(&config, ca_pem.as_bytes());
        if ops.is_empty() {
            return Ok(());
        }
        let patch: json_patch::Patch =
            serde_json::from_value(Value::Array(ops)).unwrap_or_default();
        configs
            .patch(
                &self.webhook_config,
                &PatchParams::default(),
                &Patch::Json::<()>(patch),
            )
            .await
            .map_err(|source| self.api_error("patch the caBundle", source))?;
        tracing::info!(config = %self.webhook_config, "webhook caBundle updated");
        Ok(())
    }

    fn api_error(&self, what: &str, source: kube::Error) -> CertStoreError {
        CertStoreError::Api {
            what: format!("{what} ({}/{})", self.namespace, self.secret_name),
            source,
        }
    }
}

/// JSON-patch operations setting `ca` on every webhook whose caBundle differs; each guarded by a
/// `test` of the webhook's name, so a concurrent reorder fails the patch instead of mixing up.
pub fn ca_bundle_ops(config: &MutatingWebhookConfiguration, ca: &[u8]) -> Vec<Value> {
    let encoded = STANDARD.encode(ca);
    let mut ops = Vec::new();
    for (i, webhook) in config.webhooks.iter().flatten().enumerate() {
        if webhook
            .client_config
            .ca_bundle
            .as_ref()
            .map(|b| b.0.as_slice())
            == Some(ca)
        {
            continue;
        }
        ops.push(
            json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": webhook.name}),
        );
        ops.push(json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": encoded}));
    }
    ops
}

/// The Secret holding `bundle`.
pub fn secret_of(bundle: &CertBundle, name: &str) -> Secret {
    let bytes = crate::pki::secrets::bytes;
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".into(),
                FIELD_MANAGER.into(),
            )])),
            annotations: Some(BTreeMap::from([
                (CA_NOT_AFTER.into(), bundle.ca_not_after.to_string()),
                (CERT_NOT_AFTER.into(), bundle.cert_not_after.to_string()),
                (CERT_DNS_NAMES.into(), bundle.dns_names.join(",")),
            ])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            ("tls.crt".into(), bytes(&bundle.cert_pem)),
            ("tls.key".into(), bytes(&bundle.key_pem)),
            ("ca.crt".into(), bytes(&bundle.ca_bundle_pem)),
            ("ca.key".into(), bytes(&bundle.ca_key_pem)),
        ])),
        ..Secret::default()
    }
}

/// The bundle a Secret holds, if it holds a whole one.
pub fn bundle_of(secret: &Secret) -> Option<CertBundle> {
    let text = |key: &str| crate::pki::secrets::text(secret, key);
    let annotations = secret.metadata.annotations.as_ref()?;
    let time = |key: &str| annotations.get(key)?.parse::<Timestamp>().ok();
    Some(CertBundle {
        ca_bundle_pem: text("ca.crt")?,
        ca_key_pem: text("ca.key")?,
        cert_pem: text("tls.crt")?,
        key_pem: text("tls.key")?,
        ca_not_after: time(CA_NOT_AFTER)?,
        cert_not_after: time(CERT_NOT_AFTER)?,
        dns_names: annotations
            .get(CERT_DNS_NAMES)?
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
    })
}
