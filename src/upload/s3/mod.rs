//! Object storage over the S3 API (AWS, Garage, MinIO, Ceph, R2), on Apache Arrow's
//! `object_store` crate: the bucket from `s3://BUCKET/PREFIX`, credentials, and one file's
//! upload, multipart and resumable for files over the part size.
//!
//! A multipart upload keeps [`S3Options::parts_in_flight`] parts on the wire at once, so that
//! a link with a long round trip is not left idle between parts: each part is read from the
//! file once into a buffer of its own, which its request sends and frees (memory: at most
//! that many parts). Parts are read, hashed and begun in order, each read and hashed on a
//! blocking thread while the runtime keeps the parts in flight moving, and each is recorded in
//! the journal as it completes, whatever the order; a restart sends again only the parts not
//! recorded.
//!
//! Every request carries a checksum of its bytes, which the server checks before it stores
//! them. Over TLS (AWS, and any `https://` endpoint) the channel already keeps the bytes from
//! being changed on the way, so the payload goes unsigned with a CRC64-NVME checksum (as
//! AWS's own SDKs send it): the only SHA-256 computed is ours, below. Over plain HTTP the
//! request's signature covers the SHA-256 of its bytes (`x-amz-content-sha256`, and
//! `x-amz-checksum-sha256`), so that no one on the way can change them unseen. Either way the
//! bytes sent are hashed as they are read, and a file whose hash is not the one its manifest
//! recorded when the split was closed is not completed.
//!
//! This file holds the bucket's set-up (options, URL, credentials, endpoint) and its one-
//! request upload; `multipart` the upload of a file in parts, resumable from the journal;
//! `errors` what a failure means, in the server's words and the option to look at.

mod errors;
mod multipart;
#[cfg(test)]
mod tests;

pub use self::errors::{S3ConfigError, ServerSaid, UploadError};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::ObjectStoreExt;
use object_store::aws::{AmazonS3Builder, Checksum};
use object_store::multipart::MultipartStore;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutPayload, RetryConfig};

use crate::sys::secret::read_secret_file;
use crate::upload::http::{StallGuardConnector, install_crypto_provider};

/// S3's smallest part (but the last): 5 MiB.
pub const MIN_PART_SIZE: u64 = 5 << 20;

/// Where and how to reach the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Options {
    /// `s3://BUCKET/PREFIX` (the prefix may be empty).
    pub url: String,
    /// A service other than AWS: `http://127.0.0.1:3900`.
    pub endpoint: Option<String>,
    /// The region (`garage` for Garage); else `$AWS_REGION`, else `us-east-1`.
    pub region: Option<String>,
    /// Path-style addressing (`ENDPOINT/BUCKET/KEY`), which self-hosted servers (Garage,
    /// MinIO, Ceph) need; else virtual-hosted (`BUCKET.ENDPOINT/KEY`), as AWS prefers.
    /// [`S3Options::path_style_by_default`] says what to choose when the user did not.
    pub path_style: bool,
    /// A credentials file in the AWS format (`aws_access_key_id`, `aws_secret_access_key`,
    /// optionally `aws_session_token`); else `$AWS_ACCESS_KEY_ID` and friends.
    pub credentials: Option<PathBuf>,
    /// Files over this go up in parts of this size (at least [`MIN_PART_SIZE`]).
    pub part_size: u64,
    /// Parts of a multipart upload on the wire at once (at least 1): the upload holds this
    /// many parts in memory.
    pub parts_in_flight: usize,
    /// How long a request may go without moving before it is given up and tried again
    /// ([`http`](super::http)); never a limit on a request that keeps moving.
    pub stall: Duration,
}

impl S3Options {
    /// The addressing boto3, rclone and MinIO's client choose when not told: path style for
    /// a service named by its endpoint (an address on the ground network rarely has a name
    /// per bucket), virtual-hosted for AWS itself.
    pub fn path_style_by_default(endpoint: Option<&str>) -> bool {
        endpoint.is_some()
    }
}

/// `s3://BUCKET/PREFIX` → (bucket, prefix without slashes at its ends).
pub fn parse_url(url: &str) -> Result<(String, String), S3ConfigError> {
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| S3ConfigError::Url(url.into()))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(S3ConfigError::Url(url.into()));
    }
    Ok((bucket.to_string(), prefix.trim_matches('/').to_string()))
}

/// The keys of an AWS credentials file: the `[default]` profile, or the file's only keys.
fn parse_credentials(text: &str) -> Option<(String, String, Option<String>)> {
    let mut id = None;
    let mut secret = None;
    let mut token = None;
    let mut profile = String::from("default");
    for line in text.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            profile = name.trim().to_string();
            continue;
        }
        if profile != "default" {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let v = v.trim().to_string();
            match k.trim() {
                "aws_access_key_id" => id = Some(v),
                "aws_secret_access_key" => secret = Some(v),
                "aws_session_token" => token = Some(v),
                _ => {}
            }
        }
    }
    Some((id?, secret?, token))
}

/// What a bucket's client does: `object_store`'s requests, multipart ones with them. The
/// daemon's is [`AmazonS3`](object_store::aws::AmazonS3); the whole-receiver simulation's
/// is an in-memory one that fails as it is told ([`Bucket::over`]).
pub trait BucketStore: ObjectStore + MultipartStore {}

impl<T: ObjectStore + MultipartStore> BucketStore for T {}

