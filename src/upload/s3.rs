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

use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use object_store::ObjectStoreExt;
use object_store::aws::{AmazonS3, AmazonS3Builder, Checksum};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as ObjectPath;
use object_store::{PutPayload, RetryConfig};
use sha2::{Digest, Sha256};

use crate::store::files::hex;
use crate::sys::secret::{SecretFileError, read_secret_file};
use crate::upload::http::{StallGuardConnector, Stalled, install_crypto_provider};
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
    #[error("--upload-endpoint {endpoint}: not a URL with a host name ({reason})")]
    Endpoint { endpoint: String, reason: String },
    #[error("the object store client: {0}")]
    Client(#[from] object_store::Error),
}

/// Why an upload failed; [`UploadError::is_config`] tells which need the user. Each says
/// what the server said (its error code, message, and the bucket or key it named) and which
/// option to look at.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error(
        "the S3 server refused our credentials (check --upload-credentials, or \
         AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY); it said: {said}"
    )]
    Credentials { said: Box<ServerSaid> },
    #[error("{}", no_bucket_message(bucket, said, *path_style))]
    NoBucket {
        /// The bucket `--upload-to` names.
        bucket: String,
        said: Box<ServerSaid>,
        /// Whether the request named the bucket in its path.
        path_style: bool,
    },
    #[error("the S3 server at {endpoint} cannot be reached (check --upload-endpoint): {detail}")]
    Unreachable { endpoint: String, detail: String },
    #[error(
        "the S3 server at {endpoint} has a TLS certificate this machine does not trust \
         ({detail}); if a private CA signed it, add the CA to the system's trust store \
         (update-ca-certificates) or name a file that holds it with SSL_CERT_FILE"
    )]
    Untrusted { endpoint: String, detail: String },
    #[error(
        "the S3 server at {endpoint} stopped taking a request: {stalled} (--upload-stall-timeout); \
         it is sent again"
    )]
    Stalled { endpoint: String, stalled: Stalled },
    #[error("the S3 server answered: {said}")]
    Transient { said: Box<ServerSaid> },
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

/// What an S3 server said of a request it refused: the fields of its XML error body
/// (`<Error><Code>NoSuchBucket</Code><Message>…</Message><BucketName>…`), as far as it sent
/// them, and the client's own words when it sent none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerSaid {
    /// The S3 error code: `NoSuchBucket`, `AccessDenied`, `SignatureDoesNotMatch`, ...
    pub code: Option<String>,
    /// The server's message.
    pub message: Option<String>,
    /// The bucket the server named (`BucketName`, or a message's trailing name as Garage
    /// writes it: `Bucket not found: NAME`).
    pub bucket: Option<String>,
    /// The key the server named (`Key`).
    pub key: Option<String>,
    /// The client's description of the failure (status, method, URL), always kept.
    pub client: String,
}

impl ServerSaid {
    /// Reads the server's error body out of the client's error text (which carries it).
    pub fn from_client_error(text: &str) -> Self {
        let message = xml_field(text, "Message");
        let bucket = xml_field(text, "BucketName").or_else(|| {
            let (_, name) = message.as_deref()?.rsplit_once(": ")?;
            (!name.is_empty() && !name.contains(char::is_whitespace)).then(|| name.to_string())
        });
        // The client's words without the body, which is said field by field.
        let client = match text.find("<?xml").or_else(|| text.find("<Error>")) {
            Some(at) => text[..at].trim_end().trim_end_matches(':').to_string(),
            None => text.to_string(),
        };
        Self {
            code: xml_field(text, "Code"),
            message,
            bucket,
            key: xml_field(text, "Key"),
            client,
        }
    }
}

impl std::fmt::Display for ServerSaid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(code) = &self.code else {
            return f.write_str(&self.client);
        };
        write!(f, "{code}")?;
        if let Some(message) = &self.message {
            write!(f, " ({message})")?;
        }
        if let Some(bucket) = &self.bucket {
            write!(f, ", bucket {bucket}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ", key {key}")?;
        }
        write!(f, " [{}]", self.client)
    }
}

