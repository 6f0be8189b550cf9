//! The vehicle's files over MAVLink FTP, in the tokio shell: a link and a [`Session`] that
//! does not ask for the log stream (`fetch`, `fill`), or the daemon's own session through
//! its loop (`--fill auto`), one FTP operation at a time ([`VehicleFiles::run`]), and what
//! is built on it: listing the SD card's logs and downloading one whole, resumably.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::link::ftp::wire::crc32_part;
use crate::link::ftp::{DirEntry, FtpConfig, FtpError, FtpOp, FtpReply, FtpStats, Nak};
use crate::link::{Event, Session, SessionConfig, SigningSetup};
use crate::shell::transport::{Link, LinkError, LinkSpec};

/// A directory where an autopilot keeps its logs, and the extension they have there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogDir {
    pub path: &'static str,
    /// Matched without regard to case (ArduPilot writes `.BIN`).
    pub extension: &'static str,
}

/// Where the autopilots list their logs, asked in this order: PX4's (the virtual directory
/// of the MAVLink FTP specification, PX4 v1.17 and newer, on a card; the SD card's; PX4's
/// SITL's, its root directory's `log`), then ArduPilot's (a board's card; its SITL's
/// `logs` beside it, which its FTP server roots at its working directory).
pub const LOG_DIRS: [LogDir; 5] = [
    LogDir {
        path: "@MAV_LOG",
        extension: "ulg",
    },
    LogDir {
        path: "/fs/microsd/log",
        extension: "ulg",
    },
    LogDir {
        path: "/log",
        extension: "ulg",
    },
    LogDir {
        path: "/APM/LOGS",
        extension: "bin",
    },
    LogDir {
        path: "/logs",
        extension: "bin",
    },
];

impl LogDir {
    /// Whether `name` is a log here.
    fn holds(&self, name: &str) -> bool {
        name.rsplit_once('.')
            .is_some_and(|(_, ext)| ext.eq_ignore_ascii_case(self.extension))
    }
}

/// Most bytes asked for per read of a download (each piece is written and synced before the
/// next).
const PIECE: u64 = 256 * 1024;
/// Fewest bytes per read of a download: its first piece.
const MIN_PIECE: u64 = 16 * 1024;
/// A download's next piece is sized to take about this long at the rate its last one came:
/// its progress shows at least this often on a slow telemetry link, and a fast link still
/// reads (and syncs) in large pieces.
const PIECE_TIME: Duration = Duration::from_secs(1);

/// Why talking to the vehicle's files failed.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error("no vehicle heard on {link} within {waited:?}")]
    NoVehicle { link: String, waited: Duration },
    #[error("the link failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the daemon is stopping")]
    Stopped,
    #[error(transparent)]
    Ftp(#[from] FtpError),
    #[error(
        "the vehicle has no log directory ({}): no SD card?",
        LOG_DIRS.map(|d| d.path).join(", ")
    )]
    NoLogs,
    #[error(
        "{path}: checksum {ours:08x} of the download is not the vehicle's {theirs:08x}; the \
         partial file is kept as {}", partial.display()
    )]
    Checksum {
        path: String,
        ours: u32,
        theirs: u32,
        partial: PathBuf,
    },
}

/// Sends what an own session has, then waits for bytes or its next timer.
async fn pump(backend: &mut Backend) -> Result<(), FilesError> {
    flush(backend).await;
    let Backend::Own { link, session, buf } = backend else {
        return Ok(());
    };
    let wake = session
        .poll_timeout()
        .map(tokio::time::Instant::from_std)
        .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(1));
    tokio::select! {
        r = link.recv(buf) => {
            let r = r?;
            let now = Instant::now();
            let authentic = match r.from {
                Some(_) => session.handle_datagram(&buf[..r.len], now),
                None => {
                    session.handle_bytes(&buf[..r.len], now);
                    true
                }
            };
            link.datagram_checked(r, authentic, now);
        }
        _ = tokio::time::sleep_until(wake) => session.handle_timeout(Instant::now()),
    }
    Ok(())
}

async fn flush(backend: &mut Backend) {
    if let Backend::Own { link, session, .. } = backend {
        while let Some(frame) = session.poll_transmit() {
            link.send(&frame).await;
        }
    }
}

/// One log on the vehicle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VehicleLog {
    /// The path to ask for.
    pub path: String,
    pub size: u64,
}

/// One FTP operation handed to the daemon's loop, which runs it on its own session (the
/// link the stream uses) and answers with the result and the client's counters.
pub type FtpRequest = (
    FtpOp,
    tokio::sync::oneshot::Sender<(Result<FtpReply, FtpError>, FtpStats)>,
);

