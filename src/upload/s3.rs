//! Object storage over the S3 API (AWS, Garage, MinIO, Ceph, R2), on Apache Arrow's
//! `object_store` crate: the bucket from `s3://BUCKET/PREFIX`, credentials, and one file's
//! upload, multipart and resumable for files over the part size.
//!
//! Every request carries the SHA-256 of its bytes (`x-amz-checksum-sha256`), which the server
//! checks; the bytes sent are hashed as they are read, and a file whose hash is not the one
//! its manifest recorded when the split was closed is not completed.

use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::ObjectStoreExt;
use object_store::aws::{AmazonS3, AmazonS3Builder, Checksum};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, PutPayload, RetryConfig};
use sha2::{Digest, Sha256};

use crate::store::files::hex;
use crate::sys::secret::{SecretFileError, read_secret_file};
use crate::upload::plan::{ObjectRecord, parts};

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
    /// Path-style addressing (`ENDPOINT/BUCKET/KEY`), which most self-hosted servers need.
    pub path_style: bool,
    /// A credentials file in the AWS format (`aws_access_key_id`, `aws_secret_access_key`,
    /// optionally `aws_session_token`); else `$AWS_ACCESS_KEY_ID` and friends.
    pub credentials: Option<PathBuf>,
    /// Files over this go up in parts of this size (at least [`MIN_PART_SIZE`]).
    pub part_size: u64,
}

/// Why the bucket cannot be set up: a configuration error, said once at start.
#[derive(Debug, thiserror::Error)]
pub enum S3ConfigError {
    #[error("--upload-to {0}: expected s3://BUCKET or s3://BUCKET/PREFIX")]
    Url(String),
    #[error("--upload-credentials: {0}")]
    Credentials(#[from] SecretFileError),
    #[error(
        "--upload-credentials {path}: no aws_access_key_id and aws_secret_access_key in it \
         (the AWS credentials file format)"
    )]
    CredentialsFormat { path: PathBuf },
    #[error(
        "no credentials for --upload-to: give --upload-credentials FILE, or set \
         AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    )]
    NoCredentials,
    #[error("--upload-part-size: parts are at least 5M (S3 refuses smaller ones)")]
    PartSize,
    #[error("the object store client: {0}")]
    Client(#[from] object_store::Error),
}

/// Why an upload failed; [`UploadError::is_config`] tells which need the user.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error(
        "the bucket refused our credentials (check --upload-credentials, or \
         AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY): {0}"
    )]
    Credentials(String),
    #[error("bucket {bucket} not found (check --upload-to and --upload-endpoint): {detail}")]
    NoBucket { bucket: String, detail: String },
    #[error("{0}")]
    Transient(String),
    #[error("cannot read {path}: {source}")]
    Local {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is not what was closed: its SHA-256 is {got}, the manifest says {want}; not \
         uploaded"
    )]
    Changed {
        path: PathBuf,
        got: String,
        want: String,
    },
}

impl UploadError {
    /// A failure only the user can fix (credentials, bucket): said once a minute at most,
    /// tried again slowly.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            UploadError::Credentials(_) | UploadError::NoBucket { .. }
        )
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

