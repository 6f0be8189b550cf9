//! The byte links the daemon and the simulator talk over (tokio): UDP (listening on one
//! address, or connected to a fixed peer, whose datagrams alone the kernel then lets in), TCP
//! (reconnected with back-off) and serial ports (reopened after an unplug). They move bytes
//! and nothing else; MAVLink lives in [`crate::link`].
//!
//! A listening UDP link answers one peer, the vehicle: [`PeerTracker`] (sans-IO) learns its
//! address only from datagrams the caller vouches for ([`Link::datagram_checked`]: one that
//! held an authentic frame of the vehicle), keeps it while the vehicle talks from there, and
//! counts every other datagram. Stray or hostile datagrams never steer a reply.
//!
//! [`Link::recv`] is cancel-safe (it can sit in a `select!` beside timers): UDP reads the socket
//! directly; TCP and serial are run by a task of their own, which owns the connection and its
//! reconnects and hands received bytes over a channel.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::mpsc;

/// Where to find the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkSpec {
    /// Listen on this address; answer the vehicle (see [`PeerTracker`]).
    UdpListen(SocketAddr),
    /// Send to and receive from this address only, from an ephemeral port.
    UdpConnect(String),
    Tcp(String),
    Serial {
        path: PathBuf,
        baud: u32,
    },
}

impl std::fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkSpec::UdpListen(a) => write!(f, "udp listen {a}"),
            LinkSpec::UdpConnect(a) => write!(f, "udp to {a}"),
            LinkSpec::Tcp(a) => write!(f, "tcp {a}"),
            LinkSpec::Serial { path, baud } => {
                write!(f, "serial {} at {baud} baud", path.display())
            }
        }
    }
}

/// Why a link could not be set up. Runtime failures (a peer gone, an unplugged adapter) are
/// not errors: the link reconnects by itself.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("cannot bind UDP {addr}: {source}")]
    Bind { addr: String, source: io::Error },
    #[error("cannot resolve {addr}: {source}")]
    Resolve { addr: String, source: io::Error },
    #[error("{addr} resolves to no address")]
    NoAddress { addr: String },
}

/// Receive buffer asked for UDP: a few seconds of a fast stream, so a busy moment of the
/// daemon does not turn into loss (Linux caps it at net.core.rmem_max).
pub const UDP_RECV_BUFFER: usize = 8 << 20;

/// Largest datagram or read handled at once.
pub const MAX_READ: usize = 64 << 10;

/// How long the vehicle's address holds after its last authentic datagram: an authentic
/// frame from elsewhere moves it only once the vehicle has been silent this long (two
/// heartbeats), so frames replayed from another host cannot steer the replies while the
/// vehicle talks.
pub const PEER_HOLD: Duration = Duration::from_secs(2);

/// Changes of the vehicle's address after the first are summed up in the log at most this
/// often.
const PEER_CHANGE_REPORT: Duration = Duration::from_secs(10);

/// Counters of a link; all monotonic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkStats {
    /// Datagrams from anywhere but the vehicle's address that held no authentic frame of it
    /// (junk, other systems, forgeries), or that came while the vehicle talked from its own.
    pub foreign_datagrams: u64,
    /// Times the vehicle's address changed.
    pub peer_changes: u64,
    /// Frames [`Link::send`] could not hand to the OS (no route, no buffer space).
    pub send_failures: u64,
    /// The link is open: a UDP socket always (it binds or the daemon does not start); a TCP
    /// connection or a serial port while connected.
    pub open: bool,
}

/// Where a listening UDP link sends, sans-IO; see the module docs.
#[derive(Debug)]
pub struct PeerTracker {
    peer: Option<SocketAddr>,
    /// When the peer last sent an authentic datagram.
    last_heard: Option<Instant>,
    /// Changes not yet told in the log, and when it last told one.
    untold_changes: u64,
    last_told: Option<Instant>,
    stats: LinkStats,
}

impl Default for PeerTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl PeerTracker {
    pub fn new() -> Self {
        Self {
            peer: None,
            last_heard: None,
            untold_changes: 0,
            last_told: None,
            stats: LinkStats::default(),
        }
    }