/// The text of the first `<NAME>…</NAME>` in `text`, XML entities decoded.
fn xml_field(text: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let end = start + text[start..].find(&format!("</{name}>"))?;
    let value = text[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&");
    (!value.is_empty()).then_some(value)
}

/// A missing bucket, said so the operator checks the right thing: when the server named
/// another bucket than ours, it read the bucket from where the request did not put it.
fn no_bucket_message(bucket: &str, said: &ServerSaid, path_style: bool) -> String {
    match &said.bucket {
        Some(named) if named != bucket => {
            let fix = if path_style {
                "drop --upload-path-style, or give --upload-virtual-hosted"
            } else {
                "drop --upload-virtual-hosted (path style is the default with \
                 --upload-endpoint)"
            };
            format!(
                "the S3 server looked for bucket {named}, but --upload-to names bucket \
                 {bucket}: it reads the bucket from another part of the request than ours \
                 ({fix}); it said: {said}"
            )
        }
        _ => format!(
            "the S3 server has no bucket {bucket} (create it, or check the bucket in \
             --upload-to and the server in --upload-endpoint); it said: {said}"
        ),
    }
}

impl UploadError {
    /// A failure only the user can fix (credentials, bucket): said once a minute at most,
    /// tried again slowly. An unreachable server is not one: a vehicle's network comes and
    /// goes.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            UploadError::Credentials { .. }
                | UploadError::NoBucket { .. }
                | UploadError::Untrusted { .. }
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
    /// with the record each time a part completes (to be saved before more is recorded).
    /// `pace` is awaited after each request with the bytes it carried and when it began; for
    /// a part, as soon as it has begun (the next begins when its bytes are paid for), and once
    /// more with 0 bytes after the last.
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
        let plan = parts(size, self.part_size);
        sent.resize(plan.len(), None);
        let mut record = ObjectRecord::Multipart {
            key: key.to_string(),
            sha256: sha256.to_string(),
            size,
            upload_id: upload_id.clone(),
            part_size: self.part_size,
            parts: sent.clone(),
        };
        checkpoint(&record)?;
        // The file and the hash of what was read so far go to a blocking thread for each
        // part and come back with it: reading and hashing a part (milliseconds) never holds up
        // the runtime, which meanwhile keeps the parts in flight moving.
        let f = Arc::new(f);
        let mut hasher = Some(Sha256::new());
        let mut in_flight = FuturesUnordered::new();
        // A part completed: recorded before anything else is.
        let mut completed = |done: Result<(usize, u64, PartId), UploadError>,
                             record: &mut ObjectRecord|
         -> Result<(), UploadError> {
            let (index, len, part) = done?;
            if let ObjectRecord::Multipart { parts, .. } = record {
                parts[index] = Some(part.content_id);
            }
            checkpoint(record)?;
            tracing::debug!(key, part = index + 1, bytes = len, "part sent");
            Ok(())
        };
        for (index, (offset, len)) in plan.into_iter().enumerate() {
            let to_send = sent[index].is_none();
            // A free slot first, so that at most `parts_in_flight` parts are held.
            while to_send && in_flight.len() >= self.parts_in_flight {
                let done = in_flight.next().await.expect("parts in flight");
                completed(done, &mut record)?;
            }
            // Read into a buffer of its own, which the request takes: no copy. (A part sent
            // before a restart is read again only to be hashed.)
            let (file, mut hash) = (f.clone(), hasher.take().expect("the hash is back"));
            let reading = tokio::task::spawn_blocking(move || {
                let mut piece = vec![0; len as usize];
                file.read_exact_at(&mut piece, offset)?;
                hash.update(&piece);
                Ok::<_, std::io::Error>((piece, hash))
            });
            tokio::pin!(reading);
            let read = loop {
                tokio::select! {
                    read = &mut reading => break read,
                    Some(done) = in_flight.next() => completed(done, &mut record)?,
                }
            };
            let (piece, hash) = read
                .map_err(|e| local(std::io::Error::other(e)))?
                .map_err(local)?;
            hasher = Some(hash);
            if !to_send {
                continue;
            }
            let started = Instant::now();
            tracing::debug!(key, part = index + 1, bytes = len, "part begun");
            let (store, location, upload_id) =
                (self.store.clone(), location.clone(), upload_id.clone());
            in_flight.push(async move {
                store
                    .put_part(&location, &upload_id, index, PutPayload::from(piece))
                    .await
                    .map(|part| (index, len, part))
                    .map_err(|e| self.classify(e))
            });
            // The next part begins once this one's bytes are paid for; parts that complete
            // meanwhile are recorded.
            let paid = pace(len, started);
            tokio::pin!(paid);
            loop {
                tokio::select! {
                    () = &mut paid => break,
                    Some(done) = in_flight.next() => completed(done, &mut record)?,
                }
            }
        }
        while let Some(done) = in_flight.next().await {
            completed(done, &mut record)?;
        }
        drop(in_flight);
        pace(0, Instant::now()).await;
        let ObjectRecord::Multipart { parts: sent, .. } = record else {
            unreachable!("a multipart record");
        };
        let got = hex(&hasher.expect("the hash is back").finalize());
        if got != sha256 {
            let _ = self.store.abort_multipart(&location, &upload_id).await;
            return Err(changed(got));
        }
        let parts: Vec<PartId> = sent
            .into_iter()
            .map(|content_id| PartId {
                content_id: content_id.expect("every part completed"),
            })
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

    /// What a failed request means for the user: credentials, the bucket, the address, or
    /// a failure to try again.
    fn classify(&self, e: object_store::Error) -> UploadError {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        let mut stalled = None;
        while let Some(s) = source {
            stalled = stalled.or_else(|| s.downcast_ref::<Stalled>().cloned());
            let more = s.to_string();
            if !text.contains(&more) {
                text.push_str(": ");
                text.push_str(&more);
            }
            source = s.source();
        }
        if let Some(stalled) = stalled {
            return UploadError::Stalled {
                endpoint: self.endpoint.clone(),
                stalled,
            };
        }
        let said = Box::new(ServerSaid::from_client_error(&text));
        let code = said.code.as_deref().unwrap_or("");
        match (&e, code) {
            (_, "NoSuchBucket") => UploadError::NoBucket {
                bucket: self.bucket.clone(),
                said,
                path_style: self.path_style,
            },
            (_, "AccessDenied" | "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "Forbidden")
            | (
                object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. },
                _,
            ) => UploadError::Credentials { said },
            // The server's certificate refused by our TLS client: no request was made.
            _ if said.code.is_none() && text.contains("invalid peer certificate") => {
                UploadError::Untrusted {
                    endpoint: self.endpoint.clone(),
                    detail: untrusted_detail(&text),
                }
            }
            // No answer at all (refused, no route, a name that does not resolve).
            _ if said.code.is_none() && is_connect_failure(&text) => UploadError::Unreachable {
                endpoint: self.endpoint.clone(),
                detail: said.client,
            },
            _ => UploadError::Transient { said },
        }
    }
}

/// What the TLS client said of a certificate it refused (`invalid peer certificate:
/// UnknownIssuer`), from the client's whole error text.
fn untrusted_detail(text: &str) -> String {
    let from = text.find("invalid peer certificate").unwrap_or(0);
    text[from..].to_string()
}

/// Whether a client error is a failure to reach the server rather than its answer.
fn is_connect_failure(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    [
        "connection refused",
        "dns error",
        "failed to lookup",
        "no route to host",
        "network is unreachable",
    ]
    .iter()
    .any(|needle| text.contains(needle))
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

    /// The error text object_store gives for a refused request: its words, then the body.
    fn client_error(body: &str) -> String {
        format!(
            "Error performing PUT http://10.0.0.5:3900/fleet/x.ulg in 4ms - Server returned \
             non-2xx status code: 404 Not Found: {body}"
        )
    }

    #[test]
    fn the_server_s_code_message_and_bucket_are_read_from_its_error_body() {
        // Garage names the bucket in its message only.
        let garage = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchBucket\
                      </Code><Message>Bucket not found: fleet</Message><Resource>/fleet/x.ulg\
                      </Resource><Region>garage</Region></Error>";
        let said = ServerSaid::from_client_error(&client_error(garage));
        assert_eq!(said.code.as_deref(), Some("NoSuchBucket"));
        assert_eq!(said.message.as_deref(), Some("Bucket not found: fleet"));
        assert_eq!(said.bucket.as_deref(), Some("fleet"));
        assert!(said.client.ends_with("404 Not Found"), "{}", said.client);
        // AWS and MinIO name it in a field of its own; entities are decoded.
        let aws = "<Error><Code>NoSuchKey</Code><Message>The specified key does not exist\
                   </Message><Key>a&amp;b.ulg</Key><BucketName>logs</BucketName></Error>";
        let said = ServerSaid::from_client_error(&client_error(aws));
        assert_eq!(said.bucket.as_deref(), Some("logs"));
        assert_eq!(said.key.as_deref(), Some("a&b.ulg"));
        assert_eq!(
            said.to_string(),
            format!(
                "NoSuchKey (The specified key does not exist), bucket logs, key a&b.ulg [{}]",
                said.client
            )
        );
        // No body: the client's words as they are.
        let bare = ServerSaid::from_client_error("connection refused");
        assert_eq!(bare.code, None);
        assert_eq!(bare.to_string(), "connection refused");
    }

    #[test]
    fn a_bucket_the_server_read_from_the_wrong_place_is_said_with_the_option_to_change() {
        let body = "<Error><Code>NoSuchBucket</Code><Message>Bucket not found: fleet</Message>\
                    </Error>";
        let said = ServerSaid::from_client_error(&client_error(body));
        let wrong_place = no_bucket_message("flightlogs", &said, false);
        assert!(
            wrong_place
                .contains("looked for bucket fleet, but --upload-to names bucket flightlogs"),
            "{wrong_place}"
        );
        assert!(
            wrong_place.contains("drop --upload-virtual-hosted"),
            "{wrong_place}"
        );
        assert!(
            wrong_place.contains("Bucket not found: fleet"),
            "{wrong_place}"
        );
        let missing = no_bucket_message("fleet", &said, true);
        assert!(missing.contains("has no bucket fleet"), "{missing}");
        assert!(missing.contains("--upload-to"), "{missing}");
        assert!(missing.contains("--upload-endpoint"), "{missing}");
    }

    #[test]
    fn path_style_is_the_default_for_an_endpoint_and_virtual_hosting_puts_the_bucket_in_the_host() {
        assert!(S3Options::path_style_by_default(Some(
            "http://10.0.0.5:3900"
        )));
        assert!(!S3Options::path_style_by_default(None));
        assert_eq!(
            bucket_endpoint("http://garage.local:3900", "logs").unwrap(),
            "http://logs.garage.local:3900"
        );
        assert_eq!(
            bucket_endpoint("https://logs.s3.example.com/", "logs").unwrap(),
            "https://logs.s3.example.com"
        );
        assert!(bucket_endpoint("garage.local:3900", "logs").is_err());
    }
}
