//! The NDJSON server's sockets: where the live socket lives, the Unix and TCP listeners, and
//! one reader and one writer task per client around the [`Publisher`](super::Publisher)'s
//! lines. The publishing thread ([`crate::live::thread`]) runs them and feeds the core.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::live::clients::{ClientTasks, ServeError, Slot};
use crate::live::ndjson::protocol::{Line, LineReader};
use crate::live::ndjson::publisher::ClientId;
use crate::sys::latency::LatencyHistogram;

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

/// The Unix socket bound at `path`, mode 0660. Only a stale socket (one nothing answers on)
/// is replaced; anything else at the path is left alone and is an error.
pub(crate) fn bind_unix(path: &Path) -> Result<BoundSocket, ServeError> {
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
pub(crate) struct BoundSocket {
    pub(crate) listener: std::os::unix::net::UnixListener,
    pub(crate) path: PathBuf,
    /// (device, inode) of the socket file.
    pub(crate) identity: (u64, u64),
}

impl BoundSocket {
    /// Removes the socket file, if it is still ours.
    pub(crate) fn remove(path: &Path, identity: (u64, u64)) {
        use std::os::unix::fs::MetadataExt;
        if std::fs::symlink_metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == identity) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A client's two halves, whatever the socket.
pub(crate) type Halves = (
    Box<dyn AsyncRead + Unpin + Send>,
    Box<dyn AsyncWrite + Unpin + Send>,
);

/// Where clients connect.
pub(crate) enum Listener {
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
pub(crate) async fn accept_clients(listener: Listener, tx: mpsc::Sender<ClientMsg>) {
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
pub(crate) enum ClientMsg {
    Connected(Halves),
    Request(ClientId, Option<Vec<u8>>),
    Gone(ClientId),
}

/// The most a writer takes from its outbox for one write.
const WRITE_BATCH: usize = 64 << 10;

pub(crate) fn spawn_client(
    id: ClientId,
    mut r: Box<dyn AsyncRead + Unpin + Send>,
    mut w: Box<dyn AsyncWrite + Unpin + Send>,
    queue_bytes: usize,
    tx: mpsc::Sender<ClientMsg>,
    latency: Arc<Mutex<LatencyHistogram>>,
) -> ClientTasks {
    let slot = Slot::new(queue_bytes);
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
