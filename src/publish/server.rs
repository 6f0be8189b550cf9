//! The live socket's shell: a thread of its own with a small tokio runtime that owns the
//! [`Publisher`], the listeners (a Unix socket, optionally TCP) and one reader and one writer
//! task per client; and, when asked for, the Foxglove WebSocket server
//! ([`crate::foxglove::server`]), fed from the same hand-over.
//!
//! The network loop hands log bytes over through a [`PublishFeed`] and never waits for it:
//! the feed is an unbounded channel whose backlog (bytes handed over, not yet published) is
//! counted; past [`PublishConfig::backlog_bytes`] the feed strips data samples from what it
//! hands over (definitions, parameters, logged strings and dropouts still go) and the clients
//! get `{"type":"lagged","cause":"server_busy"}`. Each client's writer drains its own
//! [`Outbox`], so a client that does not read only loses its own oldest lines.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};

use crate::foxglove::{
    self,
    server::{FoxMsg, FoxgloveClients},
};
use crate::latency::LatencyHistogram;
use crate::link::{Event, SessionStats};
use crate::publish::outbox::Keep;
use crate::publish::protocol::{Line, LineReader};
use crate::publish::{ClientId, Outbox, Publisher, ServerStats};
use crate::store::thread::StorageStats;
use crate::ulog::message::{FILE_HEADER_LEN, strip_samples};

/// File name of the socket in the default directories.
pub const SOCKET_NAME: &str = "ulog-recv.sock";

/// Where the daemon puts its socket when not told: systemd's `$RUNTIME_DIRECTORY` (its first
/// entry), else `$XDG_RUNTIME_DIR`, else `/run/ulog-recv/`.
pub fn default_socket_path() -> PathBuf {
    socket_candidates()
        .into_iter()
        .next()
        .expect("the last candidate is always there")
}

/// The places a client looks for the socket, in order: `$ULOG_RECV_SOCKET`, then the
/// daemon's defaults, then `/run/ulog-recv/` (where the systemd unit puts it).
pub fn socket_candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("ULOG_RECV_SOCKET").filter(|p| !p.is_empty()) {
        out.push(PathBuf::from(p));
    }
    if let Some(dirs) = std::env::var_os("RUNTIME_DIRECTORY")
        && let Some(first) = dirs.to_string_lossy().split(':').find(|d| !d.is_empty())
    {
        out.push(Path::new(first).join(SOCKET_NAME));
    }
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|p| !p.is_empty()) {
        out.push(Path::new(&dir).join(SOCKET_NAME));
    }
    out.push(Path::new("/run/ulog-recv").join(SOCKET_NAME));
    out
}

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
}

