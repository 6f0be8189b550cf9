//! How the uploads send their requests ([`send`]): the bucket's (`object_store`'s requests,
//! through [`StallGuardConnector`]) and Flight Review's, each given up only once it stops
//! moving, never after a fixed time in all.
//!
//! A part on a slow link takes as long as the link needs: 4 parts of 8 MiB in flight over a
//! 1 Mbit/s LTE uplink take about 270 s each, which no fixed request timeout both allows and
//! still catches a server that has stopped. So a request fails when, for the stall time, the
//! connection took none of its body and no answer came (its headers, or a piece of its
//! body): a server that stops reading or answering is left after the stall time and the part
//! tried again, while a request that keeps moving goes on. Underneath, reqwest's TCP
//! keep-alive and `TCP_USER_TIMEOUT` (its defaults) close a connection whose data goes
//! unacknowledged, as over a link that has died.
//!
//! The body is handed to the connection in pieces of at most [`PIECE`] bytes (slices of the
//! part's buffer, no copy), so that its progress is seen at that grain; after the last piece
//! the connection's send buffer still drains at the link's rate, which the stall time allows
//! for: the daemon's default (`--upload-stall-timeout`, 300 s) is rclone's idle timeout, time
//! enough for a send buffer of a few MB to drain over a link of a few hundred kbit/s.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpResponseBody, HttpService,
};
use tokio::time::{Instant, Sleep};

/// The most bytes of a body handed to the connection at once.
pub const PIECE: usize = 64 * 1024;

/// How long to wait for a connection to the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Makes the client `object_store` sends its requests with (see the module docs). The
/// `ClientOptions` it is handed are not used: what this client needs is here.
#[derive(Debug, Clone)]
pub struct StallGuardConnector {
    /// How long a request may go without moving.
    pub stall: Duration,
    /// Whether `http://` endpoints are allowed (else HTTPS only).
    pub allow_http: bool,
}

impl HttpConnector for StallGuardConnector {
    fn connect(&self, _: &ClientOptions) -> object_store::Result<HttpClient> {
        install_crypto_provider();
        let client = reqwest::Client::builder()
            .user_agent(concat!("ulog-recv/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(CONNECT_TIMEOUT)
            .https_only(!self.allow_http)
            .build()
            .map_err(|e| object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            })?;
        Ok(HttpClient::new(StallGuard {
            client,
            stall: self.stall,
        }))
    }
}

/// The TLS stack's cryptography (ring), installed once for every HTTPS client in the process.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A request that made no progress for the stall time.
#[derive(Debug, Clone, thiserror::Error)]
#[error("no progress for {} s: the server took none of the request and sent no answer", .0.as_secs_f64())]
pub struct Stalled(pub Duration);

/// Why a request sent with [`send`] failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error(transparent)]
    Stalled(#[from] Stalled),
    #[error(transparent)]
    Client(#[from] reqwest::Error),
}

/// The answer to a request sent with [`send`]: its body fails once it stops coming for the
/// stall time.
pub type Answer = http::Response<IdleBody>;

/// Sends `request` with `client`, given up once it makes no progress for `stall` (see the
/// module docs); the answer once its headers came. A client that is to take bodies of any
/// length has no request timeout of its own.
pub async fn send(
    client: &reqwest::Client,
    mut request: reqwest::Request,
    stall: Duration,
) -> Result<Answer, SendError> {
    let progress = Progress::new();
    if let Some(body) = request.body_mut().take() {
        *request.body_mut() = Some(reqwest::Body::wrap(Pieces {
            inner: body,
            piece: Bytes::new(),
            progress: progress.clone(),
        }));
    }
    let answer = client.execute(request);
    tokio::pin!(answer);
    let response = loop {
        tokio::select! {
            answer = &mut answer => break answer?,
            () = tokio::time::sleep_until(progress.last() + stall) => {
                if progress.last() + stall <= Instant::now() {
                    return Err(Stalled(stall).into());
                }
            }
        }
    };
    let (parts, body) = http::Response::<reqwest::Body>::from(response).into_parts();
    let body = IdleBody {
        inner: body,
        stall,
        timer: Box::pin(tokio::time::sleep(stall)),
    };
    Ok(http::Response::from_parts(parts, body))
}

/// The client: each request sent with [`send`].
#[derive(Debug)]
struct StallGuard {
    client: reqwest::Client,
    stall: Duration,
}

#[async_trait::async_trait]
impl HttpService for StallGuard {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let (parts, body) = request.into_parts();
        let url = reqwest::Url::parse(&parts.uri.to_string())
            .map_err(|e| HttpError::new(HttpErrorKind::Unknown, e))?;
        let mut out = reqwest::Request::new(parts.method, url);
        *out.headers_mut() = parts.headers;
        *out.body_mut() = Some(reqwest::Body::wrap(body));
        let answer = send(&self.client, out, self.stall)
            .await
            .map_err(http_error)?;
        let (parts, body) = answer.into_parts();
        let body = HttpResponseBody::new(body.map_err(http_error));
        Ok(HttpResponse::from_parts(parts, body))
    }
}

/// When a request last moved, shared by its body (which marks it) and its watcher.
#[derive(Debug, Clone)]
struct Progress {
    origin: Instant,
    /// Milliseconds from `origin` to the last move.
    last_ms: Arc<AtomicU64>,
}

impl Progress {
    /// Moved now.
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    fn moved(&self) {
        let ms = self.origin.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.origin + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// A request's body handed over in pieces of at most [`PIECE`] bytes, each taken marking
/// progress.
struct Pieces {
    inner: reqwest::Body,
    /// What is left of the frame being handed over.
    piece: Bytes,
    progress: Progress,
}

impl Body for Pieces {
    type Data = Bytes;
    type Error = reqwest::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, reqwest::Error>>> {
        let this = self.get_mut();
        while this.piece.is_empty() {
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => this.piece = data,
                    Err(other) => return Poll::Ready(Some(Ok(other))),
                },
                end_or_error => return Poll::Ready(end_or_error),
            }
        }
        this.progress.moved();
        let n = this.piece.len().min(PIECE);
        Poll::Ready(Some(Ok(Frame::data(this.piece.split_to(n)))))
    }

