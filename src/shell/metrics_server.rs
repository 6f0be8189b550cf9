//! The metrics' listener (`--metrics`): `GET /metrics` (Prometheus's text format, from the
//! installed [`Exposition`]) and `GET /healthz` (200 `ok`, or 503 with each problem of the
//! [`Health`](crate::monitor::health::Health) check on a line), served by axum on a thread of
//! its own, at a lower priority, with its own current-thread runtime: a scrape never runs on
//! the network loop and never delays an ack.
//!
//! The log directory's size (a walk of its files) is read at most every
//! [`DISK_REFRESH`], on this thread, for the disk gauges.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::monitor::catalogue::{LOGS_BUDGET_BYTES, LOGS_DISK_BYTES, LOGS_FREE_BYTES};
use crate::monitor::{CONTENT_TYPE, Exposition};
use crate::shell::listener_thread::{ListenerError, ListenerThread};
use crate::shell::monitoring::SharedHealth;

/// The log directory's size is walked at most this often.
pub const DISK_REFRESH: Duration = Duration::from_secs(10);
/// Histograms are folded into their buckets this often, scraped or not.
const UPKEEP: Duration = Duration::from_secs(5);

/// What the listener serves.
pub struct MetricsConfig {
    pub addr: SocketAddr,
    pub exposition: Exposition,
    pub health: SharedHealth,
    /// The log directory, for the disk gauges.
    pub log_dir: PathBuf,
    /// The log directory's budget (`max-total`), if any.
    pub budget: Option<u64>,
}

/// Why the listener did not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsServerError {
    #[error("cannot listen for metrics on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the metrics' thread: {0}")]
    Thread(std::io::Error),
}

/// The running listener; dropping it stops it.
pub struct MetricsServer {
    thread: ListenerThread,
}

struct Served {
    exposition: Exposition,
    health: SharedHealth,
    log_dir: PathBuf,
    budget: Option<u64>,
    /// The log directory's size, and when it was walked.
    disk: Mutex<Option<(u64, Instant)>>,
}

impl MetricsServer {
    /// Binds the address (a failure stops the start, before anything else listens) and
    /// serves it on its own thread ([`ListenerThread`]).
    pub fn start(config: MetricsConfig) -> Result<Self, MetricsServerError> {
        let addr = config.addr;
        let served = Arc::new(Served {
            exposition: config.exposition,
            health: config.health,
            log_dir: config.log_dir,
            budget: config.budget,
            disk: Mutex::new(None),
        });
        let thread = ListenerThread::start("ulog-recv-http", addr, "the metrics", |l, stopped| {
            serve(l, served, stopped)
        })
        .map_err(|e| match e {
            ListenerError::Bind(source) => MetricsServerError::Bind { addr, source },
            ListenerError::Thread(e) => MetricsServerError::Thread(e),
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
    stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let exposition = served.exposition.clone();
    tokio::spawn(async move {
        let mut upkeep = tokio::time::interval(UPKEEP);
        loop {
            upkeep.tick().await;
            exposition.upkeep();
        }
    });
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .with_state(served);
    let shutdown = async move {
        let _ = stopped.await;
    };
    if let Err(e) = axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!(error = %e, "the metrics' listener failed");
    }
}

async fn metrics(State(served): State<Arc<Served>>) -> Response {
    served.refresh_disk();
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        served.exposition.render(),
    )
        .into_response()
}

async fn healthz(State(served): State<Arc<Served>>) -> Response {
    let problems = served
        .health
        .lock()
        .expect("health lock")
        .problems(Instant::now());
    let text_plain = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    if problems.is_empty() {
        return (StatusCode::OK, text_plain, "ok\n").into_response();
    }
    let lines: String = problems.iter().map(|p| format!("{p}\n")).collect();
    (StatusCode::SERVICE_UNAVAILABLE, text_plain, lines).into_response()
}

impl Served {
    /// The disk gauges: free space now, the directory's size when older than
    /// [`DISK_REFRESH`].
    fn refresh_disk(&self) {
        if let Ok(free) = crate::sys::os::free_bytes(&self.log_dir) {
            metrics::gauge!(LOGS_FREE_BYTES.name).set(free as f64);
        }
        if let Some(budget) = self.budget {
            metrics::gauge!(LOGS_BUDGET_BYTES.name).set(budget as f64);
        }
        let mut disk = self.disk.lock().expect("disk lock");
        if disk.is_none_or(|(_, at)| at.elapsed() >= DISK_REFRESH)
            && let Ok(size) = crate::store::files::dir_size(&self.log_dir)
        {
            *disk = Some((size, Instant::now()));
            metrics::gauge!(LOGS_DISK_BYTES.name).set(size as f64);
        }
    }
}