/// The way to the daemon's session's files that its users share (the fill, the web page):
/// the loop's queue of operations, and the turn a user holds while it has a file open. The
/// session has one file open at a time (an open closes the one before), so a user that
/// opens, reads and closes takes its [`turn`](VehicleFiles::turn) first.
#[derive(Clone)]
pub struct SharedFiles {
    requests: tokio::sync::mpsc::UnboundedSender<FtpRequest>,
    turn: std::sync::Arc<tokio::sync::Mutex<()>>,
}

impl SharedFiles {
    /// Its operations go to `requests` (the loop's
    /// [`crate::shell::receiver::ReceiverOptions::ftp`]).
    pub fn new(requests: tokio::sync::mpsc::UnboundedSender<FtpRequest>) -> Self {
        Self {
            requests,
            turn: Default::default(),
        }
    }
}

/// A user's turn with the shared session's open file, held until dropped.
pub type Turn = tokio::sync::OwnedMutexGuard<()>;

/// A way to the vehicle's files: a link of our own, or the daemon's.
pub struct VehicleFiles {
    backend: Backend,
}

enum Backend {
    Own {
        link: Link,
        session: Box<Session>,
        buf: Vec<u8>,
    },
    /// The daemon's loop runs each operation on its session (see [`FtpRequest`]).
    Shared { files: SharedFiles, stats: FtpStats },
}

impl VehicleFiles {
    /// Opens `spec` and waits up to `wait` for the vehicle's heartbeat; signs with
    /// `signing` when given (and takes only frames signed with its key).
    pub async fn connect(
        spec: &LinkSpec,
        ftp: FtpConfig,
        signing: Option<SigningSetup>,
        wait: Duration,
    ) -> Result<Self, FilesError> {
        let config = SessionConfig {
            stream: false,
            ftp,
            signing,
            ..SessionConfig::default()
        };
        let mut backend = Backend::Own {
            link: Link::open(spec).await?,
            session: Box::new(Session::new(config, Instant::now())),
            buf: Vec::new(),
        };
        let deadline = tokio::time::Instant::now() + wait;
        while let Backend::Own { session, .. } = &backend
            && session.vehicle().is_none()
        {
            if tokio::time::Instant::now() >= deadline {
                return Err(FilesError::NoVehicle {
                    link: spec.to_string(),
                    waited: wait,
                });
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {}
                r = pump(&mut backend) => r?,
            }
        }
        Ok(Self { backend })
    }

    /// The vehicle's files through the daemon's loop.
    pub fn shared(files: SharedFiles) -> Self {
        Self {
            backend: Backend::Shared {
                files,
                stats: FtpStats::default(),
            },
        }
    }

    /// Waits for this user's turn with the open file, on a session shared with others
    /// ([`SharedFiles`]); `None` on a link of its own, where no one else opens a file.
    pub async fn turn(&self) -> Option<Turn> {
        match &self.backend {
            Backend::Shared { files, .. } => Some(files.turn.clone().lock_owned().await),
            Backend::Own { .. } => None,
        }
    }

    /// Whether another user holds the turn now (a download would wait for it).
    pub fn turn_taken(&self) -> bool {
        match &self.backend {
            Backend::Shared { files, .. } => files.turn.try_lock().is_err(),
            Backend::Own { .. } => false,
        }
    }

    /// The FTP client's counters.
    pub fn stats(&self) -> FtpStats {
        match &self.backend {
            Backend::Own { session, .. } => session.ftp_stats(),
            Backend::Shared { stats, .. } => *stats,
        }
    }

