//! Flight Review (PX4's log server, `logs.px4.io` or a fleet's own): the flight as one
//! `.ulg` in a multipart POST to `/upload`, as QGroundControl and logloader send it.
//!
//! The server answers 200 with `{"url": ...}` (we ask for no redirect), 400 when it cannot
//! read the log (never sent again), 503 and other 5xx when it should be tried later. Bodies
//! over 100 MB carry `?expected_size=`.

use std::time::Duration;

use http_body_util::BodyExt;

use crate::upload::http::{self, install_crypto_provider};

/// Bodies over this need `?expected_size=` (the server's streaming limit).
const LARGE_BODY: usize = 100 * 1000 * 1000;

/// Where and how to upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlightReviewOptions {
    /// The server, e.g. `https://logs.px4.io` or `http://127.0.0.1:5006`.
    pub url: String,
    /// Listed publicly (a "flight report"); else a private ("personal") upload.
    pub public: bool,
    /// Where the server mails the log's link (may be empty).
    pub email: String,
    /// An API key for servers that need one, sent as `Authorization: Bearer`.
    pub key: Option<String>,
    /// How long the upload may go without moving before it is given up ([`http::send`]):
    /// a flight takes as long as the link needs.
    pub stall: Duration,
}

/// What is said of a flight that reached Flight Review after an earlier sending got no
/// answer.
pub const MAYBE_TWICE: &str =
    "sent again after an upload with no answer: Flight Review may hold it twice";

/// Why an upload to Flight Review failed.
#[derive(Debug, thiserror::Error)]
pub enum FlightReviewError {
    /// The server refused the log for good (4xx).
    #[error("Flight Review refused the flight (HTTP {status}): {message}")]
    Refused { status: u16, message: String },
    /// The request never reached the server (no connection): nothing was stored; try again
    /// later.
    #[error("Flight Review: {0}")]
    NotReached(String),
    /// Try again later (5xx, a broken connection, a stall); the server may have stored the
    /// flight.
    #[error("Flight Review: {0}")]
    Transient(String),
}

/// A Flight Review server.
#[derive(Debug, Clone)]
pub struct FlightReview {
    client: reqwest::Client,
    options: FlightReviewOptions,
}

impl FlightReview {
    pub fn new(options: FlightReviewOptions) -> Result<Self, FlightReviewError> {
        install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| FlightReviewError::Transient(e.to_string()))?;
        Ok(Self { client, options })
    }

    /// Uploads `flight` (a whole `.ulg`) named `file_name` with `description`; returns the
    /// log's page.
    pub async fn upload(
        &self,
        flight: Vec<u8>,
        file_name: &str,
        description: &str,
    ) -> Result<String, FlightReviewError> {
        let base = self.options.url.trim_end_matches('/');
        let mut url = format!("{base}/upload");
        if flight.len() > LARGE_BODY {
            url.push_str(&format!("?expected_size={}", flight.len()));
        }
        let file = reqwest::multipart::Part::bytes(flight)
            .file_name(file_name.to_string())
            .mime_str("application/octet-stream")
            .expect("a valid mime type");
        let mut form = reqwest::multipart::Form::new()
            .text("description", description.to_string())
            .text("email", self.options.email.clone())
            .text("source", "ulog-recv")
            .text("redirect", "false")
            .text("allowForAnalysis", "false");
        form = if self.options.public {
            form.text("type", "flightreport").text("public", "true")
        } else {
            form.text("type", "personal")
        };
        let mut request = self.client.post(&url).multipart(form.part("filearg", file));
        if let Some(key) = &self.options.key {
            request = request.bearer_auth(key);
        }
        let failed = |e: http::SendError| match &e {
            http::SendError::Client(c) if c.is_connect() => {
                FlightReviewError::NotReached(format!("{url}: {e}"))
            }
            _ => FlightReviewError::Transient(format!("{url}: {e}")),
        };
        let request = request.build().map_err(|e| failed(e.into()))?;
        let answer = http::send(&self.client, request, self.options.stall)
            .await
            .map_err(failed)?;
        let status = answer.status();
        let body = match answer.into_body().collect().await {
            Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
            Err(e) if status.is_success() => return Err(failed(e)),
            Err(_) => String::new(),
        };
        if status.is_success() {
            let page = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("url")?.as_str().map(str::to_string))
                .ok_or_else(|| {
                    FlightReviewError::Transient(format!(
                        "{url}: no log URL in the answer {body:?}"
                    ))
                })?;
            // The server answers with a path; the page is on the server.
            return Ok(if page.starts_with('/') {
                format!("{base}{page}")
            } else {
                page
            });
        }
        let message = body.chars().take(300).collect::<String>();
        if status.is_client_error() && status != reqwest::StatusCode::TOO_MANY_REQUESTS {
            Err(FlightReviewError::Refused {
                status: status.as_u16(),
                message,
            })
        } else {
            Err(FlightReviewError::Transient(format!(
                "{url}: HTTP {status}: {message}"
            )))
        }
    }
}

/// The log id in a Flight Review page URL (`.../plot_app?log=ID`).
pub fn log_id(url: &str) -> Option<&str> {
    url.split_once("log=")
        .map(|(_, id)| id.split('&').next().unwrap_or(id))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_log_id_is_read_from_the_page_url() {
        assert_eq!(
            super::log_id("http://h/plot_app?log=8d1c-aa"),
            Some("8d1c-aa")
        );
        assert_eq!(super::log_id("http://h/plot_app?log=x&y=1"), Some("x"));
        assert_eq!(super::log_id("http://h/"), None);
    }
}