impl Default for PublishConfig {
    fn default() -> Self {
        Self {
            unix: None,
            tcp: None,
            foxglove: None,
            client_queue_bytes: 4 << 20,
            backlog_bytes: 8 << 20,
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot create the socket's directory {path}: {source}")]
    Directory { path: PathBuf, source: io::Error },
    #[error("another ulog-recv already serves {0}")]
    InUse(PathBuf),
    #[error("{0} exists and is not a socket: left as it is; give another --socket PATH")]
    NotASocket(PathBuf),
    #[error("cannot listen on {path}: {source}")]
    Bind { path: String, source: io::Error },
    #[error("cannot start the publishing thread: {0}")]
    Thread(io::Error),
}

/// The publishing thread's niceness (the store thread's is 5).
const PUBLISH_NICENESS: i32 = 10;

/// What the network loop sends the publishing thread.
enum Feed {
    Log { bytes: Bytes, arrived: Instant },
    Skipped(u64),
    Event(Event),
    Stats(Box<(SessionStats, StorageStats)>),
}

/// The network loop's end of the server: hands over log bytes, events and counters without
/// ever waiting. Dropping it shuts the server down.
pub struct PublishFeed {
    tx: mpsc::UnboundedSender<Feed>,
    backlog: Arc<AtomicUsize>,
    limit: usize,
    batch: BytesMut,
    /// Arrival of the first datagram whose bytes are in `batch`.
    batch_arrived: Option<Instant>,
    /// File header bytes still to come in this log (they are not framed as messages).
    header_left: usize,
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
        self.batch.extend_from_slice(bytes);
    }

    /// A session event (after the log bytes before it).
    pub fn event(&mut self, event: &Event) {
        if let Event::LogBytes(_) = event {
            return;
        }
        self.flush();
        if let Event::LogOpened { .. } = event {
            self.header_left = FILE_HEADER_LEN;
        }
        let _ = self.tx.send(Feed::Event(event.clone()));
    }

    /// The session's and the store's counters (once a second).
    pub fn stats(&mut self, stats: SessionStats, storage: StorageStats) {
        self.flush();
        let _ = self.tx.send(Feed::Stats(Box::new((stats, storage))));
    }

    /// Hands the gathered log bytes over (stripped of samples when the server is behind).
    pub fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let mut bytes = self.batch.split().freeze();
        let arrived = self.batch_arrived.take().unwrap_or_else(Instant::now);
        if self.backlog.load(Ordering::Relaxed) > self.limit {
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

/// A TCP listener bound at `addr`, non-blocking for tokio.
fn bind_tcp(addr: SocketAddr) -> Result<std::net::TcpListener, ServeError> {
    std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|_| l))
        .map_err(|source| ServeError::Bind {
            path: addr.to_string(),
            source,
        })
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
            batch: BytesMut::new(),
            batch_arrived: None,
            header_left: 0,
        };
        let queue = config.client_queue_bytes;
        let clients = Arc::new(AtomicUsize::new(0));
        let count = clients.clone();
        let thread = std::thread::Builder::new()
            .name("ulog-recv-publish".into())
            .spawn(move || {
                // Below the network loop and the store: live clients come after the acks
                // and the files when the CPU is short.
                crate::os::lower_thread_priority(PUBLISH_NICENESS);
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime");
                let listeners = Listeners {
                    unix,
                    tcp,
                    foxglove,
                };
                rt.block_on(serve(rx, backlog, listeners, queue, count));
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
/// The Unix socket bound at `path`, mode 0660. Only a stale socket (one nothing answers on)
/// is replaced; anything else at the path is left alone and is an error.
fn bind_unix(path: &Path) -> Result<BoundSocket, ServeError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| ServeError::Directory {
            path: dir.to_owned(),
            source,
        })?;
    }
    let bind_err = |source| ServeError::Bind {
        path: path.display().to_string(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(ServeError::InUse(path.to_owned()));
            }
            std::fs::remove_file(path).map_err(bind_err)?;
        }
        Ok(_) => return Err(ServeError::NotASocket(path.to_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(bind_err(e)),
    }
    let listener = std::os::unix::net::UnixListener::bind(path).map_err(bind_err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(bind_err)?;
    listener.set_nonblocking(true).map_err(bind_err)?;
    let meta = std::fs::symlink_metadata(path).map_err(bind_err)?;
    Ok(BoundSocket {
        listener,
        path: path.to_owned(),
        identity: (meta.dev(), meta.ino()),
    })
}

/// The Unix listener and how to tell its file from another one put at the same path later.
#[derive(Debug)]
struct BoundSocket {
    listener: std::os::unix::net::UnixListener,
    path: PathBuf,
    /// (device, inode) of the socket file.
    identity: (u64, u64),
}

impl BoundSocket {
    /// Removes the socket file, if it is still ours.
    fn remove(path: &Path, identity: (u64, u64)) {
        use std::os::unix::fs::MetadataExt;
        if std::fs::symlink_metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == identity) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A client's two halves, whatever the socket.
type Halves = (
    Box<dyn AsyncRead + Unpin + Send>,
    Box<dyn AsyncWrite + Unpin + Send>,
);

/// Where clients connect.
enum Listener {
    Unix(tokio::net::UnixListener),
    Tcp(tokio::net::TcpListener),
}

impl Listener {
    async fn accept(&self) -> io::Result<Halves> {
        match self {
            Listener::Unix(l) => {
                let (r, w) = l.accept().await?.0.into_split();
                Ok((Box::new(r), Box::new(w)))
            }
            Listener::Tcp(l) => {
                let (s, _) = l.accept().await?;
                let _ = s.set_nodelay(true);
                let (r, w) = s.into_split();
                Ok((Box::new(r), Box::new(w)))
            }
        }
    }
}

/// Hands every client `listener` accepts to the serving loop, until that loop is gone.
async fn accept_clients(listener: Listener, tx: mpsc::Sender<ClientMsg>) {
    loop {
        match listener.accept().await {
            Ok((r, w)) => {
                if tx.send(ClientMsg::Connected((r, w))).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept a client");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// What the client tasks tell the serving loop.
enum ClientMsg {
    Connected(Halves),
    Request(ClientId, Option<Vec<u8>>),
    Gone(ClientId),
}

/// A client's queue, shared by the serving loop (which fills it) and the client's writer
/// task (which drains it); the Foxglove server's clients have the same.
pub(crate) struct Slot {
    pub(crate) outbox: Mutex<Outbox>,
    pub(crate) wake: Notify,
    /// The server stops: write what is queued, then close.
    pub(crate) closed: AtomicBool,
}

/// A connected client: its queue and its two tasks.
pub(crate) struct ClientTasks {
    pub(crate) slot: Arc<Slot>,
    pub(crate) reader: tokio::task::JoinHandle<()>,
    pub(crate) writer: tokio::task::JoinHandle<()>,
}

/// Puts each `(client, line or message, arrival, keep)` into its client's outbox (a client
/// gone already is skipped) and wakes each writer once.
pub(crate) fn deliver(
    clients: &HashMap<ClientId, ClientTasks>,
    items: impl Iterator<Item = (ClientId, Bytes, Option<Instant>, Keep)>,
) {
    let mut woken: Vec<ClientId> = Vec::new();
    for (id, bytes, arrived, keep) in items {
        if let Some(client) = clients.get(&id) {
            client
                .slot
                .outbox
                .lock()
                .expect("outbox lock")
                .push(bytes, arrived, keep);
            if !woken.contains(&id) {
                woken.push(id);
            }
        }
    }
    for id in woken {
        clients[&id].slot.wake.notify_one();
    }
}

/// How long the clients get to receive the last lines when the daemon stops.
const FINAL_FLUSH: Duration = Duration::from_millis(500);
/// The most a writer takes from its outbox for one write.
const WRITE_BATCH: usize = 64 << 10;

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

fn spawn_client(
    id: ClientId,
    mut r: Box<dyn AsyncRead + Unpin + Send>,
    mut w: Box<dyn AsyncWrite + Unpin + Send>,
    queue_bytes: usize,
    tx: mpsc::Sender<ClientMsg>,
    latency: Arc<Mutex<LatencyHistogram>>,
) -> ClientTasks {
    let slot = Arc::new(Slot {
        outbox: Mutex::new(Outbox::new(queue_bytes)),
        wake: Notify::new(),
        closed: AtomicBool::new(false),
    });
    let reader_tx = tx.clone();
    let reader = tokio::spawn(async move {
        let mut lines = LineReader::new();
        let mut buf = vec![0u8; 8192];
        loop {
            match r.read(&mut buf).await {
                // The client closed its sending side: it may still be reading.
                Ok(0) => return,
                Ok(n) => {
                    lines.push(&buf[..n]);
                    while let Some(line) = lines.next_line() {
                        let line = match line {
                            Line::Text(t) => Some(t.to_vec()),
                            Line::TooLong => None,
                        };
                        if reader_tx.send(ClientMsg::Request(id, line)).await.is_err() {
                            return;
                        }
                    }
                }
                Err(_) => {
                    let _ = reader_tx.send(ClientMsg::Gone(id)).await;
                    return;
                }
            }
        }
    });
    let writer_slot = slot.clone();
    let writer = tokio::spawn(async move {
        let slot = writer_slot;
        let mut buf = Vec::with_capacity(WRITE_BATCH * 2);
        let mut arrivals: Vec<Instant> = Vec::new();
        loop {
            slot.outbox
                .lock()
                .expect("outbox lock")
                .take(&mut buf, WRITE_BATCH, |at| arrivals.push(at));
            if buf.is_empty() {
                if slot.closed.load(Ordering::Relaxed) {
                    let _ = w.shutdown().await;
                    return;
                }
                slot.wake.notified().await;
                continue;
            }
            if w.write_all(&buf).await.is_err() {
                let _ = tx.send(ClientMsg::Gone(id)).await;
                return;
            }
            let now = Instant::now();
            let mut h = latency.lock().expect("latency lock");
            for at in arrivals.drain(..) {
                h.record(now.duration_since(at));
            }
            drop(h);
            buf.clear();
        }
    });
    ClientTasks {
        slot,
        reader,
        writer,
    }
}
