//! The client plumbing both live servers share (the NDJSON socket's and Foxglove's): each
//! client's queue (`Slot`) and tasks (`ClientTasks`), the delivery of a core's output into
//! the queues (`deliver`), and binding a listener ([`bind_tcp`], [`ServeError`]).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::Notify;

use crate::live::outbox::{Keep, Outbox};

/// A client's number, as both cores give it out.
type ClientId = u64;

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

/// A TCP listener bound at `addr`, non-blocking for tokio.
pub fn bind_tcp(addr: SocketAddr) -> Result<std::net::TcpListener, ServeError> {
    std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|_| l))
        .map_err(|source| ServeError::Bind {
            path: addr.to_string(),
            source,
        })
}

/// A client's queue, shared by the serving loop (which fills it) and the client's writer
/// task (which drains it); the Foxglove server's clients have the same.
pub(crate) struct Slot {
    pub(crate) outbox: Mutex<Outbox>,
    pub(crate) wake: Notify,
    /// The server stops: write what is queued, then close.
    pub(crate) closed: AtomicBool,
}

impl Slot {
    /// An empty queue that holds up to `queue_bytes`.
    pub(crate) fn new(queue_bytes: usize) -> Arc<Slot> {
        Arc::new(Slot {
            outbox: Mutex::new(Outbox::new(queue_bytes)),
            wake: Notify::new(),
            closed: AtomicBool::new(false),
        })
    }
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
