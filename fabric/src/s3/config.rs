//! `S3Config`: where the S3 artifact store lives and how it talks to it. Plain data read from the
//! config file, each field documented with its unit, default and effect; [`S3Config::validate`]
//! checks it without IO.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::artifacts::check_key;
use crate::secret::Secret;

/// S3's smallest allowed part, except for the last part of an upload.
pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;
/// S3's largest allowed part.
pub const MAX_PART_SIZE: u64 = 5 * 1024 * 1024 * 1024;
/// S3's largest page of ListObjectsV2.
pub const MAX_LIST_PAGE_SIZE: i32 = 1000;

/// Settings of the S3 artifact store. Works with AWS S3 and S3-compatible servers (MinIO, Ceph,
/// s3s-fs).
///
/// Credentials are static keys: the AWS default chain (environment, profiles, SSO,
/// `credential_process`, instance roles) is not consulted, because the SDK's config loader is
/// left out of the build. Read the keys from the environment or a file in the CLI instead.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    /// Endpoint URL, e.g. `http://minio.cowork:9000`. Default: none, which means AWS S3 of
    /// `region`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Region used for signing. Default `us-east-1` (what MinIO expects unless configured).
    #[serde(default = "default_region")]
    pub region: String,
    /// Bucket holding every object of the store. Required.
    pub bucket: String,
    /// Key prefix inside the bucket, so several installations can share one bucket, e.g.
    /// `cowork` or `teams/a/cowork/`. A trailing `/` is implied. Default: none (keys start at the
    /// bucket's root).
    #[serde(default)]
    pub prefix: Option<String>,
    /// Access key id. Required.
    pub access_key_id: String,
    /// Secret access key. Required; never printed.
    pub secret_access_key: Secret,
    /// Path-style addressing (`http://host/bucket/key`) instead of virtual-hosted style
    /// (`http://bucket.host/key`). Default `true`, which MinIO and most self-hosted servers need;
    /// set `false` for AWS S3.
    #[serde(default = "default_true")]
    pub path_style: bool,
    /// Objects larger than this many bytes are uploaded in parts (multipart upload). Default
    /// 16 MiB.
    #[serde(default = "default_multipart_threshold")]
    pub multipart_threshold: u64,
    /// Size of each part of a multipart upload, in bytes, between 5 MiB and 5 GiB (S3's limits).
    /// Raised automatically when an object would need more than 10,000 parts. Default 8 MiB.
    #[serde(default = "default_part_size")]
    pub part_size: u64,
    /// Create the bucket at connect time if it does not exist. Default `false`: a missing bucket
    /// is then a connect error.
    #[serde(default)]
    pub create_bucket: bool,
    /// Time allowed to open a TCP (and TLS) connection, e.g. `5s`. Default 5 s.
    #[serde(default = "default_connect_timeout", with = "duration")]
    pub connect_timeout: Duration,
    /// Time allowed for one request, including the SDK's own retry, e.g. `60s`: one PUT, one part
    /// of a multipart upload, one list page; for a GET, the response headers and again the
    /// body. Default 60 s.
    #[serde(default = "default_operation_timeout", with = "duration")]
    pub operation_timeout: Duration,
    /// PEM file with the certificate authorities to trust for an `https` endpoint, for a private
    /// CA. When set, it replaces the system's roots. Default: none (the system's roots).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Keys per ListObjectsV2 page, 1 to 1000. Default 1000 (S3's maximum).
    #[serde(default = "default_list_page_size")]
    pub list_page_size: i32,
}

fn default_region() -> String {
    "us-east-1".to_owned()
}

fn default_true() -> bool {
    true
}

fn default_multipart_threshold() -> u64 {
    16 * 1024 * 1024
}