    fn is_end_stream(&self) -> bool {
        self.piece.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let left = self.piece.len() as u64;
        match inner.exact() {
            Some(n) => SizeHint::with_exact(n + left),
            None => {
                let mut hint = SizeHint::new();
                hint.set_lower(inner.lower() + left);
                if let Some(upper) = inner.upper() {
                    hint.set_upper(upper + left);
                }
                hint
            }
        }
    }
}

/// An answer's body that fails once no piece of it came for the stall time.
pub struct IdleBody {
    inner: reqwest::Body,
    stall: Duration,
    timer: Pin<Box<Sleep>>,
}

impl Body for IdleBody {
    type Data = Bytes;
    type Error = SendError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, SendError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let next = Instant::now() + this.stall;
                this.timer.as_mut().reset(next);
                Poll::Ready(frame.map(|f| f.map_err(SendError::from)))
            }
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Stalled(this.stall).into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A failed request as `object_store` sorts them (which it retries on its own: a failure to
/// connect or to send; a stall, a timeout or a cut if the request can be repeated).
fn http_error(e: SendError) -> HttpError {
    let e = match e {
        SendError::Stalled(stalled) => return HttpError::new(HttpErrorKind::Timeout, stalled),
        SendError::Client(e) => e,
    };
    let kind = if e.is_timeout() {
        HttpErrorKind::Timeout
    } else if e.is_connect() {
        HttpErrorKind::Connect
    } else if e.is_decode() {
        HttpErrorKind::Decode
    } else if e.is_request() || e.is_body() {
        HttpErrorKind::Request
    } else {
        HttpErrorKind::Unknown
    };
    HttpError::new(kind, e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// How a test server treats a request: reads `read` bytes of it (all: `usize::MAX`),
    /// `step` bytes every `pause`, then answers 200 if it read it all and is to `answer`.
    #[derive(Clone, Copy)]
    struct Server {
        read: usize,
        step: usize,
        pause: Duration,
        answer: bool,
    }

    /// A server on loopback that serves one connection as `how` says and then holds it
    /// open; its URL.
    async fn serve(how: Server) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/bucket/key", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let length = read_head(&mut socket).await;
            let mut buf = vec![0u8; how.step];
            let (mut got, want) = (0, length.min(how.read));
            while got < want {
                let n = socket
                    .read(&mut buf[..how.step.min(want - got)])
                    .await
                    .unwrap();
                assert!(n > 0, "the client closed the request");
                got += n;
                tokio::time::sleep(how.pause).await;
            }
            if got == length && how.answer {
                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                socket.write_all(answer).await.unwrap();
            }
            // Held open, silent.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(socket);
        });
        url
    }