/// The bucket a daemon uploads to.
#[derive(Debug, Clone)]
pub struct Bucket {
    store: Arc<AmazonS3>,
    bucket: String,
    prefix: String,
    part_size: u64,
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
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&bucket)
            .with_checksum_algorithm(Checksum::SHA256)
            .with_virtual_hosted_style_request(!options.path_style)
            // Our own loop retries for hours; the client's own retries only smooth blips.
            .with_retry(RetryConfig {
                max_retries: 2,
                retry_timeout: Duration::from_secs(30),
                ..Default::default()
            })
            .with_client_options(
                ClientOptions::new()
                    .with_connect_timeout(Duration::from_secs(10))
                    .with_timeout(Duration::from_secs(120)),
            );
        if let Some(endpoint) = &options.endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"));
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

    /// Uploads `file` as `key`, its content to hash to `sha256` (hex). `record` is what the
    /// journal says of it (a multipart upload under way is resumed); `checkpoint` is called
    /// with the record after each part (to be saved before the next). `pace` is awaited
    /// after each request with the bytes it carried and when it began.
    pub async fn upload_file<P, F, C>(
        &self,
        file: &Path,
        key: &str,
        sha256: &str,
        record: Option<ObjectRecord>,
        mut pace: P,
        mut checkpoint: C,
    ) -> Result<ObjectRecord, UploadError>
    where
        P: FnMut(u64, Instant) -> F,
        F: std::future::Future<Output = ()>,
        C: FnMut(&ObjectRecord) -> Result<(), UploadError>,
    {
        let local = |source| UploadError::Local {
            path: file.to_owned(),
            source,
        };
        let mut f = std::fs::File::open(file).map_err(local)?;
        let size = f.metadata().map_err(local)?.len();
        let location = ObjectPath::from(key);
        let changed = |got: String| UploadError::Changed {
            path: file.to_owned(),
            got,
            want: sha256.to_string(),
        };
        if size <= self.part_size {
            let mut bytes = Vec::with_capacity(size as usize);
            f.read_to_end(&mut bytes).map_err(local)?;
            let got = hex(&Sha256::digest(&bytes));
            if got != sha256 {
                return Err(changed(got));
            }
            let started = Instant::now();
            self.store
                .put(&location, PutPayload::from(bytes))
                .await
                .map_err(|e| self.classify(e))?;
            pace(size, started).await;
            return Ok(ObjectRecord::Done {
                key: key.to_string(),
                sha256: sha256.to_string(),
                size,
            });
        }
        // Multipart: resume the upload under way for this content, or begin one.
        let (upload_id, mut sent) = match record {
            Some(ObjectRecord::Multipart {
                sha256: s,
                size: z,
                upload_id,
                part_size,
                parts,
                ..
            }) if s == sha256 && z == size && part_size == self.part_size => (upload_id, parts),
            _ => {
                let id = self
                    .store
                    .create_multipart(&location)
                    .await
                    .map_err(|e| self.classify(e))?;
                (id, Vec::new())
            }
        };
        let mut record = ObjectRecord::Multipart {
            key: key.to_string(),
            sha256: sha256.to_string(),
            size,
            upload_id: upload_id.clone(),
            part_size: self.part_size,
            parts: sent.clone(),
        };
        checkpoint(&record)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; self.part_size as usize];
        for (index, (offset, len)) in parts(size, self.part_size).into_iter().enumerate() {
            let piece = &mut buf[..len as usize];
            f.read_exact_at(piece, offset).map_err(local)?;
            hasher.update(&*piece);
            if index < sent.len() {
                continue;
            }
            let started = Instant::now();
            let part = self
                .store
                .put_part(
                    &location,
                    &upload_id,
                    index,
                    PutPayload::from(piece.to_vec()),
                )
                .await
                .map_err(|e| self.classify(e))?;
            sent.push(part.content_id);
            if let ObjectRecord::Multipart { parts, .. } = &mut record {
                *parts = sent.clone();
            }
            checkpoint(&record)?;
            tracing::debug!(key, part = index + 1, bytes = len, "part sent");
            pace(len, started).await;
        }
        let got = hex(&hasher.finalize());
        if got != sha256 {
            let _ = self.store.abort_multipart(&location, &upload_id).await;
            return Err(changed(got));
        }
        let parts: Vec<PartId> = sent
            .into_iter()
            .map(|content_id| PartId { content_id })
            .collect();
        if let Err(e) = self
            .store
            .complete_multipart(&location, &upload_id, parts)
            .await
        {
            // A server that forgot the upload (expired, or completed before a crash cut our
            // record): begin again with the next try.
            if matches!(e, object_store::Error::NotFound { .. }) {
                checkpoint(&ObjectRecord::Multipart {
                    key: key.to_string(),
                    sha256: String::new(),
                    size,
                    upload_id,
                    part_size: self.part_size,
                    parts: Vec::new(),
                })?;
            }
            return Err(self.classify(e));
        }
        Ok(ObjectRecord::Done {
            key: key.to_string(),
            sha256: sha256.to_string(),
            size,
        })
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

    fn classify(&self, e: object_store::Error) -> UploadError {
        match e {
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => {
                UploadError::Credentials(e.to_string())
            }
            object_store::Error::NotFound { .. } => UploadError::NoBucket {
                bucket: self.bucket.clone(),
                detail: e.to_string(),
            },
            other => UploadError::Transient(other.to_string()),
        }
    }
}

/// The TLS stack's cryptography (ring), installed once for every HTTPS client in the process.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_names_bucket_and_prefix() {
        assert_eq!(parse_url("s3://logs").unwrap(), ("logs".into(), "".into()));
        assert_eq!(
            parse_url("s3://logs/fleet/a/").unwrap(),
            ("logs".into(), "fleet/a".into())
        );
        assert!(parse_url("logs/fleet").is_err());
        assert!(parse_url("s3:///fleet").is_err());
    }

    #[test]
    fn credentials_come_from_the_default_profile() {
        let text = "[other]\naws_access_key_id = X\naws_secret_access_key = Y\n\n[default]\n\
                    aws_access_key_id = GK1\naws_secret_access_key = s3cr3t\n";
        assert_eq!(
            parse_credentials(text),
            Some(("GK1".into(), "s3cr3t".into(), None))
        );
        assert_eq!(
            parse_credentials("[default]\naws_access_key_id = A\n"),
            None
        );
    }
}
