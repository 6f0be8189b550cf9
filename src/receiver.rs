//! The receiving daemon's shell (tokio): moves bytes between a [`Link`] and the sans-IO
//! [`Session`], runs its timers, writes each log it hands out to a `.ulg` file in the log
//! directory, and measures the ack latency (from a datagram's arrival to its ack's send).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::link::{Event, Session, SessionConfig, SessionStats};
use crate::transport::Link;

/// How the receiver runs.
#[derive(Debug, Clone)]
pub struct ReceiverOptions {
    pub log_dir: PathBuf,
    pub session: SessionConfig,
    /// How often [`Notice::Status`] is reported (and files flushed to the OS).
    pub status_interval: Duration,
}

/// What the receiver reports to its caller, as it happens.
#[derive(Debug)]
pub enum Notice<'a> {
    Event(&'a Event),
    /// A log file was created.
    FileOpened(&'a Path),
    /// A log file was completed and synced to disk.
    FileClosed {
        path: &'a Path,
        bytes: u64,
    },
    Status(&'a Status),
}

/// Counters of the whole run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Status {
    pub session: SessionStats,
    pub ack_latency: AckLatency,
    /// Bytes that could not be written (disk full, I/O error).
    pub write_errors: u64,
    pub files: Vec<PathBuf>,
}

/// Time from a datagram's arrival to the send of the ack it caused, in microseconds, as a
/// histogram with 1 µs buckets up to 65 ms.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AckLatency {
    #[serde(skip)]
    buckets: Vec<u32>,
    pub count: u64,
    pub max_us: u64,
}

impl Default for AckLatency {
    fn default() -> Self {
        Self {
            buckets: vec![0; 1 << 16],
            count: 0,
            max_us: 0,
        }
    }
}

impl AckLatency {
    pub fn record(&mut self, d: Duration) {
        let us = d.as_micros().min(u64::MAX as u128) as u64;
        let i = (us as usize).min(self.buckets.len() - 1);
        self.buckets[i] += 1;
        self.count += 1;
        self.max_us = self.max_us.max(us);
    }

    /// The `q` quantile (0..=1) in microseconds; `None` before any ack.
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (us, &n) in self.buckets.iter().enumerate() {
            seen += n as u64;
            if seen >= rank {
                return Some(us as u64);
            }
        }
        Some(self.max_us)
    }
}

/// The log files of a run: one per log the session opens.
pub struct LogFiles {
    dir: PathBuf,
    current: Option<(PathBuf, BufWriter<File>, u64)>,
}

impl LogFiles {
    /// Creates `dir` if it is missing.
    pub fn new(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
            current: None,
        })
    }

    /// Starts a new file named after the UTC time, `log_2026-11-22T12-00-00Z_1.ulg`.
    pub fn open(&mut self, number: u32) -> io::Result<PathBuf> {
        self.close()?;
        let stamp = humantime::format_rfc3339_seconds(SystemTime::now())
            .to_string()
            .replace(':', "-");
        let mut k = 0;
        loop {
            let suffix = if k == 0 {
                String::new()
            } else {
                format!("-{k}")
            };
            let path = self.dir.join(format!("log_{stamp}_{number}{suffix}.ulg"));
            match File::options().write(true).create_new(true).open(&path) {
                Ok(f) => {
                    self.current = Some((path.clone(), BufWriter::with_capacity(1 << 16, f), 0));
                    return Ok(path);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && k < 100 => k += 1,
                Err(e) => return Err(e),
            }
        }
    }

    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.current {
            Some((_, w, n)) => {
                w.write_all(bytes)?;
                *n += bytes.len() as u64;
                Ok(())
            }
            None => Err(io::Error::other("no log file open")),
        }
    }

    /// Hands buffered bytes to the OS.
    pub fn flush(&mut self) -> io::Result<()> {
        match &mut self.current {
            Some((_, w, _)) => w.flush(),
            None => Ok(()),
        }
    }

    /// Completes the current file: flushed and synced to disk.
    pub fn close(&mut self) -> io::Result<Option<(PathBuf, u64)>> {
        let Some((path, w, n)) = self.current.take() else {
            return Ok(None);
        };
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(Some((path, n)))
    }
}

/// Runs the receiver on `link` until `shutdown` completes; then STOP goes to the vehicle and
/// the open log is completed. Returns the run's counters.
pub async fn run(
    mut link: Link,
    options: ReceiverOptions,
    shutdown: impl std::future::Future<Output = ()>,
    mut notify: impl FnMut(Notice<'_>),
) -> io::Result<Status> {
    let mut files = LogFiles::new(&options.log_dir)?;
    let mut session = Session::new(options.session.clone(), Instant::now());
    let mut status = Status::default();
    let mut buf = Vec::with_capacity(crate::transport::MAX_READ);
    let mut tick = tokio::time::interval(options.status_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        let wake = session
            .poll_timeout()
            .map(tokio::time::Instant::from_std)
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            r = link.recv(&mut buf) => {
                let n = r?;
                let arrived = Instant::now();
                let acks_before = session.stats().acks_sent;
                session.handle_bytes(&buf[..n], arrived);
                // Drain what else is waiting without going back to the runtime.
                for _ in 0..64 {
                    match link.try_recv(&mut buf) {
                        Some(n) => session.handle_bytes(&buf[..n], Instant::now()),
                        None => break,
                    }
                }
                let acked = session.stats().acks_sent > acks_before;
                transmit(&mut session, &mut link).await;
                if acked {
                    status.ack_latency.record(arrived.elapsed());
                }
            }
            _ = tokio::time::sleep_until(wake) => {
                session.handle_timeout(Instant::now());
                transmit(&mut session, &mut link).await;
            }
            _ = tick.tick() => {
                if let Err(e) = files.flush() {
                    tracing::error!(error = %e, "cannot write the log file");
                }
                status.session = session.stats();
                notify(Notice::Status(&status));
            }
        }
        handle_events(&mut session, &mut files, &mut status, &mut notify);
    }
    session.shutdown(Instant::now());
    transmit(&mut session, &mut link).await;
    handle_events(&mut session, &mut files, &mut status, &mut notify);
    status.session = session.stats();
    Ok(status)
}

async fn transmit(session: &mut Session, link: &mut Link) {
    while let Some(frame) = session.poll_transmit() {
        link.send(&frame).await;
    }
}

fn handle_events(
    session: &mut Session,
    files: &mut LogFiles,
    status: &mut Status,
    notify: &mut impl FnMut(Notice<'_>),
) {
    while let Some(event) = session.poll_event() {
        match &event {
            Event::LogOpened { number } => match files.open(*number) {
                Ok(path) => {
                    tracing::info!(path = %path.display(), "log file opened");
                    notify(Notice::FileOpened(&path));
                    status.files.push(path);
                }
                Err(e) => tracing::error!(error = %e, "cannot create a log file"),
            },
            Event::LogBytes(bytes) => {
                if let Err(e) = files.write(bytes) {
                    status.write_errors += bytes.len() as u64;
                    tracing::error!(error = %e, bytes = bytes.len(), "cannot write the log file");
                }
            }
            Event::LogClosed { .. } => match files.close() {
                Ok(Some((path, bytes))) => {
                    tracing::info!(path = %path.display(), bytes, "log file closed");
                    notify(Notice::FileClosed { path: &path, bytes });
                }
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "cannot complete the log file"),
            },
            _ => {}
        }
        notify(Notice::Event(&event));
    }
}
