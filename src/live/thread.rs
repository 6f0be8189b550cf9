//! The publishing thread: a thread of its own with a small tokio runtime that owns the live
//! socket's [`Publisher`] with its listeners (a Unix socket, optionally TCP) and client tasks
//! ([`crate::live::ndjson::server`]) and, when asked for, the Foxglove WebSocket server
//! ([`crate::live::foxglove::server`]), both fed from the same hand-over.
//!
//! The network loop hands log bytes over through a [`PublishFeed`] and never waits for it:
//! the feed is an unbounded channel whose backlog (bytes handed over, not yet published) is
//! counted; past [`PublishConfig::backlog_bytes`] the feed strips data samples from what it
//! hands over (definitions, parameters, logged strings and dropouts still go) and the clients
//! get `{"type":"lagged","cause":"server_busy"}`. Both servers publish both formats (a PX4's
//! ULog, an ArduPilot's DataFlash). Each client's writer drains its own
//! [`Outbox`](crate::live::Outbox), so a client that does not read only loses its own oldest
//! lines.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use crate::autopilot::LogFormat;
use crate::dataflash::{self, format::is_sample};
use crate::link::{Event, SessionStats};
use crate::live::clients::{ClientTasks, ServeError, bind_tcp, deliver};
use crate::live::foxglove::{
    self,
    server::{FoxMsg, FoxgloveClients},
};
use crate::live::ndjson::protocol::Line;
use crate::live::ndjson::server::{
    BoundSocket, ClientMsg, Listener, accept_clients, bind_unix, spawn_client,
};
use crate::live::ndjson::{ClientId, Publisher, ServerStats};
use crate::store::events::{EventOutcome, EventRequest};
use crate::store::thread::{Batch, StorageStats};
use crate::sys::latency::LatencyHistogram;
use crate::ulog::message::{FILE_HEADER_LEN, strip_samples};
use crate::upload::UploadStatus;

/// Where and how the server listens.
#[derive(Debug, Clone)]
pub struct PublishConfig {
    /// The Unix socket (created with mode 0660; a stale file is replaced).
    pub unix: Option<PathBuf>,
    /// A TCP address (for containers), e.g. `127.0.0.1:14600`.
    pub tcp: Option<SocketAddr>,
    /// The Foxglove WebSocket server's address, e.g. `127.0.0.1:8765`.
    pub foxglove: Option<SocketAddr>,
    /// Bytes each client's queue may hold before its oldest lines are dropped.
    pub client_queue_bytes: usize,
    /// Log bytes handed over and not yet published beyond which samples are skipped.
    pub backlog_bytes: usize,
    /// Where the events clients ask for go (the store, through the network loop); `None`:
    /// they are refused.
    pub event_requests: Option<mpsc::UnboundedSender<EventRequest>>,
}

impl Default for PublishConfig {
    fn default() -> Self {
        Self {
            unix: None,
            tcp: None,
            foxglove: None,
            client_queue_bytes: 4 << 20,
            backlog_bytes: 8 << 20,
            event_requests: None,
        }
    }
}

/// The publishing thread's niceness (the store thread's is 5).
const PUBLISH_NICENESS: i32 = 10;

/// What the network loop sends the publishing thread.
enum Feed {
    Log { bytes: Bytes, arrived: Instant },
    Skipped(u64),
    Event(Event),
    Stats(Box<(SessionStats, StorageStats)>),
    Uploads(Box<UploadStatus>),
    EventOutcome(Box<EventOutcome>),
}

/// The network loop's end of the server: hands over log bytes, events and counters without
/// ever waiting. Dropping it shuts the server down.
pub struct PublishFeed {
    tx: mpsc::UnboundedSender<Feed>,
    backlog: Arc<AtomicUsize>,
    limit: usize,
    batch: Batch,
    /// Arrival of the first datagram whose bytes are in `batch`.
    batch_arrived: Option<Instant>,
    /// File header bytes still to come in this log (they are not framed as messages).
    header_left: usize,
    /// The open log's framer when it is a DataFlash log: it learns the types' lengths as
    /// their FMTs pass, so that samples can be told apart when the server is behind.
    bin: Option<dataflash::Framer>,
}

impl std::fmt::Debug for PublishFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishFeed")
            .field("backlog", &self.backlog.load(Ordering::Relaxed))
            .finish()
    }
}