    /// Where replies go, once known.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// A datagram from `from` was handled at `now`; `authentic` when it held a frame of the
    /// vehicle that passed every check.
    pub fn datagram(&mut self, from: SocketAddr, authentic: bool, now: Instant) {
        if self.peer == Some(from) {
            if authentic {
                self.last_heard = Some(now);
            }
        } else if !authentic {
            self.stats.foreign_datagrams += 1;
        } else if self
            .last_heard
            .is_some_and(|t| now.duration_since(t) < PEER_HOLD)
        {
            // The vehicle talks from its address: this is a copy, a second route, or a replay.
            self.stats.foreign_datagrams += 1;
        } else {
            match self.peer.replace(from) {
                None => tracing::info!(%from, "vehicle's address learnt"),
                Some(was) => {
                    self.stats.peer_changes += 1;
                    self.untold_changes += 1;
                    if self.last_told.is_none() {
                        tracing::warn!(%from, %was, "the vehicle now talks from another address");
                        self.untold_changes = 0;
                        self.last_told = Some(now);
                    }
                }
            }
            self.last_heard = Some(now);
        }
        if self.untold_changes > 0
            && self
                .last_told
                .is_some_and(|t| now.duration_since(t) >= PEER_CHANGE_REPORT)
        {
            tracing::warn!(
                changes = self.untold_changes,
                now_at = ?self.peer,
                "the vehicle's address changed again since the last report"
            );
            self.untold_changes = 0;
            self.last_told = Some(now);
        }
    }
}

/// One received read: its length, and for UDP where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    pub len: usize,
    pub from: Option<SocketAddr>,
}

/// One open link; see the module docs.
pub struct Link {
    inner: Inner,
    send_failures: u64,
}

enum Inner {
    Udp {
        socket: UdpSocket,
        /// The fixed peer of a connected link; else the tracker's.
        fixed: Option<SocketAddr>,
        tracker: PeerTracker,
    },
    Stream {
        rx: mpsc::Receiver<Vec<u8>>,
        tx: mpsc::Sender<Vec<u8>>,
        /// Set by the connection's task while it is connected.
        connected: Arc<AtomicBool>,
    },
}

impl Link {
    /// Opens the link. UDP fails at once when it cannot bind; TCP and serial connect in the
    /// background and keep trying.
    pub async fn open(spec: &LinkSpec) -> Result<Self, LinkError> {
        let inner = match spec {
            LinkSpec::UdpListen(addr) => Inner::Udp {
                socket: bind_udp(*addr, None)?,
                fixed: None,
                tracker: PeerTracker::new(),
            },
            LinkSpec::UdpConnect(target) => {
                let peer = resolve(target).await?;
                let local: SocketAddr = if peer.is_ipv4() {
                    "0.0.0.0:0".parse().expect("valid")
                } else {
                    "[::]:0".parse().expect("valid")
                };
                Inner::Udp {
                    socket: bind_udp(local, Some(peer))?,
                    fixed: Some(peer),
                    tracker: PeerTracker::new(),
                }
            }
            LinkSpec::Tcp(_) | LinkSpec::Serial { .. } => {
                let (to_main, rx) = mpsc::channel(1024);
                let (tx, from_main) = mpsc::channel(256);
                let connected = Arc::new(AtomicBool::new(false));
                tokio::spawn(run_stream(
                    spec.clone(),
                    to_main,
                    from_main,
                    connected.clone(),
                ));
                Inner::Stream { rx, tx, connected }
            }
        };
        Ok(Self {
            inner,
            send_failures: 0,
        })
    }

    /// Frames that could not be handed to the OS (no route, no buffer space).
    pub fn send_failures(&self) -> u64 {
        self.send_failures
    }

    /// The link's counters.
    pub fn stats(&self) -> LinkStats {
        let mut stats = match &self.inner {
            Inner::Udp { tracker, .. } => LinkStats {
                open: true,
                ..tracker.stats()
            },
            Inner::Stream { connected, .. } => LinkStats {
                open: connected.load(Ordering::Relaxed),
                ..LinkStats::default()
            },
        };
        stats.send_failures = self.send_failures;
        stats
    }

    /// Where the link sends: a connected link's peer, or the vehicle's learnt address.
    pub fn peer(&self) -> Option<SocketAddr> {
        match &self.inner {
            Inner::Udp { fixed, tracker, .. } => fixed.or(tracker.peer()),
            Inner::Stream { .. } => None,
        }
    }

    /// Tells a listening UDP link what a received datagram held (see [`PeerTracker`]);
    /// nothing to do for other links.
    pub fn datagram_checked(&mut self, received: Received, authentic: bool, now: Instant) {
        if let (
            Inner::Udp {
                fixed: None,
                tracker,
                ..
            },
            Some(from),
        ) = (&mut self.inner, received.from)
        {
            tracker.datagram(from, authentic, now);
        }
    }

