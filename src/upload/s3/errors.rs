//! What a failed request to the bucket means, for the operator: a configuration error said
//! once at start, or an upload's failure with the server's own words (its error code,
//! message, and the bucket or key it named) and the option to look at.

use std::path::PathBuf;

use super::Bucket;
use crate::sys::secret::SecretFileError;
use crate::upload::http::Stalled;

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
pub(super) fn no_bucket_message(bucket: &str, said: &ServerSaid, path_style: bool) -> String {
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
    /// The failure's kind in a word, for the metrics' `reason` label (a fixed set).
    pub fn reason(&self) -> &'static str {
        match self {
            UploadError::Credentials { .. } => "credentials",
            UploadError::NoBucket { .. } => "no_bucket",
            UploadError::Unreachable { .. } => "unreachable",
            UploadError::Untrusted { .. } => "untrusted",
            UploadError::Stalled { .. } => "stalled",
            UploadError::Transient { .. } => "server",
            UploadError::Local { .. } => "local",
            UploadError::Changed { .. } => "changed",
        }
    }

    pub fn is_config(&self) -> bool {
        matches!(
            self,
            UploadError::Credentials { .. }
                | UploadError::NoBucket { .. }
                | UploadError::Untrusted { .. }
        )
    }
}

impl Bucket {
    /// What a failed request means for the user: credentials, the bucket, the address, or
    /// a failure to try again.
    pub(super) fn classify(&self, e: object_store::Error) -> UploadError {
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
