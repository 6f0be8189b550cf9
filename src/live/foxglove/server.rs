//! The Foxglove server's shell, run by the live socket's publishing thread: a TCP listener,
//! the WebSocket handshake (tokio-tungstenite; the subprotocol chosen by
//! [`protocol::choose_subprotocol`]) and one reader and one writer task per client around
//! the sans-IO [`FoxglovePublisher`].
//!
//! A client that does not read loses its own oldest samples (its
//! [`Outbox`](crate::live::Outbox) is bounded in bytes) and is told how many in a `status`
//! warning; nobody else waits for it. Handshakes are bounded in number and time, and a
//! client's requests in size, so that a stranger on the network cannot hold the server's
//! memory or tasks.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode, header};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use crate::link::Event;
use crate::live::clients::{ClientTasks, Slot, deliver};
use crate::live::foxglove::protocol::{self, Level, SUBPROTOCOLS};
use crate::live::foxglove::publisher::{ClientId, FoxglovePublisher, is_text};
use crate::sys::latency::LatencyHistogram;

/// Handshakes in progress at once; more connections are closed at once.
const MAX_HANDSHAKES: usize = 8;
/// Time a connection has to complete its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest message a client may send (its requests are a few KB).
const MAX_REQUEST_BYTES: usize = 1 << 20;
/// The most a writer takes from its outbox before flushing the socket.
const WRITE_BATCH: usize = 64 << 10;
/// A client socket's send buffer: enough for a few MB/s over Wi-Fi, little enough that a
/// client that falls behind loses its oldest messages, not sees them seconds late.
const SEND_BUFFER: usize = 256 << 10;

/// What the connection tasks tell the serving loop.
#[derive(Debug)]
pub enum FoxMsg {
    Connected {
        socket: Box<WebSocketStream<TcpStream>>,
        subprotocol: &'static str,
        peer: SocketAddr,
    },
    Text(ClientId, String),
    /// The connection ended, for this reason.
    Gone(ClientId, String),
}

/// Accepts connections on `listener` and hands every completed handshake to the serving loop,
/// until that loop is gone.
pub async fn accept_clients(listener: tokio::net::TcpListener, tx: mpsc::Sender<FoxMsg>) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept a Foxglove client");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = handshakes.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "Foxglove connection closed: too many handshakes at once");
            continue;
        };
        let tx = tx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _ = stream.set_nodelay(true);
            let _ = crate::sys::os::cap_send_buffer(&stream, SEND_BUFFER);
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(stream)).await {
                Ok(Ok((socket, subprotocol))) => {
                    let _ = tx
                        .send(FoxMsg::Connected {
                            socket: Box::new(socket),
                            subprotocol,
                            peer,
                        })
                        .await;
                }
                Ok(Err(e)) => tracing::info!(%peer, error = %e, "Foxglove handshake refused"),
                Err(_) => tracing::info!(%peer, "Foxglove handshake timed out"),
            }
        });
    }
}

/// The WebSocket handshake, accepting only a client that asks for one of [`SUBPROTOCOLS`].
// The refusal's type is tungstenite's `Callback` contract, large or not.
#[allow(clippy::result_large_err)]
async fn handshake(
    stream: TcpStream,
) -> Result<(WebSocketStream<TcpStream>, &'static str), tokio_tungstenite::tungstenite::Error> {
    let mut chosen = None;
    let callback = |request: &Request, mut response: Response| {
        let offered = request
            .headers()
            .get_all(header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|v| v.to_str().ok());
        match protocol::choose_subprotocol(offered) {
            Some(p) => {
                response
                    .headers_mut()
                    .insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(p));
                chosen = Some(p);
                Ok(response)
            }
            None => {
                let mut refusal = ErrorResponse::new(Some(format!(
                    "a Foxglove WebSocket server: ask for the subprotocol {}\n",
                    SUBPROTOCOLS.join(" or ")
                )));
                *refusal.status_mut() = StatusCode::BAD_REQUEST;
                Err(refusal)
            }
        }
    };
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_REQUEST_BYTES))
        .max_frame_size(Some(MAX_REQUEST_BYTES));
    let socket =
        tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(config)).await?;
    match chosen {
        Some(p) => Ok((socket, p)),
        None => Err(tokio_tungstenite::tungstenite::Error::Protocol(
            tokio_tungstenite::tungstenite::error::ProtocolError::HandshakeIncomplete,
        )),
    }
}

