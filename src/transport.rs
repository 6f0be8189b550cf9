//! The byte links the daemon and the simulator talk over (tokio): UDP (listening, learning the
//! peer from its packets, or connected to a fixed peer), TCP (reconnected with back-off) and
//! serial ports (reopened after an unplug). They move bytes and nothing else; MAVLink lives in
//! [`crate::link`].
//!
//! [`Link::recv`] is cancel-safe (it can sit in a `select!` beside timers): UDP reads the socket
//! directly; TCP and serial are run by a task of their own, which owns the connection and its
//! reconnects and hands received bytes over a channel.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::mpsc;

/// Where to find the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkSpec {
    /// Listen on this address; answer whoever sent the last datagram.
    UdpListen(SocketAddr),
    /// Send to (and receive from) this address, from an ephemeral port.
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

/// One open link; see the module docs.
pub struct Link {
    inner: Inner,
    /// Frames [`Link::send`] could not hand to the OS.
    send_failures: u64,
}

enum Inner {
    Udp {
        socket: UdpSocket,
        peer: Option<SocketAddr>,
        /// Learn the peer from incoming datagrams (listening mode).
        learn_peer: bool,
    },
    Stream {
        rx: mpsc::Receiver<Vec<u8>>,
        tx: mpsc::Sender<Vec<u8>>,
    },
}

impl Link {
    /// Opens the link. UDP fails at once when it cannot bind; TCP and serial connect in the
    /// background and keep trying.
    pub async fn open(spec: &LinkSpec) -> Result<Self, LinkError> {
        let inner = match spec {
            LinkSpec::UdpListen(addr) => Inner::Udp {
                socket: bind_udp(*addr)?,
                peer: None,
                learn_peer: true,
            },
            LinkSpec::UdpConnect(target) => {
                let peer = resolve(target).await?;
                let local: SocketAddr = if peer.is_ipv4() {
                    "0.0.0.0:0".parse().expect("valid")
                } else {
                    "[::]:0".parse().expect("valid")
                };
                Inner::Udp {
                    socket: bind_udp(local)?,
                    peer: Some(peer),
                    learn_peer: false,
                }
            }
            LinkSpec::Tcp(_) | LinkSpec::Serial { .. } => {
                let (to_main, rx) = mpsc::channel(1024);
                let (tx, from_main) = mpsc::channel(256);
                tokio::spawn(run_stream(spec.clone(), to_main, from_main));
                Inner::Stream { rx, tx }
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

    /// The local address of a UDP link.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.inner {
            Inner::Udp { socket, .. } => socket.local_addr().ok(),
            Inner::Stream { .. } => None,
        }
    }

    /// Receives the next bytes into `buf` (at least [`MAX_READ`] long); returns how many.
    /// Cancel-safe. An error means the link is gone for good (a closed task).
    pub async fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        match &mut self.inner {
            Inner::Udp {
                socket,
                peer,
                learn_peer,
            } => {
                buf.resize(MAX_READ, 0);
                let (n, from) = socket.recv_from(buf).await?;
                learn(peer, *learn_peer, from);
                Ok(n)
            }
            Inner::Stream { rx, .. } => match rx.recv().await {
                Some(bytes) => {
                    buf.clear();
                    buf.extend_from_slice(&bytes);
                    Ok(bytes.len())
                }
                None => Err(io::ErrorKind::BrokenPipe.into()),
            },
        }
    }

    /// Like [`recv`](Self::recv) but only what is already waiting; `None` when nothing is.
    pub fn try_recv(&mut self, buf: &mut Vec<u8>) -> Option<usize> {
        match &mut self.inner {
            Inner::Udp {
                socket,
                peer,
                learn_peer,
            } => {
                buf.resize(MAX_READ, 0);
                let (n, from) = socket.try_recv_from(buf).ok()?;
                learn(peer, *learn_peer, from);
                Some(n)
            }
            Inner::Stream { rx, .. } => {
                let bytes = rx.try_recv().ok()?;
                buf.clear();
                buf.extend_from_slice(&bytes);
                Some(bytes.len())
            }
        }
    }

    /// Sends one frame, best effort: with no peer yet, or the link down, it is dropped.
    pub async fn send(&mut self, frame: &[u8]) {
        match &mut self.inner {
            Inner::Udp { socket, peer, .. } => {
                if let Some(peer) = peer
                    && let Err(e) = socket.send_to(frame, *peer).await
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

/// In listening mode, answers whoever sent the last datagram.
fn learn(peer: &mut Option<SocketAddr>, learn_peer: bool, from: SocketAddr) {
    if learn_peer && *peer != Some(from) {
        tracing::info!(%from, "peer address learnt");
        *peer = Some(from);
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

fn bind_udp(addr: SocketAddr) -> Result<UdpSocket, LinkError> {
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
        force_recv_buffer(&socket, UDP_RECV_BUFFER);
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
    UdpSocket::from_std(socket.into()).map_err(err)
}

/// SO_RCVBUFFORCE: past net.core.rmem_max, for a process with CAP_NET_ADMIN (root, or a
/// systemd unit that grants it). Without the capability it quietly does nothing.
fn force_recv_buffer(socket: &socket2::Socket, bytes: usize) {
    use std::os::fd::AsRawFd;
    let value = bytes.min(i32::MAX as usize) as libc::c_int;
    // SAFETY: a valid socket, a pointer to an int and its size.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
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
                        break;
                    }
                    Ok(n) => if to_main.send(buf[..n].to_vec()).await.is_err() { return },
                },
                f = from_main.recv() => match f {
                    Some(frame) => if let Err(e) = conn.write_all(&frame).await {
                        tracing::warn!(link = %spec, error = %e, "write failed; reconnecting");
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