impl PublishFeed {
    /// Log bytes (whole messages) of a datagram that arrived at `arrived`; they go out at the
    /// next [`flush`](Self::flush).
    pub fn log_bytes(&mut self, bytes: &[u8], arrived: Instant) {
        self.batch_arrived.get_or_insert(arrived);
        self.batch.extend(bytes);
    }

    /// A session event (after the log bytes before it).
    pub fn event(&mut self, event: &Event) {
        if let Event::LogBytes(_) = event {
            return;
        }
        self.flush();
        if let Event::LogOpened { format, .. } = event {
            (self.header_left, self.bin) = match format {
                LogFormat::ULog => (FILE_HEADER_LEN, None),
                LogFormat::DataFlash => (0, Some(dataflash::Framer::new())),
            };
        }
        let _ = self.tx.send(Feed::Event(event.clone()));
    }

    /// The session's and the store's counters (once a second).
    pub fn stats(&mut self, stats: SessionStats, storage: StorageStats) {
        self.flush();
        let _ = self.tx.send(Feed::Stats(Box::new((stats, storage))));
    }

    /// The uploader's state (before the next [`stats`](Self::stats)).
    pub fn uploads(&mut self, status: UploadStatus) {
        let _ = self.tx.send(Feed::Uploads(Box::new(status)));
    }

    /// What became of an event (entered in the manifest, or refused).
    pub fn event_outcome(&mut self, outcome: EventOutcome) {
        self.flush();
        let _ = self.tx.send(Feed::EventOutcome(Box::new(outcome)));
    }

    /// Hands the gathered log bytes over (stripped of samples when the server is behind).
    pub fn flush(&mut self) {
        let Some(mut bytes) = self.batch.take() else {
            return;
        };
        let arrived = self.batch_arrived.take().unwrap_or_else(Instant::now);
        let behind = self.backlog.load(Ordering::Relaxed) > self.limit;
        if let Some(framer) = self.bin.as_mut() {
            // Every message passes the framer (it learns the formats); when behind, only
            // what is not a sample goes on.
            let mut kept = Vec::new();
            let mut skipped = 0u64;
            framer.push(&bytes, |m, f| {
                if !behind {
                    return;
                }
                if is_sample(f) {
                    skipped += 1;
                } else {
                    kept.extend_from_slice(m);
                }
            });
            if behind {
                // It waits in a queue that counts its length: no spare capacity.
                kept.shrink_to_fit();
                bytes = Bytes::from(kept);
                if skipped > 0 {
                    let _ = self.tx.send(Feed::Skipped(skipped));
                }
            }
        } else if behind {
            let (kept, skipped) = strip_samples(&bytes, self.header_left);
            bytes = kept;
            if skipped > 0 {
                let _ = self.tx.send(Feed::Skipped(skipped));
            }
        }
        self.header_left = self.header_left.saturating_sub(bytes.len());
        self.backlog.fetch_add(bytes.len(), Ordering::Relaxed);
        let _ = self.tx.send(Feed::Log { bytes, arrived });
    }
}

/// The running server; [`join`](Self::join) it after dropping its [`PublishFeed`].
#[derive(Debug)]
pub struct PublishServer {
    thread: Option<std::thread::JoinHandle<()>>,
    clients: Arc<AtomicUsize>,
    unix: Option<PathBuf>,
    tcp: Option<SocketAddr>,
    foxglove: Option<SocketAddr>,
}

impl PublishServer {
    /// Binds the listeners (errors come here, before anything runs) and starts the thread.
    pub fn start(config: PublishConfig) -> Result<(PublishFeed, PublishServer), ServeError> {
        let unix = config.unix.as_deref().map(bind_unix).transpose()?;
        let tcp = config.tcp.map(bind_tcp).transpose()?;
        let tcp_addr = tcp.as_ref().and_then(|l| l.local_addr().ok());
        let foxglove = config.foxglove.map(bind_tcp).transpose()?;
        let foxglove_addr = foxglove.as_ref().and_then(|l| l.local_addr().ok());
        let (tx, rx) = mpsc::unbounded_channel();
        let backlog = Arc::new(AtomicUsize::new(0));
        let feed = PublishFeed {
            tx,
            backlog: backlog.clone(),
            limit: config.backlog_bytes,
            batch: Batch::default(),
            batch_arrived: None,
            header_left: 0,
            bin: None,
        };
        let queue = config.client_queue_bytes;
        let event_requests = config.event_requests.clone();
        let clients = Arc::new(AtomicUsize::new(0));
        let count = clients.clone();
        let thread = std::thread::Builder::new()
            .name("ulog-recv-publish".into())
            .spawn(move || {
                // Below the network loop and the store: live clients come after the acks
                // and the files when the CPU is short.
                crate::sys::os::lower_thread_priority(PUBLISH_NICENESS);
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime");
                let listeners = Listeners {
                    unix,
                    tcp,
                    foxglove,
                };
                rt.block_on(serve(rx, backlog, listeners, queue, count, event_requests));
            })
            .map_err(ServeError::Thread)?;
        Ok((
            feed,
            PublishServer {
                thread: Some(thread),
                clients,
                unix: config.unix,
                tcp: tcp_addr,
                foxglove: foxglove_addr,
            },
        ))
    }