/// The Foxglove side of the serving loop: the sans-IO core and its clients' tasks.
pub struct FoxgloveClients {
    publisher: FoxglovePublisher,
    clients: HashMap<ClientId, ClientTasks>,
    queue_bytes: usize,
    tx: mpsc::Sender<FoxMsg>,
    latency: Arc<Mutex<LatencyHistogram>>,
    /// Messages dropped from the queues of clients that have left.
    dropped_departed: u64,
}

impl FoxgloveClients {
    /// Clients' queues hold `queue_bytes` each; their tasks report on `tx`; the time from a
    /// sample's arrival to its write into a socket goes into `latency`.
    pub fn new(
        queue_bytes: usize,
        tx: mpsc::Sender<FoxMsg>,
        latency: Arc<Mutex<LatencyHistogram>>,
    ) -> Self {
        let session = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        Self {
            publisher: FoxglovePublisher::new(
                format!("ulog-recv {}", env!("CARGO_PKG_VERSION")),
                session.to_string(),
            ),
            clients: HashMap::new(),
            queue_bytes,
            tx,
            latency,
            dropped_departed: 0,
        }
    }

    pub fn handle_log_bytes(&mut self, bytes: &[u8], arrived: Instant) {
        self.publisher.handle_log_bytes(bytes, arrived);
        self.dispatch();
    }

    pub fn handle_event(&mut self, event: &Event, now: Instant) {
        self.publisher.handle_event(event, now);
        self.dispatch();
    }

    pub fn handle_finding(&mut self, finding: &crate::diagnose::Finding, now: Instant) {
        self.publisher.handle_finding(finding, now);
        self.dispatch();
    }

    pub fn handle(&mut self, message: FoxMsg) {
        match message {
            FoxMsg::Connected {
                socket,
                subprotocol,
                peer,
            } => match self.publisher.connect() {
                Some(id) => {
                    tracing::info!(client = id, %peer, subprotocol, "Foxglove client connected");
                    let tasks = spawn_client(
                        id,
                        *socket,
                        self.queue_bytes,
                        self.tx.clone(),
                        self.latency.clone(),
                    );
                    self.clients.insert(id, tasks);
                }
                None => {
                    tracing::warn!(%peer, "Foxglove client refused: too many clients");
                    tokio::spawn(async move {
                        let mut socket = *socket;
                        let _ = socket.close(None).await;
                    });
                }
            },
            FoxMsg::Text(id, text) => self.publisher.handle_text(id, &text, Instant::now()),
            FoxMsg::Gone(id, reason) => {
                self.publisher.disconnect(id);
                if let Some(client) = self.clients.remove(&id) {
                    self.dropped_departed += client
                        .slot
                        .outbox
                        .lock()
                        .expect("outbox lock")
                        .dropped_total();
                    client.reader.abort();
                    client.writer.abort();
                    tracing::info!(client = id, %reason, "Foxglove client gone");
                }
            }
        }
        self.dispatch();
    }

    /// Connected clients.
    pub fn client_count(&self) -> usize {
        self.publisher.client_count()
    }

    /// Messages dropped from slow clients' queues, over the whole run.
    pub fn dropped_total(&self) -> u64 {
        self.dropped_departed
            + self
                .clients
                .values()
                .map(|c| c.slot.outbox.lock().expect("outbox lock").dropped_total())
                .sum::<u64>()
    }

    /// Moves what the core made into the clients' outboxes and wakes their writers.
    fn dispatch(&mut self) {
        let publisher = &mut self.publisher;
        deliver(
            &self.clients,
            std::iter::from_fn(|| publisher.poll_transmit())
                .map(|out| (out.client, out.message, out.arrived, out.keep)),
        );
    }