fn default_part_size() -> u64 {
    8 * 1024 * 1024
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_operation_timeout() -> Duration {
    Duration::from_secs(60)
}

fn default_list_page_size() -> i32 {
    MAX_LIST_PAGE_SIZE
}

impl S3Config {
    /// A config with the required fields and every default (AWS S3 unless `endpoint` is set
    /// afterwards).
    pub fn new(
        bucket: impl Into<String>,
        access_key_id: impl Into<String>,
        secret_access_key: Secret,
    ) -> S3Config {
        S3Config {
            endpoint: None,
            region: default_region(),
            bucket: bucket.into(),
            prefix: None,
            access_key_id: access_key_id.into(),
            secret_access_key,
            path_style: default_true(),
            multipart_threshold: default_multipart_threshold(),
            part_size: default_part_size(),
            create_bucket: false,
            connect_timeout: default_connect_timeout(),
            operation_timeout: default_operation_timeout(),
            ca_file: None,
            list_page_size: default_list_page_size(),
        }
    }

    /// Every problem of the config, each naming its field; empty when it is usable. No IO: the
    /// CA file is read at connect time.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(endpoint) = &self.endpoint
            && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            problems.push(format!(
                "s3 endpoint {endpoint:?} must start with http:// or https://"
            ));
        }
        if self.region.is_empty() {
            problems.push("s3 region is empty".to_owned());
        }
        if let Err(reason) = check_bucket_name(&self.bucket) {
            problems.push(format!("s3 bucket {:?} is invalid: {reason}", self.bucket));
        }
        if let Some(prefix) = self.prefix.as_ref().filter(|p| !p.is_empty()) {
            let trimmed = prefix.strip_suffix('/').unwrap_or(prefix);
            if let Err(error) = check_key(trimmed) {
                problems.push(format!("s3 prefix {prefix:?} is invalid: {error}"));
            }
        }
        if self.access_key_id.is_empty() {
            problems.push("s3 access_key_id is empty".to_owned());
        }
        if self.secret_access_key.expose().is_empty() {
            problems.push("s3 secret_access_key is empty".to_owned());
        }
        if !(MIN_PART_SIZE..=MAX_PART_SIZE).contains(&self.part_size) {
            problems.push(format!(
                "s3 part_size {} is outside {MIN_PART_SIZE}..={MAX_PART_SIZE} bytes (S3's part limits)",
                self.part_size
            ));
        }
        if self.connect_timeout.is_zero() {
            problems.push("s3 connect_timeout is zero".to_owned());
        }
        if self.operation_timeout.is_zero() {
            problems.push("s3 operation_timeout is zero".to_owned());
        }
        if !(1..=MAX_LIST_PAGE_SIZE).contains(&self.list_page_size) {
            problems.push(format!(
                "s3 list_page_size {} is outside 1..={MAX_LIST_PAGE_SIZE}",
                self.list_page_size
            ));
        }
        problems
    }

    /// The key prefix as stored in front of every key: empty, or ending with exactly one `/`.
    pub(crate) fn key_prefix(&self) -> String {
        match &self.prefix {
            None => String::new(),
            Some(prefix) => {
                let trimmed = prefix.strip_suffix('/').unwrap_or(prefix);
                if trimmed.is_empty() {
                    String::new()
                } else {
                    format!("{trimmed}/")
                }
            }
        }
    }
}

/// The common subset of S3's bucket naming rules: 3–63 characters of lowercase letters, digits,
/// `-` and `.`, starting and ending with a letter or digit.
fn check_bucket_name(bucket: &str) -> Result<(), &'static str> {
    if !(3..=63).contains(&bucket.len()) {
        return Err("must be 3 to 63 characters long");
    }
    if !bucket
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return Err("may contain only lowercase letters, digits, '-' and '.'");
    }
    let edge_ok = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !edge_ok(bucket.bytes().next()) || !edge_ok(bucket.bytes().last()) {
        return Err("must start and end with a letter or digit");
    }
    Ok(())
}