/// The bucket a daemon uploads to.
#[derive(Debug, Clone)]
pub struct Bucket {
    store: Arc<dyn BucketStore>,
    bucket: String,
    prefix: String,
    part_size: u64,
    parts_in_flight: usize,
    path_style: bool,
    /// The endpoint as the user gave it, for errors.
    endpoint: String,
}

/// A virtual-hosted endpoint: the bucket's name before the host's (`http://garage:3900` →
/// `http://BUCKET.garage:3900`), as boto3 and rclone build it, unless the user's endpoint
/// already begins with it.
fn bucket_endpoint(endpoint: &str, bucket: &str) -> Result<String, S3ConfigError> {
    let bad = |reason: String| S3ConfigError::Endpoint {
        endpoint: endpoint.to_string(),
        reason,
    };
    let mut url = reqwest::Url::parse(endpoint).map_err(|e| bad(e.to_string()))?;
    let host = url
        .host_str()
        .ok_or_else(|| bad("no host".into()))?
        .to_string();
    if !host.starts_with(&format!("{bucket}.")) {
        url.set_host(Some(&format!("{bucket}.{host}")))
            .map_err(|e| bad(e.to_string()))?;
    }
    Ok(url.as_str().trim_end_matches('/').to_string())
}

impl Bucket {
    /// Sets up the client (no request yet). Credentials come from `options.credentials`,
    /// else from the environment.
    pub fn new(options: &S3Options) -> Result<Self, S3ConfigError> {
        let (bucket, prefix) = parse_url(&options.url)?;
        if options.part_size < MIN_PART_SIZE {
            return Err(S3ConfigError::PartSize);
        }
        install_crypto_provider();
        let tls = options
            .endpoint
            .as_deref()
            .is_none_or(|e| !e.starts_with("http://"));
        let (checksum, signed_payload) = match tls {
            true => (Checksum::CRC64NVME, false),
            false => (Checksum::SHA256, true),
        };
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&bucket)
            .with_checksum_algorithm(checksum)
            .with_unsigned_payload(!signed_payload)
            .with_virtual_hosted_style_request(!options.path_style)
            // Our own loop retries for hours; the client's own retries only smooth blips.
            .with_retry(RetryConfig {
                max_retries: 2,
                retry_timeout: Duration::from_secs(30),
                ..Default::default()
            })
            .with_http_connector(StallGuardConnector {
                stall: options.stall,
                allow_http: !tls,
            });
        if let Some(endpoint) = &options.endpoint {
            let endpoint = if options.path_style {
                endpoint.clone()
            } else {
                bucket_endpoint(endpoint, &bucket)?
            };
            builder = builder
                .with_allow_http(endpoint.starts_with("http://"))
                .with_endpoint(endpoint);
        }
        let region = options
            .region
            .clone()
            .or_else(|| std::env::var("AWS_REGION").ok())
            .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
            .unwrap_or_else(|| "us-east-1".into());
        builder = builder.with_region(region);
        if let Some(path) = &options.credentials {
            let text = read_secret_file(path, "the upload credentials file")?;
            let (id, secret, token) = parse_credentials(&String::from_utf8_lossy(&text))
                .ok_or_else(|| S3ConfigError::CredentialsFormat { path: path.clone() })?;
            builder = builder
                .with_access_key_id(id)
                .with_secret_access_key(secret);
            if let Some(token) = token {
                builder = builder.with_token(token);
            }
        } else if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
            && std::env::var_os("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_none()
            && std::env::var_os("AWS_WEB_IDENTITY_TOKEN_FILE").is_none()
        {
            return Err(S3ConfigError::NoCredentials);
        }
        Ok(Self {
            store: Arc::new(builder.build()?),
            bucket,
            prefix,
            part_size: options.part_size,
            parts_in_flight: options.parts_in_flight.max(1),
            path_style: options.path_style,
            endpoint: options
                .endpoint
                .clone()
                .unwrap_or_else(|| "AWS S3".to_string()),
        })
    }

    /// A bucket served by `store` rather than over the S3 API, at `url` (`s3://BUCKET/PREFIX`),
    /// uploading files over `part_size` in parts, `parts_in_flight` at once. S3's smallest
    /// part is not required: a store of one's own takes any.
    pub fn over(
        store: Arc<dyn BucketStore>,
        url: &str,
        part_size: u64,
        parts_in_flight: usize,
    ) -> Result<Self, S3ConfigError> {
        let (bucket, prefix) = parse_url(url)?;
        Ok(Self {
            endpoint: store.to_string(),
            store,
            bucket,
            prefix,
            part_size: part_size.max(1),
            parts_in_flight: parts_in_flight.max(1),
            path_style: true,
        })
    }

    /// The key prefix of every object (`PREFIX` of `s3://BUCKET/PREFIX`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The bucket's name.
    pub fn name(&self) -> &str {
        &self.bucket
    }

    /// Uploads `bytes` as `key` in one request (the manifest).
    pub async fn put_bytes<P, F>(
        &self,
        key: &str,
        bytes: Vec<u8>,
        mut pace: P,
    ) -> Result<(), UploadError>
    where
        P: FnMut(u64, Instant) -> F,
        F: std::future::Future<Output = ()>,
    {
        let len = bytes.len() as u64;
        let started = Instant::now();
        self.store
            .put(&ObjectPath::from(key), PutPayload::from(bytes))
            .await
            .map_err(|e| self.classify(e))?;
        pace(len, started).await;
        Ok(())
    }
}