    /// The server stops: the writers send what is queued until `deadline`, then close.
    pub async fn close(mut self, deadline: tokio::time::Instant) {
        for client in self.clients.values() {
            client.slot.closed.store(true, Ordering::Relaxed);
            client.slot.wake.notify_one();
        }
        for (_, mut client) in self.clients.drain() {
            client.reader.abort();
            if tokio::time::timeout_at(deadline, &mut client.writer)
                .await
                .is_err()
            {
                client.writer.abort();
            }
        }
    }
}

fn spawn_client(
    id: ClientId,
    socket: WebSocketStream<TcpStream>,
    queue_bytes: usize,
    tx: mpsc::Sender<FoxMsg>,
    latency: Arc<Mutex<LatencyHistogram>>,
) -> ClientTasks {
    let (mut sink, mut stream) = socket.split();
    let slot = Slot::new(queue_bytes);
    let reader_tx = tx.clone();
    let reader = tokio::spawn(async move {
        loop {
            match stream.next().await {
                Some(Ok(Message::Text(text))) => {
                    let request = FoxMsg::Text(id, text.as_str().to_owned());
                    if reader_tx.send(request).await.is_err() {
                        return;
                    }
                }
                // Pings are answered by the WebSocket layer; a publishing server takes no
                // binary messages (client publishing is not offered).
                Some(Ok(Message::Binary(_) | Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Frame(_))) => {}
                Some(Ok(Message::Close(_))) | None => {
                    let _ = reader_tx
                        .send(FoxMsg::Gone(id, "closed by the client".into()))
                        .await;
                    return;
                }
                Some(Err(e)) => {
                    let _ = reader_tx.send(FoxMsg::Gone(id, e.to_string())).await;
                    return;
                }
            }
        }
    });
    let writer_slot = slot.clone();
    let writer = tokio::spawn(async move {
        let slot = writer_slot;
        let mut batch: Vec<(bytes::Bytes, Option<Instant>)> = Vec::new();
        loop {
            let dropped = {
                let mut outbox = slot.outbox.lock().expect("outbox lock");
                let mut size = 0;
                while size < WRITE_BATCH {
                    let Some((message, at)) = outbox.pop() else {
                        break;
                    };
                    size += message.len();
                    batch.push((message, at));
                }
                outbox.take_dropped()
            };
            if dropped > 0 {
                let warning = protocol::status(
                    Level::Warning,
                    &format!(
                        "{dropped} messages dropped: this connection reads slower than the \
                         vehicle logs"
                    ),
                );
                if let Ok(text) = Utf8Bytes::try_from(warning)
                    && let Err(e) = sink.feed(Message::Text(text)).await
                {
                    let _ = tx.send(FoxMsg::Gone(id, e.to_string())).await;
                    return;
                }
            }
            if batch.is_empty() && dropped == 0 {
                if slot.closed.load(Ordering::Relaxed) {
                    let _ = sink.close().await;
                    return;
                }
                slot.wake.notified().await;
                continue;
            }
            let mut arrivals: Vec<Instant> = Vec::new();
            for (message, at) in batch.drain(..) {
                let message = if is_text(&message) {
                    match Utf8Bytes::try_from(message) {
                        Ok(text) => Message::Text(text),
                        Err(_) => continue,
                    }
                } else {
                    Message::Binary(message)
                };
                if let Err(e) = sink.feed(message).await {
                    let _ = tx.send(FoxMsg::Gone(id, e.to_string())).await;
                    return;
                }
                arrivals.extend(at);
            }
            if let Err(e) = sink.flush().await {
                let _ = tx.send(FoxMsg::Gone(id, e.to_string())).await;
                return;
            }
            let now = Instant::now();
            let mut h = latency.lock().expect("latency lock");
            for at in arrivals {
                h.record(now.duration_since(at));
            }
        }
    });
    ClientTasks {
        slot,
        reader,
        writer,
    }
}
