//! S3 in a build without the `s3` feature (baton-playground's): the same interface as `s3.rs`,
//! every call refused with the same message. `cli` refuses `--s3-url` and `s3://` before
//! anything else with that message; these stubs keep `save` and `restore` compiling.

use bytes::Bytes;

use super::location::S3Url;
use crate::cli::S3_UNAVAILABLE as UNAVAILABLE;

/// `--s3-endpoint` and `--s3-region` (set by `save` and `restore`; nothing reads them here).
#[allow(dead_code)]
#[derive(Debug, Clone, Default)]
pub struct S3Options {
    pub endpoint: Option<String>,
    pub region: Option<String>,
}

/// Never made: `open` always refuses.
pub struct Bucket(());

impl Bucket {
    pub fn open(_bucket: &str, _opts: &S3Options) -> Result<Bucket, String> {
        Err(UNAVAILABLE.to_owned())
    }

    pub async fn put(&self, _key: &str, _bytes: Vec<u8>) -> Result<(), String> {
        Err(UNAVAILABLE.to_owned())
    }

    pub async fn prune(
        &self,
        _prefix: &str,
        _cluster_id: &str,
        _keep: usize,
    ) -> Result<Vec<String>, String> {
        Err(UNAVAILABLE.to_owned())
    }
}

pub async fn fetch(_url: &S3Url, _opts: &S3Options) -> Result<(String, Bytes), String> {
    Err(UNAVAILABLE.to_owned())
}