    /// The Unix socket's path.
    pub fn unix_path(&self) -> Option<&Path> {
        self.unix.as_deref()
    }

    /// The count of connected clients, kept up to date by the server.
    pub fn clients_counter(&self) -> Arc<AtomicUsize> {
        self.clients.clone()
    }

    /// The TCP address actually bound (port 0 resolved).
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp
    }

    /// The Foxglove server's address actually bound (port 0 resolved).
    pub fn foxglove_addr(&self) -> Option<SocketAddr> {
        self.foxglove
    }

    /// Waits for the thread: it ends once the feed is dropped and the clients have been given
    /// a moment to receive the last lines; the socket file is removed.
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Creates the socket: the directory if needed, a stale file replaced, mode 0660.
/// How long the clients get to receive the last lines when the daemon stops.
const FINAL_FLUSH: Duration = Duration::from_millis(500);

/// What the server listens on, bound before the thread starts.
struct Listeners {
    unix: Option<BoundSocket>,
    tcp: Option<std::net::TcpListener>,
    foxglove: Option<std::net::TcpListener>,
}

async fn serve(
    mut feed: mpsc::UnboundedReceiver<Feed>,
    backlog: Arc<AtomicUsize>,
    listeners: Listeners,
    queue_bytes: usize,
    client_count: Arc<AtomicUsize>,
    event_requests: Option<mpsc::UnboundedSender<EventRequest>>,
) {
    let Listeners {
        unix,
        tcp,
        foxglove,
    } = listeners;
    let (conn_tx, mut conn_rx) = mpsc::channel::<ClientMsg>(256);
    let unix_file = unix.as_ref().map(|b| (b.path.clone(), b.identity));
    if let Some(l) = unix.and_then(|b| tokio::net::UnixListener::from_std(b.listener).ok()) {
        tokio::spawn(accept_clients(Listener::Unix(l), conn_tx.clone()));
    }
    if let Some(l) = tcp.and_then(|l| tokio::net::TcpListener::from_std(l).ok()) {
        tokio::spawn(accept_clients(Listener::Tcp(l), conn_tx.clone()));
    }
    let mut publisher = Publisher::new(format!("ulog-recv {}", env!("CARGO_PKG_VERSION")));
    let mut slots: HashMap<ClientId, ClientTasks> = HashMap::new();
    let latency = Arc::new(Mutex::new(LatencyHistogram::default()));
    let (fox_tx, mut fox_rx) = mpsc::channel::<FoxMsg>(256);
    let mut fox = match foxglove.and_then(|l| tokio::net::TcpListener::from_std(l).ok()) {
        Some(l) => {
            tokio::spawn(foxglove::server::accept_clients(l, fox_tx.clone()));
            Some(FoxgloveClients::new(queue_bytes, fox_tx, latency.clone()))
        }
        None => None,
    };
    // Lines dropped from the queues of clients that have left.
    let mut lagged_departed = 0u64;
    // The clients by protocol last set in the metrics.
    let mut clients_told = None;
    loop {
        tokio::select! {
            f = feed.recv() => match f {
                None => break,
                Some(Feed::Log { bytes, arrived }) => {
                    backlog.fetch_sub(bytes.len(), Ordering::Relaxed);
                    publisher.handle_log_bytes(&bytes, arrived);
                    if let Some(fox) = fox.as_mut() {
                        fox.handle_log_bytes(&bytes, arrived);
                    }
                }
                Some(Feed::Skipped(n)) => publisher.handle_skipped(n),
                Some(Feed::Uploads(status)) => publisher.handle_uploads(*status),
                Some(Feed::EventOutcome(outcome)) => {
                    publisher.handle_event_outcome(&outcome);
                    if let (Some(fox), EventOutcome::Recorded(record)) = (fox.as_mut(), &*outcome)
                        && let Some(finding) = &record.finding
                    {
                        fox.handle_finding(finding, Instant::now());
                    }
                }
                Some(Feed::Event(e)) => {
                    publisher.handle_event(&e, Instant::now());
                    if let Some(fox) = fox.as_mut() {
                        fox.handle_event(&e, Instant::now());
                    }
                }
                Some(Feed::Stats(stats)) => {
                    let (s, storage) = *stats;
                    let lat = latency.lock().expect("latency lock");
                    let lagged: u64 = lagged_departed
                        + fox.as_ref().map_or(0, FoxgloveClients::dropped_total)
                        + slots
                            .values()
                            .map(|c| c.slot.outbox.lock().expect("outbox lock").dropped_total())
                            .sum::<u64>();
                    let server = ServerStats {
                        latency_p50_us: lat.quantile_us(0.5),
                        latency_p99_us: lat.quantile_us(0.99),
                        lagged_lines: lagged,
                    };
                    drop(lat);
                    publisher.handle_stats(&s, &storage, server, Instant::now());
                }
            },
            Some(m) = conn_rx.recv() => match m {
                ClientMsg::Connected((r, mut w)) => match publisher.connect() {
                    Some(id) => {
                        let slot = spawn_client(id, r, w, queue_bytes, conn_tx.clone(), latency.clone());
                        slots.insert(id, slot);
                        tracing::debug!(client = id, "client connected");
                    }
                    None => {
                        tokio::spawn(async move {
                            let _ = w
                                .write_all(b"{\"type\":\"error\",\"message\":\"too many clients\"}\n")
                                .await;
                        });
                    }
                },
                ClientMsg::Request(id, line) => {
                    let line = match &line {
                        Some(text) => Line::Text(text),
                        None => Line::TooLong,
                    };
                    publisher.handle_request(id, line);
                    while let Some(request) = publisher.poll_request() {
                        let name = request.name.clone();
                        let sent = event_requests.as_ref().is_some_and(|tx| tx.send(request).is_ok());
                        if !sent {
                            publisher.handle_event_outcome(&EventOutcome::Refused {
                                name,
                                reason: "this server takes no events".into(),
                            });
                        }
                    }
                }
                ClientMsg::Gone(id) => {
                    publisher.disconnect(id);
                    if let Some(client) = slots.remove(&id) {
                        lagged_departed +=
                            client.slot.outbox.lock().expect("outbox lock").dropped_total();
                        client.reader.abort();
                        client.writer.abort();
                        tracing::debug!(client = id, "client gone");
                    }
                }
            },
            Some(m) = fox_rx.recv(), if fox.is_some() => {
                if let Some(fox) = fox.as_mut() {
                    fox.handle(m);
                }
            }
        }
        let foxglove_clients = fox.as_ref().map_or(0, FoxgloveClients::client_count);
        let clients = (publisher.client_count(), foxglove_clients);
        if clients_told != Some(clients) {
            clients_told = Some(clients);
            let live = crate::monitor::catalogue::LIVE_CLIENTS.name;
            metrics::gauge!(live, "protocol" => "ndjson").set(clients.0 as f64);
            metrics::gauge!(live, "protocol" => "foxglove").set(clients.1 as f64);
        }
        client_count.store(
            publisher.client_count() + foxglove_clients,
            Ordering::Relaxed,
        );
        // Everything the publisher made goes to the outboxes.
        deliver(
            &slots,
            std::iter::from_fn(|| publisher.poll_transmit())
                .map(|out| (out.client, out.line, out.arrived, out.keep)),
        );
    }
    // The daemon stops: the writers send what is queued, for a moment at most.
    let deadline = tokio::time::Instant::now() + FINAL_FLUSH;
    for client in slots.values() {
        client.slot.closed.store(true, Ordering::Relaxed);
        client.slot.wake.notify_one();
    }
    for (_, mut client) in slots.drain() {
        client.reader.abort();
        if tokio::time::timeout_at(deadline, &mut client.writer)
            .await
            .is_err()
        {
            client.writer.abort();
        }
    }
    if let Some(fox) = fox {
        fox.close(deadline).await;
    }
    if let Some((path, identity)) = unix_file {
        BoundSocket::remove(&path, identity);
    }
}