    /// The local address of a UDP link.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.inner {
            Inner::Udp { socket, .. } => socket.local_addr().ok(),
            Inner::Stream { .. } => None,
        }
    }

    /// Receives the next bytes into `buf` (at least [`MAX_READ`] long): a datagram, or a
    /// piece of a byte stream. Cancel-safe. An error means the link is gone for good (a
    /// closed task).
    pub async fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Received> {
        match &mut self.inner {
            Inner::Udp { socket, .. } => {
                buf.resize(MAX_READ, 0);
                loop {
                    match socket.recv_from(buf).await {
                        Ok((len, from)) => {
                            return Ok(Received {
                                len,
                                from: Some(from),
                            });
                        }
                        // A connected socket hears of an ICMP "port unreachable" (the peer not
                        // up yet, or restarting): not the end of the link.
                        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                        Err(e) => return Err(e),
                    }
                }
            }
            Inner::Stream { rx, .. } => match rx.recv().await {
                Some(bytes) => {
                    buf.clear();
                    buf.extend_from_slice(&bytes);
                    Ok(Received {
                        len: bytes.len(),
                        from: None,
                    })
                }
                None => Err(io::ErrorKind::BrokenPipe.into()),
            },
        }
    }

    /// Like [`recv`](Self::recv) but only what is already waiting; `None` when nothing is.
    pub fn try_recv(&mut self, buf: &mut Vec<u8>) -> Option<Received> {
        match &mut self.inner {
            Inner::Udp { socket, .. } => {
                buf.resize(MAX_READ, 0);
                loop {
                    match socket.try_recv_from(buf) {
                        Ok((len, from)) => {
                            return Some(Received {
                                len,
                                from: Some(from),
                            });
                        }
                        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                        Err(_) => return None,
                    }
                }
            }
            Inner::Stream { rx, .. } => {
                let bytes = rx.try_recv().ok()?;
                buf.clear();
                buf.extend_from_slice(&bytes);
                Some(Received {
                    len: bytes.len(),
                    from: None,
                })
            }
        }
    }

    /// Sends one frame, best effort: with no peer yet, or the link down, it is dropped.
    pub async fn send(&mut self, frame: &[u8]) {
        let peer = self.peer();
        match &mut self.inner {
            Inner::Udp { socket, .. } => {
                if let Some(peer) = peer
                    && let Err(e) = socket.send_to(frame, peer).await
                {
                    self.send_failures += 1;
                    tracing::debug!(%peer, error = %e, "UDP send failed");
                }
            }
            Inner::Stream { tx, .. } => {
                let _ = tx.send(frame.to_vec()).await;
            }
        }
    }
}

async fn resolve(target: &str) -> Result<SocketAddr, LinkError> {
    tokio::net::lookup_host(target)
        .await
        .map_err(|source| LinkError::Resolve {
            addr: target.to_owned(),
            source,
        })?
        .next()
        .ok_or_else(|| LinkError::NoAddress {
            addr: target.to_owned(),
        })
}

/// A UDP socket bound to `addr`, connected to `peer` when given (the kernel then delivers
/// that peer's datagrams only).
fn bind_udp(addr: SocketAddr, peer: Option<SocketAddr>) -> Result<UdpSocket, LinkError> {
    let err = |source| LinkError::Bind {
        addr: addr.to_string(),
        source,
    };
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .map_err(err)?;
    if let Err(e) = socket.set_recv_buffer_size(UDP_RECV_BUFFER) {
        tracing::warn!(error = %e, "cannot enlarge the UDP receive buffer");
    }
    if socket.recv_buffer_size().unwrap_or(0) < UDP_RECV_BUFFER {
        // Past net.core.rmem_max, when the process may (CAP_NET_ADMIN).
        let _ = crate::sys::os::force_recv_buffer(&socket, UDP_RECV_BUFFER);
    }
    let got = socket.recv_buffer_size().unwrap_or(0);
    if got < UDP_RECV_BUFFER {
        tracing::info!(
            asked = UDP_RECV_BUFFER,
            got,
            "UDP receive buffer capped by the kernel (raise net.core.rmem_max for fast links)"
        );
    }
    socket.set_nonblocking(true).map_err(err)?;
    socket.bind(&addr.into()).map_err(err)?;
    if let Some(peer) = peer {
        socket.connect(&peer.into()).map_err(err)?;
    }
    UdpSocket::from_std(socket.into()).map_err(err)
}