    /// Runs one operation to its end.
    pub async fn run(&mut self, op: FtpOp) -> Result<FtpReply, FilesError> {
        match &mut self.backend {
            Backend::Shared { files, stats } => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                files
                    .requests
                    .send((op, tx))
                    .map_err(|_| FilesError::Stopped)?;
                let (result, now) = rx.await.map_err(|_| FilesError::Stopped)?;
                *stats = now;
                Ok(result?)
            }
            Backend::Own { session, .. } => {
                session.ftp_start(op, Instant::now())?;
                loop {
                    if let Backend::Own { session, .. } = &mut self.backend {
                        while let Some(event) = session.poll_event() {
                            if let Event::Ftp(result) = event {
                                flush(&mut self.backend).await;
                                return Ok(result?);
                            }
                        }
                    }
                    pump(&mut self.backend).await?;
                }
            }
        }
    }

    /// Every log on the vehicle's SD card, oldest first (PX4 names them by date and time,
    /// ArduPilot by a number counting up), under the first log directory the vehicle knows:
    /// PX4's `.ulg`, ArduPilot's `.BIN`.
    pub async fn list_logs(&mut self) -> Result<Vec<VehicleLog>, FilesError> {
        let mut last_error = None;
        for dir in LOG_DIRS {
            let root = dir.path;
            let entries = match self.list(root).await {
                Ok(entries) => entries,
                Err(FilesError::Ftp(FtpError::Refused {
                    nak: Nak::FileNotFound | Nak::FailErrno(_),
                    ..
                })) => continue,
                Err(e @ FilesError::Ftp(FtpError::Refused { .. })) => {
                    last_error = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut logs = Vec::new();
            for entry in entries {
                let path = format!("{root}/{}", entry.name);
                match entry.size {
                    Some(size) if dir.holds(&entry.name) => logs.push(VehicleLog { path, size }),
                    Some(_) => {}
                    None => {
                        for file in self.list(&path).await? {
                            if let Some(size) = file.size.filter(|_| dir.holds(&file.name)) {
                                logs.push(VehicleLog {
                                    path: format!("{path}/{}", file.name),
                                    size,
                                });
                            }
                        }
                    }
                }
            }
            logs.sort_by(|a, b| a.path.cmp(&b.path));
            return Ok(logs);
        }
        Err(last_error.unwrap_or(FilesError::NoLogs))
    }

    async fn list(&mut self, path: &str) -> Result<Vec<DirEntry>, FilesError> {
        match self.run(FtpOp::List { path: path.into() }).await? {
            FtpReply::Listed(entries) => Ok(entries),
            _ => unreachable!("a listing answers a listing"),
        }
    }

    /// Opens `path` read-only; its size.
    pub async fn open(&mut self, path: &str) -> Result<u64, FilesError> {
        match self.run(FtpOp::Open { path: path.into() }).await? {
            FtpReply::Opened { size } => Ok(size),
            _ => unreachable!("an open answers an open"),
        }
    }

    /// `len` bytes of the open file from `offset` (fewer at its end).
    pub async fn read(&mut self, offset: u64, len: u64) -> Result<Vec<u8>, FilesError> {
        match self.run(FtpOp::Read { offset, len }).await? {
            FtpReply::Read { data, .. } => Ok(data),
            _ => unreachable!("a read answers a read"),
        }
    }

    pub async fn close(&mut self) -> Result<(), FilesError> {
        self.run(FtpOp::Close).await.map(|_| ())
    }

    /// The vehicle's checksum of `path`.
    pub async fn crc32(&mut self, path: &str) -> Result<u32, FilesError> {
        match self.run(FtpOp::Crc32 { path: path.into() }).await? {
            FtpReply::Crc32(crc) => Ok(crc),
            _ => unreachable!("a checksum answers a checksum"),
        }
    }

    /// Downloads `path` to `out`: into `out.part`, continued from its length when one is
    /// there (a download cut short resumes), checked against the vehicle's checksum, then
    /// renamed. Returns the bytes fetched now. On a shared session it waits for its
    /// [`turn`](Self::turn) first and holds it to the end.
    pub async fn download(
        &mut self,
        path: &str,
        out: &Path,
        progress: impl Fn(u64, u64),
    ) -> Result<u64, FilesError> {
        let _turn = self.turn().await;
        let partial = partial_of(out);
        let size = self.open(path).await?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&partial)?;
        let mut have = file.metadata()?.len().min(size);
        file.set_len(have)?;
        let from = have;
        let mut piece = MIN_PIECE;
        while have < size {
            let asked = Instant::now();
            let data = self.read(have, piece.min(size - have)).await?;
            if data.is_empty() {
                break;
            }
            let rate = data.len() as f64 / asked.elapsed().as_secs_f64().max(1e-3);
            piece = ((rate * PIECE_TIME.as_secs_f64()) as u64).clamp(MIN_PIECE, PIECE);
            file.write_all(&data)?;
            crate::store::fsync::file_data(&file)?;
            have += data.len() as u64;
            progress(have, size);
        }
        self.close().await?;
        drop(file);
        let theirs = self.crc32(path).await?;
        let ours = crc32_part(0, &std::fs::read(&partial)?);
        if ours != theirs {
            return Err(FilesError::Checksum {
                path: path.into(),
                ours,
                theirs,
                partial,
            });
        }
        std::fs::rename(&partial, out)?;
        Ok(have - from)
    }
}

/// Where a download to `out` gathers its bytes until checked: `out` with `.part` added.
pub fn partial_of(out: &Path) -> PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(".part");
    PathBuf::from(name)
}
