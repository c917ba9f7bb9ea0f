//! Backups in S3 or an S3-compatible store, through `object_store`. Credentials come from the
//! environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, optional `AWS_SESSION_TOKEN`;
//! `AWS_WEB_IDENTITY_TOKEN_FILE` with `AWS_ROLE_ARN` for a Kubernetes service account), as
//! `object_store` reads every `AWS_*` variable.

use bytes::Bytes;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::location::{self, BackupName, S3Url};

/// `--s3-endpoint` and `--s3-region`.
#[derive(Debug, Clone, Default)]
pub struct S3Options {
    /// A non-AWS endpoint (MinIO, Ceph, moto...): `http://HOST:PORT` or `https://...`.
    pub endpoint: Option<String>,
    pub region: Option<String>,
}

/// A bucket to read and write backups in.
pub struct Bucket {
    store: AmazonS3,
    name: String,
}

/// `error` and the causes under it: object_store's own message of a failed request ends at
/// "error sending request", and the reason (a certificate no trusted root signed, a refused
/// connection) is only in its sources.
fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let said = inner.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = inner.source();
    }
    text
}

fn has_env(key: &str) -> bool {
    std::env::var_os(key).is_some_and(|v| !v.is_empty())
}

impl Bucket {
    /// Opens `bucket` with the environment's credentials, refusing to go looking for others
    /// (an instance metadata service) when none are set.
    pub fn open(bucket: &str, opts: &S3Options) -> Result<Bucket, String> {
        let static_keys = has_env("AWS_ACCESS_KEY_ID") && has_env("AWS_SECRET_ACCESS_KEY");
        let web_identity = has_env("AWS_WEB_IDENTITY_TOKEN_FILE") && has_env("AWS_ROLE_ARN");
        if !static_keys && !web_identity {
            return Err(
                "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
                 AWS_SESSION_TOKEN for temporary ones) in the environment"
                    .into(),
            );
        }
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
        if let Some(region) = &opts.region {
            builder = builder.with_region(region);
        }
        if let Some(endpoint) = &opts.endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"));
        }
        let store = builder
            .build()
            .map_err(|e| format!("S3 settings for bucket {bucket}: {}", with_causes(&e)))?;
        Ok(Bucket {
            store,
            name: bucket.to_string(),
        })
    }

    fn url(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.name)
    }

    /// Writes one object (a single PUT: it appears whole or not at all).
    pub async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), String> {
        self.store
            .put(&ObjectPath::from(key), PutPayload::from(bytes))
            .await
            .map(drop)
            .map_err(|e| format!("upload {}: {}", self.url(key), with_causes(&e)))
    }

    /// Reads one object.
    pub async fn get(&self, key: &str) -> Result<Bytes, String> {
        let read = async { self.store.get(&ObjectPath::from(key)).await?.bytes().await };
        read.await
            .map_err(|e| format!("download {}: {}", self.url(key), with_causes(&e)))
    }

    /// The backups directly under `prefix` (empty or ending in `/`), newest first: by the time
    /// in their names, then index.
    pub async fn backups(&self, prefix: &str) -> Result<Vec<(String, BackupName)>, String> {
        let dir = (!prefix.is_empty()).then(|| ObjectPath::from(prefix));
        let listed = self
            .store
            .list_with_delimiter(dir.as_ref())
            .await
            .map_err(|e| format!("list {}: {}", self.url(prefix), with_causes(&e)))?;
        let mut found: Vec<(String, BackupName)> = listed
            .objects
            .into_iter()
            .filter_map(|meta| {
                let key = meta.location.to_string();
                let name = location::parse_name(meta.location.filename()?)?;
                Some((key, name))
            })
            .collect();
        found.sort_by(|a, b| b.1.cmp(&a.1));
        Ok(found)
    }

    /// Deletes the backups of `cluster_id` under `prefix` beyond the newest `keep`; returns the
    /// keys deleted.
    pub async fn prune(
        &self,
        prefix: &str,
        cluster_id: &str,
        keep: usize,
    ) -> Result<Vec<String>, String> {
        let mut deleted = Vec::new();
        let ours = self
            .backups(prefix)
            .await?
            .into_iter()
            .filter(|(_, name)| name.cluster_id == cluster_id);
        for (key, _) in ours.skip(keep) {
            self.store
                .delete(&ObjectPath::from(key.as_str()))
                .await
                .map_err(|e| format!("delete {} (pruning): {}", self.url(&key), with_causes(&e)))?;
            deleted.push(key);
        }
        Ok(deleted)
    }
}

/// A backup's bytes from `url`: the object it names, or the newest backup under the prefix it
/// names. Returns where it came from, too.
pub async fn fetch(url: &S3Url, opts: &S3Options) -> Result<(String, Bytes), String> {
    let bucket = Bucket::open(&url.bucket, opts)?;
    let key = if url.is_prefix() {
        let newest = bucket.backups(&url.prefix()).await?.into_iter().next();
        match newest {
            Some((key, _)) => key,
            None => {
                return Err(format!(
                    "no *{} object directly under {url}",
                    location::SUFFIX
                ));
            }
        }
    } else {
        url.key.clone()
    };
    let bytes = bucket.get(&key).await?;
    Ok((bucket.url(&key), bytes))
}
