//! The web page's listener (`--http`): hyper's HTTP/1 connections under the limits that keep a
//! client from holding the daemon (a request's head at most [`MAX_HEAD_BYTES`] and sent
//! within [`HEAD_TIMEOUT`], at most [`MAX_CONNECTIONS`] at once), axum's router as their
//! service, on a thread of its own at a lower priority with its own current-thread runtime,
//! as the metrics' listener: nothing it does runs on the network loop or delays an ack.
//!
//! The same thread follows the log directory (every [`WATCH_INTERVAL`] and whenever a
//! session opens or closes, a `stat` per session), keeps each session's line of the flights' list, and pushes a change for each
//! session that appeared, changed (a fill, an upload) or went.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;

use crate::shell::listener_thread::{ListenerError, ListenerThread};
use crate::sys::secret::SecretFileError;
use crate::web::auth::Access;
use crate::web::flights::FlightsCache;
use crate::web::live::{Change, WebFeed};
use crate::web::routes::router;
use crate::web::served::Actions;
use crate::web::served::Served;

/// A request's head (its line and headers) larger than this is refused (431).
pub const MAX_HEAD_BYTES: usize = 4096;
/// A request's head must be in within this long of the connection (or of the request
/// before it): a flood of connections that send nothing holds the page for this long at most.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; more are closed as they come.
pub const MAX_CONNECTIONS: usize = 256;
/// The log directory is looked at this often for sessions that came, changed or went.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(2);

/// What the listener serves.
pub struct WebConfig {
    pub addr: SocketAddr,
    /// The password file (`--http-password-file`); required beyond loopback.
    pub password_file: Option<PathBuf>,
    pub feed: WebFeed,
    pub log_dir: PathBuf,
    /// The log directory's budget (`max-total`), if any.
    pub budget: Option<u64>,
    /// What the page's actions reach.
    pub actions: Actions,
}

/// Why the listener did not start.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error(
        "the web page would be open to the network on {addr} without a password: give \
         --http-password-file FILE (a file only the daemon's user reads), or a loopback address"
    )]
    NoPassword { addr: SocketAddr },
    #[error(transparent)]
    PasswordFile(#[from] SecretFileError),
    #[error("the web page's password file {} is empty", .0.display())]
    EmptyPassword(PathBuf),
    #[error("cannot listen for the web page on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the web page's thread: {0}")]
    Thread(std::io::Error),
}

/// The running listener; dropping it stops it.
pub struct WebServer {
    thread: ListenerThread,
}

impl WebServer {
    /// Reads the password file, binds the address (a failure of either stops the start,
    /// before anything listens) and serves it on its own thread.
    pub fn start(config: WebConfig) -> Result<Self, WebError> {
        let addr = config.addr;
        let access = match &config.password_file {
            Some(path) => {
                let bytes =
                    crate::sys::secret::read_secret_file(path, "the web page's password file")?;
                let text = String::from_utf8_lossy(&bytes);
                let password = text.lines().next().unwrap_or_default();
                if password.is_empty() {
                    return Err(WebError::EmptyPassword(path.clone()));
                }
                Access::with_password(password)
            }
            None if addr.ip().is_loopback() => Access::open(),
            None => return Err(WebError::NoPassword { addr }),
        };
        let served = Arc::new(Served {
            access,
            actions: config.actions,
            feed: config.feed,
            flights: FlightsCache::new(config.log_dir.clone()),
            log_dir: config.log_dir,
            budget: config.budget,
            disk: Default::default(),
            sd_card: Default::default(),
        });
        let thread = ListenerThread::start("ulog-recv-web", addr, "the web page", |l, stopped| {
            serve(l, served, stopped)
        })
        .map_err(|e| match e {
            ListenerError::Bind(source) => WebError::Bind { addr, source },
            ListenerError::Thread(e) => WebError::Thread(e),
        })?;
        Ok(Self { thread })
    }

    /// The address bound (port 0 resolved).
    pub fn addr(&self) -> SocketAddr {
        self.thread.addr()
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    served: Arc<Served>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let watcher = served.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(WATCH_INTERVAL);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                // A session opened or closed: its line at once, not at the next look.
                _ = watcher.feed.sessions_changed() => {}
            }
            watcher.refresh_flights().await;
        }
    });
    let disk = served.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(crate::web::served::DISK_REFRESH);
        loop {
            tick.tick().await;
            let view = disk.disk_view().await;
            disk.feed.push(Some(Change::new("disk", &view)));
        }
    });
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let app = router(served);
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, from) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, most likely: wait rather than spin.
                tracing::warn!(error = %e, "the web page cannot take a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        // Every request knows the address it came from (the password throttle's key).
        let service = TowerToHyperService::new(
            app.clone()
                .layer(axum::Extension(axum::extract::ConnectInfo(from))),
        );
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_header_size(MAX_HEAD_BYTES)
                .max_headers(64)
                .serve_connection(TokioIo::new(stream), service);
            let _ = connection.await;
            drop(permit);
        });
    }
}
