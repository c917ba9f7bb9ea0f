//! Where backups go and come from: files, `s3://BUCKET/KEY` and `s3://BUCKET/PREFIX/`, and the
//! names backups take in a bucket.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The file name suffix of every backup.
pub const SUFFIX: &str = ".baton-backup";

/// An S3 location: a bucket and a key (or key prefix) in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Url {
    pub bucket: String,
    /// The key, without a leading `/`; empty for the whole bucket.
    pub key: String,
}

impl S3Url {
    /// Parses `s3://BUCKET[/KEY]`.
    pub fn parse(url: &str) -> Result<S3Url, String> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| format!("{url:?} is not an s3://BUCKET/KEY URL"))?;
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(&b));
        if !bucket_ok {
            return Err(format!(
                "{url:?}: {bucket:?} is not an S3 bucket name (3 to 63 lowercase letters, digits, '-' or '.')"
            ));
        }
        if key.split('/').any(|part| part == "." || part == "..") {
            return Err(format!("{url:?}: the key may not hold . or .. parts"));
        }
        Ok(S3Url {
            bucket: bucket.to_string(),
            key: key.trim_start_matches('/').to_string(),
        })
    }

    /// Whether this names a prefix (ends in `/`, or is the whole bucket) rather than one object.
    pub fn is_prefix(&self) -> bool {
        self.key.is_empty() || self.key.ends_with('/')
    }

    /// The key as a prefix: empty or ending in `/`.
    pub fn prefix(&self) -> String {
        if self.is_prefix() {
            self.key.clone()
        } else {
            format!("{}/", self.key)
        }
    }
}

impl std::fmt::Display for S3Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)
    }
}

/// Where a backup is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    S3(S3Url),
}

impl Source {
    pub fn parse(from: &str) -> Result<Source, String> {
        if from.starts_with("s3://") {
            S3Url::parse(from).map(Source::S3)
        } else if from.contains("://") {
            Err(format!(
                "{from:?}: only files and s3:// URLs are understood"
            ))
        } else {
            Ok(Source::File(PathBuf::from(from)))
        }
    }
}

/// `<cluster-id>-<index:020>-<UTC yyyymmddThhmmssZ>.baton-backup`: names of one cluster sort
/// by index, then time.
pub fn object_name(cluster_id: &str, index: u64, at: SystemTime) -> String {
    format!("{cluster_id}-{index:020}-{}{SUFFIX}", utc_stamp(at))
}

/// A backup's name, taken apart.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BackupName {
    /// Sort order: time, then index.
    pub stamp: String,
    pub index: u64,
    pub cluster_id: String,
}

/// Takes apart a name made by `object_name` (the last part of a key); `None` for anything else.
pub fn parse_name(name: &str) -> Option<BackupName> {
    let rest = name.strip_suffix(SUFFIX)?;
    let (rest, stamp) = rest.rsplit_once('-')?;
    let (cluster_id, index) = rest.rsplit_once('-')?;
    let stamp_ok = stamp.len() == 16
        && stamp.as_bytes()[8] == b'T'
        && stamp.ends_with('Z')
        && stamp[..8]
            .bytes()
            .chain(stamp[9..15].bytes())
            .all(|b| b.is_ascii_digit());
    let index_ok = index.len() == 20 && index.bytes().all(|b| b.is_ascii_digit());
    if !stamp_ok || !index_ok || cluster_id.is_empty() {
        return None;
    }
    Some(BackupName {
        stamp: stamp.to_string(),
        index: index.parse().ok()?,
        cluster_id: cluster_id.to_string(),
    })
}

/// `yyyymmddThhmmssZ` in UTC.
pub fn utc_stamp(at: SystemTime) -> String {
    jiff::Timestamp::try_from(at)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .max(jiff::Timestamp::UNIX_EPOCH)
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string()
}

/// The file `--out` names: itself, or the backup's own name inside it when it is a directory.
pub fn out_file(out: &Path, name: &str) -> PathBuf {
    if out.is_dir() {
        out.join(name)
    } else {
        out.to_path_buf()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn stamps_are_utc() {
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101T000000Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        assert_eq!(utc_stamp(t), "20261118T110640Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(utc_stamp(leap), "20000229T000000Z");
    }

    #[test]
    fn names_round_trip_and_others_are_ignored() {
        let t = UNIX_EPOCH + Duration::from_secs(951_782_461);
        let name = object_name("prod-east.1", 42, t);
        assert_eq!(
            name,
            "prod-east.1-00000000000000000042-20000229T000101Z.baton-backup"
        );
        assert_eq!(
            parse_name(&name),
            Some(BackupName {
                stamp: "20000229T000101Z".into(),
                index: 42,
                cluster_id: "prod-east.1".into(),
            })
        );
        for other in [
            "notes.txt",
            "x-42-20000229T000101Z.baton-backup",
            "x-00000000000000000042-2000.baton-backup",
            "-00000000000000000042-20000229T000101Z.baton-backup",
            "x-00000000000000000042-20000229T000101Z.baton-backup.tmp",
        ] {
            assert_eq!(parse_name(other), None, "{other}");
        }
    }

    #[test]
    fn s3_urls() {
        let u = S3Url::parse("s3://my-bucket/backups/prod/").expect("parses");
        assert_eq!(
            (u.bucket.as_str(), u.key.as_str()),
            ("my-bucket", "backups/prod/")
        );
        assert!(u.is_prefix());
        assert_eq!(u.prefix(), "backups/prod/");
        let u = S3Url::parse("s3://my-bucket/backups/x.baton-backup").expect("parses");
        assert!(!u.is_prefix());
        let u = S3Url::parse("s3://my-bucket").expect("parses");
        assert!(u.is_prefix() && u.prefix().is_empty());
        assert_eq!(
            S3Url::parse("s3://my-bucket/a").expect("parses").prefix(),
            "a/"
        );
        assert!(S3Url::parse("https://my-bucket/a").is_err());
        assert!(S3Url::parse("s3://My_Bucket/a").is_err());
        assert!(S3Url::parse("s3://b/a").is_err(), "too short");
        assert!(S3Url::parse("s3://bucket/../a").is_err());
        assert_eq!(
            Source::parse("/tmp/x.baton-backup"),
            Ok(Source::File("/tmp/x.baton-backup".into()))
        );
        assert!(Source::parse("gs://bucket/x").is_err());
    }
}