/// Back-off between reconnect attempts: 0.5 s doubling to 5 s.
fn reconnect_delay(failures: u32) -> Duration {
    Duration::from_millis(500 << failures.min(4)).min(Duration::from_secs(5))
}

/// Owns a TCP or serial connection: connects, pumps bytes both ways, reconnects.
async fn run_stream(
    spec: LinkSpec,
    to_main: mpsc::Sender<Vec<u8>>,
    mut from_main: mpsc::Receiver<Vec<u8>>,
    is_connected: Arc<AtomicBool>,
) {
    let mut failures = 0u32;
    loop {
        let connected: io::Result<Box<dyn Duplex>> = match &spec {
            LinkSpec::Tcp(addr) => TcpStream::connect(addr.as_str()).await.map(|s| {
                let _ = s.set_nodelay(true);
                Box::new(s) as Box<dyn Duplex>
            }),
            LinkSpec::Serial { path, baud } => {
                use tokio_serial::SerialPortBuilderExt;
                tokio_serial::new(path.to_string_lossy(), *baud)
                    .open_native_async()
                    .map(|s| Box::new(s) as Box<dyn Duplex>)
                    .map_err(io::Error::from)
            }
            LinkSpec::UdpListen(_) | LinkSpec::UdpConnect(_) => unreachable!("UDP has no task"),
        };
        let mut conn = match connected {
            Ok(c) => {
                tracing::info!(link = %spec, "connected");
                is_connected.store(true, Ordering::Relaxed);
                failures = 0;
                c
            }
            Err(e) => {
                let delay = reconnect_delay(failures);
                if failures == 0 {
                    tracing::warn!(link = %spec, error = %e, "cannot connect; retrying");
                } else {
                    tracing::debug!(link = %spec, error = %e, ?delay, "cannot connect");
                }
                failures += 1;
                // Frames sent meanwhile have nowhere to go.
                let sleep = tokio::time::sleep(delay);
                tokio::pin!(sleep);
                loop {
                    tokio::select! {
                        _ = &mut sleep => break,
                        f = from_main.recv() => if f.is_none() { return },
                    }
                }
                continue;
            }
        };
        let mut buf = vec![0u8; MAX_READ];
        loop {
            tokio::select! {
                r = conn.read(&mut buf) => match r {
                    Ok(0) | Err(_) => {
                        let why = match r { Err(e) => e.to_string(), _ => "closed".into() };
                        tracing::warn!(link = %spec, why, "link lost; reconnecting");
                        is_connected.store(false, Ordering::Relaxed);
                        break;
                    }
                    Ok(n) => if to_main.send(buf[..n].to_vec()).await.is_err() { return },
                },
                f = from_main.recv() => match f {
                    Some(frame) => if let Err(e) = conn.write_all(&frame).await {
                        tracing::warn!(link = %spec, error = %e, "write failed; reconnecting");
                        is_connected.store(false, Ordering::Relaxed);
                        break;
                    },
                    None => return,
                },
            }
        }
    }
}

/// A byte stream both ways (a TCP socket, a serial port).
trait Duplex: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Duplex for T {}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    #[test]
    fn only_the_vehicle_moves_the_peer_and_only_once_it_went_quiet() {
        let t = Instant::now();
        let mut p = PeerTracker::new();
        // Junk before the vehicle: nothing learnt.
        p.datagram(addr(9), false, t);
        assert_eq!(p.peer(), None);
        p.datagram(addr(1), true, t);
        assert_eq!(p.peer(), Some(addr(1)));
        // Junk and even authentic frames from elsewhere while the vehicle talks: counted.
        for i in 0..1000 {
            let at = t + Duration::from_millis(i);
            p.datagram(addr(9), false, at);
            p.datagram(addr(1), true, at);
        }
        p.datagram(addr(2), true, t + Duration::from_millis(1500));
        assert_eq!(p.peer(), Some(addr(1)));
        assert_eq!(p.stats().foreign_datagrams, 1002);
        // The vehicle went quiet for the hold time: its new address is taken.
        let later = t + Duration::from_millis(999) + PEER_HOLD;
        p.datagram(addr(2), true, later);
        assert_eq!(p.peer(), Some(addr(2)));
        assert_eq!(p.stats().peer_changes, 1);
    }
}