    /// Reads a request's head; its content-length.
    async fn read_head(socket: &mut TcpStream) -> usize {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            head.push(socket.read_u8().await.unwrap());
        }
        let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
        let line = head.lines().find(|l| l.starts_with("content-length:"));
        line.expect("a content-length")[15..]
            .trim()
            .parse()
            .unwrap()
    }

    /// PUTs `bytes` zero bytes (as object_store hands a part: one buffer) to `url` through
    /// a client with `stall`; the answer's status, or the error.
    async fn put(url: &str, bytes: usize, stall: Duration) -> Result<u16, HttpError> {
        let client = StallGuardConnector {
            stall,
            allow_http: true,
        }
        .connect(&ClientOptions::new())
        .unwrap();
        let payload = object_store::PutPayload::from(vec![0u8; bytes]);
        let body = object_store::client::HttpRequestBody::from(payload);
        let mut request = HttpRequest::new(body);
        *request.method_mut() = http::Method::PUT;
        *request.uri_mut() = url.parse().unwrap();
        let response = client.execute(request).await?;
        Ok(response.status().as_u16())
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_request_that_keeps_moving_outlives_the_stall_time() {
        runtime().block_on(async {
            // 16 MiB read at about 3 MiB/s: over twice the stall time in all, far more than
            // the socket buffers on loopback hold, with no pause as long as the stall (2 s:
            // a loaded machine may hold a thread back for most of a second).
            let url = serve(Server {
                read: usize::MAX,
                step: 64 << 10,
                pause: Duration::from_millis(20),
                answer: true,
            })
            .await;
            let stall = Duration::from_secs(2);
            let started = Instant::now();
            let status = put(&url, 16 << 20, stall)
                .await
                .expect("the upload completes");
            assert_eq!(status, 200);
            assert!(
                started.elapsed() > stall * 2,
                "the server read too fast to tell: {:?}",
                started.elapsed()
            );
        });
    }

    /// PUTs `bytes` to a server that treats it as `how` says, with a stall time of 0.5 s;
    /// it must fail as stalled, within 10 s and no sooner than the stall time.
    async fn stalled_put(how: Server, bytes: usize) {
        let url = serve(how).await;
        let stall = Duration::from_millis(500);
        let started = Instant::now();
        let error = tokio::time::timeout(Duration::from_secs(10), put(&url, bytes, stall))
            .await
            .expect("given up within 10 s")
            .expect_err("a stall");
        assert!(started.elapsed() >= stall);
        assert_eq!(error.kind(), HttpErrorKind::Timeout, "{error}");
        let said = std::error::Error::source(&error).unwrap().to_string();
        assert!(said.starts_with("no progress for 0.5 s"), "{said}");
    }

    #[test]
    fn a_server_that_stops_reading_is_left_after_the_stall_time() {
        let how = Server {
            read: 1 << 20,
            step: 64 << 10,
            pause: Duration::ZERO,
            answer: true,
        };
        runtime().block_on(stalled_put(how, 64 << 20));
    }

    #[test]
    fn a_server_that_reads_all_and_never_answers_is_left_after_the_stall_time() {
        let how = Server {
            read: usize::MAX,
            step: 64 << 10,
            pause: Duration::ZERO,
            answer: false,
        };
        runtime().block_on(stalled_put(how, 4 << 20));
    }
}