/// Human-readable durations for serde: one or more `<integer><unit>` groups with units `ms`,
/// `s`, `m` and `h`, e.g. `500ms`, `30s`, `1m30s`.
mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse(&text).map_err(serde::de::Error::custom)
    }

    pub(super) fn parse(text: &str) -> Result<Duration, String> {
        let invalid = || format!("invalid duration {text:?}: expected e.g. 500ms, 30s, 5m or 1h");
        let mut rest = text.trim();
        if rest.is_empty() {
            return Err(invalid());
        }
        let mut total = Duration::ZERO;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(invalid());
            }
            let number: u64 = rest[..digits].parse().map_err(|_| invalid())?;
            rest = &rest[digits..];
            let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            let unit = match &rest[..unit_len] {
                "ms" => Duration::from_millis(1),
                "s" => Duration::from_secs(1),
                "m" => Duration::from_secs(60),
                "h" => Duration::from_secs(3600),
                _ => return Err(invalid()),
            };
            rest = &rest[unit_len..];
            let part = u32::try_from(number)
                .ok()
                .and_then(|n| unit.checked_mul(n))
                .ok_or_else(invalid)?;
            total = total.checked_add(part).ok_or_else(invalid)?;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn minimal() -> S3Config {
        S3Config::new("cowork", "access", Secret::new("s3cr3t-value"))
    }

    #[test]
    fn defaults_apply_and_unknown_fields_are_refused() {
        let parsed: S3Config = serde_json::from_str(
            r#"{"bucket": "cowork", "access_key_id": "access", "secret_access_key": "s3cr3t-value"}"#,
        )
        .expect("a minimal config");
        assert_eq!(parsed, minimal());
        assert_eq!(parsed.region, "us-east-1");
        assert!(parsed.path_style);
        assert_eq!(parsed.multipart_threshold, 16 * 1024 * 1024);
        assert_eq!(parsed.part_size, 8 * 1024 * 1024);
        assert!(parsed.validate().is_empty(), "{:?}", parsed.validate());

        let full: S3Config = serde_json::from_str(
            r#"{"bucket": "cowork", "access_key_id": "a", "secret_access_key": "s",
                "endpoint": "http://127.0.0.1:9000", "connect_timeout": "250ms",
                "operation_timeout": "1m30s", "prefix": "fleet/", "create_bucket": true}"#,
        )
        .expect("a full config");
        assert_eq!(full.connect_timeout, Duration::from_millis(250));
        assert_eq!(full.operation_timeout, Duration::from_secs(90));
        assert_eq!(full.key_prefix(), "fleet/");

        let unknown = serde_json::from_str::<S3Config>(
            r#"{"bucket": "b", "access_key_id": "a", "secret_access_key": "s", "buckt": "x"}"#,
        );
        assert!(unknown.is_err());
        let missing = serde_json::from_str::<S3Config>(r#"{"bucket": "b", "access_key_id": "a"}"#);
        assert!(missing.is_err(), "secret_access_key is required");
    }

    #[test]
    fn debug_output_hides_the_secret_key() {
        let shown = format!("{:?}", minimal());
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("***"), "{shown}");
    }

    #[test]
    fn durations_parse() {
        fn check(text: &str, expected: Option<Duration>) {
            assert_eq!(duration::parse(text).ok(), expected, "{text:?}");
        }
        check("500ms", Some(Duration::from_millis(500)));
        check("30s", Some(Duration::from_secs(30)));
        check("5m", Some(Duration::from_secs(300)));
        check("1h", Some(Duration::from_secs(3600)));
        check("1m30s", Some(Duration::from_secs(90)));
        check("", None);
        check("30", None);
        check("s", None);
        check("3d", None);
        check("-1s", None);
        check("99999999999h", None);
    }

    #[test]
    fn validation_names_each_bad_field() {
        fn check(edit: impl FnOnce(&mut S3Config), expected: &str) {
            let mut config = minimal();
            edit(&mut config);
            let problems = config.validate();
            assert!(
                problems.iter().any(|p| p.contains(expected)),
                "expected a problem mentioning {expected:?}, got {problems:?}"
            );
        }
        check(|c| c.endpoint = Some("minio:9000".into()), "s3 endpoint");
        check(|c| c.bucket = "Cowork".into(), "s3 bucket");
        check(|c| c.bucket = "ab".into(), "s3 bucket");
        check(|c| c.bucket = "-cowork".into(), "s3 bucket");
        check(|c| c.prefix = Some("/abs".into()), "s3 prefix");
        check(|c| c.prefix = Some("a/../b".into()), "s3 prefix");
        check(|c| c.prefix = Some("/".into()), "s3 prefix");
        check(|c| c.access_key_id = String::new(), "access_key_id");
        check(
            |c| c.secret_access_key = Secret::new(""),
            "secret_access_key",
        );
        check(|c| c.part_size = 1024, "part_size");
        check(|c| c.connect_timeout = Duration::ZERO, "connect_timeout");
        check(|c| c.list_page_size = 0, "list_page_size");
        check(|c| c.list_page_size = 1001, "list_page_size");
        check(|c| c.region = String::new(), "region");
    }

    #[test]
    fn key_prefix_ends_with_one_slash() {
        fn check(prefix: Option<&str>, expected: &str) {
            let mut config = minimal();
            config.prefix = prefix.map(str::to_owned);
            assert_eq!(config.key_prefix(), expected, "{prefix:?}");
        }
        check(None, "");
        check(Some(""), "");
        check(Some("fleet"), "fleet/");
        check(Some("fleet/"), "fleet/");
        check(Some("teams/a"), "teams/a/");
    }
}
